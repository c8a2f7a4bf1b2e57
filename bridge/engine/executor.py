"""Execute a workload DAG on the ns-3 network: start each task when its dependencies finish.

Flows run in ns-3 packet by packet; compute tasks are timers kept here, in Python. ns-3 runs until
the next decision time (a release time, a compute finish, the time cap) or until a flow completes
(the sink stops the simulator after that event), so dependents start at the exact nanosecond
their last dependency finished: the executor adds no delay of its own.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..ns3.network import Ns3Network
from ..workload.dag import ComputeTask, Workload
from .fastforward import FastForward

NEVER = np.iinfo(np.int64).max


@dataclass
class Execution:
    """What happened to every task (times in ns; -1 for tasks that never started/finished)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    head_ns: np.ndarray                 # per flow: when no earlier flow of its connection was unfinished
    flow_index: dict[int, int]          # task id -> flow index in the C++ flow table
    connection_of: dict[int, int]       # task id -> connection id
    own_connection: set[int]            # flows that opened their own connection (handshake in FCT)
    workload_start_ns: int              # after persistent connections were established
    sim_time_ns: int
    events: int
    loop_s: float
    bytes_skipped: np.ndarray           # per task: bytes fast-forward skipped (0 for compute, stock)
    unfinished: list[int] = field(default_factory=list)
    stop_reason: str = "done"


ProgressFn = Callable[[int, int, int], None]   # (sim_ns, flows_done, flows_total)


