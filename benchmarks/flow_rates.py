"""Bytes sent and delivered of chosen flows over a window of a stock run, sampled at a fixed step.

    python benchmarks/flow_rates.py moe-bench-dcqcn --flows 2825,2910 --from 1.44ms --to 1.52ms --out out/rates

What flows.csv cannot tell: how a flow's rate moved while it ran (where an accelerated run's
model parts from stock's, say). Runs stock ns-3 in this process, stopping it every `--step` inside
the window to read the flows' bytes sent and delivered; each stop is one more event but moves
nothing (moe-bench-dcqcn: flows.csv byte for byte stock's). Writes OUT/rates.csv (time_ns,
flow_id, sent_bytes, delivered_bytes) beside the run's outputs and prints each flow's mean rates
over `--every` steps (bytes sent but not delivered are in flight or queued: what a model of
shares alone misses).
Sent is what the RDMA QP has transmitted; on TCP, what the socket has taken (it buffers it).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

from checkouts import ROOT, scenario_path

sys.path.insert(0, str(ROOT))
from bridge.errors import ScenarioError  # noqa: E402
from bridge.ns3 import engine_api  # noqa: E402
from bridge.engine import executor  # noqa: E402
from bridge.scenario import load_scenario  # noqa: E402
from bridge.simulation import RunOptions, simulate  # noqa: E402
from bridge.units import parse_time  # noqa: E402


class Sampler:
    """Splits the run loop's RunUntil calls at the step's multiples inside [start, end) and keeps
    each chosen flow's bytes sent (its size less what its sender has not sent yet) and delivered
    (the flow table's) after each."""

    def __init__(self, flows: list[int], start_ns: int, end_ns: int, step_ns: int):
        self.flows, self.start_ns, self.end_ns, self.step_ns = flows, start_ns, end_ns, step_ns
        self.times: list[int] = []
        self.sent: list[list[int]] = []
        self.delivered: list[list[int]] = []
        self.executor: executor.Executor | None = None

    def install(self) -> None:
        sampler, init, run = self, engine_api.EngineApi.__init__, executor.Executor.run

        def sampled_init(api, *args):
            init(api, *args)
            api.run_until = sampler.wrap(api)

        def kept_run(ex):
            sampler.executor = ex
            return run(ex)

        engine_api.EngineApi.__init__ = sampled_init
        executor.Executor.run = kept_run

    def known(self) -> bool:
        return all(f in self.executor.flow_index for f in self.flows)

    def wrap(self, api):
        run_until = api.run_until

        def run(until: int) -> int:
            now = api.now_ns()
            if until > self.start_ns and now < self.end_ns:
                stop = (max(now, self.start_ns) // self.step_ns + 1) * self.step_ns
                if stop < until:      # (the loop calls again: the executor sees a short slice)
                    now = run_until(stop)   # (earlier where ns-3 stops for a completion)
                    if now >= self.start_ns and self.known():
                        self._keep(now, api)
                    return now
            return run_until(until)
        return run

    def _keep(self, now: int, api) -> None:
        ex = self.executor
        sent, delivered = [], []
        for flow in self.flows:
            index = ex.flow_index[flow]
            delivered.append(api.table.GetDelivered(index))
            conn = ex.connection_of.get(flow)
            untransmitted = ex.flows[index].size if conn is None else \
                api.flows.GetSender(conn).GetUntransmittedOf(index)
            sent.append(ex.flows[index].size - untransmitted)
        if self.times and self.times[-1] == now:
            self.sent[-1], self.delivered[-1] = sent, delivered
        else:
            self.times.append(now)
            self.sent.append(sent)
            self.delivered.append(delivered)


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
    if not 0 < step <= end - start or args.every < 1:
        sys.exit("error: --step must be positive and no longer than the window, --every at least 1")
    try:
        scenario = load_scenario(scenario_path(args.scenario))
    except ScenarioError as err:
        sys.exit(f"error: {err}")
    sampler = Sampler(flows, start, end, step)
    sampler.install()
    simulate(scenario, args.out, RunOptions())
    if not sampler.known():
        unknown = next(f for f in flows if f not in sampler.executor.flow_index)
        sys.exit(f"error: --flows: no flow {unknown} in {args.scenario}'s flows.csv")
    if len(sampler.times) < 2:
        sys.exit("error: the run never reached the window (--from/--to)")
    times = np.array(sampler.times)
    sent, delivered = np.array(sampler.sent), np.array(sampler.delivered)
    with (args.out / "rates.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["time_ns", "flow_id", "sent_bytes", "delivered_bytes"])
        for row, t in enumerate(times):
            for col, flow in enumerate(flows):
                writer.writerow([int(t), flow, int(sent[row, col]), int(delivered[row, col])])
    # (ns-3 also stops at completions: more samples than steps, so the means are over time blocks)
    marks = np.searchsorted(times, np.arange(times[0], times[-1] + 1, args.every * step)).tolist()
    marks.append(len(times) - 1)
    blocks = [(a, b) for a, b in zip(marks, marks[1:]) if b > a]
    print(f"mean Gbps sent / delivered over every {args.every} x {args.step} from {int(times[0])} ns:")
    for col, flow in enumerate(flows):
        means = [f"{(sent[b, col] - sent[a, col]) * 8 / (times[b] - times[a]):.0f}/"
                 f"{(delivered[b, col] - delivered[a, col]) * 8 / (times[b] - times[a]):.0f}" for a, b in blocks]
        print(f"  flow {flow}: " + " ".join(means))
    print(f"wrote {args.out / 'rates.csv'}")


if __name__ == "__main__":
    main()
