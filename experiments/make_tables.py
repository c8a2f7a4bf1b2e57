"""Print the README's Markdown tables from finished sweeps.

    python experiments/make_tables.py out/speedup out/ablation

One table per sweep folder (what `wormhole sweep ... --out DIR` wrote): a row per run, its axis
values and mode, then events, simulated time, FCTs, the loop's wall time and, for runs compared
with a stock run of the same point, the speedup and the FCT error against stock.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

KEY = ["point", "mode"]
METRICS = {"scenario", "flows", "flows_finished", "fct_mean_ns", "fct_p50_ns", "fct_p99_ns", "fct_max_ns",
           "iter_mean_ns", "iter_max_ns", "sim_time_ns", "events", "skipped_fraction", "fct_err_mean",
           "fct_err_p99", "iter_err_max"}


def _num(x, fmt: str, scale: float = 1.0) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x / scale, fmt)


def table(sweep_dir: Path) -> str:
    results = pd.read_csv(sweep_dir / "results.csv")
    timings = pd.read_csv(sweep_dir / "timings.csv")
    runs = results.merge(timings[KEY + [c for c in timings if c.startswith(("wall_loop", "speedup"))]], on=KEY)
    # With several bases, a row names its scenario rather than the base's path.
    axes = [("scenario" if c == "base" else c) for c in results.columns if c not in METRICS and c not in KEY]
    compared = "fct_err_mean" in runs
    iterations = runs.iter_mean_ns.notna().any()
    header = [*axes, "mode", "flows", "events", "sim time (us)", "FCT mean (us)", "FCT p99 (us)"]
    header += ["iteration (ms)"] if iterations else []
    header += ["loop (s)"] + (["speedup (loop)", "FCT error mean", "FCT error p99"] if compared else [])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in runs.to_dict("records"):
        row = [str(r[a]) for a in axes] + [r["mode"], f"{r['flows_finished']}/{r['flows']}", f"{r['events']:,}",
                                           _num(r["sim_time_ns"], ",.1f", 1e3), _num(r["fct_mean_ns"], ",.1f", 1e3),
                                           _num(r["fct_p99_ns"], ",.1f", 1e3)]
        row += [_num(r["iter_mean_ns"], ".3f", 1e6)] if iterations else []
        row += [_num(r["wall_loop_s"], ".2f")]
        if compared:
            speedup = _num(r.get("speedup_loop"), ".2f")
            row += [speedup and f"{speedup}x", _num(r["fct_err_mean"], ".2%"), _num(r["fct_err_p99"], ".2%")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweeps", nargs="+", type=Path, help="sweep output folders")
    for sweep_dir in parser.parse_args().sweeps:
        print(f"### {sweep_dir.name}\n\n{table(sweep_dir)}\n")


if __name__ == "__main__":
    main()
