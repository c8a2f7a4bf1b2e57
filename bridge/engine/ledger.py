"""Where the events an accelerated run still simulates go (`--explain-events`).

After each run slice, the partition-tag simulator's event log (each event's tag) is read and every
event is counted against the partition holding its tag then, by what the engine was doing with that
partition and by the collectives of its flows: a user sees whether the events left are spent
recording transients or episodes the memo missed (a warm store may hit them), or simulating
partitions no record could serve. Off by default (a diagnostic): the simulator then keeps every
event's tag until it is read (moe-8x7b-hpcc warm: 34.1 s loop with it, 34.4 s without, separate runs).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from .partitions import Partitions

CHUNK = 1 << 16
# What the engine did with a partition while its events ran: watched it to record an episode or
# a transient (the memo missed), or simulated it otherwise: after it formed, while the steady test
# has not passed (memo off, or waiting), because a flow of it was too near its end to look it up
# (ending) or, after a miss, to record it (too short), a QP's rate steps up within min_freeze
# (rate step), or after a thaw (until it is steady again); or ran events of a frozen one something
# thawed within the slice.
MODES = ("watched_episode", "watched_transient", "simulated_formed", "simulated_ending",
         "simulated_too_short", "simulated_rate_step", "simulated_after_thaw", "skip_back", "unattributed")


class EventLedger:
    """Counts of events per (mode, collectives), e.g. ("watched_episode", "ep+pp")."""

    def __init__(self, sim, n_ports: int, flow_kinds: list[str]):
        self.sim = sim
        self.n_ports = n_ports
        self.flow_kinds = flow_kinds
        self.counts: Counter[tuple[str, str]] = Counter()
        self._ts = np.zeros(CHUNK, dtype=np.int64)
        self._ctx = np.zeros(CHUNK, dtype=np.uint32)
        self._tags = np.zeros(CHUNK, dtype=np.uint32)
        sim.EnableLog(True)

    def read(self, parts: Partitions, mode_of) -> None:
        """Count the events logged since the last read; mode_of(partition id) says what the engine
        was doing with that partition during the slice."""
        while True:
            n = self.sim.ReadLog(self._ts, self._ctx, self._tags, CHUNK)
            if n == 0:
                return
            tags, counts = np.unique(self._tags[:n], return_counts=True)
            keys: dict[int, tuple[str, str]] = {}      # partition id -> (mode, collectives)
            for tag, count in zip(tags.tolist(), counts.tolist()):
                pid = self._partition(parts, tag)
                if pid is None:
                    self.counts["unattributed", "-"] += count
                    continue
                if pid not in keys:
                    kinds = "+".join(sorted({self.flow_kinds[f] for f in parts.by_id[pid].flows}))
                    keys[pid] = (mode_of(pid), kinds)
                self.counts[keys[pid]] += count

    def _partition(self, parts: Partitions, tag: int) -> int | None:
        if tag < self.n_ports:
            return parts.of_port.get(tag)
        users = parts.host_users.get(tag - self.n_ports)   # a host's node tag
        return parts.of_flow.get(next(iter(users))) if users else None

    def summary(self) -> dict:
        """mode -> {"events": total, "by_collectives": {collectives: events}}, largest first."""
        out = {}
        for mode in MODES:
            rows = sorted(((kinds, n) for (m, kinds), n in self.counts.items() if m == mode), key=lambda x: (-x[1], x[0]))
            if rows:
                out[mode] = {"events": sum(n for _, n in rows), "by_collectives": dict(rows)}
        return out
