"""The C++ patches on real ns-3, in this process: ECMP, flow transport, skipping, probe, executor."""

from __future__ import annotations

import numpy as np
import pytest

from bridge.engine.executor import Executor
from bridge.ns3.network import build_network, configure_transport
from bridge.scenario import parse_scenario_dict
from bridge.topology import build_topology
from bridge.workload.dag import ComputeTask, FlowTask, Workload

LINK = {"rate": "100Gbps", "delay": "1us"}


@pytest.fixture(scope="module")
def h():
    from bridge.ns3.loader import load

    return load()


@pytest.fixture
def simulation(h):
    """Build a network for a topology dict; tear the simulator down after the test."""
    built = []

    def make(topology: dict, n_flows: int, transport: dict | None = None, seed: int = 1):
        scenario = parse_scenario_dict({"name": "t", "seed": seed, "topology": topology,
                                        "transport": transport or {},
                                        "flows": [{"src": 0, "dst": 1, "size": 1}]}, None)
        topo = build_topology(scenario.topology)
        configure_transport(h, scenario.transport, seed)
        net = build_network(h, topo, scenario.transport, n_flows)
        built.append(net)
        return net, topo

    yield make
    h.ns.Simulator.Destroy()
    built.clear()


def leaf_spine(leaves=2, spines=4, hosts_per_leaf=8):
    return {"kind": "leaf-spine", "leaves": leaves, "spines": spines, "hosts_per_leaf": hosts_per_leaf,
            "host_link": LINK, "fabric_link": LINK}


def spine_ports(net, topo) -> list[int]:
    """Ports of leaf0's uplinks (leaf -> spine direction)."""
    leaf0 = topo.node_names.index("leaf0")
    return [2 * i for i, link in enumerate(topo.links)
            if link.a == leaf0 and topo.node_names[link.b].startswith("spine")]


def tx_packets(net) -> np.ndarray:
    out = np.zeros(net.n_ports, dtype=np.uint64)
    net.builder.ReadPortTxPackets(out)
    return out


def test_ecmp_keeps_a_flow_on_one_path(simulation):
    net, topo = simulation(leaf_spine(), 1)
    run = Executor(Workload([FlowTask(0, 0, 8, 2_000_000)]), net, None).run()
    assert run.stop_reason == "done"
    uplinks = tx_packets(net)[spine_ports(net, topo)]
    assert (uplinks > 0).sum() == 1  # every data packet of the connection took the same spine


def test_traced_paths_are_the_ports_packets_cross(simulation, h):
    net, topo = simulation({"kind": "fat-tree", "k": 4, "host_link": LINK, "fabric_link": LINK}, 4)
    pairs = [(0, 15), (3, 8), (5, 6), (12, 1)]
    conns = [int(net.flows.OpenConnection(s, d)) for s, d in pairs]
    paths = []
    for flow, conn in enumerate(conns):
        out = np.zeros(64, dtype=np.uint32)
        n = int(net.flows.GetConnectionPath(conn, out, len(out)))
        paths.append(set(out[:n].tolist()))
        net.flows.StartFlow(flow, conn, 300_000)
    assert [len(p) for p in paths] == [12, 12, 8, 12]  # cross-pod: 6 hops each way; same pod: 4
    table = net.flows.GetTable()
    while any(table.GetEndNs(i) < 0 for i in range(4)) and net.now_ns() < 10**9:
        h.wh.RunUntil(10**9)
    used = set(np.flatnonzero(tx_packets(net)).tolist())
    assert used == set().union(*paths)


def test_ecmp_spreads_flows_over_spines(simulation):
    net, topo = simulation(leaf_spine(), 16)
    flows = [FlowTask(i, i % 8, 8 + (i % 8), 200_000) for i in range(16)]
    run = Executor(Workload(flows), net, None).run()
    assert run.stop_reason == "done" and not run.unfinished
    uplinks = tx_packets(net)[spine_ports(net, topo)]
    assert (uplinks > 0).sum() >= 3  # 16 connections hashed over 4 spines
    table = net.flows.GetTable()
    assert [int(table.GetDelivered(i)) for i in range(16)] == [200_000] * 16


@pytest.mark.parametrize("kind", ["newreno", "cubic"])
def test_loss_based_transports_deliver_an_incast(simulation, kind):
    net, _ = simulation(leaf_spine(1, 1, 8), 7, {"kind": kind, "queue_size": 20})
    flows = [FlowTask(i, i + 1, 0, 300_000) for i in range(7)]
    run = Executor(Workload(flows), net, None).run()
    assert not run.unfinished
    table = net.flows.GetTable()
    assert all(int(table.GetDelivered(i)) == 300_000 for i in range(7))


def test_skip_shrinks_the_budget_and_the_flow_still_completes(simulation, h):
    net, _ = simulation(leaf_spine(1, 1, 2), 1)
    conn = net.flows.OpenConnection(0, 1)
    net.flows.StartFlow(0, conn, 10_000_000)
    h.wh.RunUntil(100_000)                      # 100 us: ~1.2 MB delivered at 100 Gbps
    skipped = int(net.flows.SkipFlow(0, conn, 5_000_000))
    assert skipped == 5_000_000
    h.wh.RunUntil(10**9)
    table = net.flows.GetTable()
    assert table.GetEndNs(0) > 0
    assert int(table.GetDelivered(0)) == 5_000_000
    assert int(table.GetSkipped(0)) == 5_000_000
    h.wh.RunUntil(table.GetEndNs(0) + 50_000)  # completion stops the run before the last ACK
    sender = net.flows.GetSender(conn)
    assert int(sender.GetSent()) == 5_000_000 and int(sender.GetAcked()) == 5_000_000
    # A skip can only take bytes not yet written into the socket.
    assert int(net.flows.SkipFlow(0, conn, 1)) == 0


