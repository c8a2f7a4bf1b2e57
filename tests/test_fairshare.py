"""Max-min fair rates: the textbook cases, the defining property on random instances, and the
engine's model with ACK frames taking port time."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.engine.fairshare import AckedShares


def _lib():
    from bridge.ns3.engine_api import library   # the filling runs in our C++ patches
    from bridge.ns3.loader import load

    return library(load().library)


def _edges(ports: list) -> tuple[np.ndarray, np.ndarray]:
    """(flow, port) edges of flows 0..n-1 through ports[i] each."""
    pairs = [(i, p) for i, through in enumerate(ports) for p in through]
    return tuple(np.array([x[k] for x in pairs], dtype=np.int64) for k in (0, 1))


def max_min_rates(paths: dict[int, frozenset[int]], capacity: dict[int, float],
                  caps: dict[int, float]) -> dict[int, float]:
    """The shares with no ACKs, on flows and ports named by numbers (ports below 16): a port of
    capacity c takes 1/c ns per byte-sized frame."""
    flows = sorted(paths)
    edges = _edges([sorted(paths[f]) for f in flows])
    frame_ns = np.array([1 / capacity[p] if p in capacity else 1.0 for p in range(16)])
    none = (np.zeros(0, dtype=np.int64),) * 2
    model = AckedShares(_lib(), edges, none, np.array([caps[f] for f in flows]), frame_ns, np.ones(16), 1, 1)
    return dict(zip(flows, model.shares(np.zeros(len(flows))).tolist()))


def test_flows_on_one_port_share_it_equally():
    assert max_min_rates({0: frozenset({1}), 1: frozenset({1})}, {1: 10.0}, {0: 99.0, 1: 99.0}) == \
        {0: pytest.approx(5.0), 1: pytest.approx(5.0)}


def test_a_flow_held_back_elsewhere_leaves_its_share_to_the_others():
    # 0 and 1 share port 1 (10); 1 also crosses port 2 (4) with nothing else: 1 gets 4, 0 gets 6.
    rates = max_min_rates({0: frozenset({1}), 1: frozenset({1, 2})}, {1: 10.0, 2: 4.0}, {0: 99.0, 1: 99.0})
    assert rates == {0: pytest.approx(6.0), 1: pytest.approx(4.0)}


def test_a_capped_flow_takes_no_more_than_its_cap():
    rates = max_min_rates({0: frozenset({1}), 1: frozenset({1})}, {1: 10.0}, {0: 2.0, 1: 99.0})
    assert rates == {0: pytest.approx(2.0), 1: pytest.approx(8.0)}


def test_removing_a_flow_can_slow_another():
    # With 0 on port 1 (0.6), 1 gets 0.3 there and 2 the rest of port 2 (0.7); without 0, 1 and 2
    # split port 2.
    paths = {0: frozenset({1}), 1: frozenset({1, 2}), 2: frozenset({2})}
    caps = {f: 9.0 for f in paths}
    assert max_min_rates(paths, {1: 0.6, 2: 1.0}, caps) == \
        {0: pytest.approx(0.3), 1: pytest.approx(0.3), 2: pytest.approx(0.7)}
    del paths[0]
    assert max_min_rates(paths, {1: 0.6, 2: 1.0}, caps) == {1: pytest.approx(0.5), 2: pytest.approx(0.5)}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(0, 8), st.frozensets(st.integers(0, 5), min_size=1, max_size=3), min_size=1),
       st.lists(st.floats(0.5, 10.0), min_size=6, max_size=6), st.lists(st.floats(0.1, 12.0), min_size=9, max_size=9))
def test_every_flow_is_capped_or_has_a_full_port_where_no_one_gets_more(paths, capacity, caps):
    capacity = dict(enumerate(capacity))
    caps = {f: caps[f] for f in paths}
    rates = max_min_rates(paths, capacity, caps)
    load = {p: sum(rates[f] for f in paths if p in paths[f]) for p in capacity}
    for p, used in load.items():
        assert used <= capacity[p] * (1 + 1e-9)
    for f, ports in paths.items():
        bottleneck = any(load[p] >= capacity[p] * (1 - 1e-9) and all(rates[g] <= rates[f] * (1 + 1e-9)
                                                                    for g in paths if p in paths[g])
                         for p in ports)
        assert rates[f] >= caps[f] * (1 - 1e-9) or bottleneck


def _acked(paths: dict[int, tuple[list[int], list[int]]], n_ports: int) -> AckedShares:
    """AckedShares over flows 0..n-1 with (data ports, ACK ports) each, on ports of 10-ns frames of
    1000 bytes and 1-ns ACK frames, an ACK per 1000 bytes, each flow capped at 90 bytes per ns."""
    flows = sorted(paths)
    edges = [_edges([paths[f][side] for f in flows]) for side in (0, 1)]
    return AckedShares(_lib(), edges[0], edges[1], np.full(len(flows), 90.0), np.full(n_ports, 10.0),
                       np.full(n_ports, 1.0), 1000, 1000)


def test_acks_crossing_a_port_take_their_frames_time_from_its_data():
    # Flows 0 and 1 send through port 0; flow 2 (90 bytes per ns) sends its ACKs across it, 9 per
    # 100 ns of 1 ns each: port 0 keeps 91 % of its 100 bytes per ns for data.
    model = _acked({0: ([0], [1]), 1: ([0], [1]), 2: ([2], [0])}, 3)
    shares = model.shares(np.array([50.0, 50.0, 90.0]))
    assert shares.tolist() == pytest.approx([45.5, 45.5, 90.0])
    assert model.shares(np.array([50.0, 50.0, 90.0]), without=2)[:2].tolist() == pytest.approx([50.0, 50.0])


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.integers(0, 6), st.tuples(st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True),
                                                    st.lists(st.integers(0, 4), max_size=3, unique=True)),
                       min_size=2),
       st.data())
def test_a_flow_left_out_is_the_same_as_a_flow_removed(paths, data):
    flows = sorted(paths)
    gone = data.draw(st.sampled_from(flows))
    rates = np.array(data.draw(st.lists(st.floats(1.0, 90.0), min_size=len(flows), max_size=len(flows))))
    without = _acked(paths, 5).shares(rates, without=flows.index(gone))
    kept = [i for i, f in enumerate(flows) if f != gone]
    removed = _acked({f: paths[f] for f in flows if f != gone}, 5).shares(rates[kept])
    assert without[flows.index(gone)] == 0.0
    assert without[kept].tolist() == removed.tolist()
