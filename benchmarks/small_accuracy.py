"""The engine's accuracy on small RDMA scenarios, against stock and against a 1 ns nudge of stock.

    python benchmarks/small_accuracy.py --out out/small

The benches (memo_benches.py) are where the speed is measured; these small scenarios are where
short flows, hand-overs on a connection and replays of a few microseconds make most of each
FCT, so an engine error shows here first (one did: see docs/rdma.md, "Accuracy on small scenarios").
For each scenario, in this invocation: stock, stock with its first flow released 1 ns later
(how chaotic the scenario is by itself), and the engine steady-only, with memo on an empty store
(cold) and on the store the cold run filled (warm). Prints one row per scenario and mode: how
many times fewer events than stock, FCT error mean / max and iteration error against stock; the
nudge row is the floor. Writes OUT/results.json. About 2 minutes on 2 cores.

Scenarios: gpt-tiny and moe-tiny on RDMA with DCQCN and HPCC, the HPCC reference simulator's four
cases with both, and tiny-memo-rdma.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bridge import api
from bridge.report.validation import compare

MODES = {"steady": {"memo": False}, "cold": {}, "warm": {}}


def scenarios(out: Path) -> list[tuple[str, Path]]:
    """(name, scenario file) of every case, the RDMA variants of the tiny trainings written to out."""
    cases = []
    for base in ("gpt-tiny", "moe-tiny"):
        for cc in ("dcqcn", "hpcc"):
            data = yaml.safe_load((ROOT / "scenarios" / f"{base}.yaml").read_text())
            data["transport"] = {"kind": "rdma", "cc": cc}
            data["name"] = f"{base}-{cc}"
            path = out / f"{data['name']}.yaml"
            path.write_text(yaml.safe_dump(data))
            cases.append((data["name"], path))
    for case in ("incast2", "ring8", "incast16", "a2a8"):
        for cc in ("dcqcn", "hpcc"):
            cases.append((f"{case}-{cc}", ROOT / "scenarios" / "hpcc-sim" / case / f"config_{cc}.txt"))
    cases.append(("tiny-memo-rdma", ROOT / "scenarios" / "tiny-memo-rdma.yaml"))
    return cases


def _row(stock: api.RunResult, run: api.RunResult) -> dict:
    c = compare(stock, run)
    accel = run.summary.get("accel") or {}
    events = accel.get("events_executed", run.summary["events"])
    return {"events_fewer": stock.summary["events"] / events, "fct_error_mean": c["fct_error"]["mean"],
            "fct_error_max": c["fct_error"]["max"], "iteration_error_max": c["iteration_error_max"]}


def measure(name: str, scenario: Path, out: Path) -> dict:
    folder = out / name
    cache = folder / "memo.whdb"
    cache.unlink(missing_ok=True)
    stock = api.run(scenario, folder / "stock")
    rows = {"nudge": _row(stock, api.run(scenario, folder / "nudge", nudge_ns=1))}
    for mode, options in MODES.items():
        rows[mode] = _row(stock, api.run(scenario, folder / mode, accel=True, cache=cache, **options))
    return rows


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.2f} %"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    print("| scenario | run | events, stock / run | FCT error mean / max | iteration error |")
    print("|---|---|---|---|---|")
    for name, scenario in scenarios(args.out):
        results[name] = rows = measure(name, scenario, args.out)
        for mode, r in rows.items():
            print(f"| {name} | {mode} | {r['events_fewer']:.2f}x | {_pct(r['fct_error_mean'])} / "
                  f"{_pct(r['fct_error_max'])} | {_pct(r['iteration_error_max'])} |", flush=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
