"""Steady-state fast-forward (the first half of Wormhole) over port-level partitions, with
memoized transients (the second half, bridge.engine.memo) applied when partitions form.

Every `tau` the rate probe samples each flow's delivered bytes. A partition whose flows all kept a
steady rate over the last `window` samples ((max - min) / mean < theta; or over `window` blocks of
`coarse` samples, for noisy but stationary flows) is frozen: the partition-tag
simulator holds its pending events aside while the rest of the network's clock runs on. It thaws
at the planned time (before any of its flows gets within `margin` untransmitted bytes of its end),
or earlier when something touches it (a flow starting on its ports, an event scheduled into it: a
skip-back). At thaw its events come back shifted by the frozen time and each flow's untransmitted
bytes (its queue in the sender application, and the socket's send buffer when it is the
connection's only flow) shrink by rate x frozen time: those bytes are skipped, never simulated.

Its parts: flow ends computed inside frozen partitions (bridge.engine.computed_ends), partitions
frozen at their fair shares as they form (bridge.engine.fair_starts), memoized transients and
episodes (bridge.engine.transients); what it keeps per partition is in bridge.engine.state.

Known inexactness: TCP state holding absolute times sees the jump; RTT samples of segments in
flight at the freeze come out dT long and inflate the RTO for about 0.5 ms after a thaw. Without
loss (DCTCP with ECN) this changes no delivery; with loss right after a thaw, recovery waits longer.
A memo hit restores congestion state but not queue occupancy: the queues refill after the thaw.
A computed end carries the frozen rate's error to every later flow of the connection that takes
over while frozen (the rate is timed between byte arrivals to keep it small), and a flow that
takes over an idle connection starts one lag after its release, whatever its congestion state.
Fair shares predict the rates after an end within about 1 % (gpt-13b-dcqcn's last-stage rings,
alone on their links after the pipeline sends beside them end, run 0.18 % slow in the model).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable

import numpy as np

from ..ns3.network import Ns3Network
from .computed_ends import ComputedEnds
from .fair_starts import HPCC_MERGED_LOAD, QUEUE_DRAIN_NS, FairStarts
from .ledger import EventLedger
from .memo import FlowPorts, Memo
from .partitions import Partition, Partitions
from .state import NEVER, Episode, FastForwardStats, Frozen, ModeInterval, PartitionState, Ports
from .transients import MemoizedTransients

REPLAN_NS = 2_000     # a truncated record is taken once it is due within this (ns)


class FastForward(ComputedEnds, FairStarts, MemoizedTransients):
    """Partitions, steady detection and freeze/thaw for one running network."""

    def __init__(self, net: Ns3Network, flow_sizes: list[int], spec, enabled: bool, memo: Memo | None,
                 ports: Ports, flow_kinds: list[str] | None = None):
        """flow_kinds: each flow's collective (dp, pp, ep, ...), for spec.explain_events."""
        self.net = net
        self.spec = spec
        self.flow_sizes = flow_sizes
        n_flows = len(flow_sizes)
        # Flows complete inside frozen partitions at their computed time (RDMA: a QP's flows are
        # offsets in one byte stream). TCP's flows pass through the socket's send buffer, whose
        # bytes cannot be moved across a flow boundary: there every end is simulated.
        self.computed_ends = net.rdma and spec.flow_ends == "computed"
        self.unreported: set[int] = set()                 # computed ends not yet back in flow_finished
        self.queued: dict[int, int] = {}                  # per connection: flows waiting behind its first
        self.took_over: set[int] = set()                  # flows that became their QP's head behind a predecessor
        self.dropped: dict[int, tuple[int, tuple[int, int]]] = {}  # ... whose partition thawed: (conn, hosts)
        self.enabled = enabled
        self.memo = memo if enabled else None
        self.ports = ports
        # Truncated records on RDMA only: on TCP gpt-bench, hits on them made the pipeline flows
        # 14-20 % late (FCT error 4.6 -> 10.2 %); why is not understood yet.
        self.truncated_records = net.rdma
        self.api = net.engine              # the loop's calls into ns-3 (bridge.ns3.engine_api)
        self.sim = self.api.simulator()
        if self.sim is None:
            raise RuntimeError("the partition-tag simulator is not active")
        self.sim.AttachPorts(self.api.ports)
        self.ledger = (EventLedger(self.sim, net.n_ports, flow_kinds or ["flow"] * len(flow_sizes))
                       if spec.explain_events else None)
        # Steady at the sample period, or over blocks of `coarse` samples: a fine scale catches
        # clean flows early, the coarse one flows whose packet-level rate is noisy but stationary.
        # HPCC's rates swing over ~150 us (a decaying oscillation): a steady rate taken over the fine
        # window's 30 us came out up to 2 % off; the coarse one's 120 us averages it (gpt-xl-hpcc:
        # iteration error 0.91 % -> 0.04 %, for 77x -> 66x fewer events than stock): coarse only.
        self.scales = [spec.coarse] if net.utilization_cc else sorted({1, spec.coarse})
        self.capacity = spec.window * spec.coarse + 2
        self.table = self.api.table
        self.probing = False  # sampling starts with the first flow (workloads may start late)
        self.times = np.zeros(self.capacity, dtype=np.int64)
        self.delivered = np.zeros((self.capacity, n_flows), dtype=np.uint64)
        self.arrived = np.zeros((self.capacity, n_flows), dtype=np.int64)  # when the latest of them came
        self.queues = np.zeros((self.capacity, net.n_ports), dtype=np.uint32)
        self.probe = self.api.rate_probe(self.times, self.delivered, self.arrived, self.queues)
        self.parts = Partitions()
        self.state: dict[int, PartitionState] = {}
        self.conn_of: dict[int, int] = {}
        self.senders: dict[int, object] = {}              # per connection: its sender (see _sender)
        self.head_since: dict[int, int] = {}              # flow -> since when it is its connection's first
        self.paths: dict[int, frozenset[int]] = {}           # per connection: ports of its partition tags
        self.ports_of: dict[int, FlowPorts] = {}          # per connection: ports its data and ACKs leave by
        self.data_conns: dict[int, list[int]] = {}        # per port: the connections whose data leaves by it
        self.path_labels: dict[int, str] = {}             # per connection: its ports' labels in order
        self.lag_ns: dict[int, float] = {}                # per connection: how long its deliveries lag its sends
        self.hops: dict[int, tuple[list, list]] = {}      # per connection: (port, ns) of its data, its ACK path
        self.port_arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # per connection: its data ports, its ACK ports
        # _frozen_shares per tuple of connections: a function of their fixed paths alone, asked
        # again at each forming and join of the same connections (gpt-bench-dcqcn: 513 asks, 263 sets).
        self._frozen_shares_of: dict[tuple[int, ...], np.ndarray | None] = {}
        self._nic_shares_of: dict[tuple[int, ...], np.ndarray] = {}   # _nic_shares, alike
        self.next_check_ns = spec.tau * (spec.window + 1)
        self.all_frozen = False                          # since the last run slice (next_wakeup_ns)
        self._test_period = spec.tau * max(1, spec.window // 2)   # the steady test's
        self.settled: list[tuple[Frozen, int, int]] = []  # checks done ahead of the slice (_settle_checks)
        self.stats = FastForwardStats()
        self._path_buf = np.zeros(256, dtype=np.uint32)
        self._tag_buf = np.zeros(1, dtype=np.uint32)
        self._interrupted = np.zeros(64, dtype=np.uint32)
        self._cc_buf = np.zeros(3, dtype=np.float64)
        port_rates = np.array(ports.rates)
        # Per port, the ns a data frame takes, and an ACK frame (_fair_model): ns-3 rounds a frame's
        # time to the nearest ns (a QP's pacing rounds up). Rounded up here, two QPs sharing a NIC
        # came out 1.2 % slower than in ns-3, and a NIC carrying its flow's data and another's ACKs too.
        self._frame_ns = np.round(net.data_frame_bytes / port_rates)
        self._ack_ns = np.round(net.ack_frame_bytes / port_rates)
        self.line_rate: dict[int, float] = {}            # per connection: its first link's, bytes per ns
        self.thawed: dict[int, tuple[float, int]] = {}   # flow -> (its rate while frozen, thaw time)
        self.formed: set[int] = set()                    # partitions formed since the last prepare()
        self.retry_at: dict[int, int] = {}               # partition -> when its fair start is tried again
        self.n_read = 0                                  # samples in times/delivered at the last read
        self.episodes = self.memo is not None and self.computed_ends and spec.episodes
        self.fair_start = enabled and self.computed_ends and (net.fair_share_cc or net.u_target > 0) \
            and spec.fair_start
        self.link_shares = (net.fair_share_cc or net.u_target > 0) and spec.fair_shares == "links"
        # The load a switch port carries at the shares partitions freeze at: HPCC's with link shares.
        self.switch_load = net.u_target * HPCC_MERGED_LOAD if net.u_target > 0 and self.link_shares else 1.0
        # (its connection, pid, the partition's flows' shares with it and their rates without it, its
        # share): the flow that absorbs() let join, until flow_started() takes it in.
        self.joining: tuple[int, int, dict[int, tuple[float, float]], float] | None = None
        self.host_port = np.array([label.startswith("h") for label in ports.labels])
        self._queue_buf = np.zeros(max(1, net.n_ports), dtype=np.uint32)
        # Per port, the queue bytes a partition forming at its NICs' fair shares may find there
        # (_queued_on_switches): fewer than it marks ECN above (KMIN), drained in QUEUE_DRAIN_NS.
        self._kmin = np.array([net.ecn_kmin_bytes.get(round(rate * 8e9), 0) for rate in ports.rates], dtype=float)
        self._queue_bound = np.minimum(self._kmin, np.array(ports.rates, dtype=float) * QUEUE_DRAIN_NS)
        self._marking = ~self.host_port & (self._kmin > 0)   # switch ports that mark ECN (RDMA)
        self.episode_of: dict[int, Episode] = {}         # flow -> the episode watched that holds it
        self.pending_ends: dict[int, int] = {}           # flow -> its recorded end, after an episode thawed
        # Flows an episode (watched, or frozen on a hit) expects to start on its ports -> that
        # episode or frozen partition; known_starts(until_ns) is the executor's (Executor.known_starts).
        self.expected_in: dict[int, Episode | Frozen] = {}
        self.known_starts: Callable[[int], list[tuple[int, int, int, tuple[int, int], int]]] = lambda until_ns: []
        # released_by(flows, now): the flows their completions start (Executor.released_by).
        self.released_by: Callable[[list[int], int], list[tuple[int, int, int, frozenset[int]]]] = \
            lambda flows, now: []

    # -- flow life cycle (called by the executor) -------------------------------------------

    def flow_started(self, flow: int, conn: int, hosts: tuple[int, int], now: int) -> None:
        """`flow` starts sending: the first unfinished flow of its connection. (A flow queued behind
        others changes nothing in the network until it reaches the head: see flow_finished.)"""
        t0 = time.perf_counter()
        if not self.probing:
            self.probe.Start(self.spec.tau)
            self.probing = True
        path = self._connection_path(conn)
        self.conn_of[flow] = conn
        touched = self.parts.touching(path)
        if self.joining is not None and self.joining[0] == conn:   # as absorbs() found it
            _, pid, shares, share = self.joining
            self.joining = None
            self._fair_join(self.state[pid].frozen, flow, conn, path, hosts, shares, share, now)
            self.stats.control_s += time.perf_counter() - t0
            return
        if flow in self.expected_in:
            held = self.absorbs(flow, conn, now)          # as the executor started it
            holder = self.expected_in.pop(flow)
            expected_ns = holder.expected.pop(flow)
            if held:
                self._join_frozen(holder, flow, conn, path, hosts, now)
                self.stats.control_s += time.perf_counter() - t0
                return
            if isinstance(holder, Episode):
                released = expected_ns < 0 and holder.waits[flow] <= holder.ends.keys()
                if (expected_ns == now or released) and all(self.episode_of.get(f) is holder
                                                            for pid in touched for f in self.parts.by_id[pid].flows):
                    self.episode_of[flow] = holder        # as expected: the watched episode goes on
                    holder.leads[flow] = holder.formed_ns - now
                else:
                    self._abandon(holder, "expected_elsewhen")
        self._abandon_episodes(touched, "flow_start", keep=self.episode_of.get(flow))
        if len(touched) == 1:
            pid = next(iter(touched))
            frozen = self.state[pid].frozen
            if frozen is not None and conn in frozen.vacant:  # it takes over, still frozen
                self._revoke(frozen, conn, now)   # its ACKs come back
                self._take_over(frozen, frozen.fill_vacancy(conn), flow, now)
                self.stats.control_s += time.perf_counter() - t0
                return
        for pid in sorted(touched):  # it may need only the ports of an episode's completed flows
            self._shed_completed(pid, now)
        for pid in self.parts.touching(path):
            self._thaw(pid, now, planned=False)
        self._thaw_interrupted(now)
        touched = self.parts.touching(path)  # (a thaw drops the flows completed while frozen)
        for pid in touched:  # they merge into one partition that starts its history now
            self._close_interval(pid, now)
            del self.state[pid]
        part = self.parts.add_flow(flow, path, hosts)
        self.head_since[flow] = now
        self.state[part.id] = PartitionState(since_ns=now)
        self.formed.add(part.id)
        self.stats.control_s += time.perf_counter() - t0

    def _connection_path(self, conn: int) -> frozenset[int]:
        """The ports of `conn`'s partition tags (set up with what else the engine keeps per
        connection the first time it is asked)."""
        path = self.paths.get(conn)
        if path is not None:
            return path
        n = self.api.flows.GetConnectionPath(conn, self._path_buf, len(self._path_buf))
        ordered = self._path_buf[:n].tolist()
        # A packet's arrival is an event tagged with the receiving side's port (the reverse
        # port of its link), so a partition holds both ports of every link its flows cross:
        # data and ACKs of a connection may take different spines.
        path = self.paths[conn] = frozenset(ordered) | frozenset(p ^ 1 for p in ordered)
        data = ordered[:len(ordered) // 2]            # the data path, then the ACK path (same hops)
        self.ports_of[conn] = FlowPorts(frozenset(data), frozenset(ordered[len(data):]))
        self.port_arrays[conn] = (np.array(sorted(data), dtype=np.int64),
                                  np.array(sorted(ordered[len(data):]), dtype=np.int64))
        for p in data:
            self.data_conns.setdefault(p, []).append(conn)
        # Per hop, a frame's serialization and propagation: a data frame's, an ACK's.
        ack_ns = self.net.ack_frame_bytes
        self.hops[conn] = ([(p, self.ports.delays[p]) for p in data],
                           [(p, self.ports.propagation[p] + ack_ns / self.ports.rates[p])
                            for p in ordered[len(data):]])
        # Delivered bytes count at the receiver (TCP), or at the sender when their ACK arrives
        # (RDMA: the QP's acknowledged bytes), one ACK path later.
        self.lag_ns[conn] = (self._to_sender(conn, data[0]) if self.net.rdma
                             else sum(self.ports.delays[p] for p in data))
        self.line_rate[conn] = self.ports.rates[ordered[0]]
        if self.memo is not None:
            self.path_labels[conn] = ",".join(self.ports.labels[p] for p in ordered)
        return path

    def absorbs(self, flow: int, conn: int, now: int) -> bool:
        """Whether `flow`, starting now on `conn`, starts inside a frozen partition, its QP held:
        the episode that expects it then, if it touches no other partition, or one at its NICs'
        fair shares that it joins (_fair_join_shares). The executor asks before it starts it."""
        frozen = self.expected_in.get(flow)
        if frozen is not None:
            if not isinstance(frozen, Frozen) or frozen.expected[flow] != now:
                return False
            pid = self.parts.of_flow[next(iter(frozen.rates))]
            return self.parts.touching(self._connection_path(conn)) <= {pid}
        self.joining = self._fair_join_shares(flow, conn) if self.fair_start and self.net.fair_share_cc else None
        return self.joining is not None

    def flow_queued(self, conn: int) -> None:
        """A flow was released onto `conn` behind unfinished ones: it starts when they end."""
        self.queued[conn] = self.queued.get(conn, 0) + 1

    def flow_finished(self, flow: int, now: int, successor: int | None = None) -> None:
        """`flow` completed; `successor`, the next flow of its connection, starts sending."""
        self.took_over.discard(flow)
        if successor is not None:
            conn = self.dropped[flow][0] if flow in self.dropped else self.conn_of[flow]
            self.queued[conn] -= 1
            self.took_over.add(successor)
        if flow in self.unreported:
            self.unreported.discard(flow)
            if flow in self.dropped:  # its partition thawed at the same ns, after its end was computed
                conn, hosts = self.dropped.pop(flow)
                if successor is not None:
                    self.flow_started(successor, conn, hosts, now)
            else:
                self._completed_frozen(self.parts.of_flow[flow], flow, now, successor)
            return
        t0 = time.perf_counter()
        self.pending_ends.pop(flow, None)
        if flow in self.episode_of:
            self._episode_flow_ended(flow, now, successor)
        pid = self.parts.of_flow[flow]
        self._close_interval(pid, now)
        del self.state[pid]
        conn = self.conn_of.pop(flow)
        del self.head_since[flow]
        self.thawed.pop(flow, None)
        if successor is not None:  # it takes over the same ports: no split
            self.conn_of[successor] = conn
            parts = [self.parts.replace_flow(flow, successor)]
            self.head_since[successor] = now
        else:
            parts = self.parts.remove_flow(flow)
        for part in parts:
            self.state[part.id] = PartitionState(since_ns=now)
            self.formed.add(part.id)
        self.stats.control_s += time.perf_counter() - t0

    def pop_completions(self, now: int) -> list[tuple[int, int]]:
        """Flows whose computed end inside a frozen partition has come, or whose recorded end came
        after their episode thawed: (flow, end ns), in order of their ends. Called after each run
        slice, before anything can thaw their partitions; the executor reports each back through
        flow_finished, as a simulated end."""
        due = []
        for st in self.state.values():
            frozen = st.frozen
            if frozen is not None and frozen.ends.earliest() <= now:
                for flow in [f for f, end in frozen.ends.items() if end <= now]:
                    due.append((frozen.ends.pop(flow), flow))
                    frozen.complete(flow)
                    self.unreported.add(flow)
        for flow in [f for f, end in self.pending_ends.items() if end <= now]:
            due.append((self.pending_ends.pop(flow), flow))
        self.stats.ends_computed += len(due)
        return [(flow, end) for end, flow in sorted(due)]

    # -- decisions ---------------------------------------------------------------------------

    def prepare(self, now: int) -> None:
        """Before ns-3 runs on: memo lookups for the partitions formed since the last run slice. Not
        at each flow start or end: a completion releases its dependents at the same ns, and a
        partition frozen on a hit would thaw again at once."""
        if not self.formed:
            return
        t0 = time.perf_counter()
        formed, self.formed = sorted(self.formed), set()
        for pid in formed:
            # (not one frozen again since: an episode's running flows after its completed ones left)
            if pid not in self.state or self.state[pid].frozen is not None:
                continue
            part = self.parts.by_id[pid]
            if self.fair_start and self._freeze_at_shares(part, now):
                continue
            if self.memo is not None:
                self._apply_or_watch(part, now)
        self.stats.control_s += time.perf_counter() - t0

    def next_wakeup_ns(self, now: int, until_ns: int) -> int:
        """When the engine needs the next run slice to end: by `until_ns` (the executor's next
        release, compute end or stop time) or earlier. Flows' end checks that would change nothing
        are done here instead (_settle_checks)."""
        planned, checks, unfrozen = NEVER, NEVER, False      # (one pass: it runs after every run slice)
        for s in self.state.values():
            frozen = s.frozen
            if frozen is not None:
                planned = min(planned, frozen.until_ns, frozen.ends.earliest())
                checks = min(checks, frozen.checks.earliest())
            else:
                unfrozen = True
                if s.forming is not None and s.forming.record_ns < planned:
                    planned = s.forming.record_ns
        # The steady test has nothing to look at while every partition is frozen: no wake-up for it
        # then (gpt-xl-dcqcn: 3,441 tests -> 161; wakeup keeps their times as they were).
        self.all_frozen = bool(self.state) and not unfrozen
        planned = min(planned, min(self.pending_ends.values(), default=NEVER),
                      min(self.retry_at.values(), default=NEVER),
                      self.next_check_ns if self.enabled and unfrozen else NEVER)
        if now < checks < min(planned, until_ns):
            t0 = time.perf_counter()
            checks = self._settle_checks(min(planned, until_ns))
            self.stats.control_s += time.perf_counter() - t0
        return min(planned, checks)

    def _steady_test_at(self, ns: int) -> bool:
        """Whether a run slice ending at `ns` would run the steady test while every partition is
        frozen (wakeup: one due on the dot)."""
        return (self.enabled and self.all_frozen and ns >= self.next_check_ns
                and (ns - self.next_check_ns) % self._test_period == 0)

    def wakeup(self, now: int) -> None:
        """After each run slice: skip-backs, planned thaws, then the steady test if due."""
        t0 = time.perf_counter()
        self._thaw_interrupted(now)
        for pid in sorted(pid for pid, at in self.retry_at.items() if at <= now):
            del self.retry_at[pid]
            if pid in self.state and self.state[pid].frozen is None:
                self._freeze_at_shares(self.parts.by_id[pid], now)
        for pid, st in list(self.state.items()):
            if st.frozen and st.frozen.checks.earliest() <= now:
                self._check_ends(pid, st.frozen, now)
        for pid, st in list(self.state.items()):
            if st.frozen and st.frozen.until_ns <= now:
                self._thaw(pid, now, planned=True)
            elif st.forming and st.forming.record_ns <= now:
                cut = self._cut_ns(st.forming.graph.flows)
                if cut >= REPLAN_NS:
                    st.forming.record_ns = now + cut
                elif now - st.forming.formed_ns >= self.spec.min_freeze:
                    self._record(st, self._last_rates(st.forming, now), now, truncated=True)
                else:
                    st.forming.record_ns = NEVER          # too short a transient to be worth a record
        if self.enabled and now >= self.next_check_ns:
            # Tests come every `period` while some partition exists; after a stretch with none, the
            # first run slice tests at once and the count restarts from it. Tests skipped because
            # every partition was frozen (next_wakeup_ns) would have found nothing: their count goes
            # on, and one due right now runs.
            period = self._test_period
            if self.all_frozen:
                missed = (now - self.next_check_ns) // period
                due = self.next_check_ns + missed * period == now
                self.next_check_ns += (missed + 1) * period
            else:
                due, self.next_check_ns = True, now + period
            if due:
                self._check(now)
        if self.memo is not None:
            self.memo.flush_if_due()
        self.stats.control_s += time.perf_counter() - t0

    def slice_ran(self, now: int) -> None:
        """After each run slice, before anything changes the partitions: the settled checks still
        ahead come back (_unsettle_checks); count its events."""
        if self.settled:
            self._unsettle_checks(now)
        if self.ledger is not None:
            self.ledger.read(self.parts, self._mode_of)

    def _mode_of(self, pid: int) -> str:
        st = self.state.get(pid)
        if st is None:
            return "simulated_formed"
        if st.frozen is not None:
            return "skip_back"        # its events ran after something thawed it within the slice
        if any(f in self.episode_of for f in self.parts.by_id[pid].flows):
            return "watched_episode"
        return "watched_transient" if st.forming is not None else f"simulated_{st.simulated}"

    def tagging_errors(self) -> int:
        """Events the simulator could not attribute or held wrongly (must stay 0 for exact freezes)."""
        return self.sim.GetErrorTotal()

    def finish(self, now: int) -> None:
        for pid, st in list(self.state.items()):
            if st.frozen:
                self._thaw(pid, now, planned=True)
            self._close_interval(pid, now)
        self.probe.Stop()
        if self.memo is not None:
            self.memo.flush()

    # -- internals ---------------------------------------------------------------------------

    def _check(self, now: int) -> None:
        self.stats.checks += 1
        n = self._read_probe()
        for pid, st in self.state.items():
            if st.frozen:
                continue
            history = n - int(np.searchsorted(self.times[:n], st.since_ns))
            scales = [s for s in self.scales if history >= self.spec.window * s + 1]
            if scales:
                self._try_freeze(self.parts.by_id[pid], st, n, scales, now)

    def _read_probe(self) -> int:
        """Copy the probe's samples into times/delivered/arrived/queues; returns how many."""
        self.n_read = self.probe.Read()
        return self.n_read

    def _window_rates(self, n: int, flows: list[int], scale: int) -> np.ndarray:
        """Bytes per block of `scale` samples over the last `window` blocks: window x flows."""
        rows = self.delivered[n - self.spec.window * scale - 1:n:scale, flows].astype(np.int64)
        return np.diff(rows, axis=0)

    def _steady_rate(self, flow: int, n: int, scale: int, since_ns: int) -> float:
        """Bytes per ns over all blocks of the window but the oldest (which may still hold the flow's
        ramp-up), between the arrivals of the latest bytes before each end sample: deliveries come
        in steps (a packet per RDMA ACK by default, more with L2_ACK_INTERVAL or TCP's delayed
        ACKs), and per sample period they would round the rate by up to a step per window (0.3 %
        for 30 us at 100 Gbps), an error a computed end carries over every later flow of the
        connection. (Not the median block either: it rounds down too.)"""
        first, last = n - 1 - (self.spec.window - 1) * scale, n - 1
        delivered = int(self.delivered[last, flow]) - int(self.delivered[first, flow])
        start, end = int(self.arrived[first, flow]), int(self.arrived[last, flow])
        if start < since_ns or end <= start:
            start, end = int(self.times[first]), int(self.times[last])
        return delivered / (end - start)

    def _try_freeze(self, part: Partition, st: PartitionState, n: int, scales: list[int], now: int) -> None:
        spec = self.spec
        flows = sorted(part.flows)
        blocks = {s: self._window_rates(n, flows, s) for s in scales}
        rates: dict[int, float] = {}
        for i, flow in enumerate(flows):
            if blocks[scales[0]][:, i].sum() <= 0:
                return                                      # a sending flow that does not move
            scale = next((s for s, b in blocks.items() if _spread(b[:, i]) < spec.theta), None)
            if scale is None:
                return
            rates[flow] = self._steady_rate(flow, n, scale, st.since_ns)
        horizon = min(int((self._untransmitted(flow) - spec.margin) / rate) for flow, rate in rates.items())
        if self._marks_in_ns(part, n, max(scales)) < horizon:
            return        # a queue on its way to marking: DCQCN will cut, and a freeze or record would hold that off
        if st.forming is not None:
            self._record(st, rates, now)
        steps = self._rate_steps(flows)       # _freeze ends it by the earliest
        if min(horizon, min(steps.values(), default=NEVER) - now) >= spec.min_freeze:
            self._freeze(part, st, Frozen(group=-1, since_ns=now, until_ns=now + horizon, rates=rates,
                                          rate_steps=steps), now)

    def _marks_in_ns(self, part: Partition, n: int, scale: int) -> int:
        """How long until a switch port of the partition whose queue grew at every block of the
        window reaches KMIN at that pace (0 if it is there, NEVER if no queue grows). Delivered
        rates are steady while such a queue fills (the port drains at its rate, the senders send
        above it), and a freeze holds the queue where it is: the marks, and DCQCN's cuts, come as
        much later as the partition was frozen (moe-8x13b-128-dcqcn's first all-to-all: 6 QPs into
        each receiver at line rate, frozen at 290 KB of queue for 126 us; in stock 2 of them were
        cut at 400 KB before their ends, and the flows left after the others' ends took 25 Gbps,
        not 13.6)."""
        ports = [p for p in part.ports if self._marking[p]]
        if not ports:
            return NEVER
        first = n - 1 - self.spec.window * scale
        rows = self.queues[first:n:scale, ports].astype(np.int64)
        last, kmin = rows[-1], self._kmin[ports]
        rising = (np.diff(rows, axis=0) > 0).all(axis=0)
        if not rising.any():
            return NEVER
        pace = (last - rows[0])[rising] / (int(self.times[n - 1]) - int(self.times[first]))
        return max(0, int(((kmin[rising] - last[rising]) / pace).min()))

    def _rate_steps(self, flows: list[int]) -> dict[int, int]:
        """Connections of `flows` whose QP's rate steps up on its own within the freeze -> when:
        DCQCN's rate-increase timer, pending below line rate with no cut over the steady window. A
        frozen rate ignores it, and each freeze moved it on by the frozen time: a pipeline send cut
        to 8 Gbps by an all-to-all, in stock at 54 Gbps at its next step, was held there by a chain
        of truncated hits until it ended (moe-8x13b-128-dcqcn, 2.0x its stock time)."""
        if not self.net.rdma:
            return {}
        quiet = self.spec.window * self.spec.tau
        steps = {}
        for conn in sorted({self.conn_of[f] for f in flows}):
            at = self._sender(conn).GetRateStepNs(quiet)
            if at >= 0:
                steps[conn] = at
        return steps

    def _freeze(self, part: Partition, st: PartitionState, frozen: Frozen, now: int) -> None:
        tags = np.array(part.tags(self.net.n_ports), dtype=np.uint32)
        frozen.group = self.sim.Freeze(tags, len(tags))
        self._abandon_episodes([part.id], "freeze")
        for flow in part.flows:               # the model ends it now (an episode left it few bytes)
            self.pending_ends.pop(flow, None)
        if frozen.episode:
            for flow in sorted(frozen.rates):
                frozen.left[flow] = self._left(flow)
                frozen.ends[flow] = max(now, now - frozen.recorded_at(flow) + frozen.memo.ends[flow])
                frozen.order[self.conn_of[flow]] = [flow]
        elif self.computed_ends and (frozen.memo is None or not frozen.memo.truncated):
            frozen.until_ns = NEVER                        # it thaws when something touches it
            nic_flows = Counter(self._nic(self.conn_of[f]) for f in frozen.rates) if frozen.at_shares else None
            for flow in sorted(frozen.rates):
                conn = self.conn_of[flow]
                frozen.in_flight[conn] = self._left(flow) - self._untransmitted(flow)
                frozen.order[conn] = [flow]
                if frozen.memo is not None:
                    frozen.wire[flow] = frozen.rates[flow] * self.lag_ns[conn] - frozen.in_flight[conn]
                elif frozen.at_shares:
                    # The lag counts its last frame's time at the NIC, where the QPs sharing it
                    # send their last frames in turn: each ends at the middle of that turn.
                    nic = self._nic(conn)
                    ahead = self._frame_ns[nic] * (nic_flows[nic] + 1) / 2
                    frozen.wire[flow] = (frozen.rates[flow] * (self.lag_ns[conn] - ahead)
                                         - frozen.in_flight[conn] + frozen.queued.get(conn, 0))
                self._plan_end(frozen, flow)
        if not frozen.episode and not frozen.at_shares:
            if frozen.rate_steps is None:
                frozen.rate_steps = self._rate_steps(sorted(frozen.rates))
            step = min(frozen.rate_steps.values(), default=NEVER)
            self.stats.rate_steps += step < frozen.until_ns
            frozen.until_ns = min(frozen.until_ns, step)
        self._close_interval(part.id, now)
        st.frozen = frozen
        st.forming = None
        self.stats.freezes += 1

    def _thaw(self, pid: int, now: int, planned: bool, shed: bool = False) -> None:
        st = self.state[pid]
        frozen = st.frozen
        if frozen is None:
            return
        shift = now - frozen.since_ns
        self.sim.Thaw(frozen.group, shift)
        if self.net.rdma:
            for conn in sorted({self.conn_of[flow] for flow in frozen.rates}):
                self._sender(conn).ShiftTimes(now - frozen.held.get(conn, frozen.since_ns))
            for conn in sorted(frozen.rate_steps or ()):
                self._sender(conn).KeepRateStep(shift)
        for flow in frozen.expected:
            del self.expected_in[flow]
        # A connection skips the bytes its flows delivered in the model, in stream order: a flow
        # completed meanwhile gives up all its unsent bytes, and the bytes it still had in flight
        # come out of its successor's (they arrive after the thaw, where the successor's would). A
        # successor the model has nearly done may lose all its bytes: it completes with the ACK of
        # the last byte in flight, at most one lag after its computed end.
        memo, episode = frozen.memo, frozen.episode
        stream = frozen.order or {self.conn_of[flow]: [flow] for flow in frozen.rates}
        for conn, flows in stream.items():
            # An episode's flow thawed for good (not shed) restarts with an empty pipe: it is
            # credited the bytes that would be on the wire, those it sent in the last lag.
            lag = math.ceil(self.lag_ns[conn])
            ahead = {f: min(now - self.head_since[f], lag) if episode and not shed else 0 for f in flows}
            owed = sum(frozen.skipped_bytes(flow, shift + ahead[flow]) for flow in flows)
            if frozen.at_shares:
                # The model counts deliveries; the sender is a pipe ahead, what the model has it
                # deliver in the next lag (a rate its sends took up to a lag ago, as another flow
                # joined its NIC), less the bytes in flight since the freeze (a fresh flow's few;
                # after a rate change, a pipe of the old rate): it skips what it would have sent.
                owed += round(frozen.pipe(flows[-1], now, self.lag_ns[conn]) - frozen.in_flight[conn]
                              + frozen.queued.get(conn, 0))
            elif memo is None and frozen.in_flight:
                # Steady: the bytes in flight at the freeze are the pipe at its rate then; a gain
                # since adds to the pipe what the sender sent ahead (2.1 us late without, a test).
                owed += round((frozen.rate_at(flows[-1], now) - frozen.rates[flows[0]]) * self.lag_ns[conn])
            owed = max(0, owed)           # (a flow that joined as the thaw came: 0, give or take rounding)
            for flow in flows:
                skipped = self.api.flows.SkipFlow(flow, conn, owed)
                owed -= skipped
                self.stats.bytes_skipped += skipped
                if (episode and not shed and flow not in frozen.done
                        and (owed > 0 or frozen.recorded_at(flow) + shift + ahead[flow] >= memo.ends[flow])):
                    # Its last bytes are on the wire in the model, or were in flight since the
                    # freeze: they would arrive a lag late. It completes at its recorded time.
                    self.pending_ends[flow] = frozen.since_ns - frozen.recorded_at(flow) + memo.ends[flow]
                elif flow in frozen.ends and (memo is None and owed > 0
                                              or flow in frozen.wire and frozen.past_left(flow, now)):
                    # The model has all its bytes delivered or on the wire: every byte is skipped,
                    # and none is left to complete it in ns-3. It completes at its computed end.
                    # So does a flow that has sent its last byte in the model (frozen steady or at
                    # its fair shares): the bytes it has in flight are those of the freeze, a lag
                    # from their end, while its last ones would be nearer (moe-8x13b-128-dcqcn's
                    # all-to-alls thawed at their first end, a lag after every flow's last byte
                    # in the model: 144 flows 3.4-4.3 us late of 350 us).
                    self.pending_ends[flow] = frozen.ends[flow]
        for conn in sorted(frozen.held):
            self.api.flows.Resume(conn)            # what it has left to send, it sends now
        if self._held_at_link_shares(frozen):
            self._pace_cut_qps(frozen, now)
        elif frozen.pacing_cuts:
            self._pace_nic_bound_qps(frozen, now)
        for flow in frozen.rates:
            conn = self.conn_of[flow]
            self.thawed[flow] = (frozen.rate_at(flow, now), now)
            # The stored congestion state is where the transient ends (an episode's flow: where it
            # completed): an interrupted transient, or an episode's flow still running, keeps the
            # state it had (the flow resumes its own ramp with the bytes it was credited).
            ended = flow in frozen.done if episode else memo is not None and shift >= memo.transient_ns
            if ended and memo.states.get(flow):
                state = memo.states[flow]
                first, second, third = self.net.cc_state_keys
                self._sender(conn).SetCongestionState(
                    state.get(first, 0.0), state.get(second, 0.0), state.get(third, -1.0))
        self.stats.thaws += 1
        self.stats.episodes_interrupted += episode and not planned
        self.stats.skip_backs += 0 if planned else 1
        self.stats.frozen_ns += shift
        self.stats.intervals.append(ModeInterval(pid, frozen.since_ns, now, "frozen" if frozen.memo is None
                                                 else "memo", len(self.parts.by_id[pid].flows)))
        st.frozen = None
        st.since_ns = now  # the window must see the thawed partition run again
        st.simulated = "after_thaw"
        if planned and not episode:
            # What a planned thaw leaves is looked up rather than simulated until the steady test
            # passes again (HPCC's takes 160 us or more): past a truncated record its flows go on
            # from the rates it ends with (the transient's next part); at a flow's end whose effect
            # on the others is not known (off their fair shares, HPCC), an all-to-all's last flows
            # may replay as an episode (moe-8x7b-dcqcn with seed 3: 36.4 M -> 30.5 M events cold,
            # 30.3 M -> 20.8 M warm).
            self.formed.add(pid)
        if frozen.done:
            self._drop_completed(pid, sorted(frozen.done), now)

    def _sender(self, conn: int):
        """The connection's sender (its handle made once)."""
        sender = self.senders.get(conn)
        if sender is None:
            sender = self.senders[conn] = self.api.flows.GetSender(conn)
        return sender

    def _congestion_state(self, flow: int) -> dict[str, float]:
        n = self._sender(self.conn_of[flow]).GetCongestionState(self._cc_buf, len(self._cc_buf))
        if n < 3:
            return {}
        first, second, third = self.net.cc_state_keys
        state = {first: float(self._cc_buf[0]), second: float(self._cc_buf[1])}
        if self._cc_buf[2] >= 0:
            state[third] = float(self._cc_buf[2])
        return state

    def _untransmitted(self, flow: int) -> int:
        return self._sender(self.conn_of[flow]).GetUntransmittedOf(flow)

    def _thaw_interrupted(self, now: int) -> None:
        """Events were scheduled into frozen partitions: thaw them now (skip-back)."""
        while True:
            n = self.sim.PopInterrupted(self._interrupted, len(self._interrupted))
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
