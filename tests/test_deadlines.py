"""The computed ends' and checks' deadline dict: its heap agrees with a scan of the dict after any
sequence of changes."""

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.engine.fastforward import NEVER, Deadlines

OPS = st.lists(st.tuples(st.sampled_from(["set", "pop", "del", "due"]), st.integers(0, 9), st.integers(0, 50)),
               max_size=200)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_earliest_and_due_match_a_scan(ops):
    d, plain = Deadlines(), {}
    for op, flow, at in ops:
        if op == "set":
            d[flow] = at
            plain[flow] = at
        elif op == "pop":
            assert d.pop(flow, None) == plain.pop(flow, None)
        elif op == "del" and flow in plain:
            del d[flow]
            del plain[flow]
        elif op == "due":
            assert d.due(at) == sorted(f for f, t in plain.items() if t <= at)
        assert dict(d) == plain
        assert d.earliest() == min(plain.values(), default=NEVER)
