"""`wormhole validate`: run stock and accelerated on one scenario, then report speedup and error.

Layout of the output folder:
    stock/                 the stock run (bridge.api output files)
    accel/                 the candidate run: accelerated, or stock-seed<N>/ when testing against a seed
    accel-<k>/             with accel_runs: the accelerated run again (k = 2..accel_runs)
    stock-seed<N>/         with noise_floor: stock again on seed + 1
    stock-nudged/          with nudge_floor: stock again with the first flow released 1 ns later
    stock-jittered-<k>/    with jitter_floor_ns: stock again with each flow released 0..jitter_floor_ns
                           later, once per draw k < jitter_draws
    validation.json        metrics and both summaries (bridge.report.validation.compare)
    report.md              the human-readable report, linking the PNGs below
    fct_scatter.png, fct_error_cdf.png, timeline.png
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Callable

import pandas as pd

from . import api
from .engine.memo import default_cache_path
from .ns3.patches import build_library
from .errors import SimulationError
from .runner import TIME_LIMIT_REACHED, make_out_dir
from .report import plots
from .report.validation import compare, fct_errors, floors, jitter_floor, render_markdown, within_noise_floor
from .report.validation import noise_floor as noise_floor_of  # `noise_floor` is validate()'s flag
from .scenario import Scenario

PLOTS = ["fct_scatter.png", "fct_error_cdf.png", "timeline.png"]


def _cpu_model() -> str:
    # platform.processor() is empty on most Linux systems; /proc/cpuinfo names the model.
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine() -> dict:
    return {"platform": platform.platform(), "cpu_count": os.cpu_count(), "processor": _cpu_model(),
            "python": platform.python_version()}


def validate(scenario: str | Path | Scenario, out_dir: str | Path, *, seed: int | None = None,
             noise_floor: bool = False, nudge_floor: bool = False, jitter_floor_ns: int | None = None,
             jitter_draws: int = 1, accel_runs: int = 1,
             candidate_accel: bool = True,
             candidate_seed: int | None = None,
             memo: bool = True, cache: str | Path | None = None, accel_overrides: dict | None = None,
             timeout_s: float | None = None, progress: Callable[[str, dict | None], None] | None = None) -> dict:
    """Run stock, then the candidate, (then stock on seed + 1, then stock nudged, then stock
    jittered), and write the validation outputs.

    The candidate is the accelerated run on the same seed; candidate_accel=False makes it a stock
    run on candidate_seed instead (how the comparison is tested without acceleration). Runs go one
    after the other so that none disturbs another's timing. Everything is written to a private
    folder first and moved into out_dir only when all runs succeeded: a failed validation leaves
    earlier results alone. The floors tell how far runs move anyway: the seed (ECMP paths, ECN
    draws), a 1 ns delay of the first flow (how chaotic the scenario is: any acceleration perturbs
    at least that much), and a delay of each flow by a draw from 0..jitter_floor_ns (the flows'
    timing against each other off by as much as the engine's timing errors; jitter_draws runs, each
    with its own draw: their worst errors and the span of their iteration times). memo, cache and
    accel_overrides apply to the accelerated run (see api.run). progress(name, None) announces a
    run, then progress(name, p) relays its api.run progress. Returns the validation.json contents.
    """
    if not isinstance(scenario, Scenario):
        scenario = api.load_scenario(scenario)  # scenario errors before any run starts
    progress = progress or (lambda name, p: None)
    seed = scenario.seed if seed is None else seed
    if candidate_accel:
        cand_name, cand_seed = "accel", seed
    else:
        cand_seed = seed if candidate_seed is None else candidate_seed
        cand_name = f"stock-seed{cand_seed}"
    # The first child would otherwise compile changed ns3_patches inside its timed import.
    build_library()
    out_dir = make_out_dir(out_dir)
    work = Path(tempfile.mkdtemp(prefix=".partial-", dir=out_dir))
    stores = Path(tempfile.mkdtemp(prefix=".stores-", dir=out_dir))   # (never moved into out_dir)
    try:
        def run(name: str, accel: bool, run_seed: int, store: str | Path | None = cache,
                **perturbation) -> api.RunResult:
            progress(name, None)
            result = api.run(scenario, work / name, accel=accel, seed=run_seed, timeout_s=timeout_s,
                             memo=memo, cache=store, accel_overrides=accel_overrides if accel else None,
                             progress=lambda p: progress(name, p), **perturbation)
            s = result.summary
            if s["stop_reason"] == TIME_LIMIT_REACHED:   # (a comparison of a part of a run says nothing)
                raise SimulationError(f"the {name} run reached the {timeout_s:g} s time limit with "
                                      f"{s['flows_finished']} of {s['flows']} flows finished; nothing kept")
            return result

        stock = run("stock", False, seed)
        repeats = accel_runs if candidate_accel else 1
        store = Path(cache) if cache is not None else default_cache_path()
        before = stores / "before.whdb"
        if repeats > 1 and memo and store.exists():
            shutil.copyfile(store, before)
        cand = run(cand_name, candidate_accel, cand_seed)
        again = []
        for k in range(2, repeats + 1):
            copy = stores / f"run-{k}.whdb"
            if before.exists():
                shutil.copyfile(before, copy)
            again.append(run(f"{cand_name}-{k}", True, cand_seed, store=copy))
        noise = None
        if noise_floor:
            noise_name = f"stock-seed{seed + 1}"
            noise = cand if noise_name == cand_name else run(noise_name, False, seed + 1)
        nudged = run("stock-nudged", False, seed, nudge_ns=1) if nudge_floor else None
        jittered = [run(f"stock-jittered-{k}", False, seed, jitter_ns=jitter_floor_ns, jitter_draw=k)
                    for k in range(jitter_draws if jitter_floor_ns else 0)]

        result = {"scenario": scenario.name, "fingerprint": scenario.fingerprint(), "candidate": cand_name,
                  "machine": machine(), **compare(stock, cand)}
        if again:
            runs = [cand, *again]
            for key in ("loop", "total"):
                result[f"accel_{key}_s_runs"] = [r.summary["wall_s"][key] for r in runs]
                median = statistics.median(result[f"accel_{key}_s_runs"])
                result[f"speedup_{key}"] = stock.summary["wall_s"][key] / median if median > 0 else None
            # Deterministic: the same store state gives the same run, event for event.
            result["accel_runs_agree"] = all(r.summary["events"] == cand.summary["events"]
                                             and r.flows.end_ns.tolist() == cand.flows.end_ns.tolist()
                                             for r in again)
        if noise is not None:
            result["noise_floor"] = noise_floor_of(stock, noise)
            result["within_noise_floor"] = within_noise_floor(result, result["noise_floor"])
        if nudged is not None:
            result["nudge_floor"] = noise_floor_of(stock, nudged)
        if jittered:
            result["jitter_floor"] = jitter_floor(stock, jittered, jitter_floor_ns, cand)
        result["stock"], result["accel"] = stock.summary, cand.summary
        (work / "validation.json").write_text(json.dumps(result, indent=2) + "\n")

        errors = fct_errors(stock.flows, cand.flows)
        plots.fct_scatter(errors, work / "fct_scatter.png", cand_name)
        noise_errors = fct_errors(stock.flows, noise.flows).error if noise is not None else None
        plots.fct_error_cdf(errors.error, noise_errors, work / "fct_error_cdf.png", cand_name)
        partitions_csv = work / cand_name / "partitions.csv"
        partitions = pd.read_csv(partitions_csv) if partitions_csv.exists() else None
        plots.timeline(cand.flows, partitions, work / "timeline.png", cand_name)
        (work / "report.md").write_text(render_markdown(result, PLOTS))

        for item in work.iterdir():
            target = out_dir / item.name
            if target.is_dir():
                shutil.rmtree(target)
            os.replace(item, target)
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(stores, ignore_errors=True)


def console_table(v: dict):
    """A rich Table of the headline numbers, for the terminal."""
    from rich.table import Table

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.2f} %"

    columns = floors(v)
    table = Table(title=f"{v['scenario']}: stock vs {v['candidate']}")
    table.add_column("metric")
    table.add_column(v["candidate"], justify="right")
    for _, name in columns:
        table.add_column(name, justify="right")
    for name, key in (("speedup (loop)", "speedup_loop"), ("speedup (total)", "speedup_total")):
        table.add_row(name, "n/a" if v[key] is None else f"{v[key]:.2f}x")
    for key, label in (("fct_error", "FCT"), ("service_error", "service time")):
        for k in ("mean", "p99", "max"):
            table.add_row(f"{label} error {k}", pct(v[key][k]), *(pct(f[key][k]) for f, _ in columns))
    if v["iteration_error_max"] is not None:
        table.add_row("iteration error max", pct(v["iteration_error_max"]),
                      *(pct(f["iteration_error_max"]) for f, _ in columns))
    inside = (v.get("jitter_floor") or {}).get("candidate_within_range")
    if inside:
        table.add_row("iterations inside the jittered span", f"{sum(x is True for x in inside)} of {len(inside)}")
    table.add_row("skipped events", pct(v["skipped_fraction"]))
    table.add_row("unmatched flows", f"{v['unmatched']} of {v['flows']}",
                  *(str(f["unmatched"]) for f, _ in columns))
    return table
