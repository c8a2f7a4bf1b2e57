"""Partitions frozen at their flows' max-min fair shares as they form (fair starts), and flows
joining them frozen (fair joins): RDMA with DCQCN or HPCC and computed ends, where QPs at line rate
share a NIC (or with fair_shares "links" a switch port) in turn and no steady test is needed."""

from __future__ import annotations

import math

import numpy as np

from .fairshare import AckedShares
from .partitions import Partition
from .state import NEVER, Frozen

LINK_BOUND = 0.98     # a flow whose frames and the ACKs crossing its link fill this much of it is bound by it
# A partition's rates are max-min fair shares when each is this close to its share. DCQCN QPs
# delivered 1.2-1.5 % above the modelled shares while the model rounded frame times up (gpt-13b-dcqcn:
# 82 of 89 partitions; the rest 5 % off); the change at an end is taken as the ratio of the shares.
FAIR_MATCH = 0.02
# HPCC fair starts at NIC shares (_nic_bound_while_cut): QPs pace above their shares by this fraction
# of their rate, to their ends.
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
# fraction of their time left (spec.hpcc_recovery). (1 % kept that incast to its steady test, 5 %
# late; gpt-bench-hpcc cold at 2.5 %: 12.6x fewer events than stock, FCT p99 5.81 %; without the
# bound 17.7x, 11.5 %.)
HPCC_RECOVERY_RTTS = 2.0
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


