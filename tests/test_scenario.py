"""Scenario loading: the tiny scenarios, parsed values, fingerprints, and one test per error case.

Every bad input must raise ScenarioError whose field names the culprit; the property test at the
bottom mutates the bundled scenarios and allows nothing else (no traceback, no hang).
"""

import copy
import re
import shutil
import string
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.errors import ScenarioError
from bridge.scenario import Scenario, load_scenario, parse_scenario_dict
from bridge.units import parse_rate, parse_size, parse_time

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
TINY = [SCENARIOS / f for f in ("tiny-leafspine.yaml", "tiny-fattree.yaml", "tiny-roft.yaml",
                                "tiny-hpcc/scenario.yaml")]
RING8 = Path("/work/shared/reference-data/hpcc-sim/ring8/topology.txt")
LEAF_SPINE = yaml.safe_load((SCENARIOS / "tiny-leafspine.yaml").read_text())


def _error(data, path="s.yaml") -> ScenarioError:
    with pytest.raises(ScenarioError) as e:
        parse_scenario_dict(data, path)
    return e.value


def _mutated(mutate) -> ScenarioError:
    """The error of the tiny leaf-spine scenario after `mutate(data)`."""
    data = copy.deepcopy(LEAF_SPINE)
    mutate(data)
    return _error(data)


