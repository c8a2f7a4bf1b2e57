"""Validate acceleration on the bench scenarios: stock vs accelerated, one after the other.

    python benchmarks/validate_benches.py --out out/validate [--noise-floor] [names ...]

Runs `wormhole validate` (bridge.validate) per scenario and prints an acceleration table:
scenario, stock loop s, accelerated loop s, speedup, FCT error mean / p99, iteration error, skipped
events. Each scenario's report.md, validation.json and plots stay in OUT/<name>/. A bench takes
minutes (the stock run dominates); run on a quiet machine, timings are wall clock.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bridge.validate import validate  # noqa: E402

BENCHES = ["leafspine-bench", "roft-bench", "gpt-bench", "moe-bench"]


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.2f} %"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", default=BENCHES)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--noise-floor", action="store_true", help="also a stock run with another seed")
    args = parser.parse_args()
    print("| scenario | stock loop s | accel loop s | speedup (loop) | FCT error mean / p99 | "
          "iteration error max | skipped events | noise floor mean |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.names:
        cache = args.out / f"{name}.memo.whdb"   # each bench starts from an empty memo store
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.unlink(missing_ok=True)
        v = validate(ROOT / "scenarios" / f"{name}.yaml", args.out / name, noise_floor=args.noise_floor,
                     cache=cache)
        floor = v.get("noise_floor", {}).get("fct_error", {}).get("mean")
        print(f"| {name} | {v['stock']['wall_s']['loop']:.1f} | {v['accel']['wall_s']['loop']:.1f} | "
              f"{v['speedup_loop']:.2f}x | {_pct(v['fct_error']['mean'])} / {_pct(v['fct_error']['p99'])} | "
              f"{_pct(v['iteration_error_max'])} | {_pct(v['skipped_fraction'])} | "
              f"{_pct(floor) if args.noise_floor else ''} |", flush=True)


if __name__ == "__main__":
    main()
