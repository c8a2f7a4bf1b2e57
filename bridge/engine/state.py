"""What the fast-forward (bridge.engine.fastforward) keeps per partition: the model of a frozen
partition's deliveries (Frozen), the watches that record memoized transients and episodes (Forming,
Episode), and its counters."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .fairshare import AckedShares
from .memo import ConflictGraph, Transient

NEVER = np.iinfo(np.int64).max


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
    # flow -> the sum of its changes, kept until the next one: rate_at's with every change made
    # (a fair join asks it of each flow frozen beside it; summed each time, 6 % of moe-bench-dcqcn's loop).
    added: dict[int, float] = field(default_factory=dict, repr=False)
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
    # HPCC, frozen at its NICs' shares (_nic_bound_while_cut): per connection whose QP HPCC cuts
    # meanwhile, its pacing rate at the freeze (bps), its first cut, its cut per round trip after
    # that and its busiest switch port's load.
    nic_bound: bool = False
    pacing_cuts: dict[int, tuple[float, float, float, float]] = field(default_factory=dict)
    # DCQCN, frozen at link shares (_window_queues): per connection, the bytes of its window in
    # flight beyond the pipe at its share, queued at its switch port: delivered at the share, and
    # kept in flight at the thaw.
    queued: dict[int, int] = field(default_factory=dict)
    offset_ns: int = 0            # episode: how far into the recorded episode this freeze began
    leads: dict[int, int] = field(default_factory=dict)     # episode: flow -> its clock's lead (Episode.leads)
    # Episode: flows known to start on its ports (-> when), taken in still frozen as they start.
    # Their QPs start held (-> when), never kicked into sending until the thaw; so do those of flows
    # joining a partition at its NICs' fair shares (_fair_join).
    expected: dict[int, int] = field(default_factory=dict)
    held: dict[int, int] = field(default_factory=dict)      # connection -> when its flow started
    # RDMA: connections whose QP's rate steps up on its own while frozen (DCQCN's rate-increase
    # timer, no cut lately; _rate_steps) -> when. The freeze ends by the earliest, and at the thaw
    # each step keeps its time instead of moving with the frozen time. None: not looked up yet
    # (_freeze does; it leaves episodes and freezes at fair shares without).
    rate_steps: dict[int, int] | None = None

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
        changes = self.changes.get(flow)
        if not changes:
            return self.rates[flow]
        if at_ns >= changes[-1][0]:
            total = self.added.get(flow)
            if total is None:
                total = self.added[flow] = sum(added for _, added in changes)
            return self.rates[flow] + total
        return self.rates[flow] + sum(added for t, added in changes if t <= at_ns)

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
        self.added.pop(flow, None)
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
        self.added.pop(successor, None)
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
    # ("ending"), or to record it after a miss ("too_short"), a QP's rate steps up on its own
    # within min_freeze ("rate_step"), or it thawed.
    simulated: str = "formed"


@dataclass
class ModeInterval:
    partition: int
    start_ns: int
    end_ns: int
    mode: str                     # "simulate" | "frozen" | "memo" (frozen through a memoized transient)
    flows: int


# What ends the watch of an episode before its last flow completes: a flow starting on its ports
# that it did not expect, a flow it expected starting elsewhen or beside other partitions, a
# flow's successor taking over its QP, the partition freezing (a steady test or a fair start).
EPISODE_WATCH_ENDS = ("flow_start", "expected_elsewhen", "successor", "freeze")
# Why a partition was not frozen at its fair shares as it formed (or at a retry), checked in this
# order (FairStarts._fair_start): its flows are short enough for an episode; a DCQCN QP paces
# below its line rate (cut); a flow's every byte is on the wire; no fair shares hold (a flow
# would get none, or, without link shares, a switch port binds); a switch port holds a queue;
# HPCC is still cutting its QPs (or climbing) towards the shares; HPCC flows too short for
# min_freeze at their shares; a windowed DCQCN QP's ACKs would wait in the queue of a switch port
# others' data fill (link shares, FairStarts._acks_queued); DCQCN QPs a switch port bounds have
# not filled their windows (window queues: retried a round trip later); a flow known to start on
# its ports within min_freeze would thaw it.
FAIR_START_REFUSALS = ("episode", "below_line_rate", "all_sent", "no_shares", "queued", "hpcc_cutting",
                       "too_short", "acks_queued", "windows_filling", "start_soon")


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
    # Episodes watched after a miss, completed (every flow did: recorded), and given up by what
    # ended the watch first (EPISODE_WATCH_ENDS): what a warm store cannot hold.
    episodes_watched: int = 0
    episodes_completed: int = 0
    episodes_given_up: dict[str, int] = field(default_factory=lambda: dict.fromkeys(EPISODE_WATCH_ENDS, 0))
    fair_starts: int = 0          # partitions frozen at their fair shares as they formed
    fair_starts_refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAIR_START_REFUSALS, 0))
    fair_joins: int = 0           # flows that started inside such a partition, its shares holding
    rate_steps: int = 0           # freezes cut short by a QP's own rate step (FastForward._rate_steps)
    checks: int = 0
    control_s: float = 0.0        # wall time in this controller (detection, freeze, thaw)
    intervals: list[ModeInterval] = field(default_factory=list)
