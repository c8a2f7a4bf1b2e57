"""Steady-state fast-forward (the first half of Wormhole) over port-level partitions.

Every `tau` the rate probe samples each flow's delivered bytes. A partition whose flows all kept a
steady rate over the last `window` samples ((max - min) / mean < theta; or over `window` blocks of
`coarse` samples, for noisy but stationary flows) is frozen: the partition-tag
simulator holds its pending events aside while the rest of the network's clock runs on. It thaws
at the planned time (before any of its flows gets within `margin` unsent bytes of its end), or
earlier when something touches it (a flow starting on its ports, an event scheduled into it: a
skip-back). At thaw its events come back shifted by the frozen time and each flow's unsent budget
shrinks by rate x frozen time: those bytes are skipped, never simulated. The end of every flow
is simulated packet by packet, so FCTs come out of ns-3 itself.

Known inexactness: TCP state holding absolute times sees the jump; RTT samples of segments in
flight at the freeze come out dT long and inflate the RTO for about 0.5 ms after a thaw. Without
loss (DCTCP with ECN) this changes no delivery; with loss right after a thaw, recovery waits longer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..ns3.network import Ns3Network
from .partitions import Partition, Partitions

NEVER = np.iinfo(np.int64).max


@dataclass
class Frozen:
    group: int
    since_ns: int
    until_ns: int                 # planned thaw
    rates: dict[int, float]       # flow index -> delivered bytes per ns


@dataclass
class PartitionState:
    since_ns: int                 # samples before this describe another partition (or a frozen one)
    frozen: Frozen | None = None


@dataclass
class ModeInterval:
    partition: int
    start_ns: int
    end_ns: int
    mode: str                     # "simulate" | "frozen"
    flows: int


@dataclass
class FastForwardStats:
    freezes: int = 0
    thaws: int = 0
    skip_backs: int = 0
    bytes_skipped: int = 0
    frozen_ns: int = 0            # sum over partitions of time spent frozen
    checks: int = 0
    control_s: float = 0.0        # wall time in this controller (detection, freeze, thaw)
    intervals: list[ModeInterval] = field(default_factory=list)


class FastForward:
    """Partitions, steady detection and freeze/thaw for one running network."""

    def __init__(self, net: Ns3Network, n_flows: int, spec, enabled: bool = True):
        self.net = net
        self.spec = spec
        self.enabled = enabled
        wh = net.h.wh
        self.sim = wh.TagSimulatorImpl.Get()
        if not self.sim:
            raise RuntimeError("the partition-tag simulator is not active")
        self.sim.AttachPorts(net.builder)
        # Steady at the sample period, or over blocks of `coarse` samples: a fine scale catches
        # clean flows early, the coarse one flows whose packet-level rate is noisy but stationary.
        self.scales = sorted({1, spec.coarse})
        self.capacity = spec.window * spec.coarse + 2
        self.probe = wh.RateProbe(net.flows.GetTable(), net.builder, self.capacity)
        self.probe.Start(spec.tau)
        self.times = np.zeros(self.capacity, dtype=np.int64)
        self.delivered = np.zeros((self.capacity, n_flows), dtype=np.uint64)
        self.queues = np.zeros((self.capacity, net.n_ports), dtype=np.uint32)
        self.parts = Partitions()
        self.state: dict[int, PartitionState] = {}
        self.conn_of: dict[int, int] = {}
        self.conn_flows: dict[int, list[int]] = {}        # active flows per connection, FIFO
        self.paths: dict[int, frozenset[int]] = {}
        self.next_check_ns = spec.tau * (spec.window + 1)
        self.stats = FastForwardStats()
        self._path_buf = np.zeros(256, dtype=np.uint32)
        self._tag_buf = np.zeros(1, dtype=np.uint32)
        self._interrupted = np.zeros(64, dtype=np.uint32)

    # -- flow life cycle (called by the executor) -------------------------------------------

    def flow_started(self, flow: int, conn: int, hosts: tuple[int, int], now: int) -> None:
        t0 = time.perf_counter()
        path = self.paths.get(conn)
        if path is None:
            n = int(self.net.flows.GetConnectionPath(conn, self._path_buf, len(self._path_buf)))
            path = self.paths[conn] = frozenset(self._path_buf[:n].tolist())
        touched = self.parts.touching(path)
        for pid in touched:
            self._thaw(pid, now, planned=False)
        self._thaw_interrupted(now)
        for pid in touched:  # they merge into one partition that starts its history now
            self._close_interval(pid, now)
            del self.state[pid]
        part = self.parts.add_flow(flow, path, hosts)
        self.state[part.id] = PartitionState(since_ns=now)
        self.conn_of[flow] = conn
        self.conn_flows.setdefault(conn, []).append(flow)
        self.stats.control_s += time.perf_counter() - t0

    def flow_finished(self, flow: int, now: int) -> None:
        t0 = time.perf_counter()
        pid = self.parts.of_flow[flow]
        self._close_interval(pid, now)
        del self.state[pid]
        for part in self.parts.remove_flow(flow):
            self.state[part.id] = PartitionState(since_ns=now)
        self.conn_flows[self.conn_of.pop(flow)].remove(flow)
        self.stats.control_s += time.perf_counter() - t0

    # -- decisions ---------------------------------------------------------------------------

    def next_wakeup_ns(self) -> int:
        planned = min((s.frozen.until_ns for s in self.state.values() if s.frozen), default=NEVER)
        return min(planned, self.next_check_ns if self.enabled and len(self.parts) else NEVER)

    def wakeup(self, now: int) -> None:
        """After each run slice: skip-backs, planned thaws, then the steady test if due."""
        t0 = time.perf_counter()
        self._thaw_interrupted(now)
        for pid, st in list(self.state.items()):
            if st.frozen and st.frozen.until_ns <= now:
                self._thaw(pid, now, planned=True)
        if self.enabled and now >= self.next_check_ns:
            self.next_check_ns = now + self.spec.tau * max(1, self.spec.window // 2)
            self._check(now)
        self.stats.control_s += time.perf_counter() - t0

    def tagging_errors(self) -> int:
        """Events the simulator could not attribute or held wrongly (must stay 0 for exact freezes)."""
        return int(self.sim.GetErrorTotal())

    def finish(self, now: int) -> None:
        for pid, st in list(self.state.items()):
            if st.frozen:
                self._thaw(pid, now, planned=True)
            self._close_interval(pid, now)
        self.probe.Stop()

    # -- internals ---------------------------------------------------------------------------

    def _check(self, now: int) -> None:
        self.stats.checks += 1
        n = int(self.probe.Read(self.times, self.delivered, self.queues, self.capacity))
        for pid, st in self.state.items():
            if st.frozen:
                continue
            history = n - int(np.searchsorted(self.times[:n], st.since_ns))
            scales = [s for s in self.scales if history >= self.spec.window * s + 1]
            if scales:
                self._try_freeze(self.parts.by_id[pid], st, n, scales, now)

    def _window_rates(self, n: int, flows: list[int], scale: int) -> np.ndarray:
        """Bytes per block of `scale` samples over the last `window` blocks: window x flows."""
        rows = self.delivered[n - self.spec.window * scale - 1:n:scale, flows].astype(np.int64)
        return np.diff(rows, axis=0)

    def _try_freeze(self, part: Partition, st: PartitionState, n: int, scales: list[int], now: int) -> None:
        spec = self.spec
        flows = sorted(part.flows)
        blocks = {s: self._window_rates(n, flows, s) for s in scales}
        rates: dict[int, float] = {}
        horizon = NEVER
        for i, flow in enumerate(flows):
            if blocks[1][:, i].sum() <= 0:
                if self.conn_flows[self.conn_of[flow]][0] == flow:
                    return                                  # a sending flow that does not move
                continue                                    # queued behind its connection's head
            scale = next((s for s, b in blocks.items() if _spread(b[:, i]) < spec.theta), None)
            if scale is None:
                return
            # The median block: the oldest block of a window may still hold the flow's ramp-up.
            rate = float(np.median(blocks[scale][:, i])) / (scale * spec.tau)   # bytes per ns
            unsent = int(self.net.flows.GetSender(self.conn_of[flow]).GetUnsentOf(flow))
            horizon = min(horizon, int((unsent - spec.margin) / rate))
            rates[flow] = rate
        if not rates or horizon < spec.min_freeze:
            return
        tags = np.array(part.tags(self.net.n_ports), dtype=np.uint32)
        group = int(self.sim.Freeze(tags, len(tags)))
        self._close_interval(part.id, now)
        st.frozen = Frozen(group=group, since_ns=now, until_ns=now + horizon, rates=rates)
        self.stats.freezes += 1

    def _thaw(self, pid: int, now: int, planned: bool) -> None:
        st = self.state[pid]
        frozen = st.frozen
        if frozen is None:
            return
        shift = now - frozen.since_ns
        self.sim.Thaw(frozen.group, shift)
        for flow, rate in frozen.rates.items():
            skipped = int(self.net.flows.SkipFlow(flow, self.conn_of[flow], int(rate * shift)))
            self.stats.bytes_skipped += skipped
        self.stats.thaws += 1
        self.stats.skip_backs += 0 if planned else 1
        self.stats.frozen_ns += shift
        self.stats.intervals.append(ModeInterval(pid, frozen.since_ns, now, "frozen",
                                                 len(self.parts.by_id[pid].flows)))
        st.frozen = None
        st.since_ns = now  # the window must see the thawed partition run again

    def _thaw_interrupted(self, now: int) -> None:
        """Events were scheduled into frozen partitions: thaw them now (skip-back)."""
        while True:
            n = int(self.sim.PopInterrupted(self._interrupted, len(self._interrupted)))
            if n == 0:
                return
            groups = set(self._interrupted[:n].tolist())
            for pid, st in list(self.state.items()):
                if st.frozen and st.frozen.group in groups:
                    self._thaw(pid, now, planned=False)

    def _close_interval(self, pid: int, now: int) -> None:
        """End the partition's current "simulate" interval, which began at its since_ns (frozen
        intervals are closed by _thaw). Callers then freeze or drop the partition, so it closes once."""
        st = self.state.get(pid)
        if st is not None and st.frozen is None and now > st.since_ns:
            self.stats.intervals.append(ModeInterval(pid, st.since_ns, now, "simulate",
                                                     len(self.parts.by_id[pid].flows)))


def _spread(rates: np.ndarray) -> float:
    """(max - min) / mean of one flow's window of rates (inf when it did not move)."""
    mean = rates.mean()
    return float((rates.max() - rates.min()) / mean) if mean > 0 else float("inf")
