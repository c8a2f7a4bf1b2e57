"""`wormhole validate`: comparison metrics on hand-made tables, the report and plots, end to end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from bridge import api
from bridge.api import RunResult
from bridge.engine.memo import open_store
from bridge.report import plots
from bridge.report.validation import compare, jitter_floor, noise_floor, render_markdown, within_noise_floor
from bridge.validate import PLOTS, console_table, machine, validate

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "scenarios" / "tiny-leafspine.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def flows(fcts: dict[int, int]) -> pd.DataFrame:
    """A flows table with the given FCTs by flow_id (-1 = unfinished), each alone on its connection."""
    return pd.DataFrame({"flow_id": list(fcts), "start_ns": 0, "head_ns": 0, "fct_ns": list(fcts.values()),
                         "end_ns": list(fcts.values()), "collective": "flow"})


def result(fcts: dict[int, int], loop: float, total: float, events: int,
           iteration_times: list[int] | None = None, **extra) -> RunResult:
    iterations = None
    if iteration_times is not None:
        iterations = pd.DataFrame({"iteration": range(len(iteration_times)), "time_ns": iteration_times})
    summary = {"scenario": "hand", "scenario_file": "hand.yaml", "seed": 1, "mode": "stock", "events": events,
               "wall_s": {"import": 1.0, "build": 0.5, "loop": loop, "total": total},
               "versions": {"ns3": "3.44", "wormhole": "0"}, **extra}
    if iteration_times is not None:
        summary["iteration_time_ns"] = iteration_times
    return RunResult(out_dir=None, summary=summary, flows=flows(fcts), iterations=iterations)


def test_compare_exact_numbers():
    # ids 0-2 finish in both; 3 is unfinished in the candidate, 4 in the reference, 5 only in the candidate
    ref = result({0: 100, 1: 200, 2: 400, 3: 1000, 4: -1}, loop=2.0, total=4.0, events=1000,
                 iteration_times=[1000, 2000, -1])
    cand = result({0: 110, 1: 200, 2: 300, 3: -1, 4: 50, 5: 70}, loop=0.5, total=2.0, events=250,
                  iteration_times=[1100, 1900, 3000])
    c = compare(ref, cand)
    assert c["speedup_loop"] == 4.0 and c["speedup_total"] == 2.0
    assert c["skipped_fraction"] == 0.75
    assert (c["flows"], c["matched"], c["unmatched"]) == (6, 3, 3)
    # errors 0.1, 0, 0.25; p99 interpolates linearly between the two largest: 0.1 + 0.98 * 0.15
    assert c["fct_error"] == pytest.approx({"mean": 0.35 / 3, "p50": 0.1, "p99": 0.247, "max": 0.25})
    assert c["iteration_error_max"] == pytest.approx(0.1)  # iteration 2 unfinished in ref: left out


def test_service_time_leaves_out_the_wait_behind_a_connections_earlier_flows():
    # Two flows of 100 ns released together onto one connection: which goes first is a near-tie.
    # Stock sends 0 then 1, the candidate 1 then 0: FCTs 100/200 against 200/100, service 100 each.
    ref = result({0: 100, 1: 200}, 1.0, 1.0, 10)
    ref.flows["head_ns"] = [0, 100]
    cand = result({0: 200, 1: 100}, 1.0, 1.0, 10)
    cand.flows["head_ns"] = [100, 0]
    c = compare(ref, cand)
    assert c["fct_error"]["max"] == pytest.approx(1.0) and c["fct_error"]["mean"] == pytest.approx(0.75)
    assert c["service_error"] == {"mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}


def test_compare_loose_flows_and_nothing_matched():
    ref = result({0: -1, 1: 100}, loop=1.0, total=2.0, events=10)
    cand = result({0: 100, 1: -1}, loop=0.0, total=1.0, events=10)
    c = compare(ref, cand)
    assert c["iteration_error_max"] is None  # loose flows have no iterations
    assert c["fct_error"] == {"mean": None, "p50": None, "p99": None, "max": None}
    assert (c["matched"], c["unmatched"]) == (0, 2)
    assert c["speedup_loop"] is None and c["skipped_fraction"] == 0.0
    assert within_noise_floor(c, noise_floor(ref, ref)) is None


def test_noise_floor_and_verdict():
    ref = result({0: 100, 1: 100}, 1.0, 1.0, 10)
    floor = noise_floor(ref, result({0: 110, 1: 100}, 1.0, 1.0, 10))
    assert floor["fct_error"]["mean"] == pytest.approx(0.05) and floor["unmatched"] == 0
    assert within_noise_floor(compare(ref, result({0: 104, 1: 100}, 1.0, 1.0, 10)), floor)
    assert not within_noise_floor(compare(ref, result({0: 120, 1: 100}, 1.0, 1.0, 10)), floor)


def test_report_renders_accel_counters_and_iterations():
    ref = result({0: 100}, 2.0, 3.0, 100, iteration_times=[1_000_000, 2_000_000])
    cand = result({0: 101}, 1.0, 2.0, 40, iteration_times=[1_100_000, 2_000_000], mode="accel",
                  accel={"events_executed": 40, "freezes": 3, "time_s": {"simulate": 0.75, "frozen": 0.25}})
    v = {"scenario": "hand", "fingerprint": "f" * 64, "candidate": "accel", "machine": machine(),
         **compare(ref, cand), "stock": ref.summary, "accel": cand.summary}
    md = render_markdown(v, PLOTS)
    assert "# Validation: hand" in md and "| freezes | 3 |" in md and "| time_s.frozen | 0.250 |" in md
    assert "| 0 | 1.0000 | 1.1000 | 10.000 % |" in md  # iterations side by side
    assert all(f"({p})" in md for p in PLOTS) and "noise floor" not in md


def test_report_shows_the_bytes_simulated_by_collective():
    ref = result({0: 100, 1: 100, 2: 100}, 2.0, 3.0, 100)
    cand = result({0: 101, 1: 100, 2: 100}, 1.0, 2.0, 40)
    cand.flows = cand.flows.assign(collective=["ring", "ring", "a2a"], size_bytes=[4_000_000, 4_000_000, 500_000],
                                   bytes_skipped=[3_600_000, 4_000_000, 0])
    v = {"scenario": "hand", "fingerprint": "f" * 64, "candidate": "accel", "machine": machine(),
         **compare(ref, cand), "stock": ref.summary, "accel": cand.summary}
    assert v["simulated_by_collective"] == [
        {"collective": "a2a", "flows": 1, "bytes": 500_000, "simulated_bytes": 500_000},
        {"collective": "ring", "flows": 2, "bytes": 8_000_000, "simulated_bytes": 400_000}]
    md = render_markdown(v, PLOTS)
    assert "| ring | 2 | 8.0 | 0.4 | 5.000 % |" in md and "| all | 3 | 8.5 | 0.9 | 10.588 % |" in md
    assert compare(ref, ref)["simulated_by_collective"] is None   # hand tables without the columns


def test_timeline_draws_partitions(tmp_path):
    partitions = pd.DataFrame({"partition": [0, 0, 1], "start_ns": [0, 5000, 2000],
                               "end_ns": [5000, 9000, 8000], "mode": ["simulate", "frozen", "simulate"],
                               "flows": [2, 2, 1]})
    for name, parts in (("parts.png", partitions), ("flows.png", None)):
        plots.timeline(flows({0: 100, 1: -1}), parts, tmp_path / name, "accel")
        assert (tmp_path / name).read_bytes().startswith(PNG_MAGIC)


def test_validate_stock_against_another_seed(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("unrelated\n")
    # candidate seed 2 = seed + 1: the noise-floor run is the candidate itself, so only two runs
    v = validate(TINY, out, candidate_accel=False, candidate_seed=2, noise_floor=True)
    assert v == json.loads((out / "validation.json").read_text())
    assert {"scenario", "fingerprint", "speedup_loop", "speedup_total", "fct_error", "service_error", "iteration_error_max",
            "skipped_fraction", "flows", "unmatched", "stock", "accel", "noise_floor",
            "within_noise_floor"} <= set(v)
    stock, cand = v["stock"], v["accel"]
    assert v["scenario"] == "tiny-leafspine" and v["fingerprint"] == stock["scenario_fingerprint"]
    assert (stock["seed"], cand["seed"], v["candidate"]) == (1, 2, "stock-seed2")
    assert v["speedup_loop"] > 0 and v["speedup_total"] > 0
    assert v["speedup_loop"] == pytest.approx(stock["wall_s"]["loop"] / cand["wall_s"]["loop"])
    assert v["speedup_total"] == pytest.approx(stock["wall_s"]["total"] / cand["wall_s"]["total"])
    assert v["skipped_fraction"] == pytest.approx(1 - cand["events"] / stock["events"])
    e = v["fct_error"]
    assert 0 <= e["p50"] <= e["p99"] <= e["max"] and 0 <= e["mean"] <= e["max"]
    assert v["iteration_error_max"] is None and v["flows"] == 8 and v["unmatched"] == 0
    assert v["noise_floor"]["fct_error"] == e and v["within_noise_floor"] is True
    assert "tiny-leafspine" in (out / "report.md").read_text()
    for name in PLOTS:
        assert (out / name).read_bytes().startswith(PNG_MAGIC)
    assert (out / "stock" / "flows.csv").exists() and (out / "stock-seed2" / "summary.json").exists()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # no partial folder left
    assert (out / "keep.txt").exists()


def wormhole(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bridge.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_cli_validate_accel_with_the_nudge_floor(tmp_path):
    (tmp_path / "validation.json").write_text("earlier\n")
    proc = wormhole("validate", str(TINY), "--out", str(tmp_path), "--quiet", "--nudge-floor")
    assert proc.returncode == 0, proc.stderr
    v = json.loads((tmp_path / "validation.json").read_text())
    assert v["candidate"] == "accel" and v["fct_error"]["mean"] >= 0 and v["speedup_loop"] > 0
    assert (tmp_path / "accel" / "summary.json").exists() and "noise_floor" not in v
    nudged = json.loads((tmp_path / "stock-nudged" / "summary.json").read_text())
    assert nudged["nudge_ns"] == 1 and nudged["mode"] == "stock"
    starts = (pd.read_csv(tmp_path / "stock-nudged" / "flows.csv").start_ns
              - pd.read_csv(tmp_path / "stock" / "flows.csv").start_ns)
    assert sorted(starts) == [0] * 7 + [1]      # only the first flow released moved, by 1 ns
    assert v["nudge_floor"]["fct_error"]["max"] >= 0 and "nudge floor" in (tmp_path / "report.md").read_text()
    simulated = sum(r["simulated_bytes"] for r in v["simulated_by_collective"])
    assert simulated == v["accel"]["accel"]["bytes_simulated"]


def test_cli_validate_accel_runs_take_the_median_on_one_store_state(tmp_path):
    """--accel-runs 3: the accelerated run three times, each on the store as it was before the
    first (the same records: the same run), the speedups from the median; the store itself holds
    the first run's records only."""
    out, store = tmp_path / "out", tmp_path / "memo.whdb"
    proc = wormhole("validate", str(ROOT / "scenarios" / "tiny-memo-rdma.yaml"), "--out", str(out),
                    "--quiet", "--cache", str(store), "--accel-runs", "3")
    assert proc.returncode == 0, proc.stderr
    v = json.loads((out / "validation.json").read_text())
    loops = v["accel_loop_s_runs"]
    assert len(loops) == 3 and v["accel_runs_agree"] is True
    assert v["speedup_loop"] == pytest.approx(v["stock"]["wall_s"]["loop"] / sorted(loops)[1])
    written = v["accel"]["accel"]["memo"]["records_written"]
    assert written > 0 and open_store(store).stats()["records"] == written
    for k in (2, 3):
        again = json.loads((out / f"accel-{k}" / "summary.json").read_text())
        assert again["events"] == v["accel"]["events"] and again["accel"]["memo"]["records_written"] == written
    assert not any(p.name.startswith(".") for p in out.iterdir())      # no store copies left
    assert "the medians of 3 accel runs" in (out / "report.md").read_text()


