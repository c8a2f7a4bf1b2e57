"""Parameter sweeps: base scenarios x the cartesian product of overrides x run modes.

    name: tiny-sweep
    base: ../scenarios/tiny-leafspine.yaml     # or a list of files (one more axis, `base`)
    modes: [stock, accel]                      # default [stock]
    axes:                                      # dotted paths into the scenario -> values
      seed: [1, 2]
      transport.kind: [dctcp, cubic]
      flows.0.size: [1MB, 4MB]                 # a number indexes a list

Modes: `stock` is ns-3 packet by packet, `accel` the Wormhole engine, `no-memo` the engine without
memoization (steady fast-forward only), `no-ff` the engine without fast-forward (its overhead
alone). An accelerated run starts from its own empty memo store (DIR/points/<id>/<mode>.memo.whdb),
so its results do not depend on which runs finished before it. A file path in the sweep is relative to the sweep file.
Each point (a base with one value per axis) is written to DIR/points/<id>/scenario.yaml and run
once per mode into DIR/points/<id>/<mode>/, a few runs at a time in worker processes. A run whose
summary.json exists for the same scenario fingerprint is not run again, so an interrupted sweep
resumes where it stopped. DIR/results.csv holds only deterministic columns (the same bytes
whatever the worker count, completion order or interruptions); wall times go to timings.csv.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
import yaml

from .errors import ScenarioError, WormholeError
from .runner import make_out_dir
from .scenario import Scenario, load_scenario, parse_scenario_dict
from .scenario.load import _StrictLoader  # the scenario loader's YAML rules: duplicate keys are errors

MODES = {"stock": {"accel": False, "fast_forward": True},
         "accel": {"accel": True, "fast_forward": True},
         "no-memo": {"accel": True, "fast_forward": True, "memo": False},
         "no-ff": {"accel": True, "fast_forward": False}}
SWEEP_KEYS = ("name", "base", "modes", "axes")
MAX_POINTS = 10_000  # a typo in an axis should not queue a month of simulation


@dataclass(frozen=True)
class Point:
    """One scenario of the sweep: `values` maps each axis (and `base` for several bases) to its value."""

    id: str
    values: dict
    scenario: Scenario
    data: dict  # the YAML written to points/<id>/scenario.yaml


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file: every point, in the order of the product (the order of the results)."""

    name: str
    modes: tuple[str, ...]
    axes: tuple[str, ...]     # result columns, in order: `base` (several bases only), then the axes
    points: tuple[Point, ...]


