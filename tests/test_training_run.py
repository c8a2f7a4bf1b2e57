"""Training DAGs executed on real ns-3: every dependency honoured, no hidden executor delay."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bridge.engine.executor import Executor
from bridge.ns3.network import build_network, configure_transport, segment_size
from bridge.report.tables import IdealFct, iterations_frame
from bridge.scenario import parse_scenario_dict
from bridge.simulation import build_workload
from bridge.topology import build_topology
from bridge.workload.dag import ComputeTask

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def h():
    from bridge.ns3.loader import load

    return load()


def execute(h, name: str, topology: dict | None = None, parallelism: dict | None = None, stragglers=(),
            **transport):
    path = ROOT / "scenarios" / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    data["topology"].update(topology or {})
    if parallelism:
        data["training"]["parallelism"] = parallelism
    if stragglers:
        data["training"]["stragglers"] = list(stragglers)
    data["transport"] = {**data.get("transport", {}), **transport}
    scenario = parse_scenario_dict(data, path)
    topology = build_topology(scenario.topology)
    workload = build_workload(scenario, topology)
    configure_transport(h, scenario.transport, scenario.seed)
    net = build_network(h, topology, scenario.transport, len(workload.flows))
    try:
        run = Executor(workload, net, 10**9).run()
    finally:
        h.ns.Simulator.Destroy()
    return scenario, topology, workload, run


@pytest.mark.parametrize("name", ["gpt-tiny", "moe-tiny"])
def test_every_task_starts_when_its_last_dependency_finishes(h, name):
    _, _, workload, run = execute(h, name)
    assert run.stop_reason == "done" and not run.unfinished
    for task in workload.tasks:
        ready = max([int(run.end_ns[d]) for d in task.deps] + [run.workload_start_ns, task.release_ns])
        assert run.start_ns[task.id] == ready, task
        if isinstance(task, ComputeTask):
            assert run.end_ns[task.id] == ready + task.duration_ns


@pytest.mark.parametrize("name", ["gpt-tiny", "moe-tiny"])
def test_flows_of_a_connection_reach_its_head_one_after_another(h, name):
    _, _, workload, run = execute(h, name)
    on_conn: dict[int, list[int]] = {}
    for f in workload.flows:
        on_conn.setdefault(run.connection_of[f.id], []).append(f.id)
    queued = 0
    for ids in on_conn.values():
        ids.sort(key=lambda i: (run.head_ns[i], run.end_ns[i]))
        for prev, cur in zip([None] + ids, ids):
            assert run.start_ns[cur] <= run.head_ns[cur] <= run.end_ns[cur]
            if run.head_ns[cur] > run.start_ns[cur]:  # queued: it heads the connection when prev ends
                queued += 1
                assert prev is not None and run.head_ns[cur] == run.end_ns[prev]
            else:
                assert prev is None or run.end_ns[prev] <= run.start_ns[cur]
    assert queued > 0  # ring steps queue behind the previous step on the same host pair


def test_uncongested_gpt_tiny_iteration_matches_the_analytical_time(h):
    # Data parallel only, one gradient bucket, every rail on one leaf: the iteration is compute,
    # then one ring all-reduce per rail whose flows never share a link and see equal paths. Slow
    # start is the one TCP effect an analytical model leaves out: the window is open at once.
    scenario, topology, workload, run = execute(
        h, "gpt-tiny", {"servers_per_leaf": 4}, parallelism={"tp": 4, "pp": 1, "dp": 4, "micro_batches": 2, "bucket_size": "1GB"},
        initial_cwnd=1000)
    assert {f.collective for f in workload.flows} == {"dp_allreduce"}
    ideal = IdealFct(topology, scenario.transport.mtu, segment_size(scenario.transport))
    finish: dict[int, int] = {}
    for task in workload.tasks:  # critical path: compute + every flow at line rate + latencies
        duration = (task.duration_ns if isinstance(task, ComputeTask)
                    else ideal(task.src, task.dst, task.size, handshake=False))
        ready = max([finish[d] for d in task.deps] + [run.workload_start_ns, task.release_ns])
        finish[task.id] = ready + duration
    analytical = max(finish.values()) - run.workload_start_ns
    measured = int(iterations_frame(workload, run).time_ns[0])
    assert abs(measured - analytical) / analytical < 0.01, (measured, analytical)


def test_a_straggler_stretches_the_iteration(h):
    """One GPU computing 3x slower (a straggler) holds up its pipeline and its rings: the
    iteration takes longer, by part of its extra compute (the rest falls into pipeline bubbles)
    and not by more than all of it."""
    _, _, workload, base = execute(h, "gpt-tiny")
    _, _, slow_workload, slow = execute(h, "gpt-tiny", stragglers=[{"hosts": [0], "slowdown": 3}])
    assert slow.stop_reason == "done" and not slow.unfinished
    extra = sum(2 * t.duration_ns for t in workload.tasks if isinstance(t, ComputeTask) and t.host == 0)
    before = int(iterations_frame(workload, base).time_ns[0])
    after = int(iterations_frame(slow_workload, slow).time_ns[0])
    assert 0.25 * extra < after - before <= 1.05 * extra
