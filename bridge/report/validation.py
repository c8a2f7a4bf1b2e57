"""Validation metrics: how far a candidate run (accelerated, or stock on another seed) is from stock.

Pure functions on RunResults, DataFrames and dicts; running simulations is bridge.validate's job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # the report layer sits below the API; it only reads RunResults
    from ..api import RunResult


# How far stock runs move anyway, beside the candidate's error: validation.json key, column title.
def floors(v: dict) -> list[tuple[dict, str]]:
    """The floors a validation.json dict holds, each with its column name."""
    jitter = v.get("jitter_floor") or {}
    draws = len(jitter.get("draws", []))
    names = {"noise_floor": "noise floor (stock, seed + 1)", "nudge_floor": "nudge floor (stock, +1 ns)",
             "jitter_floor": f"jitter floor (stock, each flow +0-{jitter.get('jitter_ns')} ns"
                             + (f", worst of {draws} draws)" if draws > 1 else ")")}
    return [(v[key], name) for key, name in names.items() if v.get(key)]


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def fct_errors(reference: pd.DataFrame, candidate: pd.DataFrame) -> pd.DataFrame:
    """Flows finished in both runs, matched by flow_id: flow_id, fct_ref, fct_cand, error.

    error = |FCT_c - FCT_s| / FCT_s. Flow sizes are >= 1 byte, so a finished FCT is > 0.
    """
    return _matched_errors(reference, candidate, "flow_id", "fct_ns", "fct")


def service_errors(reference: pd.DataFrame, candidate: pd.DataFrame) -> pd.DataFrame:
    """As fct_errors, on each flow's service time end_ns - head_ns: its FCT without the wait behind
    earlier flows of its connection. Flows released a few ns apart onto one connection (ring steps
    of two gradient buckets on the same host pair) queue in either order after any timing change,
    and each one's FCT jumps by a whole flow's transmission; the service time does not."""
    def service(flows: pd.DataFrame) -> pd.DataFrame:
        done = flows.end_ns >= 0
        service = (flows.end_ns - flows.head_ns).where(done, -1)
        return pd.DataFrame({"flow_id": flows.flow_id, "service_ns": service})
    return _matched_errors(service(reference), service(candidate), "flow_id", "service_ns", "service")


def error_stats(errors: pd.Series) -> dict:
    """mean, p50, p99, max of relative errors (all None when there are none)."""
    if errors.empty:
        return dict.fromkeys(("mean", "p50", "p99", "max"))
    e = errors.to_numpy(dtype=float)
    return {"mean": float(e.mean()), "p50": float(np.percentile(e, 50)),
            "p99": float(np.percentile(e, 99)), "max": float(e.max())}


def iteration_errors(reference: pd.DataFrame | None, candidate: pd.DataFrame | None) -> pd.DataFrame | None:
    """Iterations finished in both runs: (job,) iteration, time_ref, time_cand, error (None for
    loose flows). Iterations are matched by job too where both tables have one."""
    if reference is None or candidate is None:
        return None
    key = ["job", "iteration"] if "job" in reference and "job" in candidate else ["iteration"]
    return _matched_errors(reference, candidate, key, "time_ns", "time")


def _matched_errors(reference: pd.DataFrame, candidate: pd.DataFrame, key: str | list[str], column: str,
                    name: str) -> pd.DataFrame:
    """Rows finished (column >= 0) in both, matched by key: key, <name>_ref, <name>_cand, error."""
    keys = [key] if isinstance(key, str) else key
    ref = reference.loc[reference[column] >= 0, [*keys, column]]
    cand = candidate.loc[candidate[column] >= 0, [*keys, column]]
    both = ref.merge(cand, on=key, suffixes=("_ref", "_cand")).sort_values(key).reset_index(drop=True)
    both = both.rename(columns={f"{column}_ref": f"{name}_ref", f"{column}_cand": f"{name}_cand"})
    both["error"] = (both[f"{name}_cand"] - both[f"{name}_ref"]).abs() / both[f"{name}_ref"]
    return both


def simulated_by_collective(flows: pd.DataFrame) -> list[dict] | None:
    """Per collective of a run's flows (`flow` for loose ones): how many, their bytes, and the bytes
    their packets carried in ns-3, not skipped: where an accelerated run still simulates. None for a
    table without those columns."""
    if not {"collective", "size_bytes", "bytes_skipped"} <= set(flows.columns):
        return None
    simulated = flows.assign(simulated=flows.size_bytes - flows.bytes_skipped)
    return [{"collective": name, "flows": len(group), "bytes": int(group.size_bytes.sum()),
             "simulated_bytes": int(group.simulated.sum())}
            for name, group in simulated.groupby("collective", sort=True)]


def compare(reference: RunResult, candidate: RunResult) -> dict:
    """Speedups, FCT and iteration-time errors and skipped events of candidate against reference.

    A flow unfinished in either run (or present in only one) has no FCT to compare: it counts in
    `unmatched` and is left out of the error statistics.
    """
    errors = fct_errors(reference.flows, candidate.flows)
    ids = set(reference.flows.flow_id) | set(candidate.flows.flow_id)
    iters = iteration_errors(reference.iterations, candidate.iterations)
    ref_s, cand_s = reference.summary, candidate.summary
    return {
        "speedup_loop": _ratio(ref_s["wall_s"]["loop"], cand_s["wall_s"]["loop"]),
        "speedup_total": _ratio(ref_s["wall_s"]["total"], cand_s["wall_s"]["total"]),
        "fct_error": error_stats(errors.error),
        "service_error": error_stats(service_errors(reference.flows, candidate.flows).error),
        "iteration_error_max": float(iters.error.max()) if iters is not None and len(iters) else None,
        "skipped_fraction": 1 - cand_s["events"] / ref_s["events"] if ref_s["events"] else None,
        "simulated_by_collective": simulated_by_collective(candidate.flows),
        "flows": len(ids),
        "matched": len(errors),
        "unmatched": len(ids) - len(errors),
    }


def noise_floor(reference: RunResult, other: RunResult) -> dict:
    """The errors between two stock runs that differ only in their seed, a 1 ns nudge or a jitter
    of the flows' starts: what 'accurate' can mean."""
    c = compare(reference, other)
    return {"fct_error": c["fct_error"], "service_error": c["service_error"],
            "iteration_error_max": c["iteration_error_max"],
            "unmatched": c["unmatched"]}


