"""`wormhole run` end to end: child processes, output files, determinism, errors, abort handling."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bridge import api
from bridge.errors import RunInterrupted, ScenarioError, SimulationError
from bridge.runner import run_child
from bridge.simulation import TCP_ACCEL_WARNING

ROOT = Path(__file__).resolve().parents[1]
TINY = ["tiny-leafspine.yaml", "tiny-fattree.yaml", "tiny-roft.yaml", "tiny-hpcc/scenario.yaml",
        "aicb-example.yaml"]


def wormhole(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bridge.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.parametrize("name", TINY)
def test_every_topology_builds_and_delivers_all_bytes(name, tmp_path):
    result = api.run(ROOT / "scenarios" / name, tmp_path)
    flows, summary = result.flows, result.summary
    assert summary["flows_finished"] == summary["flows"] == len(flows) > 0
    assert (flows.fct_ns > 0).all()
    assert (flows.fct_ns >= 0.99 * flows.ideal_fct_ns).all()  # nothing beats an empty network
    assert summary["events"] > 0 and summary["sim_time_ns"] == flows.end_ns.max()
    fct_lines = (tmp_path / "fct.txt").read_text().splitlines()
    assert len(fct_lines) == len(flows) and len(fct_lines[0].split()) == 8


def test_cli_run_writes_outputs_and_is_deterministic(tmp_path):
    scenario = str(ROOT / "scenarios" / "tiny-leafspine.yaml")
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        proc = wormhole("run", scenario, "--out", str(out), "--quiet")
        assert proc.returncode == 0, proc.stderr
    for name in ("flows.csv", "fct.txt"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    a, b = (json.loads((d / "summary.json").read_text()) for d in (first, second))
    assert a["events"] == b["events"] and a["scenario_fingerprint"] == b["scenario_fingerprint"]
    assert set(a["wall_s"]) == {"import", "build", "loop", "total"}
    assert a["versions"]["ns3"].startswith("3.44")


def test_seed_changes_the_run(tmp_path):
    scenario = ROOT / "scenarios" / "tiny-fattree.yaml"
    a = api.run(scenario, tmp_path / "a", seed=1).flows
    b = api.run(scenario, tmp_path / "b", seed=2).flows
    assert not a.fct_ns.equals(b.fct_ns)  # ECMP paths and TCP randomness follow the seed


def test_bad_scenario_is_one_line_and_keeps_old_results(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "scenarios" / "tiny-leafspine.yaml").read_text()
                   .replace("hosts_per_leaf: 4", "hosts_per_leaf: -4"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "flows.csv").write_text("earlier results\n")
    proc = wormhole("run", str(bad), "--out", str(out))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "bad.yaml" in proc.stderr and "topology.hosts_per_leaf" in proc.stderr
    assert (out / "flows.csv").read_text() == "earlier results\n"
    with pytest.raises(ScenarioError):
        api.load_scenario(bad)


def test_relative_paths_work_as_in_the_readme(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text((ROOT / "scenarios" / "tiny-leafspine.yaml").read_text())
    proc = wormhole("run", "s.yaml", "--out", "out/rel", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "out" / "rel").iterdir()) == [
        "fct.txt", "flows.csv", "summary.json"]


def test_missing_scenario_file_is_one_line(tmp_path):
    proc = wormhole("run", str(tmp_path / "nope.yaml"), "--out", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "nope.yaml" in proc.stderr


@pytest.mark.parametrize("command", ["run", "validate"])
def test_an_output_folder_that_cannot_be_made_is_one_line(tmp_path, command):
    taken = tmp_path / "taken"
    taken.write_text("a file the user keeps\n")
    for out, reason in [(taken, "a file is in its place"), (taken / "sub", "Not a directory")]:
        proc = wormhole(command, str(ROOT / "scenarios" / "tiny-leafspine.yaml"), "--out", str(out))
        assert proc.returncode == 2 and proc.stderr == \
            f"wormhole: error: {out}: cannot create the output folder ({reason})\n", proc.stderr
    assert taken.read_text() == "a file the user keeps\n"


@pytest.mark.parametrize("command", ["run", "validate"])
def test_a_bad_engine_setting_is_one_line_before_anything_starts(tmp_path, command):
    """A bad --theta is refused as the scenario's own errors are: one line, worded alike, before
    the progress display and before the output folder is made."""
    out = tmp_path / "out"
    proc = wormhole(command, str(ROOT / "scenarios" / "tiny-leafspine.yaml"), "--out", str(out), "--theta", "7")
    assert proc.returncode == 2 and proc.stderr == "wormhole: error: --theta: expected <= 1 (got 7.0)\n", proc.stderr
    assert not out.exists()


def test_a_seed_or_time_limit_out_of_range_is_refused_before_the_run(tmp_path):
    """A negative seed reached ns-3's unsigned run number (the child crashed); a negative time limit
    stopped the run at once."""
    for option, value in (("--seed", "-3"), ("--seed", "4294967296"), ("--timeout", "-1")):
        proc = wormhole("run", str(ROOT / "scenarios" / "tiny-leafspine.yaml"), "--out", str(tmp_path / "o"),
                        option, value)
        assert proc.returncode == 2 and f"argument {option}: expected" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and not (tmp_path / "o").exists()
    with pytest.raises(ScenarioError, match="seed: expected an integer"):
        api.run(ROOT / "scenarios" / "tiny-leafspine.yaml", None, seed=-1)


def test_engine_settings_without_accel_are_refused_not_ignored(tmp_path):
    proc = wormhole("run", str(ROOT / "scenarios" / "tiny-leafspine.yaml"), "--out", str(tmp_path / "out"),
                    "--no-memo", "--theta", "0.2")
    assert proc.returncode == 2 and proc.stderr == \
        "wormhole: error: --no-memo, --theta: only with --accel (without it the run is stock ns-3)\n", proc.stderr


def test_ns3_abort_in_child_becomes_an_error_and_keeps_old_files(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    (tmp_path / "flows.csv").write_text("earlier results\n")
    with pytest.raises(SimulationError, match="Could not set default value"):
        run_child("ns3_abort_child", {}, tmp_path)
    assert (tmp_path / "flows.csv").read_text() == "earlier results\n"
    assert [p.name for p in tmp_path.iterdir()] == ["flows.csv"]  # the partial folder is gone


def test_unfinished_flows_are_reported(tmp_path):
    proc = wormhole("run", str(ROOT / "scenarios" / "tiny-leafspine.yaml"), "--out", str(tmp_path),
                    "--stop-time", "20us", "--quiet")
    assert proc.returncode == 1 and "did not finish" in proc.stderr
    flows = pd.read_csv(tmp_path / "flows.csv")
    assert (flows.end_ns == -1).any()


def test_a_run_stopped_before_an_iteration_began_writes_it_unfinished(tmp_path):
    """Stopped 1 ms into gpt-bench's first iteration: both iterations are written as unfinished
    (-1), the second one never having begun. (This crashed in iterations.csv before.)"""
    proc = wormhole("run", str(ROOT / "scenarios" / "gpt-bench-dcqcn.yaml"), "--out", str(tmp_path),
                    "--stop-time", "1ms", "--quiet")
    assert proc.returncode == 1 and "stop_time reached" in proc.stderr
    it = pd.read_csv(tmp_path / "iterations.csv")
    assert list(it.time_ns) == [-1, -1] and list(it.start_ns) == [0, -1] and it.compute_ns[0] > 0
    assert "unfinished, unfinished" in proc.stderr


def test_ctrl_c_ends_the_run_and_keeps_what_finished(tmp_path):
    """A first Ctrl-C (here raised from the progress callback, where the CLI's display runs)
    asks the child to stop: it writes what finished, with stop_reason "interrupted"."""
    def interrupt(p: dict) -> None:
        if p["flows_done"] > 0 and not asked:
            asked.append(True)
            raise KeyboardInterrupt

    asked: list[bool] = []
    with pytest.raises(RunInterrupted) as e:
        api.run(ROOT / "scenarios" / "gpt-bench-dcqcn.yaml", tmp_path, progress=interrupt)
    assert e.value.out_dir == tmp_path
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted" and 0 < summary["flows_finished"] < summary["flows"]
    flows = pd.read_csv(tmp_path / "flows.csv")
    assert (flows.end_ns >= 0).sum() == summary["flows_finished"]


def test_a_run_reaching_its_time_limit_stops_there_and_keeps_what_finished(tmp_path):
    """--timeout ends a run where it is (gpt-bench-dcqcn in stock ns-3 takes about 30 s): exit 1,
    stop_reason "time limit reached", the flows finished by then written, exactly as a run
    stopped at that simulated time has them (up to flows ending in the same ns as the last). (It used to kill the run and keep nothing.)"""
    proc = wormhole("run", str(ROOT / "scenarios" / "gpt-bench-dcqcn.yaml"), "--out", str(tmp_path / "limited"),
                    "--timeout", "6", "--quiet")
    assert proc.returncode == 1 and "did not finish: time limit reached" in proc.stderr, proc.stderr
    summary = json.loads((tmp_path / "limited" / "summary.json").read_text())
    assert summary["stop_reason"] == "time limit reached" and 0 < summary["flows_finished"] < summary["flows"]
    assert summary["wall_s"]["total"] < 6 + 2
    last = summary["sim_time_ns"]             # (the last end of a finished flow)
    stopped = wormhole("run", str(ROOT / "scenarios" / "gpt-bench-dcqcn.yaml"), "--out", str(tmp_path / "stopped"),
                       "--stop-time", f"{last + 1}ns", "--quiet")
    assert stopped.returncode == 1 and "stop_time reached" in stopped.stderr
    limited, at_time = (pd.read_csv(tmp_path / name / "flows.csv") for name in ("limited", "stopped"))
    done = limited.end_ns >= 0
    assert done.sum() == summary["flows_finished"]
    assert (at_time.end_ns[done] == limited.end_ns[done]).all()
    # (ns-3 stops after the event that ends a flow: others ending in that same ns may be cut off)
    assert not at_time.end_ns[~done].between(0, last - 1).any()


def test_validate_fails_on_a_run_that_reaches_its_time_limit(tmp_path):
    (tmp_path / "validation.json").write_text("earlier results\n")
    proc = wormhole("validate", str(ROOT / "scenarios" / "gpt-bench-dcqcn.yaml"), "--out", str(tmp_path),
                    "--timeout", "3", "--quiet")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "the stock run reached the 3 s time limit with" in proc.stderr and "nothing kept" in proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["validation.json"]
    assert (tmp_path / "validation.json").read_text() == "earlier results\n"


def test_a_second_ctrl_c_kills_the_run_and_keeps_earlier_results(tmp_path):
    (tmp_path / "flows.csv").write_text("earlier results\n")

    def interrupt(p: dict) -> None:
        raise KeyboardInterrupt

    with pytest.raises(RunInterrupted) as e:
        api.run(ROOT / "scenarios" / "gpt-bench-dcqcn.yaml", tmp_path, progress=interrupt)
    assert e.value.out_dir is None
    assert [p.name for p in tmp_path.iterdir()] == ["flows.csv"]
    assert (tmp_path / "flows.csv").read_text() == "earlier results\n"


def test_an_accelerated_tcp_run_warns_that_its_errors_are_not_within_bounds(tmp_path):
    """On TCP the engine misses the error bounds on the LLM benches: an accelerated TCP run says
    so (once), a run that freezes nothing (--no-ff) or an RDMA one does not."""
    warning = f"wormhole: warning: {TCP_ACCEL_WARNING}\n"
    tcp = ROOT / "scenarios" / "tiny-leafspine.yaml"
    accel = wormhole("run", str(tcp), "--out", str(tmp_path / "tcp"), "--accel", "--quiet")
    assert accel.returncode == 0 and accel.stderr.count(warning) == 1, accel.stderr
    no_ff = wormhole("run", str(tcp), "--out", str(tmp_path / "no-ff"), "--accel", "--no-ff", "--quiet")
    assert no_ff.returncode == 0 and "wormhole: warning" not in no_ff.stderr, no_ff.stderr
    rdma = wormhole("run", str(ROOT / "scenarios" / "tiny-memo-rdma.yaml"), "--out", str(tmp_path / "rdma"),
                    "--accel", "--quiet", "--cache", str(tmp_path / "m.whdb"))
    assert rdma.returncode == 0 and "wormhole: warning" not in rdma.stderr, rdma.stderr


def test_check_prints_scenario_contents():
    proc = wormhole("check", str(ROOT / "scenarios" / "tiny-roft.yaml"))
    assert proc.returncode == 0 and "roft" in proc.stdout and "flows" in proc.stdout


def test_check_lists_link_failures_and_stragglers(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ntopology: {kind: leaf-spine, leaves: 2, spines: 2, hosts_per_leaf: 8, "
                    "host_link: {rate: 100Gbps, delay: 1us}, oversubscription: 1}\n"
                    "training: {preset: gpt-tiny, stragglers: [{hosts: [0, 5], slowdown: 1.5}]}\n"
                    "transport: {kind: rdma}\nlink_failures: [{link: [16, 18], at: 50us}]\n")
    proc = wormhole("check", str(path))
    assert proc.returncode == 0
    assert "link 16-18 goes down at 50.000 us" in proc.stdout and "hosts 0, 5 compute 1.5x slower" in proc.stdout


def test_training_run_writes_iterations_and_tagged_flows(tmp_path):
    result = api.run(ROOT / "scenarios" / "gpt-tiny.yaml", tmp_path)
    it, flows = result.iterations, result.flows
    assert list(it.iteration) == [0] and result.summary["iteration_time_ns"] == list(it.time_ns)
    assert (it.time_ns > it.compute_ns).all() and (it.compute_ns > 0).all()
    assert (it.exposed_dp_ns > 0).all() and (it.exposed_pp_ns > 0).all()
    assert set(flows.collective) == {"dp_allreduce", "pp_fwd", "pp_bwd"}
    assert (flows.iteration == 0).all() and (flows.group != "").all()
    ring = flows[flows.collective == "dp_allreduce"]
    assert ring.step.min() == 0 and ring.step.max() == 2 * (2 - 1) - 1  # DP2: 2(N-1) ring steps


def test_a_successful_childs_warnings_reach_the_user(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests"))
    assert run_child("warning_child", {}, tmp_path) == {"ok": True}
    assert capfd.readouterr().err == "wormhole: warning: something the user should know\n"


def test_ns3_headers_come_precompiled():
    """A child loads ns-3 with cling's precompiled header holding the headers it would parse
    otherwise, the one file built for these sources (not what a parent process that loaded ns-3
    passed on), and its classes work through it."""
    import os

    from bridge.ns3.loader import PYTHON_HEADERS
    from bridge.ns3.patches import build_pch, pch_dir

    code = ("import os; from bridge.ns3.loader import load; h = load(); "
            "print(os.environ['CLING_STANDARD_PCH']); print(h.wh.FlowTable.__name__, h.ns.Seconds(2).GetMilliSeconds())")
    env = {k: v for k, v in os.environ.items() if k not in ("CLING_STANDARD_PCH", "EXTRA_CLING_ARGS")}
    # As a parent that loaded ns-3 passes them on: cppyy's default flags and a PCH of other sources.
    stale = {"CLING_STANDARD_PCH": str(pch_dir() / "0123456789abcdef.pch"), "EXTRA_CLING_ARGS": " -O2 -march=native"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, **stale},
                          cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    pch, classes = proc.stdout.split("\n")[:2]
    assert pch == str(build_pch([f"ns3/{h}.h" for h in PYTHON_HEADERS] + ["wormhole-patches.h"]))
    assert Path(pch).stat().st_size > 0 and classes == "FlowTable 2000"
    code = "import os; from bridge.ns3.loader import load; h = load(); print(os.environ.get('CLING_STANDARD_PCH'))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**env, **stale, "WORMHOLE_NO_PCH": "1"}, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert Path(proc.stdout.strip()).name.startswith("allDict.cxx.pch")   # cppyy's standard one


def _fake_cling(tmp_path, monkeypatch, rootcling: str | None = None):
    """build_pch's view of cppyy_backend replaced by a folder with this rootcling script (or none),
    and its cache by an empty one."""
    from bridge.ns3 import patches

    cling = tmp_path / "cppyy_backend"
    (cling / "etc/dictpch").mkdir(parents=True)
    (cling / "include").mkdir()
    (cling / "etc/dictpch/allCppflags.txt").write_text("-std=c++2a\n")
    if rootcling is not None:
        (cling / "bin").mkdir()
        (cling / "bin/rootcling").write_text(rootcling)
        (cling / "bin/rootcling").chmod(0o755)
    monkeypatch.setattr(patches, "_cling_dir", lambda: cling)
    monkeypatch.setenv("WORMHOLE_BUILD_CACHE", str(tmp_path / "cache"))
    return patches


def test_unbuildable_pch_warns_and_falls_back(tmp_path, monkeypatch, capsys):
    patches = _fake_cling(tmp_path, monkeypatch)            # no rootcling
    assert patches.build_pch(["ns3/nstime.h"]) is None
    err = capsys.readouterr().err
    assert err.startswith("wormhole: warning: could not precompile the ns-3 headers") and err.count("\n") == 1
    assert not list((tmp_path / "cache").rglob("*.pch"))


def test_a_pch_cppyy_cannot_start_with_is_not_kept(tmp_path, monkeypatch, capsys):
    # rootcling "succeeds" with a corrupt PCH
    patches = _fake_cling(tmp_path, monkeypatch, '#!/bin/sh\nwhile [ "$1" != -f ]; do shift; done\n'
                                                 'echo corrupt > "$(dirname "$2")/allDict_rdict.pch"\n')
    said = []
    assert patches.build_pch(["ns3/nstime.h"], said.append) is None
    assert said == ["precompiling the ns-3 headers, once per version of the sources: about 5 s"]
    err = capsys.readouterr().err
    assert err.startswith("wormhole: warning: could not precompile the ns-3 headers (cppyy could not start with it")
    assert not list((tmp_path / "cache").rglob("*.pch"))


def test_pchs_unused_for_a_week_are_removed(tmp_path):
    import os
    import time

    from bridge.ns3.patches import _prune_pchs

    old, recent = tmp_path / "a.pch", tmp_path / "b.pch"
    for path in (old, recent):
        path.write_bytes(b"pch")
    os.utime(old, (time.time() - 8 * 86400,) * 2)
    _prune_pchs(tmp_path)
    assert not old.exists() and recent.exists()


def test_a_build_is_announced_once(tmp_path, monkeypatch):
    from bridge.ns3.patches import build_library

    compiler = tmp_path / "fake-g++"       # "compiles" by writing its -o file
    compiler.write_text('#!/bin/sh\nwhile [ $# -gt 1 ]; do [ "$1" = -o ] && echo lib > "$2"; shift; done\n')
    compiler.chmod(0o755)
    monkeypatch.setenv("CXX", str(compiler))
    monkeypatch.setenv("WORMHOLE_BUILD_CACHE", str(tmp_path / "cache"))
    said = []
    first = build_library(said.append)
    assert build_library(said.append) == first and first.read_text() == "lib\n"
    assert said == ["compiling ns3_patches, once per version of the sources: about 40 s"]


def test_missing_compiler_is_a_clear_error(monkeypatch):
    from bridge.errors import WormholeError
    from bridge.ns3.patches import build_library

    monkeypatch.setenv("CXX", "no-such-compiler-g++")
    with pytest.raises(WormholeError, match="no C\\+\\+ compiler found"):
        build_library()
