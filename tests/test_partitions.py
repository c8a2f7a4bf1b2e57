"""Incremental partitions equal the from-scratch components after any start/finish/hand-over sequence."""

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.engine.partitions import Partitions, components

PORTS = st.frozensets(st.integers(0, 30), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["start", "finish", "hand-over"]), PORTS, st.integers(0, 9),
                          st.integers(0, 9)), max_size=60))
def test_incremental_partitions_equal_from_scratch(ops):
    parts = Partitions()
    active: dict[int, frozenset[int]] = {}
    hosts: dict[int, tuple[int, int]] = {}
    for flow, (op, ports, src, dst) in enumerate(ops):
        if op == "finish" and active:
            gone = sorted(active)[flow % len(active)]
            parts.remove_flow(gone)
            del active[gone], hosts[gone]
        elif op == "hand-over" and active:  # a connection's next flow takes over the finished one's ports
            gone = sorted(active)[flow % len(active)]
            before = parts.of_flow[gone]
            assert parts.replace_flow(gone, flow).id == before
            active[flow], hosts[flow] = active.pop(gone), hosts.pop(gone)
        else:
            parts.add_flow(flow, ports, (src, dst))
            active[flow], hosts[flow] = ports, (src, dst)
        assert parts.snapshot() == {frozenset(c) for c in components(active, set(active))}
        for part in parts:  # indexes agree with the partitions
            assert part.ports == set().union(*(active[f] for f in part.flows))
            assert part.hosts == {h for f in part.flows for h in hosts[f]}
            assert all(parts.of_port[p] == part.id for p in part.ports)
            assert all(parts.of_flow[f] == part.id for f in part.flows)
        assert set(parts.of_port) == set().union(*active.values()) if active else not parts.of_port


def test_merge_keeps_the_largest_id_and_split_returns_components():
    parts = Partitions()
    a = parts.add_flow(0, frozenset({1, 2}), (0, 1)).id
    parts.add_flow(1, frozenset({2, 3}), (0, 2))
    b = parts.add_flow(2, frozenset({7}), (5, 6)).id
    merged = parts.add_flow(3, frozenset({3, 7}), (2, 6))
    assert merged.id == a and b not in parts.by_id and merged.flows == {0, 1, 2, 3}
    assert merged.tags(100) == [1, 2, 3, 7, 100, 101, 102, 105, 106]
    split = parts.remove_flow(3)
    assert [p.flows for p in split] == [{0, 1}, {2}] and split[0].id == a
