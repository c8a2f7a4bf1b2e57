"""Grow a `Workload` DAG task by task: compute timers, sends, ring collectives and all-to-alls.

Shared by the training generator and the AICB importer. Collectives are decomposed into point-to-point
flows the way NCCL's ring and all-to-all do it. A transfer between two GPUs of the same server rides
NVLink, which is not simulated: it emits no flow, and the data counts as arrived as soon as the sender
had it, so dependency chains stay intact (as if NVLink were infinitely fast).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from bridge.workload.dag import ComputeTask, FlowTask, Task

Deps = tuple[int, ...]


def merge(*parts: Iterable[int]) -> Deps:
    """Union of dependency lists, sorted, without duplicates."""
    return tuple(sorted(set().union(*parts)))


def split_even(size: int, parts: int) -> list[int]:
    """Split `size` bytes into `parts` chunks differing by at most one byte (larger ones first)."""
    base, extra = divmod(size, parts)
    return [base + (i < extra) for i in range(parts)]


class DagBuilder:
    """Appends tasks with dense ids; every dependency refers to a task already appended."""

    def __init__(self, server_of: Callable[[int], int | None]):
        self.tasks: list[Task] = []
        self._server_of = server_of   # host -> server index, or None when unknown (never NVLink)

    def compute(self, host: int, duration_ns: int, deps: Iterable[int], *, iteration: int,
                label: str) -> Deps:
        """Busy `host` for `duration_ns`; return the deps meaning "done"."""
        task_id = len(self.tasks)
        self.tasks.append(ComputeTask(task_id, host, duration_ns, merge(deps),
                                      iteration=iteration, label=label))
        return (task_id,)

    def nvlink(self, src: int, dst: int) -> bool:
        """True if src and dst are GPUs of the same server (their traffic stays off the network)."""
        server = self._server_of(src)
        return server is not None and server == self._server_of(dst)

    def send(self, src: int, dst: int, size: int, deps: Iterable[int], *, iteration: int,
             collective: str, group: str, step: int) -> Deps:
        """Move `size` bytes from src to dst after `deps`; return the deps meaning "arrived"."""
        if self.nvlink(src, dst) or size <= 0:
            return merge(deps)
        task_id = len(self.tasks)
        self.tasks.append(FlowTask(task_id, src, dst, size, merge(deps), iteration=iteration,
                                   collective=collective, group=group, step=step,
                                   reuse_connection=True))
        return (task_id,)

    def ring(self, ring: list[int], size: int, start: Mapping[int, Deps], *, phases: int,
             iteration: int, collective: str, group: str) -> tuple[dict[int, Deps], dict[int, Deps]]:
        """Ring collective over hosts `ring` (in ring order) on a `size`-byte buffer.

        `phases` is 2 for all-reduce (reduce-scatter then all-gather: 2(N-1) steps) and 1 for a lone
        reduce-scatter or all-gather (N-1 steps). In step k the rank at ring position p sends chunk
        (p - k) mod N, of size/N bytes, to position p+1; step k+1 of a rank waits for the chunk that
        arrived at it in step k. Returns (first_send, done): per host, the deps meaning "my step-0
        send has gone" and "the last chunk has arrived at me".
        """
        n = len(ring)
        if n == 1:
            return dict(start), dict(start)
        chunks = split_even(size, n)
        ready = {h: start[h] for h in ring}
        first_send: dict[int, Deps] = {}
        for k in range(phases * (n - 1)):
            arrived = {}
            for p, src in enumerate(ring):
                dst = ring[(p + 1) % n]
                arrived[dst] = self.send(src, dst, chunks[(p - k) % n], ready[src],
                                         iteration=iteration, collective=collective, group=group,
                                         step=k)
                if k == 0:
                    first_send[src] = arrived[dst]
            ready = arrived
        return first_send, ready

    def all_to_all(self, members: list[int], pair_size: int, start: Mapping[int, Deps], *,
                   iteration: int, collective: str, group: str, step: int) -> dict[int, Deps]:
        """Every member sends `pair_size` bytes to every other member; self-traffic is local.

        Returns, per member, the deps meaning "everything addressed to me has arrived".
        """
        incoming: dict[int, list[int]] = {h: [] for h in members}
        for src in members:
            for dst in members:
                if dst != src:
                    incoming[dst].extend(self.send(src, dst, pair_size, start[src],
                                                   iteration=iteration, collective=collective,
                                                   group=group, step=step))
        return {h: merge(incoming[h], start[h]) for h in members}
