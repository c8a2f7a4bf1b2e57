"""The RDMA transport's scenario side: the reference simulator's config.txt, `transport: {kind:
rdma}` in YAML, the merge into RdmaParameters, and the mapping onto the C++ RdmaConfig.

No simulation here: everything but the last test is pure Python (the last compiles the C++ struct
alone with cppyy, in a child process).
"""

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bridge.errors import ScenarioError
from bridge.ns3.rdma import RDMA_CONFIG_FIELDS, rdma_config
from bridge.scenario import Scenario, TransportSpec, load_scenario, parse_scenario_dict
from bridge.scenario.hpcc_config import (
    PARAMETER_KEYS,
    RdmaParameters,
    parse_hpcc_config,
    resolve_rdma,
)
from bridge.scenario.schema import RdmaTransportSpec

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "scenarios" / "hpcc-sim"
CONFIGS = sorted(CASES.glob("*/config_*.txt"))
# case -> (nodes, hosts, flows, BUFFER_SIZE in MiB)
EXPECTED = {"incast2": (4, 3, 2, 32), "incast16": (18, 17, 16, 4), "ring8": (12, 8, 8, 32),
            "a2a8": (12, 8, 56, 32)}
DEFAULT_ECN = ((25 * 10**9, 100_000, 400_000, 0.2), (50 * 10**9, 200_000, 800_000, 0.2),
               (100 * 10**9, 400_000, 1_600_000, 0.2), (200 * 10**9, 800_000, 3_200_000, 0.2),
               (400 * 10**9, 1_600_000, 6_400_000, 0.2))


def _case_copy(tmp_path, case="incast2", name="config_dcqcn.txt", edit=None) -> Path:
    """A copy of a case folder under tmp_path/<case>, with `name` edited by `edit(text)`."""
    target = tmp_path / case
    target.mkdir(parents=True, exist_ok=True)
    for f in (CASES / case).iterdir():
        (target / f.name).write_bytes(f.read_bytes())
    config = target / name
    if edit is not None:
        config.write_text(edit(config.read_text()))
    return config


def _config_error(tmp_path, edit) -> ScenarioError:
    config = _case_copy(tmp_path, edit=edit)
    with pytest.raises(ScenarioError) as e:
        load_scenario(config)
    assert "\n" not in str(e.value)
    assert str(e.value).startswith(str(config))  # names the file as given
    return e.value


def _line_of(key: str, case="incast2", name="config_dcqcn.txt") -> int:
    lines = (CASES / case / name).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.split()[:1] == [key])


def _yaml_scenario(tmp_path, transport: str, topology="incast2/topology.txt") -> Path:
    _case_copy(tmp_path)
    path = tmp_path / "s.yaml"
    path.write_text(f"name: r\ntopology: {{kind: hpcc, file: {topology}}}\n"
                    f"flow_file: incast2/flow.txt\ntransport: {transport}\n")
    return path


# --- the reference cases ---------------------------------------------------------------------

