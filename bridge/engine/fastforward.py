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

Flow ends (`flow_ends`). "simulated" (TCP always): the partition thaws before any of its flows
gets within `margin` of its end, and every end is simulated packet by packet. "computed" (RDMA
default, the paper's way): a flow completes inside its frozen partition when the model has
delivered its bytes; the executor releases its dependents then, and the next flow of its queue
pair takes over its place and rate (ring steps and gradient buckets chain on one QP). The
partition keeps running frozen unless the end changes the others' rates in a way the engine cannot
tell: `margin` bytes before a flow's end, if no flow is queued on its connection and another flow
of the partition sends data through its ports, the partition thaws and that end is simulated after
all, unless the partition's rates are the max-min fair shares of its links (QPs at line rate
sharing a NIC or a switch port in turn): then the others take the shares the end leaves them.

When a partition forms and the memo holds an isomorphic one, the partition is frozen at once for
the stored transient plus the steady time after it (none after a truncated record, made on RDMA
of flows too short to turn steady); at thaw each flow skips its transient bytes and the steady
bytes after them, and gets the stored congestion state (TCP: cwnd, ssthresh, DCTCP alpha; RDMA:
the QP's rate, DCQCN target rate and alpha, HPCC reference rate and U, TIMELY reference rate and last
RTT, or DCTCP alpha). Flows too short even for
a truncated record go through its first part only, and keep their own congestion state; on DCQCN
and RDMA's DCTCP that first part may be all a partition of a short flow beside slower ones gets
(_apply_or_watch).

Episodes (RDMA, computed ends): a partition whose flows are all too short to be frozen steady is
looked up by a graph labelled with each flow's bytes left, how long it has been sending and its
QP's rates. On a miss it is watched until every flow completed, and kept if nothing touched it
meanwhile (no flow started on its ports, none of it froze): each flow's completion from the start,
its bytes delivered at each rate sample before, and its QP's congestion state at its end. On a hit
the partition is frozen at once, its flows complete at the recorded times, and it thaws when the
last one has (their QPs get the recorded congestion state). A flow starting only on the ports of
flows already completed sheds them: the rest freeze again at once (in the recorded run the
partition had split there). One starting on a running flow's ports thaws the episode: each flow
still running skips the bytes the record had it deliver by then plus those it would have on the
wire, and goes on simulated with its own congestion state; one whose last bytes would already be on
the wire completes at its recorded time.

