"""`wormhole sweep`: sweep files, point expansion, and an interrupted sweep resuming to the same table."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bridge.errors import ScenarioError
from bridge.scenario import load_scenario
from bridge.sweep import load_sweep

ROOT = Path(__file__).resolve().parents[1]
TINY_SWEEP = ROOT / "experiments" / "tiny.yaml"
LEAFSPINE = ROOT / "scenarios" / "tiny-leafspine.yaml"


def sweep_cmd(sweep: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "bridge.cli", "sweep", str(sweep), "--out", str(out), "--workers", "2"]


def env() -> dict:
    # The ns-3 children run from their output folders: make them import this tree.
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def write_sweep(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    return path


def test_points_are_the_product_in_order_with_stable_ids():
    sweep = load_sweep(TINY_SWEEP)
    assert sweep.modes == ("stock",) and sweep.axes == ("seed", "transport.kind", "topology.spines")
    assert [tuple(p.values.values()) for p in sweep.points][:3] == [(1, "dctcp", 1), (1, "dctcp", 2),
                                                                    (1, "cubic", 1)]
    assert len({p.id for p in sweep.points}) == 8
    assert [p.id for p in sweep.points] == [p.id for p in load_sweep(TINY_SWEEP).points]
    point = sweep.points[-1]
    assert (point.scenario.seed, point.scenario.transport.kind, point.scenario.topology.spines) == (2, "cubic", 2)
    assert point.data["transport"]["mtu"] == 1500  # the base's other fields are kept


def test_every_experiment_file_loads():
    """The bundled sweeps parse, and each of their points is a valid scenario."""
    for path in sorted((ROOT / "experiments").glob("*.yaml")):
        sweep = load_sweep(path)
        assert sweep.points, path
    cc = load_sweep(ROOT / "experiments" / "rdma-cc.yaml")
    assert [p.scenario.transport.cc for p in cc.points] == ["dcqcn", "hpcc", "hpcc-pint", "timely", "dctcp"]


def test_several_bases_and_referenced_files(tmp_path):
    path = write_sweep(tmp_path, f"name: s\nbase: [{ROOT}/scenarios/tiny-hpcc/scenario.yaml, {LEAFSPINE}]\n"
                                 "axes: {transport.kind: [newreno]}\n")
    sweep = load_sweep(path)
    assert sweep.axes == ("base", "transport.kind") and len(sweep.points) == 2
    # A point's scenario.yaml lives elsewhere: the HPCC files it names must still load from there.
    written = tmp_path / "elsewhere" / "scenario.yaml"
    written.parent.mkdir()
    written.write_text(yaml.safe_dump(sweep.points[0].data))
    assert load_scenario(written).fingerprint() == sweep.points[0].scenario.fingerprint()


@pytest.mark.parametrize("body, field, message", [
    ("name: s\nbase: {base}\nmodes: [stock, turbo]\n", "modes[1]", "unknown mode 'turbo'"),
    ("name: s\nbase: {base}\naxis: {{seed: [1]}}\n", "axis", "unknown field"),
    ("name: s\nbase: {base}\naxes: {{seed: []}}\n", "axes.seed", "non-empty list"),
    ("name: s\nbase: {base}\naxes: {{topology.spines: [1, 0]}}\n", "axes.topology.spines", "topology.spines=0"),
    ("name: s\nbase: {base}\naxes: {{flows.9.size: [1MB]}}\n", "axes.flows.9.size", "list of 8 items"),
    ("name: s\nbase: nope.yaml\n", "base", "cannot read"),
    ("base: {base}\n", "name", "non-empty string"),
])
def test_bad_sweep_files_name_file_and_field(tmp_path, body, field, message):
    path = write_sweep(tmp_path, body.format(base=LEAFSPINE))
    with pytest.raises(ScenarioError) as info:
        load_sweep(path)
    assert info.value.path == str(path) and info.value.field == field and message in str(info.value)


def test_cli_error_is_one_line(tmp_path):
    path = write_sweep(tmp_path, f"name: s\nbase: {LEAFSPINE}\nmodes: [warp]\n")
    proc = subprocess.run(sweep_cmd(path, tmp_path / "out"), capture_output=True, text=True, cwd=ROOT,
                          env=env(), timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "sweep.yaml: modes[0]" in proc.stderr


def test_an_output_folder_taken_by_a_file_is_one_line(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("kept\n")
    proc = subprocess.run(sweep_cmd(TINY_SWEEP, taken), capture_output=True, text=True, cwd=ROOT,
                          env=env(), timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"{taken}: cannot create the output folder (a file is in its place)" in proc.stderr
    assert taken.read_text() == "kept\n"


def test_interrupted_sweep_resumes_only_missing_runs_to_identical_results(tmp_path):
    clean, resumed = tmp_path / "clean", tmp_path / "resumed"
    proc = subprocess.run(sweep_cmd(TINY_SWEEP, clean), capture_output=True, text=True, cwd=ROOT, env=env(),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    results = pd.read_csv(clean / "results.csv")
    assert len(results) == 8 and (results.flows_finished == results.flows).all()
    assert list(results.point) == [p.id for p in load_sweep(TINY_SWEEP).points]
    assert len(pd.read_csv(clean / "timings.csv")) == 8 and (clean / "fct_by_point.png").stat().st_size > 0

    # Interrupt a second sweep (SIGTERM, as a scheduler would) once 3 runs have finished.
    summaries = lambda: sorted(resumed.glob("points/*/stock/summary.json"))  # noqa: E731
    sweep = subprocess.Popen(sweep_cmd(TINY_SWEEP, resumed), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env())
    deadline = time.monotonic() + 200
    while len(summaries()) < 3 and sweep.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    sweep.send_signal(signal.SIGTERM)
    assert sweep.wait(timeout=60) == 130, sweep.stderr.read()
    before = {p: p.stat().st_mtime_ns for p in summaries()}
    assert 3 <= len(before) < 8 and not (resumed / "results.csv").exists()

    proc = subprocess.run(sweep_cmd(TINY_SWEEP, resumed), capture_output=True, text=True, cwd=ROOT, env=env(),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert len(summaries()) == 8
    assert {p: p.stat().st_mtime_ns for p in before} == before  # finished runs were not run again
    assert (resumed / "results.csv").read_bytes() == (clean / "results.csv").read_bytes()
