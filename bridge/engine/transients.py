"""When a partition forms and the memo holds an isomorphic one, the partition is frozen at once for
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
replay expects each at the last recorded completion it waits for, and takes it in as above."""

from __future__ import annotations

import numpy as np

from .memo import ConflictGraph, Transient, rate_bin
from .partitions import Partition
from .state import NEVER, Episode, Forming, Frozen, PartitionState

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
# steps replay 1,697 of its 2,048 all-to-alls cold against 0 (docs/rdma.md).


class MemoizedTransients:
    """Memo lookups as partitions form, freezes on hits, watches that record steady, truncated and
    episode records on misses.

    A part of FastForward (bridge.engine.fastforward), mixed into it: it works on the state its
    __init__ sets up and calls its other parts' methods."""

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
        steps = self._rate_steps(flows)
        if min(steps.values(), default=NEVER) < now + self.spec.min_freeze:
            self.state[part.id].simulated = "rate_step"    # a hit would end before it could pay
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
                                     {f: self.table.GetDelivered(f) for f in flows},
                                     now + cut if cut >= 0 else NEVER)
                return
            self.memo.stats.applied_partial += 1
            until = now + partial_ns
        self._freeze(part, st, Frozen(group=-1, since_ns=now, until_ns=until, rates=hit.rates, memo=hit,
                                     rate_steps=steps), now)

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
            self.stats.episodes_watched += 1
            episode = Episode(graph, now, {**left, **{f: self.flow_sizes[f] for f in added}},
                              {**{f: self.table.GetDelivered(f) for f in flows}, **{f: 0 for f in added}},
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
            self._abandon(episode, "successor")
            return
        episode.ends[flow] = now - episode.formed_ns + episode.leads[flow]
        episode.states[flow] = self._congestion_state(flow)
        if len(episode.ends) == len(episode.left):
            self.stats.episodes_completed += 1
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

    def _abandon_episodes(self, pids, why: str, keep: Episode | None = None) -> None:
        """Something (`why`, one of EPISODE_WATCH_ENDS) touched these partitions: the episodes
        watched in them are not kept (but `keep`, which the flow touching them joins as expected)."""
        if self.episode_of:
            for pid in pids:
                for flow in self.parts.by_id[pid].flows:
                    episode = self.episode_of.get(flow)
                    if episode is not None and episode is not keep:
                        self._abandon(episode, why)

    def _abandon(self, episode: Episode, why: str) -> None:
        """End the watch of `episode`, reached through episode_of or expected_in: it leaves both,
        so no episode is given up twice."""
        self.stats.episodes_given_up[why] += 1
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
            rates[f] = (self.table.GetDelivered(f) - base) / max(1, now - since)
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
        now_bytes = self.table.GetDelivered(flow)
        return (now_bytes - int(self.delivered[n - back, flow])) / (now - int(self.times[n - back]))

    def _owed(self, flow: int, rate: float) -> float:
        """Bytes of `flow` delivered, plus those on the wire at `rate` (bytes per ns) for its lag."""
        return self.table.GetDelivered(flow) + rate * self.lag_ns[self.conn_of[flow]]

    def _credited_from(self, flow: int, rate: float, unsent: int) -> float:
        """Where a record's transient bytes of `flow` start counting, when its partition forms. On
        RDMA its bytes sent (delivered or in flight): a hit freezes the flows' packets in flight
        where they are, and they arrive after the thaw; counting from the bytes delivered credited
        them twice (gpt-bench-dcqcn's first ring steps ended 1.8 us early in a warm run, 0.9 us
        after; moe-bench-dcqcn's iteration error 0.60 -> 0.20 % warm). On TCP the bytes delivered
        and those on the wire at `rate` (0 for a young flow): counting its bytes sent made
        gpt-bench's cold memo error 3.4 % / 26 % -> 4.2 % / 41 %, iteration 0.6 -> 2.7 %."""
        if self.net.rdma:
            return self.flow_sizes[flow] - self.table.GetSkipped(flow) - unsent
        return self._owed(flow, rate)


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