def load_sweep(path: str | os.PathLike) -> Sweep:
    """Read and validate a sweep file and every point it expands to (ScenarioError on the first problem)."""
    where = str(path)
    try:
        data = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_StrictLoader)
    except OSError as e:
        raise ScenarioError(where, None, f"cannot read: {e.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError, ValueError) as e:
        raise ScenarioError(where, None, f"YAML error: {' '.join(str(e).split())}") from None
    if not isinstance(data, dict):
        raise ScenarioError(where, None, "top level must be a mapping with name, base, modes, axes")
    for key in data:
        if key not in SWEEP_KEYS:
            raise ScenarioError(where, str(key), f"unknown field (expected one of: {', '.join(SWEEP_KEYS)})")

    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ScenarioError(where, "name", f"expected a non-empty string (got {name!r})")
    bases_given = data.get("base")
    bases = bases_given if isinstance(bases_given, list) else [bases_given]
    if not bases or not all(isinstance(b, str) and b.strip() for b in bases) or len(set(bases)) < len(bases):
        raise ScenarioError(where, "base", f"expected a scenario file or a list of distinct ones "
                            f"(got {bases_given!r})")
    modes = data.get("modes", ["stock"])
    if not isinstance(modes, list) or not modes or len(set(map(str, modes))) < len(modes):
        raise ScenarioError(where, "modes", f"expected a list of distinct modes (got {modes!r})")
    for i, mode in enumerate(modes):
        if mode not in MODES:
            raise ScenarioError(where, f"modes[{i}]", f"unknown mode {mode!r} (expected one of: {', '.join(MODES)})")
    axes = data.get("axes") or {}
    if not isinstance(axes, dict):
        raise ScenarioError(where, "axes", f"expected a mapping of dotted paths to value lists (got {axes!r})")
    for axis, values in axes.items():
        if not isinstance(axis, str) or not all(axis.split(".")) or axis == "base":
            raise ScenarioError(where, f"axes.{axis}", "expected a dotted path into the scenario, "
                                "e.g. transport.kind")
        if not isinstance(values, list) or not values:
            raise ScenarioError(where, f"axes.{axis}", f"expected a non-empty list of values (got {values!r})")
        if len({json.dumps(v, sort_keys=True, default=str) for v in values}) < len(values):
            raise ScenarioError(where, f"axes.{axis}", f"repeated value in {values!r}")

    base_files = [(b, (Path(path).resolve().parent / b).resolve()) for b in bases]
    base_data = [(written, file, _read_base(where, i if len(bases) > 1 else None, file))
                 for i, (written, file) in enumerate(base_files)]
    n_points = len(bases) * math.prod(len(v) for v in axes.values())
    if n_points > MAX_POINTS:
        raise ScenarioError(where, "axes", f"{n_points} points is too many (max {MAX_POINTS})")
    columns = (("base",) if len(bases) > 1 else ()) + tuple(axes)
    points = []
    for (written, file, raw), combo in itertools.product(base_data, itertools.product(*axes.values())):
        values = dict(zip(axes, combo))
        if len(bases) > 1:
            values = {"base": written, **values}
        points.append(_point(where, file, raw, values))
    return Sweep(name, tuple(modes), columns, tuple(points))


def _read_base(where: str, index: int | None, file: Path) -> dict:
    """The base scenario's YAML, validated as it stands."""
    field = "base" if index is None else f"base[{index}]"
    try:
        load_scenario(file)
    except ScenarioError as e:
        raise ScenarioError(where, field, str(e)) from None
    return yaml.load(file.read_text(encoding="utf-8"), Loader=_StrictLoader)


def _point(where: str, base: Path, raw: dict, values: dict) -> Point:
    """Apply one combination of axis values to the base and validate the result."""
    data = copy.deepcopy(raw)
    overrides = {k: v for k, v in values.items() if k != "base"}
    for axis, value in overrides.items():
        _set_path(data, axis, value, where)
    try:
        # The base's path: files the scenario names resolve against the base's folder.
        scenario = parse_scenario_dict(data, base)
    except ScenarioError as e:
        axis = next((a for a in overrides if e.field and (e.field == a or e.field.startswith(a + "."))), None)
        raise ScenarioError(where, f"axes.{axis}" if axis else "base",
                            f"point {_describe(values)}: {e}") from None
    # The point's file lives elsewhere: name referenced files by their resolved absolute paths.
    for holder, key, resolved in ((data, "flow_file", scenario.flow_file),
                                  (data.get("topology"), "file", getattr(scenario.topology, "file", None)),
                                  (data.get("aicb"), "file", scenario.aicb and scenario.aicb.file),
                                  (data.get("transport"), "config", getattr(scenario.transport, "config", None))):
        if resolved is not None:
            holder[key] = str(resolved)
    # The id names the point by what was written in the sweep file, so it survives edits elsewhere.
    digest = hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()
    return Point(digest[:10], values, scenario, data)


def _set_path(data: dict, dotted: str, value: object, where: str) -> None:
    """data[a][b][c] = value for 'a.b.c'; missing mappings are created, list items taken by index."""
    node = data
    keys = dotted.split(".")
    for depth, key in enumerate(keys):
        last = depth == len(keys) - 1
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise ScenarioError(where, f"axes.{dotted}", f"{'.'.join(keys[:depth])} is a list of "
                                    f"{len(node)} items; {key!r} is not an index into it")
            key = int(key)
        elif not isinstance(node, dict):
            raise ScenarioError(where, f"axes.{dotted}", f"{'.'.join(keys[:depth])} is not a mapping")
        if last:
            node[key] = value
        else:
            if isinstance(node, dict) and node.get(key) is None:
                node[key] = {}
            node = node[key]


def _describe(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())


# --- running -----------------------------------------------------------------------------------

def _run_one(task: tuple[str, str, str]) -> tuple[tuple[str, str, str], str | None]:
    """Worker: run one (scenario file, out dir, mode); returns the task and an error line or None."""
    from . import api

    scenario_file, out_dir, mode = task
    options = dict(MODES[mode])
    if options["accel"] and options["fast_forward"] and options.get("memo", True):
        options["cache"] = Path(out_dir).with_suffix(".memo.whdb")
        options["cache"].unlink(missing_ok=True)
    try:
        api.run(scenario_file, out_dir, **options)
    except WormholeError as exc:  # as text: ScenarioError's signature does not survive pickling
        return task, str(exc)
    return task, None


def _worker_signals() -> None:
    """Ctrl-C reaches the whole process group; only the parent handles it, by terminating the pool.

    The pool terminates with SIGTERM: exiting through Python lets a run in progress remove its
    private partial folder.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _done(point: Point, run_dir: Path) -> bool:
    """The run has a summary for this very scenario (an edited base makes it stale)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return summary.get("scenario_fingerprint") == point.scenario.fingerprint()


def run_sweep(sweep: Sweep | str | os.PathLike, out_dir: str | os.PathLike, workers: int = 1,
              progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Run every (point, mode) not already done, then write results.csv, timings.csv, fct_by_point.png.

    progress(done, total) is called as runs finish. Returns the results table; raises
    WormholeError after writing the tables if some runs failed.
    """
    if not isinstance(sweep, Sweep):
        sweep = load_sweep(sweep)
    out = Path(out_dir)
    tasks = []
    for point in sweep.points:
        point_dir = out / "points" / point.id
        make_out_dir(point_dir)
        (point_dir / "scenario.yaml").write_text(yaml.safe_dump(point.data, sort_keys=False))
        tasks += [(str(point_dir / "scenario.yaml"), str(point_dir / mode), mode)
                  for mode in sweep.modes if not _done(point, point_dir / mode)]
    total = len(sweep.points) * len(sweep.modes)
    done = total - len(tasks)
    if progress:
        progress(done, total)
    errors = []
    if tasks:
        # spawn: a forked copy of this process would inherit the progress display's threads.
        ctx = multiprocessing.get_context("spawn")
        # On KeyboardInterrupt the pool's exit terminates the workers: an interrupted run leaves
        # no summary.json, so it runs again on resume. Done, they exit on their own (close, join):
        # a terminate() then raced the idle workers' exit and once hung a finished sweep for good.
        with ctx.Pool(min(workers, len(tasks)), initializer=_worker_signals) as pool:
            for task, error in pool.imap_unordered(_run_one, tasks):
                done += 1
                if error:
                    errors.append(f"{Path(task[1]).relative_to(out)}: {error}")
                if progress:
                    progress(done, total)
            pool.close()
            pool.join()
    results, timings = collect(sweep, out)
    results.to_csv(out / "results.csv", index=False)
    timings.to_csv(out / "timings.csv", index=False)
    plot_fct(sweep, out, out / "fct_by_point.png")
    if errors:
        raise WormholeError(f"{len(errors)} of {total} runs failed; first: {errors[0]}")
    return results


# --- tables and plot ---------------------------------------------------------------------------

_INT_COLUMNS = ["flows", "flows_finished", "fct_max_ns", "iter_max_ns", "sim_time_ns", "events"]


def _cell(value: object) -> object:
    """A scalar as itself, anything else (a list, a mapping) as compact JSON."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else json.dumps(value, sort_keys=True)


def collect(sweep: Sweep, out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """results (deterministic columns) and timings (wall clock), one row per finished run in sweep order."""
    from .api import read_results
    from .report.validation import compare

    results, timings = [], []
    for point in sweep.points:
        runs = {m: read_results(out / "points" / point.id / m) for m in sweep.modes
                if _done(point, out / "points" / point.id / m)}
        for mode, run in runs.items():
            s, fct = run.summary, run.summary["fct"]
            iters = s.get("iteration_time_ns") or []
            key = {"point": point.id, **{a: _cell(point.values[a]) for a in sweep.axes}, "mode": mode}
            row = {**key, "scenario": s["scenario"], "flows": s["flows"], "flows_finished": s["flows_finished"],
                   "fct_mean_ns": fct.get("fct_mean_ns"), "fct_p50_ns": fct.get("fct_p50_ns"),
                   "fct_p99_ns": fct.get("fct_p99_ns"), "fct_max_ns": fct.get("fct_max_ns"),
                   "iter_mean_ns": sum(iters) / len(iters) if iters else None,
                   "iter_max_ns": max(iters) if iters else None,
                   "sim_time_ns": s["sim_time_ns"], "events": s["events"]}
            wall = {**key, **{f"wall_{k}_s": s["wall_s"][k] for k in ("import", "build", "loop", "total")}}
            if mode != "stock" and "stock" in runs:
                c = compare(runs["stock"], run)
                row.update(skipped_fraction=c["skipped_fraction"], fct_err_mean=c["fct_error"]["mean"],
                           fct_err_p99=c["fct_error"]["p99"], iter_err_max=c["iteration_error_max"])
                wall.update(speedup_loop=c["speedup_loop"], speedup_total=c["speedup_total"])
            results.append(row)
            timings.append(wall)
    frame = pd.DataFrame(results, columns=_result_columns(sweep, results))
    for col in _INT_COLUMNS:  # nullable ints: no "12.0" in the CSV where a value may be missing
        frame[col] = frame[col].astype("Int64")
    return frame, pd.DataFrame(timings)


def _result_columns(sweep: Sweep, rows: list[dict]) -> list[str]:
    """A fixed column order (the error columns only when some run was compared with stock)."""
    cols = ["point", *sweep.axes, "mode", "scenario", "flows", "flows_finished", "fct_mean_ns", "fct_p50_ns",
            "fct_p99_ns", "fct_max_ns", "iter_mean_ns", "iter_max_ns", "sim_time_ns", "events"]
    if any("fct_err_mean" in r for r in rows):
        cols += ["skipped_fraction", "fct_err_mean", "fct_err_p99", "iter_err_max"]
    return cols


def plot_fct(sweep: Sweep, out: Path, path: Path) -> None:
    """Box plot of the finished flows' FCTs, one box per run, in sweep order."""
    from matplotlib.figure import Figure  # the object API: no GUI backend, no pyplot state
    from matplotlib.ticker import FuncFormatter

    boxes, labels = [], []
    for point in sweep.points:
        for mode in sweep.modes:
            run_dir = out / "points" / point.id / mode
            if not _done(point, run_dir):
                continue
            fct = pd.read_csv(run_dir / "flows.csv", usecols=["fct_ns"]).fct_ns
            boxes.append((fct[fct >= 0] / 1e3).to_numpy())
            values = " ".join(f"{a.split('.')[-1]}={point.values[a]}" for a in sweep.axes)
            labels.append(f"{values} {mode}".strip())
    fig = Figure(figsize=(max(6.0, 0.45 * len(boxes) + 2), 5.5))
    ax = fig.add_subplot()
    if boxes:
        ax.boxplot(boxes, showfliers=True)
        ax.set_xticks(range(1, len(boxes) + 1), labels, rotation=60, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 200, not 2x10^2
    else:
        ax.text(0.5, 0.5, "no finished run", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("flow completion time (us)")
    ax.set_title(f"{sweep.name}: FCT per point")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
