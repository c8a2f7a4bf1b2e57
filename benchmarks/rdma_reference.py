"""Our RDMA transport against the HPCC reference simulator's own results on its four cases.

    python benchmarks/rdma_reference.py --out out/rdma-reference [--accel] [case/cc ...]

Runs every reference config in scenarios/hpcc-sim (imported directly: config, topology and flow
files in the reference's formats) and prints the parity table of docs/rdma.md: mean FCT ours vs the
reference's, the mean of per-flow errors, the largest per-flow error (flows matched by host pair,
as both simulators number them), the largest error after sorting both sides' FCTs (the same
distribution of finish times, whichever flow got which), our own seed noise (the largest per-flow
FCT change when only the run's seed changes: ECN marking draws) and nudge noise (the same when the
first flow starts 1 ns later: how chaotic the case is, HPCC's included, which draws nothing), and
wall time against the
reference's recorded run time (the fastest of --repeat stock runs: identical runs vary by up to
2x in wall time on this machine). With --accel the accelerated run is reported too, on an empty
memo store. Timings are wall clock; run on a quiet machine.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bridge import api  # noqa: E402

CASES_DIR = ROOT / "scenarios" / "hpcc-sim"
CASES = [f"{case}/{cc}" for case in ("incast2", "ring8", "incast16", "a2a8") for cc in ("dcqcn", "hpcc")]


def read_fct(path: Path) -> dict[tuple[int, int], list[int]]:
    """(src host, dst host) -> FCTs in file order, from an fct.txt (hosts are 0bHHHH01 in hex)."""
    out: dict[tuple[int, int], list[int]] = {}
    for line in path.read_text().splitlines():
        sip, dip, *_, fct, _ = line.split()
        out.setdefault((int(sip[2:6], 16), int(dip[2:6], 16)), []).append(int(fct))
    return out


def reference_wall_s(case: str) -> tuple[float, float]:
    """The reference's recorded run time range for a case, from scenarios/hpcc-sim/README.md."""
    for line in (CASES_DIR / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 2 and cells[1] == case:
            lo, hi = re.match(r"([\d.]+)-([\d.]+) s", cells[-2]).groups()
            return float(lo), float(hi)
    raise ValueError(f"no run time for {case} in {CASES_DIR / 'README.md'}")


def compare(ours: Path, reference: Path) -> dict:
    a, b = read_fct(ours), read_fct(reference)
    pairs = [(x, y) for pair in b for x, y in zip(a[pair], b[pair], strict=True)]
    mine = np.array([x for x, _ in pairs], dtype=float)
    ref = np.array([y for _, y in pairs], dtype=float)
    per_flow = mine / ref - 1
    ranked = np.sort(mine) / np.sort(ref) - 1
    return {"flows": len(pairs), "mean_ours_us": mine.mean() / 1e3, "mean_ref_us": ref.mean() / 1e3,
            "mean_error": mine.mean() / ref.mean() - 1, "max_flow_error": np.abs(per_flow).max(),
            "max_ranked_error": np.abs(ranked).max()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", default=CASES, help="case/cc, e.g. ring8/hpcc")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--accel", action="store_true", help="also run accelerated")
    parser.add_argument("--repeat", type=int, default=3, help="stock runs per case (the fastest loop is given)")
    args = parser.parse_args()
    print("| case | cc | flows | mean FCT ours / reference (us) | mean error | max per-flow error | "
          "max error, sorted | seed noise, max | nudge noise (1 ns), max | loop s (build+loop), fastest | "
          "reference s | accel loop s | accel FCT error vs stock |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.names:
        case, cc = name.split("/")
        config = CASES_DIR / case / f"config_{cc}.txt"
        run = api.run(config, args.out / case / cc)
        c = compare(run.out_dir / "fct.txt", CASES_DIR / case / f"fct_{cc}.txt")
        noise = {kind: np.abs(other.flows.fct_ns.to_numpy() / run.flows.fct_ns.to_numpy() - 1).max()
                 for kind, other in (("seed", api.run(config, args.out / case / f"{cc}-seed2", seed=2)),
                                     ("nudge", api.run(config, args.out / case / f"{cc}-nudge", nudge_ns=1)))}
        walls = [run.summary["wall_s"]] + [api.run(config).summary["wall_s"] for _ in range(args.repeat - 1)]
        wall = min(walls, key=lambda w: w["loop"])
        lo, hi = reference_wall_s(case)
        accel_cells = " | "
        if args.accel:
            store = args.out / case / f"{cc}-memo.whdb"  # an empty memo store per run
            store.unlink(missing_ok=True)
            fast = api.run(config, args.out / case / f"{cc}-accel", accel=True, cache=store)
            err = np.abs(fast.flows.fct_ns.to_numpy() / run.flows.fct_ns.to_numpy() - 1)
            accel_cells = f"{fast.summary['wall_s']['loop']:.2f} | {100 * err.mean():.2f} % mean, {100 * err.max():.2f} % max"
        print(f"| {case} | {cc} | {c['flows']} | {c['mean_ours_us']:.0f} / {c['mean_ref_us']:.0f} | "
              f"{100 * c['mean_error']:+.2f} % | {100 * c['max_flow_error']:.1f} % | "
              f"{100 * c['max_ranked_error']:.1f} % | {100 * noise['seed']:.1f} % | {100 * noise['nudge']:.1f} % | "
              f"{wall['loop']:.2f} ({wall['build'] + wall['loop']:.2f}) | "
              f"{lo}-{hi} | {accel_cells} |", flush=True)


if __name__ == "__main__":
    main()