def jitter_floor(reference: RunResult, draws: list[RunResult], jitter_ns: int,
                 candidate: RunResult | None = None) -> dict:
    """The jitter floor over one or more jittered stock runs: each draw's errors against stock, the
    worst of each statistic over the draws, and per iteration the range of times that stock and
    its draws span. One draw can land anywhere in that range; the range says how far the flows'
    timing against each other moves an iteration, and (given a candidate) whether its time is
    inside it."""
    per_draw = [noise_floor(reference, run) for run in draws]

    def worst(values: list[float | None]) -> float | None:
        known = [x for x in values if x is not None]
        return max(known) if known else None

    floor = {key: {k: worst([d[key][k] for d in per_draw]) for k in per_draw[0][key]}
             for key in ("fct_error", "service_error")}
    floor["iteration_error_max"] = worst([d["iteration_error_max"] for d in per_draw])
    floor["unmatched"] = max(d["unmatched"] for d in per_draw)
    times = [run.summary.get("iteration_time_ns") or [] for run in [reference, *draws]]
    finished = [[t for t in column if t >= 0] for column in zip(*times)]
    floor["iteration_range_ns"] = [[min(c), max(c)] if c else None for c in finished]
    if candidate is not None:
        mine = candidate.summary.get("iteration_time_ns") or []
        floor["candidate_within_range"] = [None if span is None or t < 0 else span[0] <= t <= span[1]
                                           for span, t in zip(floor["iteration_range_ns"], mine)]
    return {**floor, "jitter_ns": jitter_ns, "draws": per_draw}


def within_noise_floor(result: dict, floor: dict) -> bool | None:
    """Candidate mean FCT error <= the noise floor's (None when either has no matched flow)."""
    mine, noise = result["fct_error"]["mean"], floor["fct_error"]["mean"]
    return None if mine is None or noise is None else mine <= noise