def test_every_reference_case_is_there():
    assert {c.parent.name for c in CONFIGS} == set(EXPECTED)
    assert len(CONFIGS) == 2 * len(EXPECTED)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_reference_config_parses(config):
    c = parse_hpcc_config(config)
    assert c.cc == ("hpcc" if config.stem.endswith("hpcc") else "dcqcn")
    assert c.topology_file == f"{config.parent.name}/topology.txt"
    assert c.flow_file == f"{config.parent.name}/flow.txt"
    assert c.stop_time == "3.00" and c.stop_time_ns == 3 * 10**9
    assert c.values["RATE_AI"] == 50 * 10**6 and c.values["RP_TIMER"] == 900_000
    assert c.lines["CC_MODE"] == _line_of("CC_MODE", config.parent.name, config.name)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_reference_config_runs_as_a_scenario(config):
    case = config.parent.name
    nodes, hosts, n_flows, buffer_mib = EXPECTED[case]
    s = load_scenario(config)
    assert isinstance(s, Scenario) and s.name == f"{case}-{config.stem}" and s.seed == 1
    assert s.topology.kind == "hpcc" and s.topology.file == (CASES / case / "topology.txt").resolve()
    assert s.flow_file == (CASES / case / "flow.txt").resolve()
    assert len(s.flows) == n_flows and s.stop_time == 3 * 10**9
    assert s.transport.kind == "rdma" and s.transport.config == config.resolve()
    assert s.source_path == config.resolve()
    p = s.transport.resolved()
    assert p.cc == ("hpcc" if config.stem.endswith("hpcc") else "dcqcn")
    assert p.buffer_bytes == buffer_mib * 2**20
    assert p.ecn == DEFAULT_ECN[:3]  # the files list 25, 50 and 100 Gbps
    assert (p.payload_bytes, p.chunk_bytes, p.ack_interval, p.int_multi) == (1000, 4000, 1, 1)
    assert p.rate_ai_bps == 50 * 10**6 and p.rate_hai_bps == p.min_rate_bps == 100 * 10**6
    assert p.ewma_gain == 1 / 256 and p.u_target == 0.95 and p.pause_time_us == 5
    assert s.transport.mtu == 1048
    from bridge.topology import read_hpcc_topology
    topology = read_hpcc_topology(s.topology.file)
    assert (topology.n_nodes, len(topology.hosts)) == (nodes, hosts)
    assert len(s.fingerprint()) == 64


def test_dcqcn_and_hpcc_configs_differ_in_fingerprint():
    a, b = (load_scenario(CASES / "incast2" / f"config_{cc}.txt") for cc in ("dcqcn", "hpcc"))
    assert a.fingerprint() != b.fingerprint()


def test_config_file_fingerprint_is_by_content(tmp_path):
    original = load_scenario(CASES / "incast2" / "config_dcqcn.txt")
    assert load_scenario(_case_copy(tmp_path)).fingerprint() == original.fingerprint()
    edited = _case_copy(tmp_path / "b", edit=lambda t: t.replace("RATE_AI 50Mb/s", "RATE_AI 40Mb/s"))
    assert load_scenario(edited).fingerprint() != original.fingerprint()


def test_config_files_resolve_next_to_the_config_first(tmp_path):
    # TOPOLOGY_FILE relative to the config's own folder is found before the parent's
    config = _case_copy(tmp_path, edit=lambda t: t.replace("incast2/", ""))
    s = load_scenario(config)
    assert s.topology.file == (tmp_path / "incast2" / "topology.txt").resolve()


def test_comment_and_blank_lines_are_skipped(tmp_path):
    config = _case_copy(tmp_path, edit=lambda t: "# a DCQCN run\n\n" + t)
    assert load_scenario(config).transport.resolved().cc == "dcqcn"


# --- defaults and overrides -------------------------------------------------------------------

def test_defaults_are_the_reference_values():
    p = RdmaTransportSpec(kind="rdma").resolved()
    assert p == RdmaParameters(
        cc="dcqcn", payload_bytes=1000, buffer_bytes=32 * 2**20, enable_ecn=True,
        ack_high_prio=False, alpha_resume_interval_ns=1000, rate_decrease_interval_ns=4000,
        rp_timer_ns=900_000, ewma_gain=1 / 256, fast_recovery_times=1, rate_ai_bps=50 * 10**6,
        rate_hai_bps=100 * 10**6, min_rate_bps=100 * 10**6, clamp_target_rate=False,
        u_target=0.95, mi_thresh=0, fast_react=True, multi_rate=False, sample_feedback=False,
        pint_log_base=1.05, pint_prob=1.0, dctcp_rate_ai_bps=1000 * 10**6, has_win=True,
        global_t=True, var_win=True, rate_bound=True, chunk_bytes=4000, ack_interval=1, error_rate_per_link=0.0,
        ecn=DEFAULT_ECN, pause_time_us=5, rto_ns=0, int_multi=1, qlen_mon_start_ns=0, qlen_mon_end_ns=0,
        qlen_mon_interval_ns=1000)
    assert {f.name for f in dataclasses.fields(RdmaParameters)} >= {"ecn", "rto_ns", "int_multi"}


