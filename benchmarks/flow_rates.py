"""Delivered bytes of chosen flows over a window of a stock run, sampled at a fixed step.

    python benchmarks/flow_rates.py moe-bench-dcqcn --flows 2825,2910 --from 1.44ms --to 1.52ms --out out/rates

What flows.csv cannot tell: how a flow's rate moved while it ran (where an accelerated run's
model parts from stock's, say). Runs stock ns-3 in this process, stopping it every `--step` inside
the window to read the flows' delivered bytes from the flow table; each stop is one more event
but moves nothing (moe-bench-dcqcn: flows.csv byte for byte stock's). Writes OUT/rates.csv (time_ns, flow_id, delivered_bytes, gbps:
the rate over the step before) beside the run's outputs and prints each flow's mean rate over
`--every` steps.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

from checkouts import ROOT, scenario_path

sys.path.insert(0, str(ROOT))
from bridge.ns3 import engine_api  # noqa: E402
from bridge.engine import executor  # noqa: E402
from bridge.scenario import load_scenario  # noqa: E402
from bridge.simulation import RunOptions, simulate  # noqa: E402
from bridge.units import parse_time  # noqa: E402


class Sampler:
    """Splits the run loop's RunUntil calls at the step's multiples inside [start, end) and keeps
    the flow table's delivered bytes after each."""

    def __init__(self, start_ns: int, end_ns: int, step_ns: int):
        self.start_ns, self.end_ns, self.step_ns = start_ns, end_ns, step_ns
        self.times: list[int] = []
        self.delivered: list[np.ndarray] = []
        self.flow_index: dict[int, int] = {}

    def install(self) -> None:
        sampler, init, run = self, engine_api.EngineApi.__init__, executor.Executor.run

        def sampled_init(api, *args):
            init(api, *args)
            api.run_until = sampler.wrap(api.run_until, api.now_ns, api.table)

        def kept_run(ex):
            execution = run(ex)
            sampler.flow_index = dict(ex.flow_index)
            return execution

        engine_api.EngineApi.__init__ = sampled_init
        executor.Executor.run = kept_run

    def wrap(self, run_until, now_ns, table):
        def run(until: int) -> int:
            now = now_ns()
            if until > self.start_ns and now < self.end_ns:
                stop = (max(now, self.start_ns) // self.step_ns + 1) * self.step_ns
                if stop < until:      # (the loop calls again: the executor sees a short slice)
                    now = run_until(stop)   # (earlier where ns-3 stops for a completion)
                    if now >= self.start_ns:
                        self._keep(now, table.delivered)
                    return now
            return run_until(until)
        return run

    def _keep(self, now: int, delivered: np.ndarray) -> None:
        if self.times and self.times[-1] == now:
            self.delivered[-1] = delivered.copy()
        else:
            self.times.append(now)
            self.delivered.append(delivered.copy())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--flows", required=True, help="flow ids of flows.csv, comma-separated")
    parser.add_argument("--from", dest="start", required=True, help="window start, e.g. 1.44ms")
    parser.add_argument("--to", dest="end", required=True, help="window end")
    parser.add_argument("--step", default="1us")
    parser.add_argument("--every", type=int, default=5, help="steps per printed mean rate")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    try:
        start, end, step = parse_time(args.start), parse_time(args.end), parse_time(args.step)
        flows = [int(f) for f in args.flows.split(",")]
    except ValueError as err:
        sys.exit(f"error: {err}")
    if not 0 < step <= end - start:
        sys.exit("error: --step must be positive and no longer than the window")
    sampler = Sampler(start, end, step)
    sampler.install()
    simulate(load_scenario(scenario_path(args.scenario)), args.out, RunOptions())
    unknown = [f for f in flows if f not in sampler.flow_index]
    if unknown:
        sys.exit(f"error: --flows: no flow {unknown[0]} in {args.scenario}'s flows.csv")
    if len(sampler.times) < 2:
        sys.exit("error: the run never reached the window (--from/--to)")
    times = np.array(sampler.times)
    delivered = np.array(sampler.delivered)[:, [sampler.flow_index[f] for f in flows]]
    gbps = np.vstack([np.zeros(len(flows)), np.diff(delivered, axis=0) * 8 / np.diff(times)[:, None]])
    with (args.out / "rates.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["time_ns", "flow_id", "delivered_bytes", "gbps"])
        for row, t in enumerate(times):
            for col, flow in enumerate(flows):
                writer.writerow([int(t), flow, int(delivered[row, col]), round(float(gbps[row, col]), 3)])
    # (ns-3 also stops at completions: more samples than steps, so the means are over time blocks)
    marks = np.searchsorted(times, np.arange(times[0], times[-1] + 1, args.every * step)).tolist()
    marks.append(len(times) - 1)
    print(f"mean Gbps over every {args.every} x {args.step} from {int(times[0])} ns:")
    for col, flow in enumerate(flows):
        means = [(delivered[b, col] - delivered[a, col]) * 8 / (times[b] - times[a])
                 for a, b in zip(marks, marks[1:]) if b > a]
        print(f"  flow {flow}: " + " ".join(f"{m:.0f}" for m in means))
    print(f"wrote {args.out / 'rates.csv'}")


if __name__ == "__main__":
    main()
