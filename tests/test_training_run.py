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


# ---- several jobs on one fabric --------------------------------------------------------------------

TWO_JOBS = {
    "name": "two-jobs",
    "topology": {"kind": "roft", "servers": 8, "gpus_per_server": 4, "servers_per_leaf": 4, "spines": 2,
                 "host_link": {"rate": "100Gbps", "delay": "1us"}, "fabric_link": {"rate": "100Gbps", "delay": "1us"}},
    "jobs": [{"preset": "gpt-tiny", "name": "a"}, {"preset": "gpt-tiny", "name": "b", "first_host": 16, "start": "20us"}],
    "transport": {"kind": "rdma"},
}


def test_two_jobs_share_the_fabric_each_on_its_own_gpus(tmp_path):
    """`jobs`: two gpt-tiny trainings on one 32-GPU ROFT, the second on hosts 16-31 from 20 us:
    each job's flows stay on its GPUs, carry its index and name, and each gets its own iteration
    row; job a alone on the fabric runs as the same training given as `training`."""
    from bridge import api

    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump(TWO_JOBS))
    both = api.run(path, tmp_path / "both")
    flows = both.flows
    assert set(flows.job) == {0, 1} and len(flows) == 2 * 96
    for job, hosts in ((0, range(0, 16)), (1, range(16, 32))):
        mine = flows[flows.job == job]
        assert set(mine.src) <= set(hosts) and set(mine.dst) <= set(hosts)
        assert mine.group.str.startswith(("a/", "b/")[job]).all()
    assert flows[flows.job == 1].start_ns.min() >= 20_000
    assert list(zip(both.iterations.job, both.iterations.iteration)) == [(0, 0), (1, 0)]
    assert both.iterations.start_ns[1] >= 20_000

    alone = {**TWO_JOBS, "jobs": TWO_JOBS["jobs"][:1]}
    single = {k: v for k, v in TWO_JOBS.items() if k != "jobs"} | {"training": {"preset": "gpt-tiny"}}
    results = []
    for name, data in (("alone", alone), ("single", single)):
        p = tmp_path / f"{name}.yaml"
        p.write_text(yaml.safe_dump(data))
        results.append(api.run(p, tmp_path / name))
    assert results[0].flows.end_ns.tolist() == results[1].flows.end_ns.tolist()


@pytest.mark.parametrize("job, field, words", [
    ({"preset": "gpt-tiny", "first_host": 8}, "jobs[1].first_host", ["include host 8 of job 'a'"]),
    ({"preset": "gpt-tiny", "first_host": 18}, "jobs[1].first_host", ["inside a server", "gpus_per_server=4"]),
    ({"preset": "gpt-tiny", "first_host": 24}, "jobs[1].first_host", ["16 GPUs from host 24", "32 hosts"]),
    ({"preset": "gpt-tiny", "first_host": 16, "parallelism": {"dp": 8}}, "jobs[1].first_host", ["64 GPUs"]),
    ({"preset": "gpt-tiny", "first_host": 16, "name": "a"}, "jobs[1].name", ["'a' names another job"]),
    ({"preset": "gpt-tiny", "first_host": 16, "start": "-1us"}, "jobs[1].start", ["before the run starts"]),
    ({"preset": "gpt-tiny", "first_host": 16, "parallelism": {"pp": 3}}, "jobs[1].model.layers", ["pp=3"]),
])
def test_job_errors_name_the_job(tmp_path, job, field, words):
    from bridge.errors import ScenarioError
    from bridge.scenario import load_scenario

    data = {**TWO_JOBS, "jobs": [TWO_JOBS["jobs"][0], job]}
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError) as e:
        scenario = load_scenario(path)
        build_workload(scenario, build_topology(scenario.topology))
    assert e.value.field == field and "\n" not in str(e.value)
    for w in words:
        assert w in e.value.message
