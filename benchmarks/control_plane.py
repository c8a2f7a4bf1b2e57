"""Where an accelerated run's loop time goes, and how two versions of the engine compare on it.

    python benchmarks/control_plane.py --out out/cp moe-8x7b-dcqcn
    python benchmarks/control_plane.py --out out/cp --base a64495f --rounds 2 moe-8x7b-dcqcn

Per scenario, an accelerated run on an empty store (cold), then one on the store it filled (warm),
each in a child process: the loop's wall time split into ns-3 running events (inside RunUntil),
the engine's control plane (accel.control_wall_s: partitions, steady tests, memo, computed ends)
and the rest (the executor releasing tasks and reading completions, the bindings' calls).

--base REF also runs the code of that git commit (checked out into OUT/base), alternating with
this checkout's, --rounds times each (this machine is noisy: ratios of runs made side by side),
checks that both produce the same flows.csv (a control-plane change must not change the
simulation), and prints the ratio of their medians and the engine's seconds per second of ns-3 in
each (the same events: a ratio this machine's drifting speed moves less). Writes OUT/results.json.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from checkouts import code_roots, scenario_path

# Run in a child with the code root first on sys.path: times RunUntil around the engine (the
# executor's call to it: through cppyy in older checkouts, through bridge.ns3.engine_api now).
_CHILD = r"""
import json, shutil, sys, time
root, scenario, store_in, out = sys.argv[1:5]
sys.path.insert(0, root)
from pathlib import Path
from bridge.ns3.loader import load
from bridge.scenario import load_scenario
from bridge.simulation import RunOptions, simulate
out = Path(out)
out.mkdir(parents=True, exist_ok=True)
store = out / "memo.whdb"
if store_in != "-" and Path(store_in).exists():  # (a cold run that recorded nothing left no store)
    shutil.copy(store_in, store)
h = load()
spent = [0.0]
def timed(run_until):
    def run(t):
        t0 = time.perf_counter()
        now = run_until(t)
        spent[0] += time.perf_counter() - t0
        return now
    return run
h.wh.RunUntil = timed(h.wh.RunUntil)        # the loop's call through cppyy (older checkouts)
try:                                        # ... or through ctypes
    from bridge.ns3 import engine_api
except ImportError:
    engine_api = None
if engine_api is not None:
    init = engine_api.EngineApi.__init__
    def timed_init(self, *args):
        init(self, *args)
        self.run_until = timed(self.run_until)
    engine_api.EngineApi.__init__ = timed_init
summary = simulate(load_scenario(scenario), out, RunOptions(accel=True, cache=str(store)))
print("@split " + json.dumps({"loop_s": summary["wall_s"]["loop"], "ns3_s": spent[0],
                              "control_s": summary["accel"]["control_wall_s"], "events": summary["events"]}))
"""


def _run(root: Path, scenario: Path, store_in: Path | None, out: Path) -> dict:
    if out.exists():
        shutil.rmtree(out)
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(root), str(scenario),
                           str(store_in) if store_in else "-", str(out)],
                          capture_output=True, text=True, cwd=root)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("@split ")), None)
    if proc.returncode != 0 or line is None:
        sys.exit(f"error: {scenario.name} with {root}: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
    split = json.loads(line[len("@split "):])
    split["rest_s"] = split["loop_s"] - split["ns3_s"] - split["control_s"]
    return split


def _s(seconds: float) -> str:
    """Seconds to three significant digits: the GPT benches' loops are a tenth of a second."""
    return f"{seconds:.3g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--base", help="git commit to compare with, run alternately with this checkout")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    args.out = args.out.resolve()
    codes = code_roots(args.base, args.out)
    results = {}
    for name in args.scenarios:
        scenario = scenario_path(name)
        runs = {(code, mode): [] for code in codes for mode in ("cold", "warm")}
        for rnd in range(args.rounds):
            for code, root in codes.items():
                out = args.out / scenario.stem / f"{code}-{rnd}"
                cold = _run(root, scenario, None, out / "cold")
                warm = _run(root, scenario, out / "cold" / "memo.whdb", out / "warm")
                runs[code, "cold"].append(cold)
                runs[code, "warm"].append(warm)
                print(f"{scenario.stem} {code} round {rnd}: " + "; ".join(
                    f"{mode} loop {_s(s['loop_s'])} s = ns-3 {_s(s['ns3_s'])} + control {_s(s['control_s'])}"
                    f" + rest {_s(s['rest_s'])}" for mode, s in (("cold", cold), ("warm", warm))), flush=True)
                if args.base and code == "this":
                    for mode in ("cold", "warm"):
                        same = filecmp.cmp(args.out / scenario.stem / f"base-{rnd}" / mode / "flows.csv",
                                           out / mode / "flows.csv", shallow=False)
                        if not same:
                            sys.exit(f"error: {scenario.stem} {mode}: flows.csv differs from the base's")
        medians = {f"{code}/{mode}": {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                   for (code, mode), rs in runs.items()}
        results[scenario.stem] = medians
        for mode in ("cold", "warm"):
            this = medians[f"this/{mode}"]
            line = (f"{scenario.stem} {mode}: loop {_s(this['loop_s'])} s, ns-3 {_s(this['ns3_s'])} "
                    f"({100 * this['ns3_s'] / this['loop_s']:.0f} %), control {_s(this['control_s'])}, "
                    f"rest {_s(this['rest_s'])}, {this['events']:,} events")
            if args.base:
                base = medians[f"base/{mode}"]
                # Python's time per second of ns-3 (the same events on both): this machine's speed
                # drifts by a third between runs, and moves both alike.
                per_ns3 = {k: (m["control_s"] + m["rest_s"]) / m["ns3_s"] for k, m in (("base", base), ("this", this))}
                line += (f"; base {_s(base['loop_s'])} s: loop x{base['loop_s'] / this['loop_s']:.2f}, "
                         f"control + rest x{(base['control_s'] + base['rest_s']) / (this['control_s'] + this['rest_s']):.2f}"
                         f", per ns-3 second {per_ns3['base']:.2f} -> {per_ns3['this']:.2f}, same flows.csv")
            print(line)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