def test_yaml_rdma_transport_with_config_parameters_and_cc(tmp_path):
    path = _yaml_scenario(tmp_path, "{kind: rdma, cc: dcqcn, config: incast2/config_hpcc.txt, rto: 1ms, "
                          "parameters: {RATE_AI: 40Mb/s, BUFFER_SIZE: 4.5, U_TARGET: 0.9, HAS_WIN: 0, "
                          "PACKET_PAYLOAD_SIZE: 1452, RP_TIMER: 300, "
                          "KMIN_MAP: '2 25000000000 50 100000000000 200', "
                          "KMAX_MAP: '2 25000000000 200 100000000000 800', "
                          "PMAX_MAP: '2 25000000000 0.1 100000000000 0.5'}}")
    s = load_scenario(path)
    p = s.transport.resolved()
    assert p.cc == "dcqcn"  # cc beats the file's CC_MODE 3
    assert p.rate_ai_bps == 40 * 10**6 and p.buffer_bytes == 4.5 * 2**20 and p.u_target == 0.9
    assert p.has_win is False and p.payload_bytes == 1452 and p.rp_timer_ns == 300_000
    assert p.rto_ns == 1_000_000 and p.rate_hai_bps == 100 * 10**6  # the rest from the file
    assert p.ecn == ((25 * 10**9, 50_000, 200_000, 0.1), (100 * 10**9, 200_000, 800_000, 0.5))
    assert s.transport.mtu == 1500
    assert s.transport.persistent_connections is False
    # without cc, the file's CC_MODE applies; without a file, dcqcn
    assert load_scenario(_yaml_scenario(tmp_path, "{kind: rdma, config: incast2/config_hpcc.txt}")
                         ).transport.resolved().cc == "hpcc"
    assert load_scenario(_yaml_scenario(tmp_path, "{kind: rdma, parameters: {CC_MODE: 3}}")
                         ).transport.resolved().cc == "hpcc"
    assert load_scenario(_yaml_scenario(tmp_path, "{kind: rdma}")).transport.resolved().cc == "dcqcn"


@pytest.mark.parametrize("mode, cc", [(7, "timely"), (8, "dctcp"), (10, "hpcc-pint")])
def test_timely_dctcp_and_pint_configs_parse(tmp_path, mode, cc):
    path = tmp_path / "config.txt"
    path.write_text((CASES / "incast2" / "config_dcqcn.txt").read_text()
                    .replace("CC_MODE 1", f"CC_MODE {mode}").replace("DCTCP_RATE_AI 1000Mb/s", "DCTCP_RATE_AI 615Mb/s")
                    .replace("TOPOLOGY_FILE incast2", f"TOPOLOGY_FILE {CASES}/incast2")
                    .replace("FLOW_FILE incast2", f"FLOW_FILE {CASES}/incast2"))
    c = parse_hpcc_config(path)
    assert c.cc == cc and c.values["DCTCP_RATE_AI"] == 615 * 10**6
    assert load_scenario(path).transport.resolved().cc == cc


def test_hpcc_variant_keys_parse(tmp_path):
    """MULTI_RATE, SAMPLE_FEEDBACK, PINT_LOG_BASE and PINT_PROB are read (they were refused or
    ignored before HPCC's variants were built)."""
    path = _yaml_scenario(tmp_path, "{kind: rdma, cc: hpcc-pint, parameters: {MULTI_RATE: 1, "
                          "SAMPLE_FEEDBACK: 1, PINT_LOG_BASE: 1.1, PINT_PROB: 0.25}}")
    p = load_scenario(path).transport.resolved()
    assert (p.cc, p.multi_rate, p.sample_feedback, p.pint_log_base, p.pint_prob) == ("hpcc-pint", True, True, 1.1, 0.25)