class FairStarts:
    """Fair starts and fair joins: whether a forming partition's QPs send at their fair shares from
    now on, the shares (the fair-share model of the network's ports), and the freeze at them.

    A part of FastForward (bridge.engine.fastforward), mixed into it: it works on the state its
    __init__ sets up and calls its other parts' methods."""

    def _qp_rate_bps(self, conn: int) -> float:
        """The rate (bps of frames) the connection's QP paces at now."""
        return self._sender(conn).GetRateBps()

    def _paces_at_line_rate(self, conn: int) -> bool:
        """Whether the connection's QP sends at its line rate (DCQCN never cut it)."""
        return self._qp_rate_bps(conn) >= self.line_rate[conn] * 8e9 * (1 - 1e-6)

    def _pacing(self, conn: int) -> float:
        """Payload bytes per ns the connection's QP paces its frames at now (_paced)."""
        return self._paced(self._qp_rate_bps(conn) / 8e9)

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
        nics = self._nic_shares(conns)
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
        return AckedShares(net.engine.lib, edges[0], edges[1], self._caps(conns), frame_ns, ack_ns,
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
        cut it; HPCC, _nic_bound_while_cut: above its share to its end, no switch port it crosses
        full), nothing is queued on its switch ports, and the shares are those of the
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
        hpcc's steady-only run by 1.4 % more events). With spec.window_queues (DCQCN) QPs whose
        share a switch port sets are frozen once their windows are in flight, the queue they leave
        there with them (_window_queues), and tried again a round trip later until then."""
        frozen = self._fair_start(part, now)
        if isinstance(frozen, str):
            self.stats.fair_starts_refused[frozen] += 1
            return False
        self._freeze(part, self.state[part.id], frozen, now)
        self.stats.fair_starts += 1
        return True

    def _fair_start(self, part: Partition, now: int) -> Frozen | str:
        """_freeze_at_shares: the partition frozen at its fair shares, or why it may not be (one of
        FAIR_START_REFUSALS, counted in summary.json accel.fair_starts_refused)."""
        flows = sorted(part.flows)
        conns = [self.conn_of[f] for f in flows]
        if self.episodes and max(self._left(f) for f in flows) < self._episode_bound(flows):
            return "episode"
        hpcc = self.net.u_target > 0
        if not hpcc and not all(self._paces_at_line_rate(conn) for conn in conns):
            return "below_line_rate"
        if any(self._untransmitted(f) == 0 for f in flows):
            return "all_sent"
        shares = self._frozen_shares(conns)
        cuts, queues = None, {}
        if hpcc and not self.link_shares:
            if shares is None:
                return "no_shares"
            if self._queued_on_switches(conns):
                return "queued"
            cuts = self._nic_bound(flows, conns, shares)
            if cuts is None:
                return "hpcc_cutting"
        elif shares is None:
            return "no_shares"
        elif hpcc and not self._outlasts_min_freeze(flows, shares):
            return "too_short"
        elif self._acks_queued(flows, conns, shares):
            return "acks_queued"
        elif (queues := {} if hpcc else self._window_queues(flows, conns, shares)) is None:
            self.retry_at[part.id] = now + math.ceil(max(self.lag_ns[c] for c in conns))   # a window later
            return "windows_filling"
        elif ((queued := self._queued_on_switches(conns, queues))
              or hpcc and not self._cut_to_link_shares(flows, shares)):
            if not hpcc:
                return "queued"
            # Not at the switch ports' shares (yet): their NICs may bind them while HPCC cuts.
            nics = self._nic_shares(conns)
            cuts = None if queued else self._nic_bound(flows, conns, nics)
            if cuts is None:      # HPCC is still cutting or climbing: its QPs may get there
                self.retry_at[part.id] = now + HPCC_RETRY_NS    # within round trips
                return "queued" if queued else "hpcc_cutting"
            shares = nics
        soon = [(conn, path) for _, _, conn, _, _ in self.known_starts(now + self.spec.min_freeze)
                if (path := self._connection_path(conn)) & part.ports]
        if soon and (hpcc or not self._joinable(part, conns, soon)):
            return "start_soon"
        return Frozen(group=-1, since_ns=now, until_ns=NEVER, rates=dict(zip(flows, shares.tolist())),
                      at_shares=True, nic_bound=cuts is not None, pacing_cuts=cuts or {}, queued=queues)

    def _queued_on_switches(self, conns: list[int], queues: dict[int, int] | None = None) -> bool:
        """Whether a switch port on the data path of one of `conns` holds more queued bytes than
        a partition frozen at its NICs' fair shares allows (_queue_bound): fewer than the port
        marks ECN above, they drain unmarked where the NICs bind (HPCC's first cut counts them,
        _nic_bound_while_cut), and a flow's own count in its bytes in flight at the freeze;
        others' (a completed flow's last frames) hold it up by their drain time, which the model
        leaves out. A port may also hold the `queues` (_window_queues) of the connections crossing
        it. (Leaves the queues read in _queue_buf.)"""
        self.api.ReadQueueBytes(self._queue_buf)
        data = np.concatenate([self.port_arrays[c][0] for c in conns])
        switch = data[~self.host_port[data]]
        bound = self._queue_bound
        if queues:
            bound = bound.copy()
            for conn, queue in queues.items():
                ports = self.port_arrays[conn][0]
                bound[ports[~self.host_port[ports]]] += queue
            bound = np.minimum(bound, self._kmin)    # above KMIN it marks, and DCQCN cuts below the shares
        return bool((self._queue_buf[switch] > bound[switch]).any())

    def _window_queues(self, flows: list[int], conns: list[int], shares: np.ndarray) -> dict[int, int] | None:
        """spec.window_queues (DCQCN, link shares): per connection whose share a switch port sets
        (below its NIC's), the bytes it has in flight beyond the pipe at that share, queued at
        that port, which drains them at the share; None while one of them has not filled its
        window yet (HAS_WIN). Such QPs send at line rate until their windows are in flight, the
        rest queued at the port (under KMIN no mark cuts them, _queued_on_switches). Frozen as
        they start, the queue was missing at each thaw, where stock goes on delivering at the old
        shares while DCQCN cuts them (moe-bench-dcqcn: 384 KB pipeline sends meeting in pairs at
        spine ports, each about 55 KB queued, up to 42 % late)."""
        if not (self.link_shares and self.spec.window_queues):
            return {}
        nics = self._nic_shares(conns)
        queues = {}
        for flow, conn, share, nic in zip(flows, conns, shares.tolist(), nics.tolist()):
            if share >= nic * (1 - FAIR_MATCH):
                continue
            if not self._sender(conn).IsWindowBound():
                return None
            queue = self._left(flow) - self._untransmitted(flow) - share * self.lag_ns[conn]
            if queue > 0:
                queues[conn] = round(queue)
        return queues

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
        if (shares <= 0).any():
            return None
        if self.link_shares:
            return shares
        nics = self._nic_shares(conns)
        if (np.abs(shares - nics) > 1e-9 * nics).any() or self._merging_full(conns, shares):
            return None
        return shares

    def _nic_shares(self, conns: list[int]) -> np.ndarray:
        """The max-min fair shares of QPs of `conns` paced at line rate over the hosts' NICs alone.
        (Read-only: kept per tuple of connections, as _frozen_shares.)"""
        key = tuple(conns)
        shares = self._nic_shares_of.get(key)
        if shares is None:
            shares = self._nic_shares_of[key] = self._fair_model(conns, hosts_only=True).shares(self._caps(conns))
            shares.flags.writeable = False
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

    def _nic_bound(self, flows: list[int], conns: list[int], shares: np.ndarray) -> dict[int, tuple[float, ...]] | None:
        """HPCC: the QPs' cuts (_nic_bound_while_cut) if they outlast min_freeze at these NIC shares;
        else None. The caller has found no more queued on their switch ports than
        _queued_on_switches allows (and left the queues it read for the first cut)."""
        if not self._outlasts_min_freeze(flows, shares):
            return None
        return self._nic_bound_while_cut(flows, conns, shares)

    def _nic_bound_while_cut(self, flows: list[int], conns: list[int],
                             shares: np.ndarray) -> dict[int, tuple[float, ...]] | None:
        """HPCC: whether QPs sending at these NIC shares stay bound by their NICs to their ends:
        per connection that HPCC cuts meanwhile, its pacing rate now (bps), its first cut, its cut
        per round trip after it and its busiest port's load; None if they do not. No switch port
        is loaded past LINK_BOUND (no queue builds), and each QP paces HPCC_PACING_MARGIN above
        its share now. HPCC divides its rate by its busiest switch port's utilization over
        U_TARGET every round trip (its reference rate's update; RATE_AI adds little): first with
        the queue there now (read by _queued_on_switches, over a round trip at the port's rate),
        then with the port's load alone, and the QP must still pace that far above its share when
        it sends its last byte. (Pipeline sends of gpt-bench-hpcc meeting in pairs at a spine port,
        each beside a ring's flow on its NIC: delivered at the NIC's share, 5.6-5.8 GB/s, while
        HPCC took their pacing from 11.5 to 9.0 GB/s over the 70 us they took.)"""
        load, _ = self._switch_loads(conns, shares)
        if any(l >= LINK_BOUND for l in load.values()):
            return None
        cuts = {}
        for flow, conn, share in zip(flows, conns, shares.tolist()):
            floor = share / (1 - HPCC_PACING_MARGIN)
            bps = self._qp_rate_bps(conn)
            ports = [p for p, _ in self.hops[conn][0] if p in load]
            busiest = max((load[p] for p in ports), default=0.0)
            queued = max((load[p] + self._queue_buf[p] / (self.ports.rates[p] * self.lag_ns[conn]) for p in ports),
                         default=0.0)
            first, cut = max(1.0, queued / self.net.u_target), busiest / self.net.u_target
            pacing = self._paced(bps / 8e9 / first)
            if pacing < floor:
                return None
            if cut > 1.0:
                rounds = 1 + math.log(pacing / floor) / math.log(cut)
                if rounds * self.lag_ns[conn] * share < self._untransmitted(flow):
                    return None
            if first > 1.0 or cut > 1.0:
                cuts[conn] = (bps, first, max(1.0, cut), busiest)
        return cuts

    def _pace_nic_bound_qps(self, frozen: Frozen, now: int) -> None:
        """HPCC, at the thaw of a partition frozen at its NICs' shares: each QP HPCC cut meanwhile
        (_nic_bound_while_cut) goes on from the rate its cuts took it to, one per round trip."""
        for conn, (bps, first, cut, load) in sorted(frozen.pacing_cuts.items()):
            if frozen.order.get(conn, [None])[-1] in frozen.done:
                continue
            rounds = (now - frozen.since_ns) / self.lag_ns[conn]
            rate = bps / (first if rounds >= 1 else 1.0) / cut ** max(0.0, rounds - 1)
            self._sender(conn).SetCongestionState(rate, rate, load)

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
                if recovery * shares[i] > self.spec.hpcc_recovery * self._untransmitted(flows[i]):
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

    def _acks_queued(self, flows: list[int], conns: list[int], shares: np.ndarray) -> bool:
        """DCQCN with fair_shares "links": whether a QP of `conns` sends its ACKs through a switch
        port that the data of two or more others fill at these shares, and its window would bound
        it there. DCQCN's marks cut the QPs meeting at that port to their shares but leave a queue
        (about KMIN), and the ACKs wait in it: a flow longer than its window, whose window does
        not cover its share over its round trip plus that queue's drain, is held below its share
        (gpt-13b-128-dcqcn: a 2.6 MB pipeline send whose ACKs crossed a spine uplink two other
        sends met at ran at 42 % of line rate in stock, at line rate frozen at its share)."""
        if not self.link_shares or self.net.u_target > 0:
            return False
        # Only a flow longer than its window can be held by it: most partitions (all-to-alls, whose
        # windows hold them whole) need no port loads.
        windowed = [(conn, share, window) for flow, conn, share in zip(flows, conns, shares.tolist())
                    if 0 < (window := self._sender(conn).GetWindow()) < self._left(flow)]
        if not windowed:
            return False
        load, _ = self._switch_loads(conns, shares)
        merging: dict[int, set[int]] = {}
        for conn in conns:
            for port, _ in self.hops[conn][0]:
                if port in load:
                    merging.setdefault(port, set()).add(conn)
        full = {port for port, crossing in merging.items() if len(crossing) > 1 and load[port] > LINK_BOUND}
        if not full:
            return False
        for conn, share, window in windowed:
            drain = max((self._kmin[port] / self.ports.rates[port] for port, _ in self.hops[conn][1]
                         if port in full and conn not in merging[port]), default=None)
            if drain is not None and window < share * (self.lag_ns[conn] + drain):
                return True
        return False

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

    def _fair_join_shares(self, flow: int, conn: int) -> tuple[int, int, dict[int, tuple[float, float]], float] | None:
        """`flow`, starting on idle `conn`, whose ports touch one partition, frozen at its fair shares
        (_frozen_shares: its NICs', or with fair_shares "links" its links'): if its QP paces at line
        rate, nothing is queued on its switch ports, and the shares hold with it (the partition's
        rates being its shares without it), `conn`, the partition, its flows' shares with it and
        their rates without it (changes to come included), and its own share (it joins frozen:
        _fair_join); else None. (Ring steps start one by one, each when its predecessor's chunk arrived:
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
        rates = [frozen.rate_at(f, NEVER) for f in running]
        if (np.abs(before - rates) > FAIR_MATCH * before).any():
            return None
        if self._acks_queued([*running, flow], [*conns, conn], shares):
            return None
        if (self.link_shares and self.spec.window_queues
                and self.flow_sizes[flow] > self._sender(conn).GetWindow()
                and shares[-1] < self._nic_shares([*conns, conn])[-1] * (1 - FAIR_MATCH)):
            # It outlasts its window, and a switch port sets its share: the window queues there
            # first (_window_queues; moe-bench-dcqcn: pipeline sends joining up to 40 % late). A
            # flow its window holds whole (an all-to-all's) joins as before: its start is its burst.
            return None
        return conn, pid, dict(zip(running, zip(shares[:-1].tolist(), rates))), float(shares[-1])

    def _fair_join(self, frozen: Frozen, flow: int, conn: int, path: frozenset[int], hosts: tuple[int, int],
                   shares: dict[int, tuple[float, float]], share: float, now: int) -> None:
        """`flow` starts inside a partition frozen at its NICs' fair shares (_fair_join_shares), its
        QP held until the thaw. It sends at its share from now: its first ACK comes one lag later
        (later by half a data frame at each link of its ACK path that others' data keeps busy) and
        delivers one ACK's bytes. The flows whose shares it changes (those sharing its NIC) send at
        their new ones from now: their deliveries change a lag later."""
        self.head_since[flow] = now
        self.parts.add_flow(flow, path, hosts)
        for other, (new, rate) in sorted(shares.items()):
            added = new - rate
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
