"""The workload as a DAG of tasks: network flows and compute timers with dependencies.

Loose flow lists and LLM-training iterations both become a `Workload`; the engine's executor starts
each task at max(release time, finish of its last dependency). No ns-3 here.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FlowTask:
    """Send `size` bytes from host `src` to host `dst` (node ids) once all `deps` finished."""

    id: int
    src: int
    dst: int
    size: int
    deps: tuple[int, ...] = ()
    release_ns: int = 0           # earliest start (a loose flow's start time)
    iteration: int = -1           # -1 for loose flows
    collective: str = "flow"      # dp_allreduce | pp_fwd | pp_bwd | ep_dispatch | ep_combine | ...
    group: str = ""               # e.g. "dp/pp0/tp3"
    step: int = -1                # ring step, micro-batch index, ...
    reuse_connection: bool = False  # training traffic rides one persistent TCP connection per (src, dst)
    job: int = 0                  # which training job (scenario `jobs`), 0 when there is one


@dataclass(frozen=True)
class ComputeTask:
    """Busy `host`'s GPU for `duration_ns` once all `deps` finished."""

    id: int
    host: int
    duration_ns: int
    deps: tuple[int, ...] = ()
    release_ns: int = 0
    iteration: int = -1
    label: str = ""               # e.g. "fwd/mb3/stage1"
    job: int = 0


Task = FlowTask | ComputeTask


@dataclass
class Workload:
    """Tasks with ids 0..n-1 (tasks[i].id == i), dependencies pointing to lower ids."""

    tasks: list[Task]
    iterations: int = 0           # 0 for a loose flow list
    meta: dict = field(default_factory=dict)

    @property
    def flows(self) -> list[FlowTask]:
        return [t for t in self.tasks if isinstance(t, FlowTask)]
