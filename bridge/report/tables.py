"""Per-flow and per-iteration tables, the HPCC fct.txt, and ideal (empty-network) FCTs."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd

from ..engine.executor import Execution
from ..ns3.network import PPP_HEADER
from ..topology import Topology
from ..workload.dag import ComputeTask, Workload

FLOW_COLUMNS = ["flow_id", "src", "dst", "size_bytes", "start_ns", "head_ns", "end_ns", "fct_ns",
                "ideal_fct_ns", "iteration", "job", "collective", "group", "step", "bytes_skipped"]
COMM_KINDS = ("dp", "pp", "ep")  # a collective's name starts with its group kind: dp_allreduce, ep_alltoall


class IdealFct:
    """FCT of a flow alone on the network along its shortest path.

    ideal = one-way propagation + every packet serialized at the bottleneck + one packet
    serialized at each other hop (store and forward), + one round trip when the flow opens its
    own connection (the TCP handshake is part of its FCT).
    """

    def __init__(self, topology: Topology, mtu: int, mss: int):
        self.graph = nx.Graph()
        for link in topology.links:
            self.graph.add_edge(link.a, link.b, rate=link.rate_bps, delay=link.delay_ns)
        self.frame = mtu + PPP_HEADER
        self.mss = mss
        self._paths: dict[tuple[int, int], tuple[float, list[int]]] = {}

    def _path(self, src: int, dst: int) -> tuple[float, list[int]]:
        """One-way propagation delay and link rates along the shortest path (cached per pair)."""
        if (src, dst) not in self._paths:
            nodes = nx.shortest_path(self.graph, src, dst)
            edges = [self.graph.edges[u, v] for u, v in zip(nodes, nodes[1:])]
            self._paths[src, dst] = (float(sum(e["delay"] for e in edges)), [e["rate"] for e in edges])
        return self._paths[src, dst]

    def __call__(self, src: int, dst: int, size: int, handshake: bool) -> int:
        delay, rates = self._path(src, dst)
        packets = -(-size // self.mss)
        wire_bits = (size + packets * (self.frame - self.mss)) * 8
        bottleneck = min(rates)
        ns = delay + wire_bits / bottleneck * 1e9
        ns += sum(self.frame * 8 / r * 1e9 for r in rates) - self.frame * 8 / bottleneck * 1e9
        if handshake:
            ns += 2 * delay
        return int(round(ns))


class RdmaIdealFct(IdealFct):
    """The reference RDMA simulator's standalone FCT (its fct.txt's last column): the pair's base
    RTT (2 x one-way delay + one payload serialized per hop) + the bytes, with its 48-byte
    per-packet header, at the bottleneck rate."""

    HEADER = 48

    def __init__(self, topology: Topology, payload: int):
        super().__init__(topology, payload, payload)

    def __call__(self, src: int, dst: int, size: int, handshake: bool) -> int:
        delay, rates = self._path(src, dst)
        packets = -(-size // self.mss)
        rtt = 2 * delay + sum(self.mss * 8 / r * 1e9 for r in rates)
        return round(rtt + (size + packets * self.HEADER) * 8 / min(rates) * 1e9)


def flows_frame(workload: Workload, run: Execution, ideal: IdealFct) -> pd.DataFrame:
    rows = []
    for f in workload.flows:
        start, end = int(run.start_ns[f.id]), int(run.end_ns[f.id])
        rows.append((f.id, f.src, f.dst, f.size, start, int(run.head_ns[f.id]), end,
                     end - start if end >= 0 else -1,
                     ideal(f.src, f.dst, f.size, f.id in run.own_connection),
                     f.iteration, f.job, f.collective, f.group, f.step, int(run.bytes_skipped[f.id])))
    return pd.DataFrame(rows, columns=FLOW_COLUMNS)


def write_fct_txt(flows: pd.DataFrame, path: Path) -> None:
    """HPCC format: `sip dip sport dport size start_ns fct_ns ideal_fct_ns`, host n = 0b00nn01;
    source ports count from 10000 per host pair in flow order, as the reference numbers them."""
    next_port: dict[tuple[int, int], int] = {}
    with open(path, "w") as out:
        for r in flows.itertuples(index=False):
            sport = next_port.get((r.src, r.dst), 10000)
            next_port[r.src, r.dst] = sport + 1
            if r.end_ns < 0:
                continue
            out.write(f"{0x0b000001 + (r.src << 8):08x} {0x0b000001 + (r.dst << 8):08x} "
                      f"{sport} 100 {r.size_bytes} {r.start_ns} {r.fct_ns} {r.ideal_fct_ns}\n")


def write_pfc_txt(network, path: Path) -> None:
    """The reference's pfc.txt: `time_ns node node_type if_index type` (type 1 pause, 0 resume;
    node_type 1 switch, 0 host), one line per PFC frame received."""
    cols = _read_columns(int(network.GetPfcLogSize()), network.ReadPfcLog,
                         (np.int64, np.uint32, np.uint32, np.uint32, np.uint32))
    with open(path, "w") as out:
        out.writelines(" ".join(map(str, row)) + "\n" for row in zip(*(c.tolist() for c in cols)))


def write_qlen_csv(network, path: Path) -> None:
    """Switch queue samples of an RDMA run (transport parameters QLEN_MON_START/END/INTERVAL):
    time_ns, switch, if_index (the port's index on its switch), bytes; empty queues left out."""
    cols = _read_columns(int(network.GetQueueSampleCount()), network.ReadQueueSamples,
                         (np.int64, np.uint32, np.uint32, np.uint64))
    pd.DataFrame(dict(zip(("time_ns", "switch", "if_index", "bytes"), cols, strict=True))).to_csv(path, index=False)


def _read_columns(n: int, read, dtypes) -> list[np.ndarray]:
    """`n` records of a C++ log read column-wise by `read(*columns, n)`."""
    cols = [np.zeros(n, dtype=d) for d in dtypes]
    if n:
        read(*cols, n)
    return cols


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def _length(intervals: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in intervals)


def _exposed(comm: list[tuple[int, int]], compute: list[tuple[int, int]]) -> int:
    """Length of the communication intervals not covered by compute intervals."""
    comm, compute = _union(comm), _union(compute)
    covered, i = 0, 0
    for s, e in comm:       # both sorted and disjoint: one sweep
        while i < len(compute) and compute[i][1] <= s:
            i += 1
        j = i
        while j < len(compute) and compute[j][0] < e:
            covered += min(e, compute[j][1]) - max(s, compute[j][0])
            j += 1
    return _length(comm) - covered


def iterations_frame(workload: Workload, run: Execution) -> pd.DataFrame:
    """One row per training iteration (of each job, in job order).

    compute_ns is the busiest GPU's compute time; exposed_<dp|pp|ep>_ns is, on the GPU where it is
    largest, the time that GPU sends or receives that kind of traffic while not computing. An
    iteration the run did not finish has end_ns and time_ns -1 (start_ns too if it never began)
    and counts the tasks that finished.
    """
    rows = []
    by_job: dict[tuple[int, int], list] = {}
    for t in workload.tasks:
        if t.iteration >= 0:
            by_job.setdefault((t.job, t.iteration), []).append(t)
    for (job, it), tasks in sorted(by_job.items()):
        starts = run.start_ns[[t.id for t in tasks]]
        ends = run.end_ns[[t.id for t in tasks]]
        finished = bool((ends >= 0).all())
        started = starts[starts >= 0]     # none: the run stopped before this iteration began
        start = int(started.min()) if started.size else -1
        end = int(ends.max()) if finished else -1
        compute: dict[int, list[tuple[int, int]]] = {}
        comm: dict[str, dict[int, list[tuple[int, int]]]] = {k: {} for k in COMM_KINDS}
        for t in tasks:
            span = (int(run.start_ns[t.id]), int(run.end_ns[t.id]))
            if span[1] < 0:
                continue   # (a run stopped early: its iteration counts what finished)
            if isinstance(t, ComputeTask):
                compute.setdefault(t.host, []).append(span)
                continue
            kind = t.collective[:2]
            if kind in comm:
                for host in (t.src, t.dst):
                    comm[kind].setdefault(host, []).append(span)
        row = {"job": job, "iteration": it, "start_ns": start, "end_ns": end,
               "time_ns": end - start if finished else -1,
               "compute_ns": max((_length(_union(v)) for v in compute.values()), default=0)}
        for kind, per_host in comm.items():
            row[f"exposed_{kind}_ns"] = max(
                (_exposed(spans, compute.get(host, [])) for host, spans in per_host.items()), default=0)
        rows.append(row)
    return pd.DataFrame(rows, columns=["job", "iteration", "start_ns", "end_ns", "time_ns", "compute_ns",
                                       "exposed_dp_ns", "exposed_pp_ns", "exposed_ep_ns"])


def fct_stats(flows: pd.DataFrame) -> dict:
    done = flows[flows.end_ns >= 0]
    if done.empty:
        return {}
    slowdown = done.fct_ns / done.ideal_fct_ns
    return {"fct_mean_ns": float(done.fct_ns.mean()), "fct_p50_ns": float(done.fct_ns.median()),
            "fct_p99_ns": float(np.percentile(done.fct_ns, 99)), "fct_max_ns": int(done.fct_ns.max()),
            "slowdown_mean": float(slowdown.mean()), "slowdown_p99": float(np.percentile(slowdown, 99))}



def partitions_frame(intervals) -> pd.DataFrame:
    """The mode timeline: one row per interval a partition spent simulated or frozen."""
    return pd.DataFrame([(i.partition, i.start_ns, i.end_ns, i.mode, i.flows) for i in intervals],
                        columns=["partition", "start_ns", "end_ns", "mode", "flows"])


def accel_summary(ff, flows: pd.DataFrame, spec) -> dict:
    """What the accelerated run did: events, bytes simulated vs skipped, freezes, time per mode."""
    s = ff.stats
    simulate_ns = sum(i.end_ns - i.start_ns for i in s.intervals if i.mode == "simulate")
    skipped = int(s.bytes_skipped)
    return {"theta": spec.theta, "window": spec.window, "tau_ns": spec.tau,
            "events_executed": ff.sim.GetEventCount(),
            "bytes_simulated": int(flows.size_bytes.sum()) - skipped, "bytes_skipped": skipped,
            "freezes": s.freezes, "thaws": s.thaws, "skip_backs": s.skip_backs, "checks": s.checks,
            "flow_ends": "computed" if ff.computed_ends else "simulated",
            "ends_computed": s.ends_computed, "handovers_frozen": s.handovers,
            "episodes_interrupted": s.episodes_interrupted, "episode_joins": s.episode_joins,
            "episode_watches": {"watched": s.episodes_watched, "completed": s.episodes_completed,
                                "given_up": dict(s.episodes_given_up)},
            "fair_starts": s.fair_starts, "fair_starts_refused": dict(s.fair_starts_refused),
            "fair_joins": s.fair_joins, "rate_steps": s.rate_steps,
            "partition_time_ns": {"simulate": int(simulate_ns), "frozen": int(s.frozen_ns)},
            "control_wall_s": round(s.control_s, 3), "tagging_errors": ff.tagging_errors(),
            "memo": _memo_summary(ff.memo),
            **({"events_by": ff.ledger.summary()} if ff.ledger is not None else {})}


def _memo_summary(memo) -> dict | None:
    if memo is None:
        return None
    m = memo.stats
    return {"cache": str(memo.store.path) if memo.store is not None else None,
            "fingerprint": memo.fingerprint[:16], "records_loaded": m.records_loaded,
            "lookups": m.lookups, "hits": m.hits, "misses": m.misses, "not_applied": m.not_applied,
            "applied_truncated": m.applied_truncated, "applied_partial": m.applied_partial,
            "applied_episode": m.applied_episode, "records_written": m.records_written,
            "records_truncated": m.records_truncated, "records_episode": m.records_episode,
            "records_duplicate": m.records_duplicate,
            "lookup_wall_s": round(m.lookup_s, 3),
            "warnings": m.problems}