def test_dctcp_defaults_are_what_the_reference_runs_it_with(tmp_path):
    """With cc dctcp and no config: run.py's alpha gain, additive increase and step marking at
    3 KB per Gbps; a key given in parameters (or a config file) still wins."""
    p = load_scenario(_yaml_scenario(tmp_path, "{kind: rdma, cc: dctcp, parameters: {DCTCP_RATE_AI: 1Gb/s}}")
                      ).transport.resolved()
    assert (p.ewma_gain, p.dctcp_rate_ai_bps) == (1 / 16, 10**9)
    assert (100 * 10**9, 300_000, 300_000, 1.0) in p.ecn
    # from a DCQCN config file, its own values stay
    q = load_scenario(_yaml_scenario(tmp_path, "{kind: rdma, cc: dctcp, config: incast2/config_dcqcn.txt}")
                      ).transport.resolved()
    assert q.ewma_gain == 1 / 256 and (100 * 10**9, 400_000, 1_600_000, 0.2) in q.ecn
    # and other CCs keep the defaults
    assert load_scenario(_yaml_scenario(tmp_path, "{kind: rdma, cc: timely}")).transport.resolved().ewma_gain == 1 / 256


def test_parameters_change_the_fingerprint(tmp_path):
    a = load_scenario(_yaml_scenario(tmp_path, "{kind: rdma}"))
    b = load_scenario(_yaml_scenario(tmp_path, "{kind: rdma, parameters: {RATE_AI: 40Mb/s}}"))
    assert a.fingerprint() != b.fingerprint()


def test_tcp_transport_is_unchanged(tmp_path):
    s = load_scenario(_yaml_scenario(tmp_path, "{persistent_connections: true}"))
    assert isinstance(s.transport, TransportSpec) and s.transport.kind == "dctcp"
    assert s.transport.mtu == 1500 and s.transport.persistent_connections
    s = load_scenario(_yaml_scenario(tmp_path, "{kind: cubic}"))
    assert s.transport.kind == "cubic"
    no_transport = tmp_path / "n.yaml"
    no_transport.write_text("name: r\ntopology: {kind: hpcc, file: incast2/topology.txt}\n"
                            "flow_file: incast2/flow.txt\n")
    assert load_scenario(no_transport).transport == TransportSpec()


@pytest.mark.parametrize("value, bps", [("50Mb/s", 50 * 10**6), ("1Gb/s", 10**9),
                                        ("100Gbps", 10**11), ("2500", 2500), ("1.5Mb/s", 1_500_000),
                                        ("12.5MB/s", 10**8), ("1Kb/s", 1000)])
def test_rate_spellings(value, bps):
    p = resolve_rdma(None, _params({"RATE_AI": value}), None)
    assert p.rate_ai_bps == bps


def _params(raw):
    from bridge.scenario.hpcc_config import parse_parameters
    return parse_parameters(raw)


def test_parameter_keys_are_the_transport_keys():
    assert {"RATE_AI", "KMAX_MAP", "CC_MODE", "BUFFER_SIZE", "U_TARGET", "INT_MULTI"} <= PARAMETER_KEYS
    assert not {"TOPOLOGY_FILE", "FLOW_FILE", "SIMULATOR_STOP_TIME", "TRACE_FILE"} & PARAMETER_KEYS


# --- config file errors: one line naming file, line and key ------------------------------------

