"""How long a run takes to start: its child process loading ns-3 with and without the precompiled
headers.

    python benchmarks/startup.py --out out/startup [--rounds 5] [scenario ...]

For each scenario (default: scenarios/gpt-tiny.yaml), alternates --rounds times a `wormhole run`
with the precompiled ns-3 headers (bridge/ns3/patches.build_pch, the default) and one with
WORMHOLE_NO_PCH=1 (the child parses them at each start), checks that both wrote the same
flows.csv, and prints the medians of the child's ns-3 load (summary wall_s.import), of the child's
wall time (wall_s.total) and of the whole command's, with their ratios (this machine is noisy:
ratios of runs made side by side). Writes OUT/results.json.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARMS = {"pch": {}, "no_pch": {"WORMHOLE_NO_PCH": "1"}}


def _run(scenario: Path, out: Path, extra_env: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("CLING_STANDARD_PCH", "WORMHOLE_NO_PCH")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bridge.cli", "run", str(scenario), "--out", str(out), "--quiet"],
                          capture_output=True, text=True, cwd=ROOT, env={**env, **extra_env})
    command_s = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"startup.py: {scenario}: {proc.stderr.strip()}")
    wall = json.loads((out / "summary.json").read_text())["wall_s"]
    return {"import_s": wall["import"], "child_s": wall["total"], "command_s": command_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("scenarios", nargs="*", default=["scenarios/gpt-tiny.yaml"])
    args = parser.parse_args()
    results = []
    _run(ROOT / args.scenarios[0], args.out / "warm-up", {})   # builds the patches and the PCH
    print("| scenario | ns-3 load s, PCH / none (ratio) | child s | command s |")
    print("|---|---|---|---|")
    for name in args.scenarios:
        scenario = (ROOT / name).resolve()
        times = {arm: [] for arm in ARMS}
        for i in range(args.rounds):
            for arm, env in ARMS.items():
                times[arm].append(_run(scenario, args.out / scenario.stem / f"{arm}-{i}", env))
        same = all(filecmp.cmp(args.out / scenario.stem / f"pch-{i}" / "flows.csv",
                               args.out / scenario.stem / f"no_pch-{i}" / "flows.csv", shallow=False)
                   for i in range(args.rounds))
        medians = {arm: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for arm, runs in times.items()}
        results.append({"scenario": name, "rounds": args.rounds, "same_flows": same, "medians": medians, "runs": times})
        cells = [f"{medians['pch'][k]:.2f} / {medians['no_pch'][k]:.2f} ({medians['no_pch'][k] / medians['pch'][k]:.2f}x)"
                 for k in ("import_s", "child_s", "command_s")]
        print(f"| {scenario.stem} | " + " | ".join(cells) + " |" + ("" if same else " (flows differ!)"))
    (args.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
