"""What the partition-tag simulator costs per event against stock ns-3's, in instructions.

    python benchmarks/tagging_cost.py --out out/tag tiny-memo-rdma
    python benchmarks/tagging_cost.py --out out/tag --base b01fa12 tiny-memo-rdma

Runs the scenario stock (DefaultSimulatorImpl) and with the engine's machinery but no freezing
(`--accel --no-ff`: TagSimulatorImpl, the same packets, a few probe events more) under valgrind's
callgrind, counting only the instructions inside the simulator's Run (every event, nothing of
the import, the build or Python's control plane between run slices). Instruction counts do not
drift with this machine's load the way wall times do (20 % between invocations), so a change to
the per-event path is measured on a tiny scenario. --base REF also measures that git commit's
tagged run (checked out into OUT/base). Needs valgrind (apt install valgrind); each run takes
about three minutes. Prints instructions per event and the tagged / stock ratio; writes
OUT/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from checkouts import ROOT, code_roots, scenario_path


def _instructions(root: Path, scenario: Path, out: Path, tagged: bool) -> dict:
    """Instructions executed inside the simulator's Run, and the run's events."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(root)}
    # Compile the patches first: valgrind would trace g++ too (it follows the run's children).
    subprocess.run([sys.executable, "-c", "from bridge.ns3.patches import build_library; build_library()"],
                   check=True, cwd=root, env=env)
    impl = "TagSimulatorImpl" if tagged else "DefaultSimulatorImpl"
    cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes",
           f"--callgrind-out-file={out}/callgrind.%p", f"--toggle-collect=*{impl}::Run*",
           sys.executable, "-m", "bridge.cli", "run", str(scenario), "--out", str(out / "run"), "--quiet",
           *(["--accel", "--no-ff"] if tagged else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env)
    if proc.returncode != 0:
        sys.exit(f"error: {scenario.name} with {root}: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    total = 0
    for path in out.glob("callgrind.*"):   # one file per process: the run's child counted them
        found = re.search(r"^(?:summary|totals): (\d+)", path.read_text(errors="replace"), re.M)
        total += int(found.group(1)) if found else 0
    events = json.loads((out / "run" / "summary.json").read_text())["events"]
    return {"instructions": total, "events": events, "per_event": total / events}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--base", help="git commit whose tagged run is measured too")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("error: valgrind not found (apt install valgrind)")
    args.out = args.out.resolve()
    codes = code_roots(args.base, args.out)
    results = {}
    for name in args.scenarios:
        scenario = scenario_path(name)
        runs = {"stock": _instructions(ROOT, scenario, args.out / scenario.stem / "stock", tagged=False)}
        for code, root in codes.items():
            runs[f"tagged-{code}"] = _instructions(root, scenario, args.out / scenario.stem / code, tagged=True)
        stock = runs["stock"]["per_event"]
        for label, r in runs.items():
            print(f"{scenario.stem} {label}: {r['instructions']:,} instructions, {r['events']:,} events, "
                  f"{r['per_event']:,.0f} per event ({r['per_event'] / stock:.3f} of stock's)", flush=True)
        results[scenario.stem] = runs
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