def test_cli_validate_with_the_jitter_floor(tmp_path):
    """Each flow of a jittered stock run starts 0-50 ns later, drawn from the seed and the draw: two
    draws move the starts differently, the floor is their worst, and a rerun is the same."""
    proc = wormhole("validate", str(TINY), "--out", str(tmp_path), "--quiet", "--jitter-floor", "50ns",
                    "--jitter-draws", "2")
    assert proc.returncode == 0, proc.stderr
    v = json.loads((tmp_path / "validation.json").read_text())
    floor = v["jitter_floor"]
    assert floor["jitter_ns"] == 50 and len(floor["draws"]) == 2
    assert floor["fct_error"]["max"] == max(d["fct_error"]["max"] for d in floor["draws"])
    assert "jitter floor (stock, each flow +0-50 ns, worst of 2 draws)" in (tmp_path / "report.md").read_text()
    stock = pd.read_csv(tmp_path / "stock" / "flows.csv")
    draws = [pd.read_csv(tmp_path / f"stock-jittered-{k}" / "flows.csv") for k in (0, 1)]
    for jittered in draws:
        starts = jittered.start_ns - stock.start_ns
        assert starts.between(0, 50).all() and starts.nunique() > 2
    assert draws[0].start_ns.tolist() != draws[1].start_ns.tolist()
    again = api.run(TINY, jitter_ns=50, jitter_draw=1)
    assert again.flows.start_ns.tolist() == draws[1].start_ns.tolist()
    assert again.flows.fct_ns.tolist() == draws[1].fct_ns.tolist()


