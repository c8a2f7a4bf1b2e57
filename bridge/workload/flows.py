"""Loose flows: a scenario's flow list as a `Workload`, and the HPCC flow.txt importer.

No ns-3 here. A loose flow is released at its start time, or when the flows it comes after have
completed, if later.
"""

from __future__ import annotations

import heapq
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from bridge.errors import ScenarioError
from bridge.topology import read_lines
from bridge.workload.dag import FlowTask, Workload

if TYPE_CHECKING:
    from bridge.scenario.schema import Scenario

_MAX_SIZE = 2**64 - 1    # ns-3 BulkSendApplication::MaxBytes is uint64
_MAX_TIME_NS = 2**63 - 1  # ns-3 Time is an int64 count of ns


class HpccFlow(NamedTuple):
    """One flow of an HPCC flow.txt, with the (1-based) line it came from."""

    line: int
    src: int
    dst: int
    size_bytes: int
    start_ns: int


def load_flows(scenario: Scenario) -> Workload:
    """The scenario's loose flows as FlowTasks, ordered by (start, order given) with each after
    the flows it comes after; id = position in that order.

    PRECONDITION: `scenario` comes from `load_scenario`, so its flows are valid (each comes after
    earlier flows of the list only).
    Raises ScenarioError if the scenario has no loose flows (it is a training scenario).
    """
    if scenario.flows is None:
        raise ScenarioError(scenario.source_path, "flows",
                            "this scenario has no loose flows (its workload is training)")
    flows = scenario.flows
    waiting = [len(set(f.after)) for f in flows]
    dependents: list[list[int]] = [[] for _ in flows]
    for i, f in enumerate(flows):
        for j in set(f.after):
            dependents[j].append(i)
    ready = [(f.start, i) for i, f in enumerate(flows) if not waiting[i]]
    heapq.heapify(ready)
    task_of: dict[int, int] = {}      # position in the list -> task id
    while ready:
        _, i = heapq.heappop(ready)
        task_of[i] = len(task_of)
        for d in dependents[i]:
            waiting[d] -= 1
            if not waiting[d]:
                heapq.heappush(ready, (flows[d].start, d))
    tasks = [FlowTask(id=task_of[i], src=f.src, dst=f.dst, size=f.size, release_ns=f.start,
                      deps=tuple(sorted(task_of[j] for j in set(f.after))), collective="flow",
                      reuse_connection=scenario.transport.persistent_connections)
             for i, f in enumerate(flows)]
    return Workload(tasks=sorted(tasks, key=lambda t: t.id))


def read_hpcc_flows(file: Path, label: str | None = None) -> list[HpccFlow]:
    """Read an HPCC flow.txt.

    Format: line 1 the number of flows; then one flow per line,
    "src dst priority_group dst_port size_bytes start_seconds" (e.g. "0 1 3 100 200000 0.000001").
    priority_group and dst_port are checked to be ints and then ignored: they only matter for
    HPCC's RDMA queues. Start times are rounded to the nearest ns. Blank lines are skipped.
    Host ids are not checked here (the scenario loader checks them against the topology).
    Raises ScenarioError naming `label` (default: the path), the line and the column.
    """
    label = label or str(file)
    lines = read_lines(file, label)

    def fail(line: int, column: str, message: str):
        raise ScenarioError(None, f"{label} line {line}: {column}", message)

    if not lines:
        raise ScenarioError(None, label, "file is empty (expected the number of flows first)")
    line_no, head = lines[0]
    if len(head) != 1 or not _is_uint(head[0]):
        fail(line_no, "count", f"expected the number of flows as one int, got {' '.join(head)!r}")
    body = lines[1:]
    if int(head[0]) != len(body):
        fail(line_no, "count", f"says {head[0]} flows but the file has {len(body)}")

    flows = []
    for line_no, toks in body:
        if len(toks) != 6:
            fail(line_no, "flow", "expected 'src dst priority_group dst_port size_bytes "
                 f"start_seconds', got {' '.join(toks)!r}")
        for column, tok in zip(("src", "dst", "priority_group", "dst_port", "size_bytes"), toks):
            if not _is_uint(tok):
                fail(line_no, column, f"{tok!r} is not a non-negative int")
        size = int(toks[4])
        if not 0 < size <= _MAX_SIZE:
            fail(line_no, "size_bytes", f"{toks[4]} must be in 1..{_MAX_SIZE}")
        start = _seconds_to_ns(toks[5])
        if start is None or not 0 <= start <= _MAX_TIME_NS:
            fail(line_no, "start_seconds", f"{toks[5]!r} is not a time in seconds >= 0")
        flows.append(HpccFlow(line_no, int(toks[0]), int(toks[1]), size, start))
    return flows


def _is_uint(tok: str) -> bool:
    return tok.isascii() and tok.isdigit()


def _seconds_to_ns(tok: str) -> int | None:
    try:
        seconds = Decimal(tok)
        if not seconds.is_finite() or abs(seconds) > 10**12:
            return None
        return int((seconds * 10**9).to_integral_value(rounding=ROUND_HALF_UP))
    except ArithmeticError:  # decimal.InvalidOperation for a token that is not a number
        return None