@pytest.mark.parametrize("old, new, key, words", [
    ("RATE_AI 50Mb/s", "RATE_AI fifty", "RATE_AI", ["'fifty' is not a rate"]),
    ("CC_MODE 1", "CC_MODE 2", "CC_MODE", ["2 is not supported", "10 = HPCC-PINT"]),
    ("DCTCP_RATE_AI 1000Mb/s", "DCTCP_RATE_AI fast", "DCTCP_RATE_AI", ["'fast' is not a rate"]),
    ("CC_MODE 1", "CC_MODE", "CC_MODE", ["missing value"]),
    ("KMAX_MAP 3", "KMAX_MAP 4", "KMAX_MAP", ["says 4 entries"]),
    ("KMAX_MAP 3 25000000000 400 ", "KMAX_MAP 2 ", "KMIN_MAP", ["same rates", "25Gbps"]),
    ("KMIN_MAP 3 25000000000 100 ", "KMIN_MAP 3 25000000000 500 ", "KMIN_MAP", ["above kmax"]),
    ("PMAX_MAP 3 25000000000 0.2", "PMAX_MAP 3 25000000000 1.2", "PMAX_MAP", ["1.2"]),
    ("U_TARGET 0.95", "U_TARGET 0", "U_TARGET", ["out of range"]),
    ("BUFFER_SIZE 32", "BUFFER_SIZE -1", "BUFFER_SIZE", ["must be > 0"]),
    ("RP_TIMER 900", "RP_TIMER 900 us", "RP_TIMER", ["expected one value"]),
    ("ENABLE_QCN 1", "ENABLE_QCN yes", "ENABLE_QCN", ["'yes' is not 0 or 1"]),
    ("L2_BACK_TO_ZERO 0", "L2_BACK_TO_ZERO 1", "L2_BACK_TO_ZERO", ["not supported"]),
    ("MULTI_RATE 0", "MULTI_RATE 2", "MULTI_RATE", ["'2' is not 0 or 1"]),
    ("SAMPLE_FEEDBACK 0", "SAMPLE_FEEDBACK on", "SAMPLE_FEEDBACK", ["'on' is not 0 or 1"]),
    ("PINT_LOG_BASE 1.05", "PINT_LOG_BASE 1", "PINT_LOG_BASE", ["out of range", "> 1"]),
    ("PINT_PROB 1.0", "PINT_PROB 0", "PINT_PROB", ["out of range"]),
    ("LINK_DOWN 0 0 0", "LINK_DOWN 1000 0 1", "LINK_DOWN", ["no link between nodes 0 and 1"]),
    ("LINK_DOWN 0 0 0", "LINK_DOWN 0 0 3", "LINK_DOWN", ["time 0 means no failure"]),
    ("LINK_DOWN 0 0 0", "LINK_DOWN 5 3 3", "LINK_DOWN", ["two different nodes"]),
    ("MI_THRESH 0", "MI_THRESH 0.5", "MI_THRESH", ["'0.5' is not an int"]),
    ("SIMULATOR_STOP_TIME 3.00", "SIMULATOR_STOP_TIME 3s", "SIMULATOR_STOP_TIME", ["'3s'"]),
    ("TOPOLOGY_FILE incast2/topology.txt", "TOPOLOGY_FILE incast2/nope.txt", "TOPOLOGY_FILE",
     ["'incast2/nope.txt' not found"]),
    ("FLOW_FILE incast2/flow.txt", "FLOW_FILE nope/flow.txt", "FLOW_FILE", ["not found"]),
])
def test_config_error_names_file_line_and_key(tmp_path, old, new, key, words):
    e = _config_error(tmp_path, lambda t: t.replace(old, new))
    assert f"config_dcqcn.txt line {_line_of(key)}: {key}: " in str(e)
    for w in words:
        assert w in e.message


def test_link_down_becomes_a_link_failure_after_2_s(tmp_path):
    """LINK_DOWN time a b: the link a-b goes down `time` us after 2 s, where the reference's flows
    start; '0 0 0' is none."""
    config = _case_copy(tmp_path, edit=lambda t: t.replace("LINK_DOWN 0 0 0", "LINK_DOWN 1000 3 0"))
    (failure,) = load_scenario(config).link_failures
    assert failure.link == (3, 0) and failure.at == 2_001_000_000
    assert load_scenario(_case_copy(tmp_path / "none")).link_failures == ()


