"""Loose flows -> Workload, and the HPCC flow.txt importer."""

from pathlib import Path

import pytest
import yaml

from bridge.errors import ScenarioError
from bridge.scenario import load_scenario, parse_scenario_dict
from bridge.workload.dag import FlowTask
from bridge.workload.flows import load_flows, read_hpcc_flows

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
LINK = {"rate": "100Gbps", "delay": "1us"}


def _scenario(flows):
    topology = {"kind": "leaf-spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 2,
                "host_link": LINK, "fabric_link": LINK}
    return parse_scenario_dict({"name": "t", "topology": topology, "flows": flows}, None)


def test_load_flows_sorts_by_start_then_given_order():
    s = _scenario([
        {"src": 0, "dst": 1, "size": "3KB", "start": "2us"},
        {"src": 1, "dst": 2, "size": "1KB", "start": "1us"},
        {"src": 2, "dst": 3, "size": "2KB", "start": "2us"},
        {"src": 3, "dst": 0, "size": "4KB"},
    ])
    w = load_flows(s)
    assert [t.size for t in w.tasks] == [4000, 1000, 3000, 2000]
    assert [t.id for t in w.tasks] == [0, 1, 2, 3]
    assert [t.release_ns for t in w.tasks] == [0, 1000, 2000, 2000]
    assert w.tasks[1] == FlowTask(id=1, src=1, dst=2, size=1000, release_ns=1000, collective="flow")
    assert w.iterations == 0 and w.flows == w.tasks


def test_a_flow_after_others_waits_for_them_and_gets_a_later_id():
    """A flow comes after the flows `after` names; ids stay in start order where that allows, with
    every flow after those it waits for (an executor starts a task once its lower-id deps end)."""
    s = _scenario([
        {"src": 0, "dst": 1, "size": "1KB", "start": "5us"},
        {"src": 1, "dst": 2, "size": "2KB", "after": [0]},
        {"src": 2, "dst": 3, "size": "3KB", "start": "1us"},
        {"src": 3, "dst": 0, "size": "4KB", "start": "2us", "after": [0, 2, 2]},
    ])
    w = load_flows(s)
    assert [t.size for t in w.tasks] == [3000, 1000, 2000, 4000]
    assert [t.deps for t in w.tasks] == [(), (), (1,), (0, 1)]
    assert [t.release_ns for t in w.tasks] == [1000, 5000, 0, 2000]


@pytest.mark.parametrize("after", [[1], [3], [-1], ["x"]])
def test_a_flow_after_itself_a_later_flow_or_no_flow_fails(after):
    with pytest.raises(ScenarioError) as e:
        _scenario([{"src": 0, "dst": 1, "size": "1KB"}, {"src": 1, "dst": 2, "size": "2KB", "after": after}])
    assert e.value.field.startswith("flows[1].after"), e.value.field


def test_load_flows_from_hpcc_flow_file():
    w = load_flows(load_scenario(SCENARIOS / "tiny-hpcc" / "scenario.yaml"))
    assert len(w.flows) == 8
    assert {(t.size, t.release_ns) for t in w.flows} == {(200_000, 1000)}
    assert [(t.src, t.dst) for t in w.flows] == [(i, (i + 1) % 8) for i in range(8)]


def test_load_flows_of_training_scenario_fails():
    data = yaml.safe_load((SCENARIOS / "tiny-roft.yaml").read_text())
    data.pop("flows")
    s = parse_scenario_dict(data | {"training": {"preset": "gpt-tiny"}}, None)
    with pytest.raises(ScenarioError, match="no loose flows"):
        load_flows(s)


def test_read_hpcc_flows_reference_file():
    flows = read_hpcc_flows(Path("/work/shared/reference-data/hpcc-sim/ring8/flow.txt"))
    assert len(flows) == 8
    assert flows[0] == (2, 0, 1, 16_000_000, 2 * 10**9)


def _flow_file(tmp_path, text):
    path = tmp_path / "flow.txt"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, field, words", [
    ("2\n0 1 3 100 1000 0\n", "flow.txt line 1: count", "says 2 flows but the file has 1"),
    ("x\n", "flow.txt line 1: count", "'x'"),
    ("1\n0 1 3 100 1000\n", "flow.txt line 2: flow", "'0 1 3 100 1000'"),
    ("1\n0 -1 3 100 1000 0\n", "flow.txt line 2: dst", "'-1'"),
    ("1\n0 1 3 100 0 0\n", "flow.txt line 2: size_bytes", "0 must be in 1.."),
    ("1\n0 1 3 100 1.5 0\n", "flow.txt line 2: size_bytes", "'1.5'"),
    ("1\n0 1 3 100 1000 -1\n", "flow.txt line 2: start_seconds", "'-1'"),
    ("1\n0 1 3 100 1000 nan\n", "flow.txt line 2: start_seconds", "'nan'"),
    ("", "flow.txt", "empty"),
])
def test_read_hpcc_flows_malformed_fails(tmp_path, text, field, words):
    with pytest.raises(ScenarioError) as e:
        read_hpcc_flows(_flow_file(tmp_path, text), "flow.txt")
    assert e.value.field == field
    assert words in e.value.message


def test_read_hpcc_flows_missing_file_fails(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read"):
        read_hpcc_flows(tmp_path / "nope.txt")


def test_read_hpcc_flows_rounds_start_to_ns(tmp_path):
    flows = read_hpcc_flows(_flow_file(tmp_path, "1\n0 1 3 100 1000 0.0000000015\n"))
    assert flows[0].start_ns == 2