class Executor:
    """Runs one workload on one built network; with `fast_forward`, steady partitions are skipped."""

    def __init__(self, workload: Workload, net: Ns3Network, stop_time_ns: int | None,
                 progress: ProgressFn | None = None, progress_every_s: float = 0.25,
                 fast_forward: FastForward | None = None, nudge_ns: int = 0, jitter_ns: int = 0,
                 jitter_seed: tuple[int, ...] = (0,), stop_requested: Callable[[], str | None] | None = None):
        self.workload = workload
        self.stop_requested = stop_requested  # polled every turn: a reason ends the run where it is
        self.nudge_ns = nudge_ns     # the first flow released starts this much later
        self.jitter_ns = jitter_ns   # each flow released starts 0..jitter_ns later (drawn from jitter_seed)
        self.jitter = np.random.default_rng(list(jitter_seed)) if jitter_ns else None
        self.net = net
        self.api = net.engine        # the loop's calls into ns-3 (bridge.ns3.engine_api)
        self.table = self.api.table
        self.ff = fast_forward
        if fast_forward is not None:
            fast_forward.known_starts = self.known_starts
            fast_forward.released_by = self.released_by
        self.stop_time_ns = stop_time_ns if stop_time_ns is not None else NEVER
        self.progress = progress
        self.progress_every_s = progress_every_s
        tasks = workload.tasks
        self.n = len(tasks)
        self.flows = workload.flows  # flow index -> task (the C++ flow table's numbering)
        self.flow_index = {t.id: i for i, t in enumerate(self.flows)}
        self.n_flows = len(self.flow_index)
        self.dependents: list[list[int]] = [[] for _ in range(self.n)]
        self.waiting = np.zeros(self.n, dtype=np.int64)
        for t in tasks:
            self.waiting[t.id] = len(t.deps)
            for d in t.deps:
                self.dependents[d].append(t.id)
        self.start_ns = np.full(self.n, -1, dtype=np.int64)
        self.end_ns = np.full(self.n, -1, dtype=np.int64)
        self.ready: list[tuple[int, int]] = []        # (release time, task id)
        self.computing: list[tuple[int, int]] = []    # (finish time, task id)
        self.connections: dict[tuple[int, int], int] = {}
        self.head_ns = np.full(self.n, -1, dtype=np.int64)
        self.connection_of: dict[int, int] = {}
        self.unfinished_on: dict[int, deque[int]] = {}   # per connection: its unfinished flows, FIFO
        self.own_connection: set[int] = set()
        self.flows_running = 0
        self.flows_done = 0
        self.done = 0
        self._completed_buf = np.zeros(4096, dtype=np.uint32)

    # -- set-up -----------------------------------------------------------------------------

    def _open_persistent_connections(self) -> None:
        """Connect every host pair of training traffic before the workload starts (as NCCL does)."""
        pairs = sorted({(t.src, t.dst) for t in self.flows if t.reuse_connection})
        if not pairs:
            return
        for pair in pairs:
            self.connections[pair] = self.api.flows.OpenConnection(*pair)
        senders = [self.api.flows.GetSender(c) for c in self.connections.values()]
        step = 1_000  # 1 us: handshakes take a few RTTs
        while not all(s.IsConnected() for s in senders):
            now = self.net.now_ns()
            if now >= self.stop_time_ns:
                raise RuntimeError("connections were not established before stop_time")
            self.api.run_until(now + step)

    # -- task life cycle --------------------------------------------------------------------

    def _release(self, task_id: int, at_ns: int) -> None:
        task = self.workload.tasks[task_id]
        at_ns = max(task.release_ns, at_ns)
        if self.nudge_ns and task_id in self.flow_index:
            at_ns, self.nudge_ns = at_ns + self.nudge_ns, 0
        if self.jitter is not None and task_id in self.flow_index:
            at_ns += int(self.jitter.integers(0, self.jitter_ns, endpoint=True))
        heapq.heappush(self.ready, (at_ns, task_id))

    def _start(self, task_id: int, now: int) -> None:
        task = self.workload.tasks[task_id]
        self.start_ns[task_id] = now
        if isinstance(task, ComputeTask):
            heapq.heappush(self.computing, (now + task.duration_ns, task_id))
            return
        if task.reuse_connection:
            conn = self.connections[(task.src, task.dst)]
        else:
            conn = self.api.flows.OpenConnection(task.src, task.dst)
            self.own_connection.add(task_id)
        self.connection_of[task_id] = conn
        queue = self.unfinished_on.setdefault(conn, deque())
        queue.append(task_id)
        heads = len(queue) == 1       # else it waits behind earlier flows of its connection
        if heads:
            self.head_ns[task_id] = now
        # A flow an episode replay expected starts inside its frozen partition, its QP held.
        held = heads and self.ff is not None and self.ff.absorbs(self.flow_index[task_id], conn, now)
        self.api.flows.StartFlow(self.flow_index[task_id], conn, task.size, kick=not held)
        if self.ff is not None:
            if heads:
                self.ff.flow_started(self.flow_index[task_id], conn, (task.src, task.dst), now)
            else:
                self.ff.flow_queued(conn)
        self.flows_running += 1

    def known_starts(self, until_ns: int) -> list[tuple[int, int, int, tuple[int, int], int]]:
        """Flows that will start by `until_ns` as the first unfinished flow of their persistent
        connection, whatever the network does until then: released already, or by a compute task
        finishing then that is the last thing they wait for. (start ns, flow index, connection,
        (src, dst), size), in start order; none under jitter or a nudge (drawn at release)."""
        if self.jitter is not None or self.nudge_ns:
            return []
        tasks = self.workload.tasks
        starts = [(at, t) for at, t in self.ready if at <= until_ns]
        for finish, compute in self.computing:
            if finish <= until_ns:
                starts += [(max(tasks[d].release_ns, finish), d) for d in self.dependents[compute]
                           if self.waiting[d] == 1 and d in self.flow_index]
        known, seen = [], set()
        for at, task_id in sorted(s for s in starts if s[0] <= until_ns):
            task = tasks[task_id]
            conn = self.connections.get((task.src, task.dst)) if task.reuse_connection else None
            if conn is None or conn in seen or self.unfinished_on.get(conn):
                seen.add(conn)
                continue          # it would queue behind another flow of its connection
            seen.add(conn)
            known.append((at, self.flow_index[task_id], conn, (task.src, task.dst), task.size))
        return known

    def released_by(self, flows: list[int], now: int) -> list[tuple[int, int, int, frozenset[int]]]:
        """Flows (not started) that the completions of `flows` (flow indices, unfinished) start:
        all else they wait for has finished, and they are released by now. (flow index, its
        persistent connection, size, the flows of `flows` it waits for), in flow order; none under
        jitter or a nudge. Whether it starts as its connection's first unfinished flow depends on
        when the flows before it on the connection end."""
        if self.jitter is not None or self.nudge_ns:
            return []
        tasks, end_ns = self.workload.tasks, self.end_ns
        members = {self.flows[f].id: f for f in flows}
        found = {}
        for task_id in members:
            for d in self.dependents[task_id]:
                task = tasks[d]
                if d in found or d not in self.flow_index or task.release_ns > now or not task.reuse_connection:
                    continue
                conn = self.connections.get((task.src, task.dst))
                waits = [dep for dep in task.deps if end_ns[dep] < 0]
                if conn is not None and all(dep in members for dep in waits):
                    found[d] = (self.flow_index[d], conn, task.size, frozenset(members[dep] for dep in waits))
        return sorted(found.values())

    def _finish(self, task_id: int, at_ns: int) -> None:
        self.end_ns[task_id] = at_ns
        self.done += 1
        for dep in self.dependents[task_id]:
            self.waiting[dep] -= 1
            if self.waiting[dep] == 0:
                self._release(dep, at_ns)

    def _collect_completed_flows(self, now: int) -> None:
        table = self.table
        by_index = self.flows
        while True:
            n = table.PopCompleted(self._completed_buf, len(self._completed_buf))
            for idx in self._completed_buf[:n].tolist():
                task_id = by_index[idx].id
                if self.end_ns[task_id] < 0:   # else its end was computed inside a frozen partition
                    self._flow_completed(task_id, table.GetEndNs(idx))
            if n < len(self._completed_buf):
                break
        if self.ff is not None:
            for idx, end in self.ff.pop_completions(now):
                self._flow_completed(by_index[idx].id, end)

    def _flow_completed(self, task_id: int, end: int) -> None:
        self.flows_running -= 1
        self.flows_done += 1
        queue = self.unfinished_on[self.connection_of[task_id]]
        queue.remove(task_id)         # the first: a connection delivers its flows in order
        successor = queue[0] if queue and self.head_ns[queue[0]] < 0 else None
        if successor is not None:
            self.head_ns[successor] = end
        if self.ff is not None:
            self.ff.flow_finished(self.flow_index[task_id], end,
                                  None if successor is None else self.flow_index[successor])
        self._finish(task_id, end)

    # -- main loop --------------------------------------------------------------------------

    def run(self) -> Execution:
        t0 = time.perf_counter()
        self._open_persistent_connections()
        workload_start = self.net.now_ns()
        for t in self.workload.tasks:
            if not t.deps:
                self._release(t.id, workload_start)
        run_until = self.api.run_until
        last_report = 0.0
        stop_reason = "done"
        now = workload_start
        while self.done < self.n:
            while self.ready and self.ready[0][0] <= now:
                self._start(heapq.heappop(self.ready)[1], now)
            if self.ff is not None:
                self.ff.prepare(now)
            next_ns = min(self.ready[0][0] if self.ready else NEVER,
                          self.computing[0][0] if self.computing else NEVER,
                          self.stop_time_ns)
            if self.ff is not None:
                next_ns = min(next_ns, self.ff.next_wakeup_ns(now, next_ns))
            if next_ns == NEVER and self.flows_running == 0:
                stop_reason = "stalled: no task can start"
                break
            if now >= self.stop_time_ns:
                stop_reason = "stop_time reached"
                break
            stop = self.stop_requested() if self.stop_requested is not None else None
            if stop:
                stop_reason = stop
                break
            now = run_until(int(next_ns))
            if self.ff is not None:
                self.ff.slice_ran(now)
            self._collect_completed_flows(now)
            while self.computing and self.computing[0][0] <= now:
                finish, task_id = heapq.heappop(self.computing)
                self._finish(task_id, finish)
            if self.ff is not None:
                self.ff.wakeup(now)
            if self.progress is not None:
                wall = time.perf_counter()
                if wall - last_report >= self.progress_every_s:
                    last_report = wall
                    self.progress(now, self.flows_done, self.n_flows)
        if self.ff is not None:
            self.ff.finish(self.net.now_ns())
        if self.progress is not None:
            self.progress(self.net.now_ns(), self.flows_done, self.n_flows)
        table = self.table
        skipped = np.zeros(self.n, dtype=np.int64)
        for task, idx in self.flow_index.items():
            skipped[task] = table.GetSkipped(idx)
        finished = self.end_ns[self.end_ns >= 0]
        sim_time = int(finished.max()) if finished.size else self.net.now_ns()
        return Execution(
            start_ns=self.start_ns, end_ns=self.end_ns, head_ns=self.head_ns, flow_index=self.flow_index,
            connection_of=self.connection_of, own_connection=self.own_connection,
            workload_start_ns=workload_start, sim_time_ns=sim_time, events=self.net.events(),
            loop_s=time.perf_counter() - t0, bytes_skipped=skipped,
            unfinished=[int(i) for i in np.flatnonzero(self.end_ns < 0)], stop_reason=stop_reason)