@pytest.mark.parametrize("extra, field, words", [
    ("link_failures: [{link: [0, 1], at: 10us}]", "link_failures[0].link", ["no link between nodes 0 and 1"]),
    ("link_failures: [{link: [0, 3], at: soon}]", "link_failures[0].at", ["soon"]),
    ("link_failures: [{link: [0, 3]}]", "link_failures[0].at", ["missing"]),
])
def test_yaml_link_failure_errors(tmp_path, extra, field, words):
    path = _yaml_scenario(tmp_path, "{kind: rdma}")
    path.write_text(path.read_text() + extra + "\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    assert "\n" not in str(e.value) and e.value.field == field
    for w in words:
        assert w in e.value.message


def test_link_failures_need_rdma(tmp_path):
    path = _yaml_scenario(tmp_path, "{kind: dctcp}")
    path.write_text(path.read_text() + "link_failures: [{link: [0, 3], at: 10us}]\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    assert e.value.field == "link_failures[0]" and "RDMA transport only" in e.value.message


def test_unknown_key(tmp_path):
    e = _config_error(tmp_path, lambda t: t + "RATE_AII 5Mb/s\n")
    n = len((CASES / "incast2" / "config_dcqcn.txt").read_text().splitlines()) + 1
    assert f"line {n}: RATE_AII: unknown key (did you mean RATE_AI?)" in str(e)


def test_duplicate_key(tmp_path):
    e = _config_error(tmp_path, lambda t: t + "RATE_AI 1Gb/s\n")
    assert e.field.endswith(": RATE_AI") and f"first on line {_line_of('RATE_AI')}" in e.message


def test_missing_topology_file_key(tmp_path):
    e = _config_error(tmp_path, lambda t: t.replace("TOPOLOGY_FILE incast2/topology.txt\n", ""))
    assert e.field == "TOPOLOGY_FILE" and "missing" in e.message


def test_config_referenced_from_yaml_names_it_relative_to_the_scenario(tmp_path):
    path = _yaml_scenario(tmp_path, "{kind: rdma, config: incast2/config_dcqcn.txt}")
    config = tmp_path / "incast2" / "config_dcqcn.txt"
    config.write_text(config.read_text().replace("RATE_AI 50Mb/s", "RATE_AI fifty"))
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    assert str(e.value) == (f"{path}: incast2/config_dcqcn.txt line {_line_of('RATE_AI')}: "
                            "RATE_AI: 'fifty' is not a rate (expected e.g. '50Mb/s')")


# --- YAML transport errors ---------------------------------------------------------------------

@pytest.mark.parametrize("transport, field, words", [
    ("{kind: rdma, parameters: {NOPE: 1}}", "transport.parameters.NOPE", ["unknown key"]),
    ("{kind: rdma, parameters: {RATE_AI: fifty}}", "transport.parameters.RATE_AI", ["'fifty'"]),
    ("{kind: rdma, parameters: {RATE_AI: [1]}}", "transport.parameters.RATE_AI", ["list"]),
    ("{kind: rdma, parameters: {FLOW_FILE: x}}", "transport.parameters.FLOW_FILE",
     ["not a transport parameter"]),
    ("{kind: rdma, parameters: {KMAX_MAP: '1 100000000000 1600'}}", "transport.parameters.KMAX_MAP",
     ["same rates", "KMIN_MAP (default)"]),
    ("{kind: rdma, cc: pint}", "transport.cc", ["dcqcn", "timely"]),
    ("{kind: rdma, mtu: 9000}", "transport.mtu", ["unknown field"]),
    ("{kind: rdma, config: nope.txt}", "transport.config", ["not found"]),
    ("{kind: bbr}", "transport.kind", ["dctcp", "rdma"]),
])
def test_yaml_transport_errors(tmp_path, transport, field, words):
    path = _yaml_scenario(tmp_path, transport)
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    assert "\n" not in str(e.value) and str(e.value).startswith(str(path))
    assert e.value.field == field
    for w in words:
        assert w in e.value.message


def test_link_rate_without_ecn_thresholds_fails(tmp_path):
    topology = (CASES / "incast2" / "topology.txt").read_text().replace("100Gbps", "40Gbps")
    path = _yaml_scenario(tmp_path, "{kind: rdma}", topology="incast2/topo40.txt")
    (tmp_path / "incast2" / "topo40.txt").write_text(topology)
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    assert "\n" not in str(e.value)
    assert e.value.field == "transport" and "40Gbps" in e.value.message
    # listing the rate fixes it
    maps = {k: f"'1 40000000000 {v}'" for k, v in (("KMIN_MAP", 100), ("KMAX_MAP", 400), ("PMAX_MAP", 0.2))}
    fixed = _yaml_scenario(tmp_path, "{kind: rdma, parameters: {"
                           + ", ".join(f"{k}: {v}" for k, v in maps.items()) + "}}",
                           topology="incast2/topo40.txt")
    assert load_scenario(fixed).transport.resolved().ecn == ((40 * 10**9, 100_000, 400_000, 0.2),)


def test_parse_scenario_dict_names_parameter_key():
    with pytest.raises(ScenarioError) as e:
        parse_scenario_dict({"name": "r", "topology": {"kind": "hpcc", "file": "incast2/topology.txt"},
                             "flow_file": "incast2/flow.txt",
                             "transport": {"kind": "rdma", "parameters": {"NOPE": 1}}},
                            CASES / "s.yaml")
    assert e.value.field == "transport.parameters.NOPE"


# --- the command line -----------------------------------------------------------------------

def test_cli_run_on_a_malformed_config_is_one_line(tmp_path):
    config = _case_copy(tmp_path, edit=lambda t: t.replace("RATE_AI 50Mb/s", "RATE_AI fifty"))
    out = subprocess.run([sys.executable, "-m", "bridge.cli", "run", str(config), "--out",
                          str(tmp_path / "out"), "--quiet"], check=False, capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert f"{config} line {_line_of('RATE_AI')}: RATE_AI: 'fifty' is not a rate" in lines[0]
    assert not (tmp_path / "out").exists()


# --- RdmaParameters -> wormhole::RdmaConfig ----------------------------------------------------

def test_rdma_config_fills_every_mapped_field():
    class FakeConfig:
        def __init__(self):
            for cxx in RDMA_CONFIG_FIELDS:
                setattr(self, cxx, None)
            self.ecn = []

        def AddEcnThreshold(self, rate, kmin, kmax, pmax):
            self.ecn.append((rate, kmin, kmax, pmax))

    p = load_scenario(CASES / "incast16" / "config_hpcc.txt").transport.resolved()
    c = rdma_config(FakeConfig, p)
    assert c.ccMode == 3 and c.bufferBytes == 4 * 2**20 and c.rpTimerNs == 900_000
    assert c.enableEcn is True and c.ewmaGain == 1 / 256 and c.ackIntervalBytes == 1
    assert c.ecn == list(p.ecn)
    assert all(getattr(c, cxx) is not None for cxx in RDMA_CONFIG_FIELDS)


def test_rdma_config_matches_the_cxx_struct():
    """Compile the RdmaConfig struct of ns3_patches/rdma.h alone (cppyy, a child process) and fill
    it: every mapped field exists there and takes its value."""
    pytest.importorskip("cppyy")
    script = textwrap.dedent("""
        import json, re, sys
        from pathlib import Path
        import cppyy
        from bridge.ns3.rdma import RDMA_CONFIG_FIELDS, rdma_config
        from bridge.scenario import load_scenario
        text = Path("ns3_patches/rdma.h").read_text()
        struct = re.search(r"struct RdmaConfig\\s*\\{.*?\\n\\};", text, re.S).group(0)
        struct = re.sub(r"void AddEcnThreshold\\(([^)]*)\\);",
                        r"void AddEcnThreshold(\\1) { ecn.push_back({rateBps, kminBytes, kmaxBytes, pmax}); }",
                        struct)
        cppyy.cppdef("#include <cstdint>\\n#include <vector>\\nnamespace rdma_check {\\n" + struct + "\\n}")
        p = load_scenario(sys.argv[1]).transport.resolved()
        c = rdma_config(cppyy.gbl.rdma_check.RdmaConfig, p)
        print(json.dumps({"fields": {cxx: getattr(c, cxx) for cxx in RDMA_CONFIG_FIELDS},
                          "ecn": [[e.rateBps, e.kmin, e.kmax, e.pmax] for e in c.ecn]}))
    """)
    config = CASES / "incast16" / "config_hpcc.txt"
    out = subprocess.run([sys.executable, "-c", script, str(config)], check=False, capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    p = load_scenario(config).transport.resolved()
    for cxx, (name, convert) in RDMA_CONFIG_FIELDS.items():
        assert got["fields"][cxx] == convert(getattr(p, name)), cxx
    assert [tuple(e) for e in got["ecn"]] == list(p.ecn)
