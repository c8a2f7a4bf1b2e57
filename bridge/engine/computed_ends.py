"""Flow ends (`flow_ends`). "simulated" (TCP always): the partition thaws before any of its flows
gets within `margin` of its end, and every end is simulated packet by packet. "computed" (RDMA
default, the paper's way): a flow completes inside its frozen partition when the model has
delivered its bytes; the executor releases its dependents then, and the next flow of its queue
pair takes over its place and rate (ring steps and gradient buckets chain on one QP). The
partition keeps running frozen unless the end changes the others' rates in a way the engine cannot
tell: `margin` bytes before a flow's end, if no flow is queued on its connection and another flow
of the partition sends data through its ports, the partition thaws and that end is simulated after
all, unless the partition's rates are the max-min fair shares of its links (QPs at line rate
sharing a NIC or a switch port in turn): then the others take the shares the end leaves them."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from .fair_starts import FAIR_MATCH, LINK_BOUND
from .state import NEVER, FairView, Frozen, PartitionState


class ComputedEnds:
    """Flows completing inside frozen partitions: their computed ends, the checks before them, the
    next flow of a connection taking over, and the rates the others gain when one leaves.

    A part of FastForward (bridge.engine.fastforward), mixed into it: it works on the state its
    __init__ sets up and calls its other parts' methods."""

    def _left(self, flow: int) -> int:
        """Bytes of `flow` still to deliver (its unsent bytes and those in flight)."""
        return self.flow_sizes[flow] - self.table.GetDelivered(flow) - self.table.GetSkipped(flow)

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
            if self._end_thaws(frozen, flow, now):
                self._thaw(pid, now, planned=True)
                return

    def _end_thaws(self, frozen: Frozen, flow: int, now: int) -> bool:
        """Whether `flow`'s check at `now` thaws its partition (_check_ends). Reads only the
        engine's state and the frozen QPs' (held while frozen): asked ahead (_settle_checks), it
        answers as at `now` while no run slice ends before."""
        conn = self.conn_of[flow]
        return (not self.queued.get(conn) and bool(self._data_through(frozen, flow, self.ports_of[conn].data))
                and self._shares_hold(frozen, flow, now) is None)

    def _settle_checks(self, before_ns: int) -> int:
        """Ahead of the run slice: the checks due before `before_ns` (the next wake-up for anything
        else) that would leave their partitions frozen are done now, as at their times, and ns-3
        runs past them; returns when the first one that does more is due (NEVER: none). A run
        slice per check was 40 % of gpt-bench-dcqcn's 2,092 (836), each a stop event and a pass of
        the engine over every partition. Exact as long as nothing happens in Python before then:
        a slice that ends earlier (a flow's end in ns-3, an interrupt) puts back the checks still
        ahead of it (_unsettle_checks), to be done at their times with whatever it changed."""
        due = sorted((check, pid, flow) for pid, st in self.state.items() if (frozen := st.frozen) is not None
                     and frozen.checks.earliest() < before_ns
                     for flow, check in frozen.checks.items() if check < before_ns)
        self.settled = []
        for check, pid, flow in due:
            frozen = self.state[pid].frozen
            if self._steady_test_at(check) or self._end_thaws(frozen, flow, check):
                break
            del frozen.checks[flow]
            self.settled.append((frozen, flow, check))
        else:
            return NEVER
        for frozen, flow, at in reversed(self.settled):   # (a check at the same ns stays: due together)
            if at < check:
                break
            frozen.checks[flow] = at
            self.settled.pop()
        return check

    def _unsettle_checks(self, now: int) -> None:
        """The run slice ended at `now`: the settled checks not yet due come back (_settle_checks)."""
        for frozen, flow, check in self.settled:
            if check >= now:
                frozen.checks[flow] = check
        self.settled = []

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
        the same gains put gpt-bench-hpcc further from stock, docs/acceleration.md)."""
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
        return self.switch_load < 1.0 and frozen.at_shares and not frozen.nic_bound

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
        view.at_shares = not ((view.shares <= 0) | (np.abs(view.shares - rates) > FAIR_MATCH * view.shares)).any()
        return view

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
        started = self.table.GetStartNs(successor)
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