def _write(tmp_path, text, name="s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _hpcc(tmp_path, topology_txt, flow_txt=None) -> ScenarioError:
    """The error of an HPCC scenario built from the given file texts in tmp_path."""
    (tmp_path / "topology.txt").write_text(topology_txt)
    (tmp_path / "flow.txt").write_text(flow_txt or "1\n0 1 3 100 1000 0\n")
    text = "name: h\ntopology: {kind: hpcc, file: topology.txt}\nflow_file: flow.txt\n"
    with pytest.raises(ScenarioError) as e:
        load_scenario(_write(tmp_path, text))
    return e.value


# --- units -----------------------------------------------------------------------------------

@pytest.mark.parametrize("parse, text, value", [
    (parse_rate, "100Gbps", 100 * 10**9), (parse_rate, "25Gbps", 25 * 10**9),
    (parse_rate, "400Mbps", 400 * 10**6), (parse_rate, 7, 7),
    (parse_time, "1us", 1000), (parse_time, "0.001ms", 1000), (parse_time, "2.5ns", 3),
    (parse_time, "1s", 10**9), (parse_time, 5, 5),
    (parse_size, "1MB", 10**6), (parse_size, "64KB", 64000), (parse_size, "1GiB", 2**30),
    (parse_size, "1500B", 1500), (parse_size, "1MiB", 2**20), (parse_size, 9, 9),
])
def test_units_parse(parse, text, value):
    assert parse(text) == value


@pytest.mark.parametrize("parse, text, words", [
    (parse_rate, "100Gb", "unknown rate unit 'Gb'"), (parse_rate, "100", "missing unit"),
    (parse_rate, "1.5bps", "whole number of bps"), (parse_time, "fast", "not understood"),
    (parse_time, 1.5, "not a time"), (parse_size, True, "not a size"),
    (parse_size, "0.5B", "whole number of bytes"), (parse_size, "1e99999999999MB", "out of range"),
])
def test_units_bad_input_fails(parse, text, words):
    with pytest.raises(ValueError, match=words):
        parse(text)


# --- the tiny scenarios ----------------------------------------------------------------------

@pytest.mark.parametrize("path", TINY, ids=lambda p: p.parent.name if p.name == "scenario.yaml"
                         else p.stem)
def test_tiny_scenarios_load(path):
    s = load_scenario(path)
    assert isinstance(s, Scenario) and s.source_path == path.resolve()
    assert 8 <= len(s.flows) <= 16
    assert all(10**5 <= f.size <= 10**6 for f in s.flows)


def test_parsed_values_are_ints_in_base_units():
    s = load_scenario(SCENARIOS / "tiny-leafspine.yaml")
    assert (s.topology.host_link.rate, s.topology.host_link.delay) == (100 * 10**9, 1000)
    assert (s.flows[0].size, s.flows[4].start) == (10**6, 10_000)
    t = s.transport
    assert (t.kind, t.mtu, t.min_rto, t.delayed_ack_timeout, t.send_buffer) == \
        ("dctcp", 1500, 10**6, 10_000, 512_000)
    assert (t.ecn_kmin, t.ecn_kmax, s.stop_time, s.seed) == (None, None, 10**9, 1)


def test_scenario_is_frozen():
    s = load_scenario(SCENARIOS / "tiny-leafspine.yaml")
    with pytest.raises(Exception):
        s.seed = 2


def test_hpcc_scenario_resolves_files_and_reads_flows():
    s = load_scenario(SCENARIOS / "tiny-hpcc" / "scenario.yaml")
    assert s.topology.file == (SCENARIOS / "tiny-hpcc" / "topology.txt").resolve()
    assert s.flow_file.is_absolute() and len(s.flows) == 8


def test_fingerprint_ignores_location_but_not_content(tmp_path):
    original = load_scenario(SCENARIOS / "tiny-hpcc" / "scenario.yaml")
    copy_dir = tmp_path / "moved"
    shutil.copytree(SCENARIOS / "tiny-hpcc", copy_dir)
    moved = load_scenario(copy_dir / "scenario.yaml")
    assert len(original.fingerprint()) == 64
    assert moved.fingerprint() == original.fingerprint()
    topo = copy_dir / "topology.txt"
    topo.write_text(topo.read_text().replace("0 8 100Gbps", "0 8 50Gbps"))
    assert load_scenario(copy_dir / "scenario.yaml").fingerprint() != original.fingerprint()


def test_fingerprint_changes_with_any_value():
    a = parse_scenario_dict(copy.deepcopy(LEAF_SPINE), "a.yaml")
    data = copy.deepcopy(LEAF_SPINE)
    data["transport"]["mtu"] = 9000
    assert parse_scenario_dict(data, "a.yaml").fingerprint() != a.fingerprint()
    assert parse_scenario_dict(copy.deepcopy(LEAF_SPINE), "elsewhere/b.yaml").fingerprint() == \
        a.fingerprint()


# --- file and YAML errors --------------------------------------------------------------------

def test_yaml_syntax_error_fails_with_line(tmp_path):
    e = _error_of_file(_write(tmp_path, "name: x\ntopology: {kind: leaf-spine\nflows: []\n"))
    assert "YAML error at line 3" in str(e) and str(e).startswith(str(tmp_path))


def _error_of_file(path) -> ScenarioError:
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    return e.value


def test_top_level_not_mapping_fails(tmp_path):
    e = _error_of_file(_write(tmp_path, "- name: x\n"))
    assert "top level must be a mapping" in e.message and "list" in e.message


def test_empty_file_fails(tmp_path):
    assert "empty scenario" in _error_of_file(_write(tmp_path, "")).message


def test_duplicate_key_fails(tmp_path):
    e = _error_of_file(_write(tmp_path, "name: a\nseed: 1\nseed: 2\n"))
    assert "duplicate key 'seed'" in e.message and "line 3" in e.message


def test_not_utf8_fails(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"name: \xff\n")
    assert "not UTF-8" in _error_of_file(path).message


def test_missing_scenario_file_fails(tmp_path):
    assert "cannot read" in _error_of_file(tmp_path / "nope.yaml").message


# --- schema errors ---------------------------------------------------------------------------

def test_unknown_top_level_key_fails():
    e = _mutated(lambda d: d.update(seeds=3))
    assert (e.field, e.path) == ("seeds", "s.yaml")
    assert "unknown field" in e.message and "seed" in e.message


def test_unknown_nested_key_fails():
    e = _mutated(lambda d: d["topology"].update(hosts=3))
    assert e.field == "topology.hosts" and "hosts_per_leaf" in e.message


def test_unknown_flow_key_fails():
    e = _mutated(lambda d: d["flows"][2].update(prio=1))
    assert e.field == "flows[2].prio"


@pytest.mark.parametrize("field, value", [("episode_bytes_step", 0), ("episode_age_step", "0us"),
                                          ("episode_bytes", "-1KB"), ("episode_join", "-5us")])
def test_bad_episode_setting_fails(field, value):
    e = _mutated(lambda d: d.update(accel={field: value}))
    assert e.field == f"accel.{field}", e


def test_wrong_type_fails():
    e = _mutated(lambda d: d["topology"].update(leaves="two"))
    assert e.field == "topology.leaves" and "'two'" in e.message


def test_float_for_count_fails():
    e = _mutated(lambda d: d["topology"].update(spines=2.0))
    assert e.field == "topology.spines" and "2.0" in e.message


def test_missing_required_fails():
    e = _mutated(lambda d: d.pop("name"))
    assert e.field == "name" and "missing" in e.message


def test_missing_nested_required_fails():
    e = _mutated(lambda d: d["topology"]["host_link"].pop("delay"))
    assert e.field == "topology.host_link.delay" and "missing" in e.message


def test_zero_rate_fails():
    e = _mutated(lambda d: d["topology"]["host_link"].update(rate="0Gbps"))
    assert e.field == "topology.host_link.rate" and "'0Gbps' must be > 0" in e.message


def test_negative_delay_fails():
    e = _mutated(lambda d: d["topology"]["fabric_link"].update(delay="-1us"))
    assert e.field == "topology.fabric_link.delay" and "'-1us' must be >= 0" in e.message


def test_bad_unit_fails():
    e = _mutated(lambda d: d["topology"]["host_link"].update(rate="100Gb"))
    assert e.field == "topology.host_link.rate" and "'100Gb'" in e.message and "Gbps" in e.message


def test_unknown_topology_kind_fails():
    e = _mutated(lambda d: d["topology"].update(kind="torus"))
    assert e.field == "topology.kind" and "'torus'" in e.message and "fat-tree" in e.message


def test_missing_topology_kind_fails():
    e = _mutated(lambda d: d["topology"].pop("kind"))
    assert e.field == "topology.kind" and "missing" in e.message


def test_unknown_transport_kind_fails():
    e = _mutated(lambda d: d["transport"].update(kind="bbr"))
    assert e.field == "transport.kind" and "'bbr'" in e.message and "dctcp" in e.message


def test_mtu_out_of_range_fails():
    e = _mutated(lambda d: d["transport"].update(mtu=100))
    assert e.field == "transport.mtu" and ">= 576" in e.message


def test_queue_size_too_small_fails():
    e = _mutated(lambda d: d["transport"].update(queue_size=5))
    assert e.field == "transport.queue_size"


def test_ecn_kmin_above_kmax_fails():
    e = _mutated(lambda d: d["transport"].update(ecn_kmin=50, ecn_kmax=20))
    assert e.field == "transport.ecn_kmin" and "50" in e.message and "20" in e.message


def test_ecn_kmax_above_queue_size_fails():
    e = _mutated(lambda d: d["transport"].update(ecn_kmax=2000))
    assert e.field == "transport.ecn_kmax" and "queue_size 1000" in e.message


def test_negative_seed_fails():
    assert _mutated(lambda d: d.update(seed=-1)).field == "seed"


def test_zero_stop_time_fails():
    assert _mutated(lambda d: d.update(stop_time="0s")).field == "stop_time"


def test_odd_fat_tree_k_fails():
    e = _mutated(lambda d: d.update(topology={"kind": "fat-tree", "k": 3,
                                              "host_link": LEAF_SPINE["topology"]["host_link"],
                                              "fabric_link": LEAF_SPINE["topology"]["host_link"]}))
    assert e.field == "topology.k" and "even" in e.message


def test_roft_servers_per_leaf_above_servers_fails():
    link = LEAF_SPINE["topology"]["host_link"]
    e = _mutated(lambda d: d.update(topology={
        "kind": "roft", "servers": 2, "gpus_per_server": 4, "servers_per_leaf": 3, "spines": 1,
        "host_link": link, "fabric_link": link}))
    assert e.field == "topology.servers_per_leaf" and "3" in e.message


def test_oversubscription_disagreeing_with_fabric_rate_fails():
    # 4 x 100G over 2 spines at 100G each is 2:1, not 4:1
    e = _mutated(lambda d: d["topology"].update(oversubscription=4.0))
    assert e.field == "topology.oversubscription" and "4.0" in e.message and "2" in e.message


def test_oversubscription_out_of_range_fails():
    e = _mutated(lambda d: d["topology"].update(oversubscription=1e-300, fabric_link=None))
    assert e.field == "topology.oversubscription" and "fabric rate" in e.message


def test_no_fabric_link_nor_oversubscription_fails():
    e = _mutated(lambda d: d["topology"].pop("fabric_link"))
    assert e.field == "topology.fabric_link" and "oversubscription" in e.message


def test_topology_too_large_fails():
    e = _mutated(lambda d: d["topology"].update(hosts_per_leaf=10**6))
    assert e.field == "topology" and "too large" in e.message


# --- flows -----------------------------------------------------------------------------------

def test_flow_dst_out_of_range_fails():
    e = _mutated(lambda d: d["flows"][3].update(dst=50))
    assert e.field == "flows[3].dst" and "50 is not a node" in e.message and "0..7" in e.message


def test_flow_src_is_switch_fails():
    e = _mutated(lambda d: d["flows"][1].update(src=9))
    assert e.field == "flows[1].src" and "9 is a switch" in e.message


def test_flow_src_equals_dst_fails():
    e = _mutated(lambda d: d["flows"][0].update(dst=0))
    assert e.field == "flows[0].dst" and "same as src (0)" in e.message


@pytest.mark.parametrize("size", [0, "0B", "-5KB", -1])
def test_flow_size_not_positive_fails(size):
    e = _mutated(lambda d: d["flows"][3].update(size=size))
    assert e.field == "flows[3].size" and "> 0" in e.message


def test_negative_flow_start_fails():
    assert _mutated(lambda d: d["flows"][2].update(start="-1us")).field == "flows[2].start"


def test_flows_and_flow_file_both_fails(tmp_path):
    (tmp_path / "flow.txt").write_text("1\n0 1 3 100 1000 0\n")
    data = copy.deepcopy(LEAF_SPINE) | {"flow_file": "flow.txt"}
    e = _error(data, str(tmp_path / "s.yaml"))
    assert e.field == "flow_file" and "flows and flow_file" in e.message


def test_flows_and_training_both_fails():
    e = _mutated(lambda d: d.update(training={"preset": "gpt-tiny"}))
    assert e.field == "training" and "flows and training" in e.message


def test_no_workload_fails():
    e = _mutated(lambda d: d.pop("flows"))
    assert e.field == "flows" and "flow_file" in e.message and "training" in e.message


def test_empty_flow_list_fails():
    assert "empty" in _mutated(lambda d: d.update(flows=[])).message


def test_missing_flow_file_fails(tmp_path):
    e = _error(copy.deepcopy(LEAF_SPINE) | {"flows": None, "flow_file": "gone.txt"},
               str(tmp_path / "s.yaml"))
    assert e.field == "flow_file" and "'gone.txt' not found" in e.message


def test_flow_file_host_out_of_range_fails(tmp_path):
    e = _hpcc(tmp_path, RING8.read_text(), "2\n0 1 3 100 1000 0\n0 9 3 100 1000 0\n")
    assert e.field == "flow.txt line 3: dst" and "9 is a switch" in e.message


def test_flow_file_malformed_line_fails(tmp_path):
    e = _hpcc(tmp_path, RING8.read_text(), "1\n0 1 3 100 1MB 0\n")
    assert e.field == "flow.txt line 2: size_bytes" and "'1MB'" in e.message
    assert str(e).startswith(str(tmp_path / "s.yaml"))


# --- HPCC topology files ---------------------------------------------------------------------

RING8_HEAD = "12 4 12\n8 9 10 11\n"


def _ring8_with(line_no: int, new: str) -> str:
    """ring8's topology.txt with 1-based line `line_no` replaced."""
    lines = RING8.read_text().splitlines()
    lines[line_no - 1] = new
    return "\n".join(lines) + "\n"


def test_hpcc_missing_topology_file_fails(tmp_path):
    e = _error({"name": "h", "topology": {"kind": "hpcc", "file": "t.txt"},
                "flows": [{"src": 0, "dst": 1, "size": 10}]}, str(tmp_path / "s.yaml"))
    assert e.field == "topology.file" and "'t.txt' not found" in e.message


def test_hpcc_isolated_node_fails(tmp_path):
    link = "100Gbps 1us 0"
    e = _hpcc(tmp_path, f"5 1 3\n4\n0 4 {link}\n1 4 {link}\n2 4 {link}\n")
    assert e.field == "topology.txt" and "node 3 is not connected to node 0" in e.message


def test_hpcc_disconnected_island_fails(tmp_path):
    # hosts 2, 3 and their switch 5 form an island
    link = "100Gbps 1us 0"
    e = _hpcc(tmp_path, f"6 2 4\n4 5\n0 4 {link}\n1 4 {link}\n2 5 {link}\n3 5 {link}\n")
    assert e.field == "topology.txt" and "node 2 is not connected" in e.message
    assert "nodes 2, 3, 5" in e.message


def test_hpcc_duplicate_link_fails(tmp_path):
    e = _hpcc(tmp_path, _ring8_with(4, "8 0 100Gbps 0.001ms 0"))
    assert e.field == "topology.txt line 4: dst"
    assert "duplicate link 8-0 (first on line 3)" in e.message


def test_hpcc_link_node_out_of_range_fails(tmp_path):
    e = _hpcc(tmp_path, _ring8_with(3, "0 12 100Gbps 0.001ms 0"))
    assert e.field == "topology.txt line 3: dst" and "12 is not a node" in e.message


def test_hpcc_self_loop_fails(tmp_path):
    e = _hpcc(tmp_path, _ring8_with(3, "8 8 100Gbps 0.001ms 0"))
    assert e.field == "topology.txt line 3: dst" and "itself" in e.message


@pytest.mark.parametrize("line, field, words", [
    ("0 8 100Gb 0.001ms 0", "rate", "'100Gb'"),
    ("0 8 0Gbps 0.001ms 0", "rate", "'0Gbps' must be > 0"),
    ("0 8 100Gbps -1us 0", "delay", "'-1us' must be >= 0"),
    ("0 8 100Gbps 0.001ms 0.5", "error_rate", "'0.5' not supported"),
    ("0 8 100Gbps", "link", "expected 'src dst rate delay error_rate'"),
    ("a 8 100Gbps 0.001ms 0", "src", "'a' is not a node id"),
])
def test_hpcc_malformed_link_line_fails(tmp_path, line, field, words):
    e = _hpcc(tmp_path, _ring8_with(3, line))
    assert e.field == f"topology.txt line 3: {field}" and words in e.message


def test_hpcc_bad_header_fails(tmp_path):
    e = _hpcc(tmp_path, "12 4\n8 9 10 11\n")
    assert e.field == "topology.txt line 1: header"


def test_hpcc_link_count_mismatch_fails(tmp_path):
    e = _hpcc(tmp_path, RING8.read_text() + "0 9 100Gbps 0.001ms 0\n")
    assert e.field == "topology.txt line 15: links" and "12 links" in e.message


def test_hpcc_switch_line_mismatch_fails(tmp_path):
    e = _hpcc(tmp_path, _ring8_with(2, "8 9 10"))
    assert e.field == "topology.txt line 2: switches" and "expected 4" in e.message


# --- property test: no input crashes the loader ----------------------------------------------

TINY_TEXTS = [(p, p.read_text()) for p in TINY]
_TOKENS = st.one_of(
    st.integers(-10**6, 10**6).map(str), st.sampled_from([
        "0", "-1", "1e9", "100Gbps", "-5us", "1MB", "0B", "abc", "null", "[]", "{}", "~", "true",
        "'", '"', ":", "- x", "&a", "*a", "!!python/object:os.system", "2001-02-30", "9" * 5000,
        "leaf-spine", "fat-tree", "roft", "hpcc", "k: 3", "  ", "\t",
    ]),
    st.text(string.printable, max_size=8),
)


@st.composite
def _mutated_text(draw):
    path, text = draw(st.sampled_from(TINY_TEXTS))
    lines = text.splitlines()
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "duplicate", "value", "truncate", "bytes", "swap"]))
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        if not lines:
            break
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "value":  # replace one value (block or flow style), or the whole line
            values = list(re.finditer(r":\s*([^,{}\[\]]+)", lines[i]))
            if values:
                m = draw(st.sampled_from(values))
                lines[i] = lines[i][:m.start(1)] + draw(_TOKENS) + lines[i][m.end(1):]
            else:
                lines[i] = draw(_TOKENS)
        elif op == "truncate":
            lines = lines[:i]
        elif op == "bytes":
            j = draw(st.integers(0, len(lines[i])))
            junk = draw(st.binary(min_size=1, max_size=4)).decode("latin-1")
            lines[i] = lines[i][:j] + junk + lines[i][j:]
        else:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
    return path, "\n".join(lines) + "\n"


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_mutated_text())
def test_mutated_scenarios_load_or_fail_cleanly(tmp_path, case):
    original, text = case
    # keep referenced files resolvable: write the mutant next to a copy of its siblings
    target_dir = tmp_path / original.parent.name
    if not target_dir.exists():
        shutil.copytree(original.parent, target_dir)
    target = target_dir / "mutant.yaml"
    target.write_bytes(text.encode("utf-8", "surrogateescape"))
    try:
        assert isinstance(load_scenario(target), Scenario)
    except ScenarioError as e:
        assert "\n" not in str(e) and str(e).startswith(str(target))


BUNDLED = sorted(SCENARIOS.glob("**/*.yaml"))


@pytest.mark.parametrize("path", BUNDLED, ids=lambda p: p.parent.name + "/" + p.name)
def test_every_bundled_scenario_loads_and_builds_its_workload(path):
    from bridge.simulation import build_workload
    from bridge.topology import build_topology

    scenario = load_scenario(path)
    workload = build_workload(scenario, build_topology(scenario.topology))
    assert workload.flows and all(f.size > 0 for f in workload.flows)
