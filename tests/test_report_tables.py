"""Report arithmetic: exposed communication time against a brute-force overlap."""

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.report.tables import _exposed, _union

SPANS = st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40)).map(lambda x: (x[0], x[0] + x[1])),
                 max_size=10)


@settings(max_examples=500, deadline=None)
@given(SPANS, SPANS)
def test_exposed_is_communication_not_covered_by_compute(comm, compute):
    comm_u, compute_u = _union(comm), _union(compute)
    uncovered = sum(1 for s, e in comm_u for t in range(s, e) if not any(cs <= t < ce for cs, ce in compute_u))
    assert _exposed(comm, compute) == uncovered