def test_jitter_floor_spans_the_iteration_times_of_stock_and_its_draws():
    stock = result({0: 100}, loop=1.0, total=2.0, events=10, iteration_times=[1000, 2000])
    draws = [result({0: 110}, loop=1.0, total=2.0, events=10, iteration_times=[990, 2030]),
             result({0: 95}, loop=1.0, total=2.0, events=10, iteration_times=[1020, -1])]
    cand = result({0: 100}, loop=0.1, total=1.0, events=1, iteration_times=[1025, 2010])
    floor = jitter_floor(stock, draws, 100, cand)
    assert floor["fct_error"]["max"] == pytest.approx(0.1)          # the worst draw's
    assert floor["iteration_error_max"] == pytest.approx(0.02)      # 1020 against 1000
    assert floor["iteration_range_ns"] == [[990, 1020], [2000, 2030]]   # an unfinished one is left out
    assert floor["candidate_within_range"] == [False, True]
    v = {**compare(stock, cand), "scenario": "hand", "fingerprint": "f" * 12, "candidate": "accel",
         "machine": machine(), "stock": stock.summary, "accel": cand.summary, "jitter_floor": floor}
    text = render_markdown(v, [])
    assert "| 0 | 0.0010 | 0.0010 | 2.500 % | 0.0010 - 0.0010 | no |" in text
    assert "worst of 2 draws" in text
    console = Console(width=200, record=True)
    console.print(console_table(v))
    assert re.search(r"iterations inside the jittered span\W+1 of 2", console.export_text())


def test_cli_validate_bad_scenario_is_one_line(tmp_path):
    proc = wormhole("validate", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "nope.yaml" in proc.stderr
    assert not (tmp_path / "out").exists()
