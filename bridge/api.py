"""The Python API (the CLI is a thin layer over it): load scenarios, run them, read results.

    from bridge import api
    result = api.run("scenarios/tiny-leafspine.yaml", out_dir="out")
    result.flows.fct_ns.describe(); result.summary["events"]
"""

from __future__ import annotations

import json
import numbers
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from .errors import ScenarioError
from .runner import run_child
from .scenario import MAX_SEED, Scenario, load_scenario, with_accel_overrides

__all__ = ["RunResult", "load_scenario", "run", "read_results"]


@dataclass
class RunResult:
    """A finished run: its summary and its tables (iterations is None for loose flows)."""

    out_dir: Path | None
    summary: dict
    flows: pd.DataFrame
    iterations: pd.DataFrame | None


def read_results(out_dir: str | Path) -> RunResult:
    """Read the files a run wrote into out_dir."""
    out_dir = Path(out_dir)
    iterations = out_dir / "iterations.csv"
    return RunResult(out_dir=out_dir, summary=json.loads((out_dir / "summary.json").read_text()),
                     flows=pd.read_csv(out_dir / "flows.csv", keep_default_na=False),
                     iterations=pd.read_csv(iterations) if iterations.exists() else None)


def run(scenario: str | Path | Scenario, out_dir: str | Path | None = None, *, accel: bool = False,
        fast_forward: bool = True, memo: bool = True, cache: str | Path | None = None,
        accel_overrides: dict | None = None, seed: int | None = None, stop_time_ns: int | None = None,
        timeout_s: float | None = None, progress: Callable[[dict], None] | None = None,
        nudge_ns: int = 0, jitter_ns: int = 0, jitter_draw: int = 0) -> RunResult:
    """Simulate a scenario in a child process; with out_dir=None nothing is kept.

    accel=False is stock ns-3 (every packet simulated); accel=True runs the Wormhole engine,
    whose fast_forward=False ablation keeps the partition machinery but never freezes, and whose
    memo=False ablation fast-forwards steady partitions without memoized transients. cache is the
    memo store file (default: $WORMHOLE_CACHE, else ~/.cache/wormhole/memo.whdb).
    accel_overrides replaces fields of the scenario's `accel` block (theta, window, tau, ...).
    nudge_ns delays the first flow the workload releases (the smallest perturbation of a run);
    jitter_ns delays each flow it releases by a draw from 0..jitter_ns ns (seeded by the run's
    seed and jitter_draw: the same seed keeps its ECMP paths while each draw jitters anew),
    perturbing the flows' timing against each other as much as the engine's own timing errors do.
    timeout_s limits the run's wall time: at it the run ends where it is and keeps what finished
    (summary stop_reason "time limit reached"); one that does not stop soon after is killed
    (SimulationError). progress gets {"sim_ns", "flows_done", "flows"} as the run goes, with "stage" (what is being
    built, before the run starts) on a first run after the patches changed.
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)  # validate here: errors surface before any child starts
    with_accel_overrides(scenario, accel_overrides)  # a bad --theta etc. fails here, in one line
    if seed is not None:
        if not isinstance(seed, numbers.Integral) or not 0 <= seed <= MAX_SEED:
            raise ScenarioError(None, "seed", f"expected an integer from 0 to {MAX_SEED} (got {seed!r})")
        seed = int(seed)              # (a numpy integer would not go into the child's JSON)
    if accel and fast_forward and memo:
        from .engine.memo import open_store

        open_store(cache)  # a bad cache file fails here, in one line, before any child starts
    payload = {"scenario": str(scenario.source_path), "seed": seed, "stop_time_ns": stop_time_ns,
               "accel": accel, "fast_forward": fast_forward, "accel_overrides": accel_overrides,
               "memo": memo, "cache": str(Path(cache).resolve()) if cache is not None else None,
               "nudge_ns": nudge_ns, "jitter_ns": jitter_ns, "jitter_draw": jitter_draw}
    if out_dir is not None:
        run_child("bridge.simulation", payload, Path(out_dir), progress, timeout_s)
        return read_results(out_dir)
    with tempfile.TemporaryDirectory(prefix="wormhole-") as tmp:
        run_child("bridge.simulation", payload, Path(tmp), progress, timeout_s)
        result = read_results(tmp)
        result.out_dir = None
        return result
