"""Topology builders: node/link/host counts, wiring, connectivity, the HPCC importer."""

from pathlib import Path

import networkx as nx
import pytest

from bridge.errors import ScenarioError
from bridge.scenario import parse_scenario_dict
from bridge.topology import (
    MAX_NODES, build_topology, fat_tree, leaf_spine, read_hpcc_topology, roft,
)

G100 = (100 * 10**9, 1000)  # (rate_bps, delay_ns)
RING8 = Path("/work/shared/reference-data/hpcc-sim/ring8/topology.txt")
LINK = {"rate": "100Gbps", "delay": "1us"}


def _spec(**topology):
    """The topology spec of a minimal scenario, as the loader resolves it."""
    data = {"name": "t", "topology": topology, "flows": [{"src": 0, "dst": 1, "size": "1KB"}]}
    return parse_scenario_dict(data, None).topology


def test_leaf_spine_2x2x4_counts():
    t = leaf_spine(2, 2, 4, G100, G100)
    assert (len(t.hosts), t.n_nodes, len(t.links)) == (8, 12, 12)
    assert t.hosts == list(range(8)) and t.switches == [8, 9, 10, 11]
    assert nx.is_connected(t.graph)


def test_leaf_spine_wiring():
    t = leaf_spine(2, 2, 4, G100, G100)
    g = t.graph
    for h in range(8):
        assert list(g.neighbors(h)) == [8 + h // 4]
    for leaf in (8, 9):
        assert sorted(g.neighbors(leaf)) == sorted([*range((leaf - 8) * 4, (leaf - 7) * 4), 10, 11])
    assert t.node_names[8] == "leaf0" and t.node_names[11] == "spine1"


def test_fat_tree_k4_counts():
    t = fat_tree(4, G100, G100)
    assert (len(t.hosts), len(t.switches), len(t.links)) == (16, 20, 48)
    g = t.graph
    assert all(g.degree(s) == 4 for s in t.switches)
    assert all(g.degree(h) == 1 for h in t.hosts)
    assert nx.is_connected(g)


def test_fat_tree_k2_is_smallest():
    t = fat_tree(2, G100, G100)
    assert (len(t.hosts), len(t.switches), len(t.links)) == (2, 5, 6)
    assert nx.is_connected(t.graph)


def test_fat_tree_pods_and_cores():
    t = fat_tree(4, G100, G100)
    g = t.graph
    edge0, agg0, core0 = 16, 24, 32
    assert list(g.neighbors(5)) == [edge0 + 2]  # host 5: pod 1, edge 2
    # agg j of every pod reaches cores 2j, 2j+1
    for pod in range(4):
        for j in range(2):
            cores = sorted(n for n in g.neighbors(agg0 + 2 * pod + j) if n >= core0)
            assert cores == [core0 + 2 * j, core0 + 2 * j + 1]


def test_roft_counts_hand_computed():
    # 4 servers x 2 GPUs, 2 servers per leaf -> 2 groups x 2 rails = 4 leaves; 3 spines.
    # nodes 8 + 4 + 3 = 15; links 8 host links + 4 * 3 leaf-spine = 20.
    t = roft(4, 2, 2, 3, G100, G100)
    assert (len(t.hosts), t.n_nodes, len(t.links)) == (8, 15, 20)
    assert nx.is_connected(t.graph)


def test_roft_host_to_rail_leaf():
    t = roft(4, 2, 2, 3, G100, G100)
    g = t.graph
    leaf0 = 8
    for s in range(4):
        for gpu in range(2):
            h = s * 2 + gpu
            assert t.host_coords[h] == (s, gpu)
            assert list(g.neighbors(h)) == [leaf0 + (s // 2) * 2 + gpu]
    assert t.node_names[leaf0 + 3] == "leaf1/rail1"
    assert t.node_names[3] == "server1/gpu1"


def test_roft_partial_last_group():
    t = roft(3, 2, 2, 1, G100, G100)  # groups: servers {0,1}, {2}
    assert t.n_nodes == 6 + 4 + 1
    assert list(t.graph.neighbors(5)) == [6 + 2 + 1]  # server 2, gpu 1 -> group 1, rail 1


def test_roft_servers_per_leaf_defaults_to_all_servers():
    spec = _spec(kind="roft", servers=2, gpus_per_server=4, spines=2,
                 host_link=LINK, fabric_link=LINK)
    assert spec.servers_per_leaf == 2
    t = build_topology(spec)
    assert (len(t.hosts), t.n_nodes, len(t.links)) == (8, 14, 16)


def test_leaf_spine_oversubscription_derives_fabric_rate():
    # 4 hosts x 100G per leaf over 2 spines at 4:1 -> 50G per fabric link, host delay.
    spec = _spec(kind="leaf-spine", leaves=2, spines=2, hosts_per_leaf=4,
                 host_link={"rate": "100Gbps", "delay": "2us"}, oversubscription=4.0)
    assert (spec.fabric_link.rate, spec.fabric_link.delay) == (50 * 10**9, 2000)
    fabric = [link for link in build_topology(spec).links if link.a >= 8]
    assert {link.rate_bps for link in fabric} == {50 * 10**9}


def test_leaf_spine_oversubscription_agreeing_with_fabric_rate_passes():
    spec = _spec(kind="leaf-spine", leaves=2, spines=2, hosts_per_leaf=4, host_link=LINK,
                 fabric_link={"rate": "100.5Gbps", "delay": "1us"}, oversubscription=2.0)
    assert spec.fabric_link.rate == 100_500_000_000


def test_hpcc_ring8_import():
    t = read_hpcc_topology(RING8)
    assert (t.n_nodes, len(t.links)) == (12, 12)
    assert t.hosts == list(range(8)) and t.switches == [8, 9, 10, 11]
    assert {(link.rate_bps, link.delay_ns) for link in t.links} == {(100 * 10**9, 1000)}
    assert t.graph.has_edge(0, 8) and t.graph.has_edge(9, 11)
    assert nx.is_connected(t.graph)


def test_build_topology_too_large_fails():
    spec = _spec(kind="fat-tree", k=4, host_link=LINK, fabric_link=LINK)
    with pytest.raises(ScenarioError, match=f"at most {MAX_NODES} nodes"):
        build_topology(spec.model_copy(update={"k": 200}))


def test_graph_attributes():
    g = leaf_spine(1, 1, 2, G100, (400 * 10**9, 500)).graph
    assert g.nodes[0] == {"name": "host0", "host": True}
    assert g.edges[2, 3] == {"rate_bps": 400 * 10**9, "delay_ns": 500}