With `episode_join`, an episode also holds the flows known to start on its ports within that time
(the executor's known_starts: released already, or by a compute task that ends then), labelled by
when they start: an all-to-all is looked up when its first host starts, with the other hosts'
flows in its graph, not when the last one has joined (until then, each join re-formed the
partition and the flows were simulated). A replay takes each expected flow in as it starts, still
frozen: its QP starts held (not kicked into sending) and its flow completes at the recorded time
from its own start; at a thaw the QP is kicked to send what the record had not delivered yet.
With `episode_chains`, it also holds the flows its own flows' completions start (all they still
wait for is in it: the executor's released_by), joined in its graph to the flows they wait for. A
replay expects each at the last recorded completion it waits for, and takes it in as above.

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
from dataclasses import dataclass, field

import numpy as np

from ..ns3.network import Ns3Network
from .fairshare import AckedShares
from .ledger import EventLedger
from .memo import ConflictGraph, FlowPorts, Memo, Transient, rate_bin
from .partitions import Partition, Partitions

NEVER = np.iinfo(np.int64).max
REPLAN_NS = 2_000     # a truncated record is taken once it is due within this (ns)
LINK_BOUND = 0.98     # a flow whose frames and the ACKs crossing its link fill this much of it is bound by it
# A partition's rates are max-min fair shares when each is this close to its share. DCQCN QPs
# delivered 1.2-1.5 % above the modelled shares while the model rounded frame times up (gpt-13b-dcqcn:
# 82 of 89 partitions; the rest 5 % off); the change at an end is taken as the ratio of the shares.
FAIR_MATCH = 0.02
# HPCC fair starts (_nic_bound_on_utilization): switch ports loaded below U_TARGET by this fraction
# of it, QPs pacing above their NIC shares by this fraction of their rate.
HPCC_LOAD_MARGIN = 0.05
HPCC_PACING_MARGIN = 0.1
# HPCC holds a switch port where its QPs' frames and others' ACKs merge at this fraction of
# U_TARGET (_cut_to_link_shares): the frame of queue the streams' interleaving leaves now and then
# counts in its utilization. Frames and ACKs at partitions' steady freezes (U_TARGET 0.95; 783 flows
# on gpt-bench-hpcc, gpt-xl-hpcc, moe-bench-hpcc): their bottleneck loaded 0.9449-0.9504, median 0.9467.
HPCC_MERGED_LOAD = 0.9467 / 0.95
# HPCC link shares: QPs meeting on a switch port at more than its share fill its queue for a round
# trip; HPCC then cuts them below their shares and they climb back over MI_THRESH round trips. They
# come out late by about this many round trips per share of overload (two QPs at line rate into a
# port, 4 MB each: 5-18 us; three 384 KB pipeline sends: 30 us), which must stay below this
# fraction of their time left. (1 % kept that incast to its steady test, 5 % late; gpt-bench-hpcc
# cold at 2.5 %: 12.6x fewer events than stock, FCT p99 5.81 %; without the bound 17.7x, 11.5 %.)
HPCC_RECOVERY_RTTS = 2.0
HPCC_RECOVERY_ERROR = 0.025
# A switch port is full at HPCC link shares when loaded this close to switch_load: the model's ACK
# load is found in three rounds, so ports bound where several QPs' bottlenecks cross came out
# 0.944-0.946 against 0.9467 (leafspine-bench-dcqcn on HPCC) and passed as not full (FCT p99
# 38.2 -> 24.7 % alone there).
HPCC_FULL_MATCH = 0.01
# A partition forming on HPCC whose QPs do not pace as a fair start needs yet (a QP HPCC cut below
# its share climbs back within round trips) is tried again this much later, until it is frozen or
# changes; else it waited for the steady test (gpt-bench-hpcc: a DP ring's step 240 us).
HPCC_RETRY_NS = 10_000
# Fair starts find at most the bytes a switch port drains in this long (and fewer than its KMIN)
# queued on their ports. gpt-bench-dcqcn, steady-only / cold / warm events fewer than stock: none
# allowed 18.1x / 25.0x / 46.1x, 1.5 us 24.6x / 32.4x / 51.5x at the same errors (no more with up
# to KMIN, 32 us at 100 Gbps). moe-bench-dcqcn: 2.61x / 6.70x / 9.75x, 1.5 us 2.67x / 6.93x / 9.95x
# (FCT p99 0.66 / 0.72 / 1.04 % -> 0.80 / 0.72 / 1.12 %), up to KMIN 2.84x / 7.20x / 10.22x but
# p99 3.46 / 1.22 / 1.58 % (its all-to-alls' last frames, queued, hold up the flows after them).
QUEUE_DRAIN_NS = 1_500
# Episode labels give a flow's age in steps of spec.episode_age_step; within a step each flow is
# timed from its own start (Episode.leads). Past the first round trip their bytes left tell flows
# apart anyway: on moe-bench, 1 us steps let 66-68 all-to-alls replay cold (3.6x fewer events than
# stock), 10 us steps (the default) 95-105 (4.1x, 4.7x) at the same errors, and no age at all the
# same as 10 us. They give its bytes left in steps of spec.episode_bytes_step (a flow that has
# delivered less than a step: its size; _clock_on_record). Exact bytes told apart all-to-alls whose
# hosts joined a few tens of ns apart: on moe-bench-dcqcn 4.7x fewer events than stock cold and
# 7.1x warm, 6.4x and 9.2x with 4 KB steps (the default) at the same errors (16 KB: 7.0x and 10.5x,
# but moe-bench-hpcc's warm p99 went 4.7 % -> 6.3 % for 8.0x -> 8.4x). moe-8x7b's hosts join its
# all-to-alls 17 us apart at the median, each with 6 flows of 512 KiB: on HPCC, 64 KiB and 100 us
# steps replay 1,697 of its 2,048 all-to-alls cold against 0 (README).


class Deadlines(dict):
    """flow -> a time (ns), with the earliest kept: the engine asks for it after every run slice,
    and a ring's frozen partition holds tens of computed ends and checks (gpt-13b-dcqcn, warm: 57
    per slice over 14 partitions, 11 % of the loop spent taking their minimum)."""

    __slots__ = ("_earliest",)

    def __init__(self):
        super().__init__()
        self._earliest = NEVER          # -1: to be computed again

    def earliest(self) -> int:
        if self._earliest < 0:
            self._earliest = min(self.values(), default=NEVER)
        return self._earliest

    def __setitem__(self, flow: int, ns: int) -> None:
        if self.get(flow) == self._earliest:
            self._earliest = -1
        elif ns < self._earliest:
            self._earliest = ns
        super().__setitem__(flow, ns)

    def __delitem__(self, flow: int) -> None:
        self.pop(flow)

    def pop(self, flow: int, *default):
        if self.get(flow) == self._earliest:
            self._earliest = -1
        return super().pop(flow, *default)


@dataclass
class FairView:
    """The flows of a frozen partition still sending (and `extra`, a completed one asked about) as
    the fair-share test sees them at one version of the partition: flows of an all-to-all check
    their ends one after another on the same rates."""

    version: int
    extra: int                    # -1: none
    flows: list[int]              # in flow order
    index: dict[int, int]         # flow -> its place in `flows`
    rates: np.ndarray             # with the changes to come
    steady_since: np.ndarray      # when each delivers at its steady rate
    model: AckedShares | None     # None unless every QP sends at line rate
    shares: np.ndarray | None
    at_shares: bool               # every rate within FAIR_MATCH of its share


@dataclass
class Frozen:
    """A frozen partition and what its flows deliver meanwhile, in the model that skips their bytes.

    With computed ends, each flow also has the bytes it had `left` to deliver when it entered the
    model; it completes when the model has delivered them (`ends`), and the next flow of its
    connection takes over at its rate (`joined`): a QP's byte stream goes on, the boundary between
    two flows is an offset in it. A completed flow stays in the partition (`done`) until the thaw,
    which skips its unsent bytes; its packets in flight then arrive and complete it in ns-3, late
    and ignored. A connection whose completed flow has no successor yet is `vacant`."""

    group: int
    since_ns: int
    until_ns: int                 # planned thaw
    rates: dict[int, float]       # flow index -> delivered bytes per ns
    memo: Transient | None = None  # a memoized transient precedes the steady rates
    left: dict[int, int] = field(default_factory=dict)      # computed ends only
    ends: Deadlines = field(default_factory=Deadlines)      # flow -> computed completion, still ahead
    checks: Deadlines = field(default_factory=Deadlines)    # flow -> when to decide how it ends
    in_flight: dict[int, int] = field(default_factory=dict)  # connection -> bytes unacked at the freeze
    joined: dict[int, int] = field(default_factory=dict)    # flow -> when it took over its connection
    done: set[int] = field(default_factory=set)
    line_rate_conns: set[int] = field(default_factory=set)  # connections whose QP sends at line rate (fixed while frozen)
    version: int = 0              # counts the changes to rates, changes, joined and done
    fair_view: FairView | None = None  # its flows' fair shares at `version` (_fair_view)
    order: dict[int, list[int]] = field(default_factory=dict)  # connection -> its flows in stream order
    vacant: dict[int, int] = field(default_factory=dict)    # connection -> its completed flow
    vacant_until: dict[int, int] = field(default_factory=dict)  # connection -> thaw unless filled by then
    # A vacant connection's ACKs no longer cross the links of flows bound by those links: each such
    # flow runs faster by the link time they took (`boosts`: the rate gained and the link) until
    # the connection's next flow's ACKs come back. A flow's rate changes at given times (`changes`:
    # from when, how much is added), which may lie ahead: a link freed now shows in the deliveries
    # of a flow crossing it one round trip later.
    boosts: dict[int, dict[int, tuple[float, int | None]]] = field(default_factory=dict)  # connection -> flow -> (gain, port)
    changes: dict[int, list[tuple[int, float]]] = field(default_factory=dict)  # flow -> [(ns, rate added)], in time order
    # A steady record's transient bytes count each flow's bytes on the wire (a hit restarts it with
    # an empty pipe), from its bytes sent when the partition formed: its deliveries lag the model's
    # by those, less the bytes it had in flight at the hit (lead them where it had more), and so
    # does its end (`wire`, per flow the hit froze). Without it, tiny-memo-rdma's replayed incasts
    # ended 4.1 us early.
    wire: dict[int, float] = field(default_factory=dict)
    # Frozen at its fair shares as it formed (_freeze_at_shares): its flows send at those rates from
    # the freeze, their bytes in flight then sent at the rates before. The model counts deliveries,
    # `wire` behind its sends: a flow's last byte is delivered a lag after it leaves.
    at_shares: bool = False
    offset_ns: int = 0            # episode: how far into the recorded episode this freeze began
    leads: dict[int, int] = field(default_factory=dict)     # episode: flow -> its clock's lead (Episode.leads)
    # Episode: flows known to start on its ports (-> when), taken in still frozen as they start.
    # Their QPs start held (-> when), never kicked into sending until the thaw; so do those of flows
    # joining a partition at its NICs' fair shares (_fair_join).
    expected: dict[int, int] = field(default_factory=dict)
    held: dict[int, int] = field(default_factory=dict)      # connection -> when its flow started

    @property
    def episode(self) -> bool:
        """Frozen on an episode record: its flows complete at the recorded times."""
        return self.memo is not None and self.memo.ends is not None

    def recorded_at(self, flow: int) -> int:
        """Episode: where `flow` was on its recorded clock (Episode.leads) when this freeze began."""
        return self.offset_ns + self.leads[flow]

    def leave_vacant(self, conn: int, flow: int, until_ns: int = NEVER) -> None:
        self.vacant[conn] = flow
        if until_ns != NEVER:
            self.vacant_until[conn] = until_ns
            self.until_ns = min(self.until_ns, until_ns)

    def fill_vacancy(self, conn: int) -> int:
        """The connection's next flow arrived: returns the completed flow it takes over from."""
        self.vacant_until.pop(conn, None)
        self.until_ns = min(self.vacant_until.values(), default=NEVER)
        return self.vacant.pop(conn)

    def skipped_bytes(self, flow: int, shift: int) -> int:
        """Bytes `flow` would have delivered in `shift` ns of this freeze."""
        if self.episode:
            start, memo = self.recorded_at(flow), self.memo
            if start + shift >= memo.ends[flow]:
                return self.left[flow]
            return min(self.left[flow], round(memo.delivered(flow, start + shift) - memo.delivered(flow, start)))
        delivered = self._delivered(flow, self.since_ns + shift)
        return min(delivered, self.left[flow]) if flow in self.left else delivered

    def _steady_from(self, flow: int) -> tuple[int, int]:
        """When the model has `flow` deliver at its steady rate, and its bytes then: from the freeze,
        from when it took over its connection, or after the memoized transient."""
        if flow in self.joined:
            return self.joined[flow], 0
        if self.memo is None:
            return self.since_ns, 0
        return self.since_ns + self.memo.transient_ns, self.memo.bytes[flow]

    def _delivered(self, flow: int, at_ns: int) -> int:
        """Bytes the model has `flow` deliver from the freeze until `at_ns` (not an episode)."""
        start, delivered = self._steady_from(flow)
        if at_ns < start:
            if flow in self.joined:
                return 0
            shift, t = at_ns - self.since_ns, self.memo.transient_ns   # interrupted during the transient
            return self.memo.bytes[flow] * max(0, shift) // t
        if self.at_shares:                    # (not a successor: it goes on from its predecessor's)
            delivered -= self.wire.get(flow, 0.0)   # its deliveries at its share start a lag after its sends
        return int(delivered + self.rates[flow] * (at_ns - start)
                   + sum(added * (at_ns - t) for t, added in self.changes.get(flow, ()) if t < at_ns))

    def pipe(self, flow: int, at_ns: int, lag: float) -> float:
        """Bytes the model has `flow` deliver in the `lag` after `at_ns` (not an episode)."""
        return self._delivered(flow, round(at_ns + lag)) - self._delivered(flow, at_ns)

    def past_left(self, flow: int, at_ns: int) -> bool:
        """Whether the model has delivered the `left` bytes of `flow` by `at_ns` (not an episode)."""
        return self._delivered(flow, at_ns) >= self.left[flow]

    def rate_at(self, flow: int, at_ns: int) -> float:
        """The model's rate of `flow` at `at_ns` (its steady one in a transient or before it joined)."""
        return self.rates[flow] + sum(added for t, added in self.changes.get(flow, ()) if t <= at_ns)

    def steady_at(self, flow: int, now: int) -> bool:
        """Whether `flow` delivers at its steady rate now (not before it joined, nor in a transient)."""
        return self.steady_since(flow) <= now

    def steady_since(self, flow: int) -> int:
        return self._steady_from(flow)[0]

    def change_rate(self, flow: int, added: float, at_ns: int) -> None:
        """`flow` delivers `added` bytes per ns more from `at_ns` on (not before it delivers steadily)."""
        changes = self.changes.setdefault(flow, [])
        changes.append((max(at_ns, self.steady_since(flow)), added))
        changes.sort()
        self.version += 1

    def start(self, flow: int, rate: float, at_ns: int, wire: float) -> None:
        """`flow` starts inside the partition at `at_ns` on a connection of its own, sending at
        `rate`: its deliveries lag its sends by `wire` bytes."""
        self.joined[flow] = at_ns
        self.rates[flow] = rate
        self.wire[flow] = wire
        self.version += 1

    def join(self, successor: int, flow: int, at_ns: int) -> None:
        """`successor` takes over from `flow` at `at_ns`, at its rate and with its changes to come."""
        self.joined[successor] = at_ns
        self.rates[successor] = self.rate_at(flow, at_ns)
        self.changes[successor] = [(t, added) for t, added in self.changes.get(flow, ()) if t > at_ns]
        self.version += 1

    def complete(self, flow: int) -> None:
        self.done.add(flow)
        self.version += 1

    def end_ns(self, flow: int) -> int:
        """When the model has delivered the `left` bytes of `flow` (after any memoized transient:
        a hit needs flows that outlast it, and their deliveries lag the model's by `wire`)."""
        left = self.left[flow]
        t, delivered = self._steady_from(flow)
        left += self.wire.get(flow, 0.0)      # (none for a successor)
        rate = self.rates[flow]
        for at, added in self.changes.get(flow, ()):
            if at > t:
                reached = delivered + rate * (at - t)
                if reached >= left:
                    break
                t, delivered = at, reached
            rate += added
        return t + math.ceil(max(0, left - delivered) / rate)


@dataclass
class Ports:
    """Per port (2i: link i's a->b side, 2i+1: b->a), what memoization needs of the network."""

    labels: list[str]             # host NIC or switch port, link rate and delay (memo vertex labels)
    rates: list[float]            # bytes per ns
    delays: list[float]           # propagation + one MTU's serialization, ns
    propagation: list[float]      # ns


@dataclass
class Forming:
    """A partition simulated since it formed: recorded when it turns steady, or else truncated
    just before any of its flows can get within `margin` of its end. No flow sends faster than its
    first link: record_ns is planned from that bound and planned again when it comes (flows sharing
    their links get there later), until it is closer than REPLAN_NS."""

    graph: ConflictGraph
    formed_ns: int
    owed: dict[int, float]        # flow index -> what its transient bytes count from (_credited_from)
    delivered: dict[int, int]     # flow index -> bytes delivered when the partition formed
    record_ns: int = NEVER


@dataclass
class Episode:
    """A partition of short flows watched from forming until every flow completed (a memo episode)."""

    graph: ConflictGraph
    formed_ns: int
    left: dict[int, int]          # flow index -> bytes left when the partition formed
    delivered: dict[int, int]     # flow index -> bytes delivered when the partition formed
    # Each flow's times count from when its age was its label's (`leads`: how far into its age
    # step, spec.episode_age_step, it was at forming), so that a replay, whose flows are each
    # somewhere else in theirs, times each flow from its own start: with one clock from forming
    # (and 1 us steps), a replayed flow that had started 0.6 us before the lookup completed 0.6 us
    # late (moe-bench-hpcc: +67 ns on average, +0.77 us for flows 0.6-1 us old).
    leads: dict[int, int] = field(default_factory=dict)     # flow -> ns into its age step at forming
    ends: dict[int, int] = field(default_factory=dict)      # flow -> its completion, on its clock
    states: dict[int, dict[str, float]] = field(default_factory=dict)  # flow -> its QP's state then
    # Flows known to start on its ports (-> when; spec.episode_join), or that its flows' completions
    # start (-> -1; spec.episode_chains): they are in `left` from the forming, their leads set as
    # they join (their clocks start at their own starts).
    expected: dict[int, int] = field(default_factory=dict)
    waits: dict[int, frozenset[int]] = field(default_factory=dict)  # a flow its flows start -> those
    joins: bool = False           # formed with flows expected


@dataclass
class PartitionState:
    since_ns: int                 # samples before this describe another partition (or a frozen one)
    frozen: Frozen | None = None
    forming: Forming | None = None
    # Why it is simulated when neither frozen nor watched for a record (--explain-events): it
    # formed and waits for the steady test, a flow of it was too near its end to look it up
    # ("ending"), or to record it after a miss ("too_short"), or it thawed.
    simulated: str = "formed"


@dataclass
class ModeInterval:
    partition: int
    start_ns: int
    end_ns: int
    mode: str                     # "simulate" | "frozen" | "memo" (frozen through a memoized transient)
    flows: int


@dataclass
class FastForwardStats:
    freezes: int = 0
    thaws: int = 0
    skip_backs: int = 0
    bytes_skipped: int = 0
    frozen_ns: int = 0            # sum over partitions of time spent frozen
    ends_computed: int = 0        # flows completed inside a frozen partition
    handovers: int = 0            # ... whose connection's next flow took over, still frozen
    episodes_interrupted: int = 0  # episode hits thawed before their last flow completed (skip-backs)
    episode_joins: int = 0        # flows an episode hit expected that started inside it, still frozen
    fair_starts: int = 0          # partitions frozen at their fair shares as they formed
    fair_joins: int = 0           # flows that started inside such a partition, its shares holding
    checks: int = 0
    control_s: float = 0.0        # wall time in this controller (detection, freeze, thaw)
    intervals: list[ModeInterval] = field(default_factory=list)


class FastForward:
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
        wh = net.h.wh
        self.sim = wh.TagSimulatorImpl.Get()
        if not self.sim:
            raise RuntimeError("the partition-tag simulator is not active")
        self.sim.AttachPorts(net.builder)
        self.ledger = (EventLedger(self.sim, net.n_ports, flow_kinds or ["flow"] * len(flow_sizes))
                       if spec.explain_events else None)
        # Steady at the sample period, or over blocks of `coarse` samples: a fine scale catches
        # clean flows early, the coarse one flows whose packet-level rate is noisy but stationary.
        # HPCC's rates swing over ~150 us (a decaying oscillation): a steady rate taken over the fine
        # window's 30 us came out up to 2 % off; the coarse one's 120 us averages it (gpt-xl-hpcc:
        # iteration error 0.91 % -> 0.04 %, for 77x -> 66x fewer events than stock): coarse only.
        self.scales = [spec.coarse] if net.utilization_cc else sorted({1, spec.coarse})
        self.capacity = spec.window * spec.coarse + 2
        self.table = net.flows.GetTable()   # the flow manager's own: one cppyy call, not one per use
        self.probe = wh.RateProbe(self.table, net.builder, self.capacity)
        self.probing = False  # sampling starts with the first flow (workloads may start late)
        self.times = np.zeros(self.capacity, dtype=np.int64)
        self.delivered = np.zeros((self.capacity, n_flows), dtype=np.uint64)
        self.arrived = np.zeros((self.capacity, n_flows), dtype=np.int64)  # when the latest of them came
        self.queues = np.zeros((self.capacity, net.n_ports), dtype=np.uint32)
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
        self.next_check_ns = spec.tau * (spec.window + 1)
        self.all_frozen = False                          # since the last run slice (next_wakeup_ns)
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
        # (its connection, pid, the partition's flows' shares with it, its share): the flow that
        # absorbs() let join, until flow_started() takes it in.
        self.joining: tuple[int, int, dict[int, float], float] | None = None
        self.host_port = np.array([label.startswith("h") for label in ports.labels])
        self._queue_buf = np.zeros(max(1, net.n_ports), dtype=np.uint32)
        # Per port, the queue bytes a partition forming at its NICs' fair shares may find there
        # (_queued_on_switches): fewer than it marks ECN above (KMIN), drained in QUEUE_DRAIN_NS.
        self._queue_bound = np.array([min(net.ecn_kmin_bytes.get(round(rate * 8e9), 0), rate * QUEUE_DRAIN_NS)
                                      for rate in ports.rates])
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
                    self._abandon(holder)
        self._abandon_episodes(touched, keep=self.episode_of.get(flow))
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
        n = int(self.net.flows.GetConnectionPath(conn, self._path_buf, len(self._path_buf)))
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
        self.joining = self._fair_join_shares(conn) if self.fair_start and self.net.fair_share_cc else None
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

    def next_wakeup_ns(self) -> int:
        planned = min((min(s.frozen.until_ns, s.frozen.ends.earliest(), s.frozen.checks.earliest()) if s.frozen
                       else s.forming.record_ns if s.forming else NEVER
                       for s in self.state.values()), default=NEVER)
        # The steady test has nothing to look at while every partition is frozen: no wake-up for it
        # then (gpt-xl-dcqcn: 3,441 tests -> 161; wakeup keeps their times as they were).
        unfrozen = any(s.frozen is None for s in self.state.values())
        self.all_frozen = bool(self.state) and not unfrozen
        return min(planned, min(self.pending_ends.values(), default=NEVER),
                   min(self.retry_at.values(), default=NEVER),
                   self.next_check_ns if self.enabled and unfrozen else NEVER)

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
            period = self.spec.tau * max(1, self.spec.window // 2)
            if self.all_frozen:
                missed = (now - self.next_check_ns) // period
                due = self.next_check_ns + missed * period == now
                self.next_check_ns += (missed + 1) * period
            else:
                due, self.next_check_ns = True, now + period
            if due:
                self._check(now)
        self.stats.control_s += time.perf_counter() - t0

    def slice_ran(self) -> None:
        """After each run slice, before anything changes the partitions: count its events."""
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
        self.n_read = int(self.probe.Read(self.times, self.delivered, self.arrived, self.queues, self.capacity))
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
        if st.forming is not None:
            self._record(st, rates, now)
        horizon = min(int((self._untransmitted(flow) - spec.margin) / rate) for flow, rate in rates.items())
        if horizon >= spec.min_freeze:
            self._freeze(part, st, Frozen(group=-1, since_ns=now, until_ns=now + horizon, rates=rates), now)

    def _freeze(self, part: Partition, st: PartitionState, frozen: Frozen, now: int) -> None:
        tags = np.array(part.tags(self.net.n_ports), dtype=np.uint32)
        frozen.group = int(self.sim.Freeze(tags, len(tags)))
        self._abandon_episodes([part.id])
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
                    frozen.wire[flow] = frozen.rates[flow] * (self.lag_ns[conn] - ahead) - frozen.in_flight[conn]
                self._plan_end(frozen, flow)
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
                owed += round(frozen.pipe(flows[-1], now, self.lag_ns[conn]) - frozen.in_flight[conn])
            elif memo is None and frozen.in_flight:
                # Steady: the bytes in flight at the freeze are the pipe at its rate then; a gain
                # since adds to the pipe what the sender sent ahead (2.1 us late without, a test).
                owed += round((frozen.rate_at(flows[-1], now) - frozen.rates[flows[0]]) * self.lag_ns[conn])
            owed = max(0, owed)           # (a flow that joined as the thaw came: 0, give or take rounding)
            for flow in flows:
                skipped = int(self.net.flows.SkipFlow(flow, conn, owed))
                owed -= skipped
                self.stats.bytes_skipped += skipped
                if (episode and not shed and flow not in frozen.done
                        and (owed > 0 or frozen.recorded_at(flow) + shift + ahead[flow] >= memo.ends[flow])):
                    # Its last bytes are on the wire in the model, or were in flight since the
                    # freeze: they would arrive a lag late. It completes at its recorded time.
                    self.pending_ends[flow] = frozen.since_ns - frozen.recorded_at(flow) + memo.ends[flow]
                elif flow in frozen.ends and (frozen.at_shares and owed > 0
                                              or flow in frozen.wire and frozen.past_left(flow, now)):
                    # The model has all its bytes delivered or on the wire: every byte is skipped,
                    # and none is left to complete it in ns-3. It completes at its computed end.
                    # So does a flow frozen at its fair shares that has sent its last byte in the
                    # model: the bytes it has in flight are those of the freeze, a lag from their
                    # end, while its last ones would be nearer.
                    self.pending_ends[flow] = frozen.ends[flow]
        for conn in sorted(frozen.held):
            self.net.flows.Resume(conn)            # what it has left to send, it sends now
        if self._held_at_link_shares(frozen):
            self._pace_cut_qps(frozen, now)
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

    # -- computed ends -----------------------------------------------------------------------

    def _left(self, flow: int) -> int:
        """Bytes of `flow` still to deliver (its unsent bytes and those in flight)."""
        return self.flow_sizes[flow] - int(self.table.GetDelivered(flow)) - int(self.table.GetSkipped(flow))

    def _plan_end(self, frozen: Frozen, flow: int) -> None:
        """Its computed end, and when to check it may stay computed: while it still has `margin`
        bytes left to send (the connection's bytes in flight, queues included, come on top). Not
        if a next flow is queued on its connection: that one takes over, whatever the check finds
        (and stays queued until this one ends)."""
        frozen.left[flow] = self._left(flow)
        frozen.ends[flow] = end = frozen.end_ns(flow)
        if self.queued.get(self.conn_of[flow]):
            frozen.checks.pop(flow, None)
            return
        tail = self.spec.margin + frozen.in_flight[self.conn_of[flow]]
        frozen.checks[flow] = end - math.ceil(tail / frozen.rate_at(flow, end))

    def _check_ends(self, pid: int, frozen: Frozen, now: int) -> None:
        """Flows `margin` bytes from the end of their sending. If their connection has a next flow
        queued (it takes over the byte stream), or no other flow of the partition sends data through
        their ports, or every rate in the partition is its fair share (_shares_hold; the others'
        changes are computed when it completes), the end is computed. Else the partition thaws now
        and their ends are simulated, as with flow_ends "simulated": their bytes in flight at a
        thaw would hold up the others, bytes that in ns-3 would have left before the computed end."""
        for flow in sorted(f for f, check in frozen.checks.items() if check <= now):
            del frozen.checks[flow]
            conn = self.conn_of[flow]
            if self.queued.get(conn):
                continue
            if (self._data_through(frozen, flow, self.ports_of[conn].data)
                    and self._shares_hold(frozen, flow, now) is None):
                self._thaw(pid, now, planned=True)
                return

    def _completed_frozen(self, pid: int, flow: int, now: int, successor: int | None) -> None:
        """`flow` completed inside its frozen partition. Its connection's next flow takes over at its
        rate. Without one, the others' rates may change: the partition thaws, unless no other flow
        sends data through the ports its data left by (then they do not depend on it), and it stays
        vacant. If its ACKs crossed others' data, the flows bound by such a link run faster without
        them (_ack_gains: 3.6 % at 1000-byte payloads, an ACK frame per data frame) until the next
        flow fills the vacancy. If that gain is unknown, or no other flow is left (its bytes still in
        flight would meet later flows at the thaw), the vacancy lasts one rate sample (tau) at most.
        Ring steps hand over within a few us to a few tens of us of each other."""
        t0 = time.perf_counter()
        frozen = self.state[pid].frozen
        conn = self.conn_of[flow]
        if frozen.episode:
            if successor is not None:        # it starts on the ports `flow` leaves
                hosts = self.parts.flow_hosts[flow]
                self._shed_completed(pid, now)
                self.flow_started(successor, conn, hosts, now)
            elif len(frozen.done) == len(frozen.rates) and not frozen.expected:
                self._thaw(pid, now, planned=True)
        elif successor is not None:
            self._take_over(frozen, flow, successor, now)
        elif self._data_through(frozen, flow, self.ports_of[conn].data):
            gains = self._share_gains(frozen, flow, now)
            if gains is None:
                self._thaw(pid, now, planned=True)
            else:
                self._apply_gains(frozen, conn, gains, now)
                frozen.leave_vacant(conn, flow)
        else:
            others = any(f != flow and f not in frozen.done for f in frozen.rates)
            if not others:
                gains = None
            elif self._held_at_link_shares(frozen):     # HPCC: what its ACKs took, the others fill
                gains = self._share_gains(frozen, flow, now)
            else:
                gains = self._ack_gains(frozen, flow, now)
            if gains is None:
                frozen.leave_vacant(conn, flow, now + self.spec.tau)
            else:
                self._apply_gains(frozen, conn, gains, now)
                frozen.leave_vacant(conn, flow)
        self.stats.control_s += time.perf_counter() - t0

    def _ack_gains(self, frozen: Frozen, flow: int, now: int) -> dict[int, tuple[float, int]] | None:
        """How much faster each flow of `frozen` runs without the ACKs of `flow`, which completed
        (none if its ACKs crossed no one's data): a flow alone with its data on a link those ACKs
        crossed, and bound by that link (its frames and the ACKs filled it, as DCQCN at line rate),
        gains the link time they took, up to the rate of a QP pacing its frames at line rate (one per
        whole ns above a frame's time: it wakes on the ns); one paced below (DCQCN after a cut) gains
        nothing. Each gain comes with the port of that link. None if some gain is unknown: that
        link's data was shared, the flow is still in a memoized transient, or the rates follow
        utilization (HPCC climbs to the freed capacity over round trips, with its own overshoot:
        the same gains put gpt-bench-hpcc further from stock, README)."""
        net = self.net
        running = [f for f in frozen.rates if f not in frozen.done] + [flow]
        data = {f: self.ports_of[self.conn_of[f]].data for f in running}
        acks = {f: self.ports_of[self.conn_of[f]].acks for f in running}
        rates = {f: frozen.rate_at(f, NEVER) for f in running}   # with the changes to come
        # What the ACKs of `flow` took of a link, in payload bytes per ns of a flow sending on it.
        gain = rates[flow] * net.ack_frame_bytes / net.acked_per_ack * net.payload_bytes \
            / net.data_frame_bytes if net.ack_frame_bytes else 0.0
        gains = {}
        for other in running:
            crossed = sorted(data[other] & acks[flow])
            if other == flow or not crossed:
                continue
            if not net.ack_frame_bytes or net.utilization_cc or not frozen.steady_at(other, now):
                return None
            for port in crossed:
                if any(port in data[f] for f in running if f != other):
                    return None
                acked = sum(rates[f] for f in running if port in acks[f])
                wire = (rates[other] * net.data_frame_bytes / net.payload_bytes
                        + acked * net.ack_frame_bytes / net.acked_per_ack)
                if wire >= LINK_BOUND * self.ports.rates[port]:
                    solo = self._paced(self.ports.rates[port])
                    gains[other] = (max(0.0, min(gain, solo - rates[other])), port)
                    break
        return gains

    def _apply_gains(self, frozen: Frozen, conn: int, gains: dict[int, tuple[float, int | None]],
                     now: int) -> None:
        """The flow of `conn` completed: each flow of `gains` runs faster by its gain (slower if
        negative). The link is free from when the completed flow's last frame or ACK left it, and
        what the other sends there in the freed time reaches its sender's count one trip later. A
        change on no port the completed flow used (port None: the ACKs of a flow that gained
        crossed its data) comes with the first direct one."""
        self._boost_gains(frozen, gains, 1, lambda other, port: now - self._to_sender(conn, port)
                          + self._to_sender(self.conn_of[other], port), now)
        frozen.boosts[conn] = gains

    def _boost_gains(self, frozen: Frozen, gains: dict[int, tuple[float, int | None]], sign: int,
                     at: Callable[[int, int], float], now: int) -> None:
        """Each flow of `gains` runs faster by `sign` x its gain from at(flow, port); one whose
        change came on no port of the completed flow (port None) from the first of the others."""
        times = {other: at(other, port) for other, (_, port) in gains.items() if port is not None}
        first = min(times.values(), default=now)
        for other, (gain, _) in sorted(gains.items()):
            self._boost(frozen, other, sign * gain, times.get(other, first), now)

    def _share_gains(self, frozen: Frozen, flow: int, now: int) -> dict[int, tuple[float, int | None]] | None:
        """How the rates of the flows of `frozen` change once `flow` (completed, or about to) no
        longer sends with them: if every rate is its max-min fair share of the links (QPs pacing
        at line rate, served in turn at a NIC or a switch port: DCQCN that never cut a rate; HPCC
        held at its link shares, _held_at_link_shares), each flow's share without `flow` over its
        share with it, applied to its rate, with the first port of its data path where the
        completed flow's frames or ACKs left room (None: it changes because others did). None if
        the shares do not hold: another congestion control (HPCC at shares it reached by itself,
        frozen by the steady test, with its own overshoot), a rate cut, a flow not yet steady, or
        rates FAIR_MATCH off their shares."""
        view = self._shares_hold(frozen, flow, now)
        if view is None:
            return None
        i = view.index[flow]
        rates, shares = view.rates, view.shares
        after = view.model.shares(rates, without=i)
        freed = self.ports_of[self.conn_of[flow]].data | self.ports_of[self.conn_of[flow]].acks
        changes = rates * (after / shares - 1)    # the model's ratio: its bias cancels
        changes[i] = 0.0
        gains = {}
        for j in np.flatnonzero(np.abs(changes) > 1e-9 * shares).tolist():
            f = view.flows[j]
            gains[f] = (float(changes[j]), next((p for p, _ in self.hops[self.conn_of[f]][0] if p in freed), None))
        if gains and all(port is None for _, port in gains.values()):
            return None
        return gains

    def _shares_hold(self, frozen: Frozen, flow: int, now: int) -> FairView | None:
        """The fair-share view of `frozen` if every rate in it is its max-min fair share and steady
        now (`flow`'s may be ahead): what a flow's check asks before its end is computed. Its
        gains wait for the end itself (_share_gains): by then most flows have a successor or no one
        left sending through their ports (moe-8x7b-dcqcn, warm: 100,175 checks, 3,252 ends that
        asked for gains)."""
        if not (self.net.fair_share_cc or self._held_at_link_shares(frozen)):
            return None
        extra = flow if flow in frozen.done else -1
        view = frozen.fair_view
        if view is None or view.version != frozen.version or view.extra != extra:
            view = frozen.fair_view = self._fair_view(frozen, extra, view)
        i = view.index[flow]
        others_late = np.count_nonzero(view.steady_since > now) - (view.steady_since[i] > now)
        return None if others_late or not view.at_shares else view

    def _held_at_link_shares(self, frozen: Frozen) -> bool:
        """HPCC with link shares, a partition frozen as it formed: its rates are the model's shares
        at switch_load, where HPCC's per-hop utilization holds its QPs (_cut_to_link_shares), and
        where it takes them again within round trips after a flow leaves, multiplying each rate by
        the utilization's shortfall (gpt-bench-hpcc's ends beside others' data, simulated before:
        FCT p99 5.93 -> 4.08 % cold, 17.5x -> 23.1x fewer events than stock)."""
        return self.switch_load < 1.0 and frozen.at_shares

    def _fair_view(self, frozen: Frozen, extra: int, last: FairView | None) -> FairView:
        """The fair-share test's view of `frozen` now (the model kept from `last` if its flows are
        the same): shares only if every QP sends at line rate (DCQCN never cut it; HPCC's cut QPs
        held at their link shares count as theirs, _held_at_link_shares)."""
        flows = sorted([f for f in frozen.rates if f not in frozen.done] + ([extra] if extra >= 0 else []))
        rates = np.array([frozen.rate_at(f, NEVER) for f in flows])
        view = FairView(frozen.version, extra, flows, {f: i for i, f in enumerate(flows)}, rates,
                        np.array([frozen.steady_since(f) for f in flows], dtype=np.int64), None, None, False)
        for f in flows:
            conn = self.conn_of[f]
            if conn in frozen.line_rate_conns or self.switch_load < 1.0:   # (HPCC: only with link shares)
                continue
            if not self._paces_at_line_rate(conn):
                return view
            frozen.line_rate_conns.add(conn)
        if last is not None and last.flows == flows:
            view.model = last.model
        else:
            view.model = self._fair_model([self.conn_of[f] for f in flows], switch_load=self.switch_load)
        view.shares = view.model.shares(rates)
        view.at_shares = not np.any((view.shares <= 0) | (np.abs(view.shares - rates) > FAIR_MATCH * view.shares))
        return view

    def _paces_at_line_rate(self, conn: int) -> bool:
        """Whether the connection's QP sends at its line rate (DCQCN never cut it)."""
        self._sender(conn).GetCongestionState(self._cc_buf, len(self._cc_buf))
        return self._cc_buf[0] >= self.line_rate[conn] * 8e9 * (1 - 1e-6)

    def _pacing(self, conn: int) -> float:
        """Payload bytes per ns the connection's QP paces its frames at now (_paced)."""
        self._sender(conn).GetCongestionState(self._cc_buf, len(self._cc_buf))
        return self._paced(self._cc_buf[0] / 8e9)

    def _pace_cut_qps(self, frozen: Frozen, now: int) -> None:
        """HPCC with link shares, at a thaw: a QP frozen as it formed kept the rate it had then (line
        rate as it starts) while the model had HPCC cut it to its share at a switch port: it goes
        on from that share, at U_TARGET, as HPCC would have it. Left at line rate, leafspine-bench-
        dcqcn's 32 QPs on HPCC, frozen at 1.8-10.6 GB/s, all sent at 12.5 GB/s at the thaw 400 us
        later (FCT p99 38.2 %; 4.8 % so), and partitions re-formed after a thaw passed as pacing
        alike where a QP starting at line rate met one HPCC had cut (gpt-13b-hpcc warm: 1454x
        fewer events than stock then, 1074x with this change alone). A QP whose share its NIC sets
        is not cut: HPCC has it pace at line rate, its NIC serving it in turn."""
        flows = sorted(frozen.rates)
        conns = [self.conn_of[f] for f in flows]
        nics = self._fair_model(conns, hosts_only=True).shares(self._caps(conns))
        for flow, conn, nic in zip(flows, conns, nics.tolist()):
            share = frozen.rate_at(flow, now)
            if flow in frozen.done or share >= nic * (1 - FAIR_MATCH) or self._pacing(conn) <= share:
                continue
            bps = share * self.net.data_frame_bytes / self.net.payload_bytes * 8e9
            self._sender(conn).SetCongestionState(bps, bps, self.net.u_target)

    def _nic(self, conn: int) -> int:
        """The port the connection's data leaves its sender by."""
        return self.hops[conn][0][0][0]

    def _fair_model(self, conns: list[int], hosts_only: bool = False, switch_load: float = 1.0) -> AckedShares:
        """The max-min fair payload rates of the flows of `conns` over their data ports
        (`hosts_only`: over the hosts' NICs alone): a port carries its line rate less the ACKs
        crossing it, each frame's time rounded to the nearest ns as ns-3 does; a QP paces its frames
        at its line rate, one per whole ns above a frame's time (it wakes on the ns). A switch port
        carries `switch_load` of its line rate (HPCC holds it there)."""
        net = self.net
        frame_ns, ack_ns = self._frame_ns, self._ack_ns
        if switch_load != 1.0:
            frame_ns = np.where(self.host_port, frame_ns, frame_ns / switch_load)
            ack_ns = np.where(self.host_port, ack_ns, ack_ns / switch_load)
        edges = []
        for side in (0, 1):                      # data, ACKs
            ports = [self.port_arrays[c][side] for c in conns]
            if hosts_only:
                ports = [a[self.host_port[a]] for a in ports]
            edges.append((np.repeat(np.arange(len(conns)), [len(a) for a in ports]), np.concatenate(ports)))
        return AckedShares(net.h.wh, edges[0], edges[1], self._caps(conns), frame_ns, ack_ns,
                           net.payload_bytes, net.acked_per_ack)

    def _caps(self, conns: list[int]) -> np.ndarray:
        """Payload bytes per ns of each connection's QP paced at its line rate."""
        return np.array([self._paced(self.line_rate[c]) for c in conns])

    def _paced(self, rate: float) -> float:
        """Payload bytes per ns of a QP pacing its frames at `rate` (bytes per ns): one per whole
        ns above a frame's time (it wakes on the ns)."""
        return self.net.payload_bytes / math.ceil(self.net.data_frame_bytes / rate)

    def _freeze_at_shares(self, part: Partition, now: int) -> bool:
        """Freeze a partition as it forms, at its flows' max-min fair shares, if that is what they
        send at from now on (DCQCN and HPCC, computed ends): every QP paces at line rate (DCQCN never
        cut it; HPCC, _nic_bound_on_utilization: above its share, every switch port it crosses
        below U_TARGET), nothing is queued on its switch ports, and the shares are those of the
        hosts' NICs alone, which serve their QPs in turn: no switch port is loaded past its rate,
        nothing is marked, and no steady test is needed. Each flow sends at its share from now, its
        end one lag after its last byte leaves, as in a steady freeze (gpt-bench-dcqcn: a ring
        step's flow sharing its NIC with a pipeline send, simulated until the send ended). Not with
        a flow whose every byte is on the wire (its last frame left before now), nor a partition of
        flows short enough for an episode, nor one that a flow known to start within min_freeze
        would thaw (one touching it alone that cannot join it, _joinable; on HPCC any): an
        all-to-all's first hosts' flows are fair at their NICs, then meet at the receivers at full
        load as the last hosts join (frozen at their shares, moe-bench-dcqcn's FCT p99 went to
        10.2 % against 0.8 %; moe-8x7b-dcqcn's 512 KiB flows, too long for episodes, froze 10,855
        times, and its control plane took 29.5 s against 10.4 s). With spec.fair_shares "links"
        (DCQCN) the shares may be set by switch ports too (_frozen_shares): QPs meeting there at
        line rate fill its queue, and DCQCN's marks cut them to about those shares within a few
        round trips, which the freeze skips, as it does the queue they build; on HPCC, at the
        shares of switch ports held below U_TARGET (_cut_to_link_shares), where a partition whose
        QPs do not pace so yet is tried again HPCC_RETRY_NS later (wakeup), until it changes (with
        "nics" no retry froze anything on the benches, and the extra run slices moved gpt-bench-
        hpcc's steady-only run by 1.4 % more events)."""
        flows = sorted(part.flows)
        conns = [self.conn_of[f] for f in flows]
        if self.episodes and max(self._left(f) for f in flows) < self._episode_bound(flows):
            return False
        hpcc = self.net.u_target > 0
        if not hpcc and not all(self._paces_at_line_rate(conn) for conn in conns):
            return False
        if any(self._untransmitted(f) == 0 for f in flows):
            return False
        shares = self._frozen_shares(conns)
        if shares is None or hpcc and not self._outlasts_min_freeze(flows, shares):
            return False
        if self._queued_on_switches(conns, drained=hpcc and not self.link_shares) or hpcc and not (
                self._cut_to_link_shares(flows, shares) if self.link_shares
                else self._nic_bound_on_utilization(flows, shares)):
            if hpcc and self.link_shares:     # HPCC is still cutting or climbing: its QPs may get there
                self.retry_at[part.id] = now + HPCC_RETRY_NS    # within round trips
            return False
        soon = [(conn, path) for _, _, conn, _, _ in self.known_starts(now + self.spec.min_freeze)
                if (path := self._connection_path(conn)) & part.ports]
        if soon and (hpcc or not self._joinable(part, conns, soon)):
            return False
        self._freeze(part, self.state[part.id], Frozen(group=-1, since_ns=now, until_ns=NEVER,
                                                      rates=dict(zip(flows, shares.tolist())), at_shares=True), now)
        self.stats.fair_starts += 1
        return True

    def _queued_on_switches(self, conns: list[int], drained: bool = False) -> bool:
        """Whether a switch port on the data path of one of `conns` holds more queued bytes than
        a partition frozen at its NICs' fair shares allows (_queue_bound; `drained`: any, as
        HPCC's utilization counts them): fewer than the port marks ECN above, they drain unmarked
        where the NICs bind, and a flow's own count in its bytes in flight at the freeze; others'
        (a completed flow's last frames) hold it up by their drain time, which the model leaves
        out."""
        self.net.builder.ReadQueueBytes(self._queue_buf)
        data = np.concatenate([self.port_arrays[c][0] for c in conns])
        switch = data[~self.host_port[data]]
        return bool(np.any(self._queue_buf[switch] > (0 if drained else self._queue_bound[switch])))

    def _frozen_shares(self, conns: list[int]) -> np.ndarray | None:
        """The max-min fair shares of QPs of `conns` paced at line rate, if a partition of them may
        be frozen at those: they are those of the hosts' NICs alone and no switch port merges them
        full (_merging_full); with spec.fair_shares "links", any (switch ports may bind; HPCC holds
        them at switch_load); else None. (Read-only: kept per tuple of connections.)"""
        key = tuple(conns)
        if key not in self._frozen_shares_of:
            shares = self._compute_frozen_shares(conns)
            if shares is not None:
                shares.flags.writeable = False
            self._frozen_shares_of[key] = shares
        return self._frozen_shares_of[key]

    def _compute_frozen_shares(self, conns: list[int]) -> np.ndarray | None:
        caps = self._caps(conns)
        shares = self._fair_model(conns, switch_load=self.switch_load).shares(caps)
        if np.any(shares <= 0):
            return None
        if self.link_shares:
            return shares
        nics = self._fair_model(conns, hosts_only=True).shares(caps)
        if np.any(np.abs(shares - nics) > 1e-9 * nics) or self._merging_full(conns, shares):
            return None
        return shares

    def _joinable(self, part: Partition, conns: list[int], soon: list[tuple[int, frozenset[int]]]) -> bool:
        """Whether the flows known to start on the partition's ports within min_freeze (`soon`:
        connection, ports) keep it frozen at its shares: those touching no other partition can
        each join it (_fair_join): their QPs pace at line rate, and the shares still hold with all
        of them (_frozen_shares). (A connection of the partition's own: its next flow, which takes
        over in turn.) One touching another partition merges the two at its start, which thaws
        them, whatever is frozen now: it does not keep this one from freezing until then. (Ring
        steps of a DP group start beside another group's frozen ring in gpt-bench-dcqcn's later
        iterations: their partitions, simulated until the steady test passed and after its thaws,
        took 69 % of a 3-iteration run's 87,961 events; 20,493 now.)"""
        added = []
        for conn, path in soon:
            if conn in conns or conn in added or self.parts.touching(path) - {part.id}:
                continue
            if not self._paces_at_line_rate(conn):
                return False
            added.append(conn)
        return not added or self._frozen_shares(conns + added) is not None

    def _nic_bound_on_utilization(self, flows: list[int], shares: np.ndarray) -> bool:
        """HPCC: whether QPs sending at these NIC shares stay bound by their NICs for min_freeze
        at least. Every switch port is loaded below U_TARGET with a margin (HPCC_LOAD_MARGIN), so
        no QP is cut and each climbs to line rate; and each paces now with HPCC_PACING_MARGIN above
        its share, so its NIC binds from the first frame, the few percent a utilization still
        above U_TARGET from before takes off its rate included. (The caller checks that they
        outlast min_freeze.)"""
        conns = [self.conn_of[f] for f in flows]
        load, _ = self._switch_loads(conns, shares)
        if any(l >= self.net.u_target * (1 - HPCC_LOAD_MARGIN) for l in load.values()):
            return False
        return all(self._pacing(conn) * (1 - HPCC_PACING_MARGIN) >= share
                   for conn, share in zip(conns, shares.tolist()))

    def _cut_to_link_shares(self, flows: list[int], shares: np.ndarray) -> bool:
        """HPCC with fair_shares "links": whether QPs settle at these shares (_frozen_shares: switch
        ports loaded to switch_load) soon enough. Each paces at its share or above now, so HPCC only
        cuts its rate (one below climbs back over round trips, by RATE_AI for the first MI_THRESH:
        frozen at their shares too, gpt-bench-hpcc's cold FCT p99 went 5.81 -> 7.50 %). At a full
        port HPCC cuts every QP by the same factor, so they must pace alike to end at equal shares
        (it evens out unequal ones by RATE_AI per round trip: a pipeline send at line rate beside a
        ring's flow at its share kept its lead), and their recovery from the overload
        (HPCC_RECOVERY_RTTS) must cost each little of its time left. A ring step's flows, starting
        one by one, meet no other flow's data: each is cut from line rate to its share at its own
        port. (The caller checks that they outlast min_freeze.)"""
        conns = [self.conn_of[f] for f in flows]
        paced = [self._pacing(conn) for conn in conns]
        if any(rate < share * (1 - FAIR_MATCH) for rate, share in zip(paced, shares.tolist())):
            return False
        load, _ = self._switch_loads(conns, shares)
        for port, fill in load.items():
            if fill < self.switch_load * (1 - HPCC_FULL_MATCH):
                continue
            at = [i for i, conn in enumerate(conns) if port in self.ports_of[conn].data]
            rates = [paced[i] for i in at]
            if max(rates) > min(rates) * (1 + FAIR_MATCH):
                return False
            overload = sum(rates) / sum(shares[i] for i in at) - 1
            for i in at:
                recovery = HPCC_RECOVERY_RTTS * overload * self.lag_ns[conns[i]]
                if recovery * shares[i] > HPCC_RECOVERY_ERROR * self._untransmitted(flows[i]):
                    return False
        return True

    def _outlasts_min_freeze(self, flows: list[int], shares: np.ndarray) -> bool:
        """Whether every flow at its share has more than `margin` bytes left to send after
        min_freeze: its end beside others' data may be simulated (the partition thaws `margin`
        bytes before, where the shares do not hold), and a partition that would thaw sooner would
        freeze again as the thaw re-forms it."""
        return all(self._untransmitted(f) - self.spec.margin >= self.spec.min_freeze * share
                   for f, share in zip(flows, shares.tolist()))

    def _merging_full(self, conns: list[int], shares: np.ndarray) -> bool:
        """Whether a switch port that merges the frames of more than two ports before it (data and
        ACKs) is loaded past LINK_BOUND at these shares. Two streams of one period interleave with a
        frame of queue at most; more, whose periods the NICs' turns and ACKs vary, build a queue
        that a full port never drains, and DCQCN cuts rates on its marks."""
        load, sources = self._switch_loads(conns, shares)
        return any(len(sources[p]) > 2 and load[p] > LINK_BOUND for p in load)

    def _switch_loads(self, conns: list[int], shares: np.ndarray) -> tuple[dict[int, float], dict[int, set[int]]]:
        """Per switch port the connections cross: its load (the fraction of its time their data
        and ACK frames take at these payload rates), and the ports those frames come from."""
        net = self.net
        load: dict[int, float] = {}
        sources: dict[int, set[int]] = {}
        for conn, share in zip(conns, shares.tolist()):
            data, acks = self.hops[conn]
            for hops, frames in ((data, share / net.payload_bytes), (acks, share / net.acked_per_ack)):
                before = -1
                for port, _ in hops:
                    if not self.host_port[port]:
                        ns = self._frame_ns[port] if hops is data else self._ack_ns[port]
                        load[port] = load.get(port, 0.0) + frames * ns
                        sources.setdefault(port, set()).add(before)
                    before = port
        return load, sources

    def _boost(self, frozen: Frozen, flow: int, added: float, at_ns: float, now: int) -> None:
        """`flow` runs faster by `added` (slower if negative) from `at_ns`: a new computed end. From
        `at_ns` even if that has passed: nothing ran in the partition since (a flow on a shorter
        path than the one that completed gained the freed NIC a lag before that one's end; from
        its end instead, it came out 2.1 us late of 422 us). (A completed flow too: a successor
        filling its vacancy takes over its rate.)"""
        if flow in frozen.rates:
            frozen.change_rate(flow, added, round(at_ns))
            if flow not in frozen.done:
                self._plan_end(frozen, flow)

    def _revoke(self, frozen: Frozen, conn: int, now: int) -> None:
        """The next flow of vacant `conn` started now: the flows it boosted lose their gains from
        when its first ACK reaches their links, one trip to their senders later."""
        self._boost_gains(frozen, frozen.boosts.pop(conn, {}), -1, lambda other, port: now
                          + self._from_start(conn, port) + self._to_sender(self.conn_of[other], port), now)

    def _to_sender(self, conn: int, port: int) -> float:
        """ns from a frame of `conn` starting out of `port` (on its data or ACK path) to its ACK
        reaching the sender."""
        hops = self.hops[conn][0] + self.hops[conn][1]
        return sum(ns for _, ns in hops[[p for p, _ in hops].index(port):])

    def _from_start(self, conn: int, port: int) -> float:
        """ns from `conn`'s first byte leaving the sender to its first frame or ACK starting out of
        `port` (on its data or ACK path)."""
        hops = self.hops[conn][0] + self.hops[conn][1]
        return sum(ns for _, ns in hops[:[p for p, _ in hops].index(port)])

    def _shed_completed(self, pid: int, now: int) -> None:
        """A flow starts on ports of a frozen episode, or the next flow of a completed one's
        connection does: the episode thaws, its completed flows leave, and the flows still running
        freeze again at once, each still to complete at its recorded time. (In the recorded run,
        the partition had split at each end: a flow starting on the ports of completed flows did
        not touch the others.)"""
        frozen = self.state[pid].frozen
        if frozen is None or not frozen.episode or not frozen.done:
            return
        running = [f for f in frozen.rates if f not in frozen.done]
        self._thaw(pid, now, planned=True, shed=True)
        for part_id in sorted({self.parts.of_flow[f] for f in running}):
            part = self.parts.by_id[part_id]
            self._freeze(part, self.state[part_id],
                         Frozen(group=-1, since_ns=now, until_ns=NEVER, rates={f: frozen.rates[f] for f in part.flows},
                                memo=frozen.memo, offset_ns=frozen.offset_ns + now - frozen.since_ns,
                                leads={f: frozen.leads[f] for f in part.flows}), now)

    def _data_through(self, frozen: Frozen, flow: int, ports) -> set[int]:
        """Those of `ports` that data of another flow of the frozen partition, still sending, leaves
        by: another connection's last flow in stream order, not completed (the flows before it
        are). Looked up per connection, not per flow: the completed flows stay in the partition
        until the thaw, and a ring's connections pile up hundreds of them on their ports."""
        own, order, done = self.conn_of[flow], frozen.order, frozen.done
        return {p for p in ports
                if any(c != own and c in order and order[c][-1] not in done for c in self.data_conns.get(p, ()))}

    def _take_over(self, frozen: Frozen, flow: int, successor: int, now: int) -> None:
        """`successor`, the next flow of `flow`'s connection, starts inside the frozen partition."""
        conn = self.conn_of[flow]
        self.conn_of[successor] = conn
        self.head_since[successor] = now
        self.parts.add_flow(successor, self.paths[conn], self.parts.flow_hosts[flow])  # same ports
        # Its deliveries (acknowledged bytes) follow its predecessor's without a gap if it was queued
        # before the predecessor's last bytes left. Else its first ACK comes one lag after it
        # started, later by half a data frame at each link of its ACK path that others' data keeps
        # busy (it waits for the frame on the wire); at its steady rate through the ACKs' arrivals,
        # its deliveries start one ACK's bytes before the first.
        started = int(self.table.GetStartNs(successor))
        waits = self._ack_waits(frozen, flow, conn)
        first = self.lag_ns[conn] + waits - self.net.acked_per_ack / frozen.rate_at(flow, now)
        # It inherits the predecessor's rate and its changes to come, with its gains.
        frozen.join(successor, flow, max(now, started + math.ceil(first)))
        for gains in frozen.boosts.values():
            if flow in gains:
                gains[successor] = gains.pop(flow)
        self._plan_end(frozen, successor)
        frozen.order[conn].append(successor)
        self.stats.handovers += 1

    def _join_frozen(self, frozen: Frozen, flow: int, conn: int, path: frozenset[int], hosts: tuple[int, int],
                     now: int) -> None:
        """`flow`, which the frozen episode expected, starts inside it (its QP held): it completes
        at its recorded time from its own start."""
        self.head_since[flow] = now
        self.parts.add_flow(flow, path, hosts)
        ends = frozen.memo.ends[flow]
        frozen.leads[flow] = frozen.since_ns - now - frozen.offset_ns   # its clock starts now
        frozen.rates[flow] = self.flow_sizes[flow] / max(1, ends)
        frozen.left[flow] = self.flow_sizes[flow]
        frozen.ends[flow] = now + ends
        # A flow its flows' completions started may follow a completed one on its QP, whose times
        # stood still from the freeze; an idle QP's from now.
        frozen.held[conn] = frozen.since_ns if conn in frozen.order else now
        frozen.order.setdefault(conn, []).append(flow)
        self.stats.episode_joins += 1

    def _ack_waits(self, frozen: Frozen, flow: int, conn: int) -> float:
        """ns the first ACK of `flow` (on `conn`) waits on its way back: half a data frame at each
        link of its ACK path that another flow of `frozen` keeps busy with its data."""
        busy = self._data_through(frozen, flow, self.ports_of[conn].acks)
        return sum(self.net.data_frame_bytes / 2 / self.ports.rates[p] for p in sorted(busy))

    def _fair_join_shares(self, conn: int) -> tuple[int, int, dict[int, float], float] | None:
        """A flow starting on idle `conn` whose ports touch one partition, frozen at its fair shares
        (_frozen_shares: its NICs', or with fair_shares "links" its links'): if its QP paces at line
        rate, nothing is queued on its switch ports, and the shares hold with it (the partition's
        rates being its shares without it), `conn`, the
        partition, its flows' shares with it and its own (it joins frozen: _fair_join); else
        None. (Ring steps start one by one, each when its predecessor's chunk arrived:
        gpt-bench-dcqcn's starts within min_freeze of a partition forming kept it from freezing at
        its shares.)"""
        touched = self.parts.touching(self._connection_path(conn))
        if len(touched) != 1:
            return None
        pid = next(iter(touched))
        frozen = self.state[pid].frozen
        if frozen is None or not frozen.at_shares or conn in frozen.order:
            return None
        # Not while a vacant connection's gains are booked (_apply_gains): they are revoked when
        # its next flow takes over, after the join set the shares without it, and the same rates
        # came off twice (gpt-tiny on DCQCN: pipeline sends 20 % slow; gpt-bench-dcqcn: a ring's
        # flows 5.5 % slow to its end).
        if any(frozen.boosts.values()):
            return None
        if not self._paces_at_line_rate(conn) or self._queued_on_switches([conn]):
            return None
        running = sorted(f for f in frozen.rates if f not in frozen.done)
        if not running:           # (every flow completed, the connections vacant)
            return None
        conns = [self.conn_of[f] for f in running]
        before, shares = self._frozen_shares(conns), self._frozen_shares([*conns, conn])
        if before is None or shares is None:
            return None
        rates = np.array([frozen.rate_at(f, NEVER) for f in running])
        if np.any(np.abs(before - rates) > FAIR_MATCH * before):
            return None
        return conn, pid, dict(zip(running, shares[:-1].tolist())), float(shares[-1])

    def _fair_join(self, frozen: Frozen, flow: int, conn: int, path: frozenset[int], hosts: tuple[int, int],
                   shares: dict[int, float], share: float, now: int) -> None:
        """`flow` starts inside a partition frozen at its NICs' fair shares (_fair_join_shares), its
        QP held until the thaw. It sends at its share from now: its first ACK comes one lag later
        (later by half a data frame at each link of its ACK path that others' data keeps busy) and
        delivers one ACK's bytes. The flows whose shares it changes (those sharing its NIC) send at
        their new ones from now: their deliveries change a lag later."""
        self.head_since[flow] = now
        self.parts.add_flow(flow, path, hosts)
        for other, new in sorted(shares.items()):
            added = new - frozen.rate_at(other, NEVER)
            if abs(added) > 1e-9 * new:
                self._boost(frozen, other, added, now + self.lag_ns[self.conn_of[other]], now)
        waits = self._ack_waits(frozen, flow, conn)
        frozen.start(flow, share, now, share * (self.lag_ns[conn] + waits) - self.net.acked_per_ack)
        # A thaw has it skip its deliveries and the pipe (_thaw): less this, what it sent by then,
        # however soon the thaw comes (one 63 ns after a pipeline send started once skipped it a
        # whole pipe, 98 KB of its 384 KB).
        frozen.in_flight[conn] = round(self.net.acked_per_ack - share * waits)
        frozen.order[conn] = [flow]
        frozen.held[conn] = now
        self._plan_end(frozen, flow)
        self.stats.fair_joins += 1

    def _drop_completed(self, pid: int, flows: list[int], now: int) -> None:
        """A thaw: the flows completed while frozen leave the partition (their last packets, still
        in flight, arrive as ns-3 runs on). What remains starts its history anew, and is looked up
        as a partition a simulated flow's end re-formed (on HPCC, where a flow's end beside others'
        data thaws its partition one tau later, gpt-13b-hpcc warm: 4.8 M -> 4.3 M events)."""
        rest = self.parts.by_id[pid].flows.difference(flows)
        for flow in flows:
            conn = self.conn_of.pop(flow)
            if flow in self.unreported:
                self.dropped[flow] = (conn, self.parts.flow_hosts[flow])
            del self.head_since[flow]
            self.thawed.pop(flow, None)
            self.parts.remove_flow(flow)
        del self.state[pid]
        for part_id in sorted({self.parts.of_flow[f] for f in rest}):
            self.state[part_id] = PartitionState(since_ns=now, simulated="after_thaw")
            self.formed.add(part_id)     # looked up, as a partition a simulated flow end re-formed

    # -- memoization -------------------------------------------------------------------------

    def _apply_or_watch(self, part: Partition, now: int) -> None:
        """A partition formed: apply a memoized transient, or watch it to record one."""
        flows = sorted(part.flows)
        if not self.net.rdma and not all(self._sender(self.conn_of[f]).IsConnected() for f in flows):
            return        # a handshake is part of the transient, and no congestion state exists yet (TCP)
        if self.episodes and self._replay_or_watch_episode(part, flows, now):
            return
        # A flow that ends before a freeze could pay (min_freeze) ends the partition before the
        # steady test can pass. At line rate, every flow with less than `reach` left: no lookup
        # (HPCC, TCP). On RDMA's other congestion controls (DCQCN, DCTCP) records tell how fast
        # their flows go, and flows sharing links may outlast min_freeze on a record's first part
        # (_partial_ns): looked up while every flow has more than the margin left, and watched to
        # record unless at their rates now (line rate for a flow too young to have one) one nears
        # its end within min_freeze. (Pipeline sends beside ring steps: gpt-bench-dcqcn 15.6x ->
        # 16.8x fewer events than stock cold, 28.0x -> 33.0x warm, 3 iterations 2.23x -> 1.96x
        # one; on DCTCP 15.6x / 27.9x -> 16.8x / 32.8x. On HPCC the same first parts put
        # gpt-bench-hpcc's FCT p99 at 9.8 % against 6.0 %: a flow thawed inside a record resumes
        # with its window from before the freeze, which HPCC moves at every ACK.)
        line_rate = max(self.line_rate[self.conn_of[f]] for f in flows)
        unsent = {f: self._untransmitted(f) for f in flows}
        shortest = min(unsent.values())
        reach = self.spec.margin + self.spec.min_freeze * line_rate
        if shortest < (self.spec.margin if self.net.rdma and not self.net.utilization_cc else reach):
            self.state[part.id].simulated = "ending"
            return
        labels, rates = {}, {}
        for f in flows:
            conn = self.conn_of[f]
            rates[f] = self._recent_rate(f, now)
            q = rate_bin(rates[f], self.line_rate[conn], self.spec.memo_bins)
            labels[f] = f"{q}|{self.path_labels[conn]}"
        graph = ConflictGraph(flows, {f: self.ports_of[self.conn_of[f]] for f in flows}, labels)
        st = self.state[part.id]
        # A steady record applies to flows long enough for its transient and a freeze after it; a
        # truncated one to flows that outlast it by `margin`, or its first part to shorter ones.
        # None fits: record this partition.
        candidates = self.memo.lookup(graph)
        fits = [(t, self._steady_ns(t, unsent)) for t in candidates]
        hit, steady_ns = next(((t, s) for t, s in fits if s >= 0), (None, -1))
        if hit is not None:
            self.memo.stats.applied_truncated += hit.truncated
            until = now + hit.transient_ns + steady_ns
        else:
            # Too short even for the truncated record: apply its first part, as a hit interrupted
            # then (proportional bytes, own congestion state), until the first flow nears its end.
            hit = next((t for t in candidates if t.truncated), None)
            partial_ns = self._partial_ns(hit, unsent) if hit is not None else -1
            if partial_ns < self.spec.min_freeze:
                if candidates:
                    self.memo.stats.not_applied += 1
                if shortest < reach and self._ends_too_soon(flows, unsent, rates):
                    st.simulated = "too_short"
                    return
                cut = self._cut_ns(flows) if self.truncated_records else -1
                st.forming = Forming(graph, now,
                                     {f: self._credited_from(f, rates[f], unsent[f]) for f in flows},
                                     {f: int(self.table.GetDelivered(f)) for f in flows},
                                     now + cut if cut >= 0 else NEVER)
                return
            self.memo.stats.applied_partial += 1
            until = now + partial_ns
        self._freeze(part, st, Frozen(group=-1, since_ns=now, until_ns=until, rates=hit.rates, memo=hit), now)

    def _ends_too_soon(self, flows: list[int], unsent: dict[int, int], rates: dict[int, float]) -> bool:
        """Whether a flow of a forming partition would get within `margin` of sending its last byte
        before min_freeze (its truncated record is cut there, and a shorter one is not kept): at its
        rate now, or for a flow too young to have one, at its max-min fair share among the
        partition's QPs at line rate. (Optimistic where flows meet at a switch port: DCQCN QPs
        start at line rate and queue the excess, and the watch may end unrecorded, simulated as it
        would have been. At line rate, QPs sharing a NIC looked too short to record: gpt-bench-dcqcn's
        warm run 51.5x -> 55.6x fewer events than stock, FCT p99 1.75 -> 2.23 %.)"""
        shares = None
        for i, f in enumerate(flows):
            rate = rates[f]
            if not rate:
                if shares is None:
                    conns = [self.conn_of[g] for g in flows]
                    shares = self._fair_model(conns).shares(self._caps(conns))
                rate = shares[i]
            if unsent[f] - self.spec.margin < self.spec.min_freeze * rate:
                return True
        return False

    def _replay_or_watch_episode(self, part: Partition, flows: list[int], now: int) -> bool:
        """A partition of short flows formed: freeze it on an episode record (True), or watch it to
        record one. Not one whose flows are inside a watched episode: that one would be lost (and
        if flows were expected to join that one, nothing else is looked up: True)."""
        watched = [self.episode_of[f] for f in flows if f in self.episode_of]
        if watched:
            return any(episode.joins for episode in watched)
        left = {f: self._left(f) for f in flows}
        # (Longer flows, which can be frozen steady, made worse episodes: on gpt-bench-dcqcn its
        # 384 KB pipeline sends, often thawed early by rings starting beside them, doubled p99.)
        short = self._episode_bound(flows)
        if max(left.values()) >= short:
            return False
        if all(self._untransmitted(f) == 0 for f in flows):
            # Every byte is on the wire (a flow that took over its QP behind a predecessor): nothing
            # to skip but the wait for the ACKs, which the queues ahead decide and no label holds
            # (gpt-tiny's pipeline sends: such a replay ended 2.4 us early, 22 % of its FCT).
            return False
        joins = self._expected_joins(part, now, short) if self.spec.episode_join else {}
        chains = self._chained(part, [*flows, *joins], joins, now, short) if self.spec.episode_chains else {}
        ports = {f: self.ports_of[self.conn_of[f]] for f in flows}
        # With flows expected, one starting now on an idle QP is labelled as they are: which host
        # of an all-to-all started first does not tell its records apart (labelled apart, 14 of 98
        # all-to-alls replayed on 4 layers of moe-8x7b-hpcc, cold; alike, 90).
        labels = {f: self._join_label(f, self.conn_of[f], 0)
                  if joins and self.head_since[f] == now and f not in self.took_over
                  else self._episode_label(f, left[f], now) for f in flows}
        for f, (at, conn) in joins.items():
            ports[f] = self.ports_of[conn]
            labels[f] = self._join_label(f, conn, at - now)
        busy = {self.conn_of[f] for f in flows} | {conn for _, conn in joins.values()}
        for f, (conn, _) in chains.items():
            ports[f] = self.ports_of[conn]
            labels[f] = self._released_label(f, conn, conn in busy)
        waits = {f: w for f, (_, w) in chains.items()}
        graph = ConflictGraph([*flows, *joins, *chains], ports, labels, waits)
        hit = next(iter(self.memo.lookup(graph)), None)
        leads = {f: (now - self.head_since[f]) % self.spec.episode_age_step for f in flows}
        expected = {f: at for f, (at, _) in joins.items()}
        added = [*joins, *chains]
        if hit is None:
            episode = Episode(graph, now, {**left, **{f: self.flow_sizes[f] for f in added}},
                              {**{f: int(self.table.GetDelivered(f)) for f in flows}, **{f: 0 for f in added}},
                              {**leads, **{f: now - at for f, at in expected.items()}},
                              expected={**expected, **{f: -1 for f in chains}}, waits=waits, joins=bool(added))
            for f in flows:
                self.episode_of[f] = episode
            for f in added:
                self.expected_in[f] = episode
            return False
        step = self.spec.episode_bytes_step
        leads = {f: _clock_on_record(hit, f, self.flow_sizes[f], left[f], leads[f], step, self.spec.episode_age_step)
                 for f in flows}
        self.memo.stats.applied_episode += 1
        rates = {f: left[f] / max(1, hit.ends[f]) for f in flows}
        frozen = Frozen(group=-1, since_ns=now, until_ns=NEVER, rates=rates, memo=hit, leads=leads, expected=expected)
        self._freeze(part, self.state[part.id], frozen, now)
        if waits:   # a released flow starts at the last completion it waits for, as the record has them
            ends = {**{f: at + hit.ends[f] for f, at in expected.items()}, **frozen.ends}
            for f, w in waits.items():
                frozen.expected[f] = max(ends[x] for x in w)
        for f in added:
            self.expected_in[f] = frozen
        return True

    def _episode_bound(self, flows: list[int]) -> float:
        """Flows with fewer bytes than this left make an episode: too short to be frozen steady."""
        return self.spec.episode_bytes or \
            self.spec.margin + self.spec.min_freeze * max(self.line_rate[self.conn_of[f]] for f in flows)

    def _expected_joins(self, part: Partition, now: int, short: int) -> dict[int, tuple[int, int]]:
        """The flows known to start on the partition's ports within spec.episode_join (flow ->
        (start, connection)), if each is short, touches no other partition, and no other flow known
        to start meets it on the ports it adds; else none."""
        joins, others = {}, []
        for at, flow, conn, _, size in self.known_starts(now + self.spec.episode_join):
            path = self._connection_path(conn)
            if not path & part.ports:
                others.append(path)
            elif not self._holds(part, flow, path, size, short):
                return {}
            else:
                joins[flow] = (at, conn)
        added = set().union(*(self.paths[conn] for _, conn in joins.values())) - part.ports
        return {} if any(path & added for path in others) else joins

    def _chained(self, part: Partition, members: list[int], joins: dict[int, tuple[int, int]], now: int,
                 short: int) -> dict[int, tuple[int, frozenset[int]]]:
        """The flows that the completions of `members` start on the ports of the partition or of
        its joins (flow -> (connection, the members it waits for)), if each is short and touches
        no other partition; else none (it would end the episode as it starts)."""
        ports = part.ports.union(*(self.paths[conn] for _, conn in joins.values()))
        chains = {}
        for flow, conn, size, waits in self.released_by(members, now):
            path = self._connection_path(conn)
            if not path & ports:
                continue
            if not self._holds(part, flow, path, size, short):
                return {}
            chains[flow] = (conn, waits)
        return chains

    def _holds(self, part: Partition, flow: int, path: frozenset[int], size: int, short: int) -> bool:
        """Whether the episode of `part` can hold `flow`, of `size` bytes on `path`, that starts
        later on its ports: it is short, no other episode expects it, and it touches no other
        partition (else it ends the episode as it starts)."""
        return size < short and flow not in self.expected_in and not self.parts.touching(path) - {part.id}

    def _released_label(self, flow: int, conn: int, busy: bool) -> str:
        """An episode vertex of a flow its flows' completions start: its size and its QP's rates
        if the QP is idle now; if a flow of the episode holds it, that flow's end decides them."""
        rates = "" if busy else f"/{self._qp_rates(conn)}"
        return f"R/N{self.flow_sizes[flow]}{rates}|{self.path_labels[conn]}"

    def _join_label(self, flow: int, conn: int, in_ns: int) -> str:
        """An episode vertex of a flow starting `in_ns` from now (in episode_age_step steps), of
        its size, on its idle QP's rates."""
        return f"J{in_ns // self.spec.episode_age_step}/N{self.flow_sizes[flow]}/{self._qp_rates(conn)}|{self.path_labels[conn]}"

    def _qp_rates(self, conn: int) -> str:
        """A QP's rate and target (HPCC: reference) rate, in memo_bins steps of its line rate."""
        self._sender(conn).GetCongestionState(self._cc_buf, len(self._cc_buf))
        line_bps = self.line_rate[conn] * 8e9
        rate, target = (rate_bin(float(x), line_bps, self.spec.memo_bins) for x in self._cc_buf[:2])
        return f"{rate}/{target}"

    def _episode_label(self, flow: int, left: int, now: int) -> str:
        """An episode vertex: the flow's bytes left in episode_bytes_step steps (its size while it
        has delivered less than a step), whether it took over its QP from a predecessor (T: its first
        bytes were on the wire behind the predecessor's when it became the head) or started on an
        idle one (I), how long it has been the head in episode_age_step steps, its QP's rate and target
        (HPCC: reference) rate in memo_bins steps of the line rate, and its path. (Without T/I,
        gpt-tiny's backward pipeline sends, starting on idle QPs, replayed a record of forward sends
        that took over theirs and ended in 2.7 us instead of 6.8.)"""
        conn = self.conn_of[flow]
        start = "T" if flow in self.took_over else "I"
        age = (now - self.head_since[flow]) // self.spec.episode_age_step
        size = self.flow_sizes[flow]
        step = self.spec.episode_bytes_step
        bytes_left = f"N{size}" if _under_a_step(size, left, step) else f"E{round(left / step)}"
        return f"{bytes_left}/{start}/{age}/{self._qp_rates(conn)}|{self.path_labels[conn]}"

    def _episode_flow_ended(self, flow: int, now: int, successor: int | None) -> None:
        """A flow of a watched episode completed (simulated): note when, and keep the episode once
        its last flow has. A successor taking over its ports ends the watch."""
        episode = self.episode_of.pop(flow)
        if successor is not None:
            self._abandon(episode)
            return
        episode.ends[flow] = now - episode.formed_ns + episode.leads[flow]
        episode.states[flow] = self._congestion_state(flow)
        if len(episode.ends) == len(episode.left):
            rates = {f: left / max(1, episode.ends[f]) for f, left in episode.left.items()}
            self.memo.record(episode.graph, max(episode.ends.values()), episode.left, rates, episode.states,
                             ends=episode.ends, progress=self._progress(episode), leads=episode.leads)

    def _progress(self, episode: Episode) -> dict[int, tuple[list[int], list[int]]]:
        """Per flow of a completed episode, its bytes delivered at each rate sample before its end
        (those still in the probe's history: 170 us by default), the samples' times on its clock."""
        n = self._read_probe()
        since = self.times[:n] - episode.formed_ns
        progress = {}
        for flow, end in episode.ends.items():
            times = since + episode.leads[flow]
            inside = (since > 0) & (times > 0) & (times < end)
            progress[flow] = (times[inside].tolist(),
                              (self.delivered[:n, flow][inside].astype(np.int64) - episode.delivered[flow]).tolist())
        return progress

    def _abandon_episodes(self, pids, keep: Episode | None = None) -> None:
        """Something touched these partitions: the episodes watched in them are not kept (but
        `keep`, which the flow touching them joins as expected)."""
        if self.episode_of:
            for pid in pids:
                for flow in self.parts.by_id[pid].flows:
                    episode = self.episode_of.get(flow)
                    if episode is not None and episode is not keep:
                        self._abandon(episode)

    def _abandon(self, episode: Episode) -> None:
        for flow in episode.left:
            if self.episode_of.get(flow) is episode:
                del self.episode_of[flow]
        for flow in episode.expected:
            del self.expected_in[flow]
        episode.expected.clear()

    def _steady_ns(self, t: Transient, unsent: dict[int, int]) -> int:
        """How long flows with `unsent` bytes left stay steady after the memoized transient `t`
        before one of them gets within `margin` of its end (0 after a truncated one); -1 if they are
        too short for it."""
        flows = list(unsent)
        left = {f: unsent[f] - t.bytes[f] - self.spec.margin for f in flows}
        if min(left.values()) < 0:
            return -1
        if t.truncated:
            return 0
        return -1 if any(t.rates[f] <= 0 for f in flows) else int(min(left[f] / t.rates[f] for f in flows))

    def _partial_ns(self, t: Transient, unsent: dict[int, int]) -> int:
        """How far into the memoized transient `t` (its bytes spread evenly over it) flows with
        `unsent` bytes left can go before one of them gets within `margin` of its end."""
        return min((int((left - self.spec.margin) * t.transient_ns / t.bytes[f])
                    for f, left in unsent.items() if t.bytes[f] > 0), default=-1)

    def _record(self, st: PartitionState, rates: dict[int, float], now: int, truncated: bool = False) -> None:
        forming, st.forming = st.forming, None
        flows = forming.graph.flows
        # A hit restarts its flows with empty pipes: skipping only the bytes delivered would make
        # each flow late by the lag of its deliveries, skipping all bytes in flight (queued ones
        # too) early by its queueing delay. The bytes on the wire (rate x lag) are what the thawed
        # flow would otherwise owe: it restarts with its bottleneck's share of the path.
        # (never below 0: a flow slowed down since it formed can owe less on the wire than then)
        owed = {f: max(0, int(self._owed(f, rates[f]) - forming.owed[f])) for f in flows}
        states = {f: self._congestion_state(f) for f in flows}
        self.memo.record(forming.graph, now - forming.formed_ns, owed, rates, states, truncated)

    def _cut_ns(self, flows: list[int]) -> int:
        """How long until the first of `flows` could get within `margin` of its end at line rate."""
        return min(int((self._untransmitted(f) - self.spec.margin) / self.line_rate[self.conn_of[f]])
                   for f in flows)

    def _last_rates(self, forming: Forming, now: int) -> dict[int, float]:
        """Bytes per ns each flow of a forming partition delivered since the latest probe sample at
        least tau / 2 old (or since the partition formed, if that is later)."""
        n = self._read_probe()
        k = int(np.searchsorted(self.times[:n], now - self.spec.tau // 2, side="right")) - 1
        use_sample = k >= 0 and self.times[k] >= forming.formed_ns
        since = int(self.times[k]) if use_sample else forming.formed_ns
        rates = {}
        for f in forming.graph.flows:
            base = int(self.delivered[k, f]) if use_sample else forming.delivered[f]
            rates[f] = (int(self.table.GetDelivered(f)) - base) / max(1, now - since)
        return rates

    def _recent_rate(self, flow: int, now: int) -> float:
        """Bytes per ns `flow` delivered since the sample `coarse` before the last one read by the
        steady test (at most `window / 2` samples old: the probe is not read again here); its frozen
        rate if it just thawed; 0 if it started within `coarse` samples (a young flow is still in its
        own transient, and its rate over a window it was not running in would differ from one
        recurrence to the next). A flow queued behind others on its connection starts when it
        reaches the head."""
        n = self.n_read
        recent = self.spec.coarse * self.spec.tau
        if now - self.head_since[flow] < recent:
            return 0.0
        rate, thawed_ns = self.thawed.get(flow, (0.0, -1))
        if thawed_ns >= 0 and now - thawed_ns < recent:
            return rate
        back = min(n, self.spec.coarse)
        if back == 0 or now <= self.times[n - back]:
            return 0.0
        now_bytes = int(self.table.GetDelivered(flow))
        return (now_bytes - int(self.delivered[n - back, flow])) / (now - int(self.times[n - back]))

    def _sender(self, conn: int):
        """The connection's sender (fetched once: a cppyy call costs microseconds)."""
        sender = self.senders.get(conn)
        if sender is None:
            sender = self.senders[conn] = self.net.flows.GetSender(conn)
        return sender

    def _congestion_state(self, flow: int) -> dict[str, float]:
        n = int(self._sender(self.conn_of[flow]).GetCongestionState(self._cc_buf, len(self._cc_buf)))
        if n < 3:
            return {}
        first, second, third = self.net.cc_state_keys
        state = {first: float(self._cc_buf[0]), second: float(self._cc_buf[1])}
        if self._cc_buf[2] >= 0:
            state[third] = float(self._cc_buf[2])
        return state

    def _owed(self, flow: int, rate: float) -> float:
        """Bytes of `flow` delivered, plus those on the wire at `rate` (bytes per ns) for its lag."""
        return int(self.table.GetDelivered(flow)) + rate * self.lag_ns[self.conn_of[flow]]

    def _credited_from(self, flow: int, rate: float, unsent: int) -> float:
        """Where a record's transient bytes of `flow` start counting, when its partition forms. On
        RDMA its bytes sent (delivered or in flight): a hit freezes the flows' packets in flight
        where they are, and they arrive after the thaw; counting from the bytes delivered credited
        them twice (gpt-bench-dcqcn's first ring steps ended 1.8 us early in a warm run, 0.9 us
        after; moe-bench-dcqcn's iteration error 0.60 -> 0.20 % warm). On TCP the bytes delivered
        and those on the wire at `rate` (0 for a young flow): counting its bytes sent made
        gpt-bench's cold memo error 3.4 % / 26 % -> 4.2 % / 41 %, iteration 0.6 -> 2.7 %."""
        if self.net.rdma:
            return self.flow_sizes[flow] - int(self.table.GetSkipped(flow)) - unsent
        return self._owed(flow, rate)

    def _untransmitted(self, flow: int) -> int:
        return int(self._sender(self.conn_of[flow]).GetUntransmittedOf(flow))

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


def _under_a_step(size: int, left: int, step: int) -> bool:
    """A flow that has delivered less than one `step` of episode labels: labelled by its size,
    placed by its age."""
    return size - left < step


def _clock_on_record(hit: Transient, flow: int, size: int, left: int, lead: int, step: int, age_step: int) -> int:
    """Where a replayed flow of `size` bytes with `left` left, `lead` ns into its age step, stands
    on its recorded clock (`step`: the labels' bytes step). One that has delivered less than a step,
    or the recorded flow's bytes, at its own lead: early on only its age tells where it is (placed
    by bytes, flows joining an all-to-all 4 us after the others were mapped onto them and ended 4 us
    off; in 64 KiB steps placed by bytes from 4 KiB on, moe-8x7b-hpcc's first hosts' flows, which had
    sent their first tens of KB alone at line rate, stood too far on at the mean rate: iteration
    error 0.04 -> 0.22 %); so is one whose recorded flow had no bytes left (no rate to place it by).
    Else where the recorded flow, at its mean rate to its end, had `left` bytes left, at most one
    age step (`age_step`) from where the recorded flow stood: their labels gave the same age. (A
    recorded flow with its last few hundred bytes left spent its time to its end waiting for their
    ACKs, not sending them: its mean rate is no rate, and placed by it a flow with 1000 bytes left
    stood 4 ms early on its clock and ended 2.3 ms late, moe-8x7b-dcqcn with seed 2.)"""
    recorded_left = hit.bytes[flow]
    if _under_a_step(size, left, step) or left == recorded_left or recorded_left == 0:
        return lead
    rate = recorded_left / max(1, hit.ends[flow] - hit.leads[flow])
    return hit.leads[flow] + max(-age_step, min(age_step, round((recorded_left - left) / rate)))