def test_flows_on_one_connection_complete_in_order(simulation, h):
    net, _ = simulation(leaf_spine(1, 1, 2), 3)
    conn = net.flows.OpenConnection(0, 1)
    for i, size in enumerate([300_000, 1, 700_000]):
        net.flows.StartFlow(i, conn, size)
    table = net.flows.GetTable()
    while table.GetEndNs(2) < 0 and net.now_ns() < 10**9:
        h.wh.RunUntil(10**9)  # every completion stops the run
    ends = [int(table.GetEndNs(i)) for i in range(3)]
    assert 0 < ends[0] <= ends[1] <= ends[2]
    assert [int(table.GetDelivered(i)) for i in range(3)] == [300_000, 1, 700_000]


def test_probe_samples_rates_and_queues(simulation, h):
    net, _ = simulation(leaf_spine(1, 1, 5), 4)
    probe = h.wh.RateProbe(net.flows.GetTable(), net.builder, 1000)
    probe.Start(5_000)
    flows = [FlowTask(i, i + 1, 0, 1_000_000) for i in range(4)]   # 4-to-1 incast
    Executor(Workload(flows), net, None).run()
    n = int(probe.GetNSamples())
    times = np.zeros(n, dtype=np.int64)
    delivered = np.zeros((n, 4), dtype=np.uint64)
    arrived = np.zeros((n, 4), dtype=np.int64)
    queues = np.zeros((n, net.n_ports), dtype=np.uint32)
    assert int(probe.Read(times, delivered, arrived, queues, n)) == n
    assert (np.diff(times) == 5_000).all()
    assert (np.diff(delivered.astype(np.int64), axis=0) >= 0).all()
    # When the latest bytes arrived: within the sample period before each sample, once any arrived.
    some = delivered > 0
    assert ((arrived <= times[:, None]) & (arrived > times[:, None] - 5_000))[some].mean() > 0.9
    assert (arrived[~some] == -1).all()
    assert 0 < delivered[-1].sum() and delivered.max() <= 1_000_000
    assert queues.max() > 10 * 1500  # the incast builds a queue at the receiver's port


def _probe_windows(h, net, capacity: int, read_every_ns: int) -> list[tuple[np.ndarray, ...]]:
    """Two flows at 0, one at 150 us and one at 400 us into host 4, sampled every 5 us by a probe of
    `capacity` samples read every `read_every_ns` into the same arrays: (times, delivered, arrived)
    of each read."""
    table = net.flows.GetTable()
    probe = h.wh.RateProbe(table, net.builder, capacity)
    probe.Start(5_000)
    conns = [net.flows.OpenConnection(src, 4) for src in range(4)]
    starts = {0: [(0, 400_000), (1, 400_000)], 150_000: [(2, 300_000)], 400_000: [(3, 200_000)]}
    times = np.zeros(capacity, dtype=np.int64)
    delivered = np.zeros((capacity, 4), dtype=np.uint64)
    arrived = np.zeros((capacity, 4), dtype=np.int64)
    queues = np.zeros((capacity, net.n_ports), dtype=np.uint32)
    reads = []
    for t in range(0, 700_000, 10_000):
        for flow, size in starts.get(t, ()):
            net.flows.StartFlow(flow, conns[flow], size)
        while net.now_ns() < t + 10_000:
            h.wh.RunUntil(t + 10_000)          # each completion stops the run
        if (t + 10_000) % read_every_ns == 0:
            n = int(probe.Read(times, delivered, arrived, queues, capacity))
            reads.append((times[:n].copy(), delivered[:n].copy(), arrived[:n].copy()))
    return reads


def test_probe_reads_every_flow_as_sampled_whatever_its_window(simulation, h):
    # A small window, read often (flows copied only when they delivered lately), against a window
    # holding the whole run, read once: every sample of every flow the same.
    net, _ = simulation(leaf_spine(1, 1, 5), 4)
    whole = _probe_windows(h, net, 1_000, 700_000)[-1]
    h.ns.Simulator.Destroy()
    net, _ = simulation(leaf_spine(1, 1, 5), 4)
    reads = _probe_windows(h, net, 4, 10_000)
    assert len(reads) == 70 and whole[1][-1].tolist() == [400_000, 400_000, 300_000, 200_000]
    for times, delivered, arrived in reads:
        rows = np.searchsorted(whole[0], times)
        assert (whole[0][rows] == times).all()
        assert (whole[1][rows] == delivered).all() and (whole[2][rows] == arrived).all()


def test_executor_starts_dependents_at_the_finish_of_their_dependencies(simulation):
    net, _ = simulation(leaf_spine(1, 1, 4), 3)
    tasks = [FlowTask(0, 0, 1, 500_000),
             ComputeTask(1, 1, 7_000, deps=(0,)),
             FlowTask(2, 1, 2, 400_000, deps=(1,)),
             FlowTask(3, 3, 2, 100_000, release_ns=50_000),
             ComputeTask(4, 2, 1_000, deps=(2, 3))]
    run = Executor(Workload(tasks), net, None).run()
    assert run.stop_reason == "done"
    s, e = run.start_ns, run.end_ns
    assert s[1] == e[0] and e[1] == s[1] + 7_000
    assert s[2] == e[1]
    assert s[3] == 50_000
    assert s[4] == max(e[2], e[3]) and e[4] == s[4] + 1_000


def test_stop_time_leaves_flows_unfinished(simulation):
    net, _ = simulation(leaf_spine(1, 1, 2), 1)
    run = Executor(Workload([FlowTask(0, 0, 1, 50_000_000)]), net, 100_000).run()
    assert run.unfinished == [0] and run.stop_reason == "stop_time reached"