def flatten(counters: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}: nested counters as table rows."""
    rows = {}
    for key, value in counters.items():
        if isinstance(value, dict):
            rows.update(flatten(value, f"{prefix}{key}."))
        else:
            rows[f"{prefix}{key}"] = value
    return rows


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.3f} %"


def _times(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.4f}" if ns >= 0 else "unfinished"


def _value(x) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    return f"{x:,}" if isinstance(x, int) else f"{x:,.3f}"


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def render_markdown(v: dict, plots: list[str]) -> str:
    """report.md from a validation.json dict and the PNG file names written beside it."""
    stock, cand, floor = v["stock"], v["accel"], v.get("noise_floor")
    columns = floors(v)
    label = v["candidate"]
    m = v["machine"]
    out = [f"# Validation: {v['scenario']}", "",
           f"- scenario: `{stock['scenario_file']}` (fingerprint `{v['fingerprint'][:12]}`), seed {stock['seed']}",
           f"- candidate: {label} (seed {cand['seed']}, mode {cand['mode']})",
           f"- machine: {m['platform']}, {m['cpu_count']} CPUs, {m['processor'] or 'unknown processor'}, "
           f"Python {m['python']}; ns-3 {stock['versions']['ns3']}, wormhole {stock['versions']['wormhole']}",
           f"- flows: {v['flows']} ({v['matched']} matched, {v['unmatched']} unmatched: unfinished in either run)",
           "", "## Wall time (s)", ""]
    out += _table(["phase", "stock", label, "stock / " + label],
                  [[k, f"{stock['wall_s'][k]:.3f}", f"{cand['wall_s'][k]:.3f}",
                    _times(_ratio(stock["wall_s"][k], cand["wall_s"][k]))]
                   for k in ("import", "build", "loop", "total")])
    repeats = v.get("accel_loop_s_runs")
    median = "" if not repeats else (
        f" (the medians of {len(repeats)} {label} runs, loops {', '.join(f'{x:.3f}' for x in repeats)} s; "
        + ("they agree event for event" if v["accel_runs_agree"] else "**they differ: not deterministic**") + ")")
    out += ["", f"Speedup: **{_times(v['speedup_loop'])}** on the simulation loop, "
                f"{_times(v['speedup_total'])} end to end{median}. Events: {stock['events']:,} stock, "
                f"{cand['events']:,} {label} (skipped fraction {_pct(v['skipped_fraction'])}).",
            "", "## Error against stock", ""]
    header = ["metric", label] + [name for _, name in columns]
    rows = [[f"{name} error {k}", _pct(v[key][k])] + [_pct(f[key][k]) for f, _ in columns]
            for key, name in (("fct_error", "FCT"), ("service_error", "service time"))
            for k in ("mean", "p50", "p99", "max")]
    rows.append(["iteration time error max", _pct(v["iteration_error_max"])]
                + [_pct(f["iteration_error_max"]) for f, _ in columns])
    out += _table(header, rows)
    if floor:
        verdict = {True: "within", False: "**above**", None: "not comparable to"}[v["within_noise_floor"]]
        out += ["", f"The {label} run's mean FCT error is {verdict} the noise floor."]
    if "iteration_time_ns" in stock and "iteration_time_ns" in cand:
        out += ["", "## Iteration times (ms)", ""]
        jitter = v.get("jitter_floor") or {}
        spans = jitter.get("iteration_range_ns", [])
        within = jitter.get("candidate_within_range", [])
        header = ["iteration", "stock", label, "error"]
        if spans:
            header += ["stock and jittered stock span", f"{label} inside"]
        rows = []
        for i, (a, b) in enumerate(zip(stock["iteration_time_ns"], cand["iteration_time_ns"])):
            row = [i, _ms(a), _ms(b), _pct(abs(b - a) / a if a > 0 and b >= 0 else None)]
            if spans:
                span = spans[i] if i < len(spans) else None
                inside = within[i] if i < len(within) else None
                row += ["n/a" if span is None else f"{_ms(span[0])} - {_ms(span[1])}",
                        {True: "yes", False: "no", None: "n/a"}[inside]]
            rows.append(row)
        out += _table(header, rows)
    if v.get("simulated_by_collective"):
        out += ["", "## Bytes simulated, by collective", ""]
        rows = v["simulated_by_collective"]
        total = {"collective": "all", "flows": sum(r["flows"] for r in rows),
                 "bytes": sum(r["bytes"] for r in rows), "simulated_bytes": sum(r["simulated_bytes"] for r in rows)}
        out += _table(["collective", "flows", "MB", f"MB simulated ({label})", "simulated"],
                      [[r["collective"], r["flows"], f"{r['bytes'] / 1e6:,.1f}", f"{r['simulated_bytes'] / 1e6:,.1f}",
                        _pct(r["simulated_bytes"] / r["bytes"] if r["bytes"] else None)] for r in [*rows, total]])
    if isinstance(cand.get("accel"), dict):
        out += ["", "## Acceleration counters", ""]
        out += _table(["counter", "value"],
                      [[k, _value(x)] for k, x in flatten(cand["accel"]).items()])
    out += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(out) + "\n"
