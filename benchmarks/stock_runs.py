"""Time stock ns-3 runs of the bundled scenarios: events/s and wall time per phase.

    python benchmarks/stock_runs.py                 # the tiny scenarios (about a minute)
    python benchmarks/stock_runs.py --bench         # plus the multi-MB bench scenarios (many minutes)
    python benchmarks/stock_runs.py scenarios/x.yaml ...

Prints a Markdown table (the README's "Measured" table comes from it).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bridge import api  # noqa: E402

TINY = ["tiny-leafspine", "tiny-fattree", "tiny-roft", "tiny-hpcc/scenario", "gpt-tiny", "moe-tiny"]
BENCH = ["leafspine-bench", "roft-bench", "gpt-bench", "moe-bench"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", type=Path)
    parser.add_argument("--bench", action="store_true", help="also run the bench scenarios")
    args = parser.parse_args()
    paths = args.scenarios or [ROOT / "scenarios" / f"{n}.yaml" for n in TINY + (BENCH if args.bench else [])]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}\n")
    print("| scenario | flows | MB | events | sim time (us) | loop s | events/s | import s | build s | total s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        with tempfile.TemporaryDirectory() as out:
            s = api.run(path, out).summary
        w = s["wall_s"]
        print(f"| {s['scenario']} | {s['flows']} | {s['bytes'] / 1e6:,.1f} | {s['events']:,} | "
              f"{s['sim_time_ns'] / 1e3:,.1f} | {w['loop']:.2f} | {s['events_per_s']:,} | {w['import']:.2f} | "
              f"{w['build']:.2f} | {w['total']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
