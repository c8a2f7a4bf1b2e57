"""Load a scenario: YAML -> per-field validation (pydantic) -> checks across fields and files.

Every problem becomes one `ScenarioError` naming the scenario file, the field path
(`flows[3].dst`, `topology.hosts_per_leaf`, `flow.txt line 4: size`) and the bad value.

A config file of the HPCC paper's reference simulator (`KEY value` lines, see hpcc_config.py) is
a scenario too: its TOPOLOGY_FILE, FLOW_FILE, SIMULATOR_STOP_TIME and LINK_DOWN with an RDMA
transport.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from bridge.errors import ScenarioError
from bridge.scenario.hpcc_config import (
    ParameterError,
    format_rate,
    looks_like_hpcc_config,
    parse_hpcc_config,
    resolve_rdma,
)
from bridge.scenario.schema import AccelSpec, FlowSpec, LinkSpec, Scenario
from bridge.scenario.training import check_training, job_field
from bridge.topology import Topology, build_topology, read_hpcc_topology
from bridge.workload.flows import read_hpcc_flows

WORKLOAD_KEYS = ("flows", "flow_file", "training", "jobs", "aicb")
MAX_SCENARIO_BYTES = 1_000_000  # a scenario is hand-written; big data goes in flow_file
_MAX_RATE = 2**64 - 1  # as RateBps in schema.py


def load_scenario(path: str | os.PathLike) -> Scenario:
    """Read, parse and validate a scenario YAML file, or a reference simulator's config.txt.

    Raises ScenarioError for an unreadable file, bad YAML, or whatever `parse_scenario_dict`
    (or `hpcc_config_scenario`) rejects.
    """
    where = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ScenarioError(where, None, f"cannot read: {e.strerror}") from None
    if len(raw) > MAX_SCENARIO_BYTES:
        raise ScenarioError(where, None, f"{len(raw)} bytes is too large for a scenario "
                            f"(max {MAX_SCENARIO_BYTES}; put flows in a flow_file)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError(where, None, f"not UTF-8 text (bad byte at offset {e.start})") from None
    if looks_like_hpcc_config(text) and not _is_yaml_mapping(text):
        return hpcc_config_scenario(path)
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ScenarioError(where, None, f"YAML error{at}: {e.problem or e.context}") from None
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        raise ScenarioError(where, None, f"YAML error at line {line}: "
                            f"character #x{e.character:04x} is not allowed") from None
    except (yaml.YAMLError, ValueError, RecursionError) as e:
        # ValueError: PyYAML builds dates and ints eagerly ("2001-02-30", a 5000-digit int).
        raise ScenarioError(where, None, f"YAML error: {_one_line(str(e))}") from None
    return parse_scenario_dict(data, where)


def _is_yaml_mapping(text: str) -> bool:
    try:
        return isinstance(yaml.safe_load(text), dict)
    except (yaml.YAMLError, ValueError, RecursionError):
        return False


def hpcc_config_scenario(path: str | os.PathLike) -> Scenario:
    """The scenario a reference simulator's config file describes.

    Name `<case folder>-<file stem>`, seed 1, topology and flows from TOPOLOGY_FILE and FLOW_FILE
    (resolved against the file's folder, then its parent: the reference ran from the folder above
    its cases), stop time SIMULATOR_STOP_TIME, a link failure from LINK_DOWN, transport rdma with
    this file as `config`.
    Raises ScenarioError naming the file, line and key.
    """
    where = str(path)
    file = Path(path).resolve()
    config = parse_hpcc_config(file, where)
    config_dir = file.parent
    data: dict = {"name": f"{config_dir.name}-{file.stem}", "seed": 1}
    for key, value in (("TOPOLOGY_FILE", config.topology_file), ("FLOW_FILE", config.flow_file)):
        if value is None:
            raise ScenarioError(where, key, "missing (a config file run needs TOPOLOGY_FILE and "
                                "FLOW_FILE)")
        candidates = [(config_dir / value).resolve(), (config_dir.parent / value).resolve()]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise ScenarioError(None, config.where(key), f"{value!r} not found (looked for "
                                f"{str(candidates[0])!r} and {str(candidates[1])!r})")
        if key == "TOPOLOGY_FILE":
            data["topology"] = {"kind": "hpcc", "file": str(found)}
        else:
            data["flow_file"] = str(found)
    data["transport"] = {"kind": "rdma", "config": str(file)}
    if config.stop_time_ns is not None:
        data["stop_time"] = config.stop_time_ns
    if config.link_down is not None:
        at_ns, a, b = config.link_down
        data["link_failures"] = [{"link": [a, b], "at": at_ns}]
    # Merge now, so that a problem with the file's values names the file as the user did.
    resolve_rdma(config, {}, None)
    try:
        return parse_scenario_dict(data, path)
    except ScenarioError as e:
        if e.field and e.field.startswith("link_failures"):  # its only source: LINK_DOWN's line
            raise ScenarioError(None, config.where("LINK_DOWN"), e.message) from None
        raise


def parse_scenario_dict(data: object, path: str | os.PathLike | None) -> Scenario:
    """Validate already-parsed YAML; files are resolved against `path`'s directory (or the cwd).

    Raises ScenarioError for the first problem found.
    """
    where = str(path) if path is not None else None
    if data is None:
        raise ScenarioError(where, None,
                            "empty scenario (expected a mapping with name, topology, ...)")
    if not isinstance(data, dict):
        raise ScenarioError(where, None, f"top level must be a mapping of fields, got "
                            f"{type(data).__name__} {_short(data)}")
    base_dir = Path(path).resolve().parent if path is not None else Path.cwd()
    try:
        scenario = Scenario.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as e:
        raise _to_scenario_error(e, where) from None
    try:
        scenario = _cross_check(scenario, base_dir)
    except ScenarioError as e:  # cross-checks know fields, not the file
        raise ScenarioError(where, e.field, e.message) from None
    scenario._source_path = Path(path).resolve() if path is not None else None
    return scenario


def _join(prefix: str, field: str | None) -> str:
    return f"{prefix}.{field}" if field else prefix


def _cross_check(s: Scenario, base_dir: Path) -> Scenario:
    """Checks across fields and files; returns the scenario with derived fields filled in."""
    topo_spec = _resolve_topology(s.topology)
    topology = _build(topo_spec, base_dir)

    given = [k for k in WORKLOAD_KEYS if getattr(s, k) is not None]
    # CORRECTNESS: exactly one workload, so nobody has to guess which one runs.
    if not given:
        raise _err("flows", "no workload: give one of flows, flow_file, training, jobs or aicb")
    if len(given) > 1:
        raise _err(given[1], "give only one of flows, flow_file, training, jobs or aicb "
                   f"(got {' and '.join(given)})")

    flows, checks = s.flows, ()
    if s.flow_file is not None:
        label = os.path.relpath(s.flow_file, base_dir)
        records = read_hpcc_flows(s.flow_file, label)
        if not records:
            raise _err("flow_file", f"{label} has no flows")
        flows = tuple(FlowSpec.model_construct(src=r.src, dst=r.dst, size=r.size_bytes,
                                               start=r.start_ns) for r in records)
        checks = zip(flows, (f"{label} line {r.line}: " for r in records))
    elif flows is not None:
        if not flows:
            raise _err("flows", "empty list (give at least one flow)")
        checks = ((f, f"flows[{i}].") for i, f in enumerate(flows))
        for i, flow in enumerate(flows):
            for j in flow.after:
                if j >= i:
                    raise _err(f"flows[{i}].after", f"{j} is not an earlier flow of the list (0..{i - 1})")
    hosts = frozenset(topology.hosts)
    for flow, field in checks:
        _check_flow(flow, field, topology, hosts)
    if s.aicb is not None:  # parse it now: a malformed file fails at load, naming its line
        from bridge.workload.aicb import import_aicb  # here: it imports bridge.scenario.training

        import_aicb(s.aicb.file, topology.hosts, getattr(topo_spec, "gpus_per_server", None),
                    s.aicb.iterations)
    if s.training is not None:
        check_training(s.training)  # whether the plan fits the topology is checked when it is built
    for k, job in enumerate(s.jobs or ()):
        try:
            check_training(job)
        except ScenarioError as e:
            raise _err(job_field(e.field, k), e.message) from None
    if s.jobs is not None and not s.jobs:
        raise _err("jobs", "empty list (give at least one job)")
    names = [job.name or f"job{k}" for k, job in enumerate(s.jobs or ())]
    for k, name in enumerate(names):
        if name in names[:k]:
            raise _err(f"jobs[{k}].name", f"{name!r} names another job too")

    t = s.transport
    for i, failure in enumerate(s.link_failures):
        field = f"link_failures[{i}]"
        if t.kind != "rdma":
            raise _err(field, "link failures are built for the RDMA transport only (transport.kind: rdma)")
        a, b = failure.link
        if not any({link.a, link.b} == {a, b} for link in topology.links):
            raise _err(f"{field}.link", f"no link between nodes {a} and {b} in the topology")
    if t.kind == "rdma":
        _check_rdma(t, topology, base_dir)
        return s.model_copy(update={"topology": topo_spec, "flows": flows})
    # CORRECTNESS: RED needs MinTh <= MaxTh <= MaxSize, and ns-3 aborts otherwise.
    kmin, kmax = t.ecn_kmin, t.ecn_kmax
    if kmin is not None and kmax is not None and kmin > kmax:
        raise _err("transport.ecn_kmin", f"{kmin} is above ecn_kmax {kmax}")
    for name, k in (("ecn_kmin", kmin), ("ecn_kmax", kmax)):
        if k is not None and k > t.queue_size:
            raise _err(f"transport.{name}", f"{k} is above queue_size {t.queue_size}")
    return s.model_copy(update={"topology": topo_spec, "flows": flows})


def _check_rdma(t, topology: Topology, base_dir: Path) -> None:
    """The config file and parameters merge, and every switch port's rate has ECN thresholds."""
    label = os.path.relpath(t.config, base_dir) if t.config is not None else None
    params = t.resolved(label)
    # CORRECTNESS: the reference aborts ("must set kmin for each link speed") on a switch port
    # whose rate has no KMIN_MAP/KMAX_MAP/PMAX_MAP entry; ours would have no thresholds.
    switches = set(topology.switches)
    rates = params.ecn_rates()
    for link in topology.links:
        if (link.a in switches or link.b in switches) and link.rate_bps not in rates:
            listed = ", ".join(format_rate(r) for r in sorted(rates))
            raise _err("transport", f"no ECN thresholds for {format_rate(link.rate_bps)} links "
                       f"(link {link.a}-{link.b}); KMIN_MAP, KMAX_MAP and PMAX_MAP list {listed}: "
                       f"add {link.rate_bps} to each")


def _resolve_topology(spec):
    """Fill derived fields: leaf-spine fabric link from oversubscription, ROFT servers_per_leaf."""
    if spec.kind == "leaf-spine":
        return spec.model_copy(update={"fabric_link": _fabric_link(spec)})
    if spec.kind == "roft":
        if spec.servers_per_leaf is None:
            return spec.model_copy(update={"servers_per_leaf": spec.servers})
        if spec.servers_per_leaf > spec.servers:
            raise _err("topology.servers_per_leaf",
                       f"{spec.servers_per_leaf} is more than servers ({spec.servers})")
    return spec


def _fabric_link(spec) -> LinkSpec:
    """fabric rate = hosts_per_leaf * host rate / (spines * oversubscription)."""
    over, fabric = spec.oversubscription, spec.fabric_link
    if over is None:
        if fabric is None:
            raise _err("topology.fabric_link", "missing (give fabric_link or oversubscription)")
        return fabric
    host_bps = spec.hosts_per_leaf * spec.host_link.rate
    exact = host_bps / (spec.spines * over)
    if not 1 <= exact <= _MAX_RATE:
        raise _err("topology.oversubscription",
                   f"{over} gives a fabric rate of {exact:.3g} bps (expected 1..{_MAX_RATE:.3g})")
    derived = round(exact)
    if fabric is None:
        return LinkSpec(rate=derived, delay=spec.host_link.delay)
    actual = host_bps / (spec.spines * fabric.rate)
    if abs(fabric.rate - derived) > 0.01 * derived:
        raise _err("topology.oversubscription",
                   f"{over} disagrees with fabric_link.rate {fabric.rate} bps, which gives "
                   f"{actual:.3g} (drop one of them)")
    return fabric


def _build(spec, base_dir: Path) -> Topology:
    """build_topology, with errors given their full field (HPCC ones name the file as written)."""
    try:
        if spec.kind == "hpcc":
            return read_hpcc_topology(spec.file, os.path.relpath(spec.file, base_dir))
        return build_topology(spec)
    except ScenarioError as e:
        field = e.field if spec.kind == "hpcc" else _join("topology", e.field)
        raise _err(field or "topology", e.message) from None


def _check_flow(flow: FlowSpec, field: str, topology: Topology, hosts: frozenset[int]) -> None:
    """CORRECTNESS: every flow runs between two distinct hosts of the topology."""
    for end in ("src", "dst"):
        node = getattr(flow, end)
        if node not in hosts:
            if node < topology.n_nodes:
                what = f"{node} is a switch, not a host"
            else:
                what = f"{node} is not a node (the topology has nodes 0..{topology.n_nodes - 1})"
            raise _err(field + end, f"{what}; hosts are {_id_ranges(topology.hosts)}")
    if flow.src == flow.dst:
        raise _err(field + "dst", f"same as src ({flow.src})")


def _id_ranges(ids: list[int], limit: int = 8) -> str:
    """'0..7, 12, 14..15' for sorted ids, at most `limit` ranges."""
    out, start = [], None
    for i, n in enumerate(ids):
        if start is None:
            start = n
        if i + 1 == len(ids) or ids[i + 1] != n + 1:
            out.append(str(n) if start == n else f"{start}..{n}")
            start = None
    return ", ".join(out[:limit]) + (", ..." if len(out) > limit else "")


def _err(field: str, message: str) -> ScenarioError:
    """A cross-check error; parse_scenario_dict adds the file."""
    return ScenarioError(None, field, message)


# --- pydantic errors -> ScenarioError --------------------------------------------------------

def _to_scenario_error(exc: ValidationError, where: str | None) -> ScenarioError:
    """The first pydantic error as a ScenarioError with a YAML path and a short message."""
    err = exc.errors()[0]
    field, model = _yaml_path(err["loc"])
    kind, msg, value = err["type"], err["msg"], err.get("input")
    if kind == "missing":
        message = "missing (required)"
    elif kind == "extra_forbidden":
        allowed = f" (expected one of: {', '.join(_keys(model))})" if model else ""
        message = f"unknown field{allowed}"
    elif kind in ("union_tag_invalid", "union_tag_not_found"):
        field = _join(field, "kind")
        expected = _union_tags(model, err["loc"][-1]) if model else ""
        got = f"unknown kind {err['ctx']['tag']!r}" if kind == "union_tag_invalid" else "missing"
        message = f"{got} (expected one of: {expected})"
    elif isinstance((err.get("ctx") or {}).get("error"), ParameterError):
        error = err["ctx"]["error"]  # transport.parameters: name the key
        field, message = _join(field, error.key), error.message
    else:
        message = _plain_message(msg, value)
    return ScenarioError(where, field or None, _one_line(message))


def _plain_message(msg: str, value: object) -> str:
    """A pydantic message in our words, with the value it refused (our validators quote it)."""
    if msg.startswith("Value error, "):
        return msg.removeprefix("Value error, ")
    return f"{_reword(msg)} (got {_short(value)})"


def with_accel_overrides(scenario: Scenario, overrides: dict | None) -> Scenario:
    """The scenario with fields of its `accel` block replaced (command-line --theta etc.).

    Raises ScenarioError naming the option for a bad value, worded as a scenario's errors are.
    """
    if not overrides:
        return scenario
    try:
        accel = AccelSpec.model_validate({**scenario.accel.model_dump(), **overrides})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ScenarioError(None, f"--{first['loc'][0].replace('_', '-')}",
                            _plain_message(first["msg"], first["input"])) from None
    updated = scenario.model_copy(update={"accel": accel})
    updated._source_path = scenario.source_path
    return updated


_REWORDS = [  # pydantic's phrasing -> ours, applied in order
    ("Input should be ", "expected "), ("greater than or equal to ", ">= "),
    ("less than or equal to ", "<= "), ("greater than ", "> "), ("less than ", "< "),
    ("a valid integer", "an int"), ("a valid string", "a string"), ("a valid number", "a number"),
    ("a valid boolean", "true or false"), ("a valid tuple", "a list"),
    ("a valid dictionary or object to extract fields from", "a mapping"),
    ("a valid dictionary", "a mapping"),
]


def _reword(msg: str) -> str:
    for old, new in _REWORDS:
        msg = msg.replace(old, new)
    return msg


def _yaml_path(loc: tuple) -> tuple[str, type[BaseModel] | None]:
    """Dotted YAML path of a pydantic location, and the model holding its last key.

    Pydantic inserts the tag of a discriminated union into the location ('topology', 'roft',
    'spines'); it is dropped here because the user never wrote it.
    """
    tp, path, holder = Scenario, "", None
    for item in loc:
        tp = _strip_optional(tp)
        if isinstance(item, int):
            path += f"[{item}]"
            args = get_args(tp)
            tp = args[0] if get_origin(tp) in (list, tuple) and args else None
            continue
        members = _tagged_members(tp)
        if item in members:
            tp = members[item]
            continue
        holder = tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None
        path = _join(path, str(item)) if path else str(item)
        tp = _field_annotation(holder, item) if holder else None
    return path, holder


def _strip_optional(tp):
    if get_origin(tp) in (Union, _UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


_UnionType = type(int | None)


def _tagged_members(tp) -> dict[str, type[BaseModel]]:
    """Union members by the value of their Literal-typed tag field."""
    if get_origin(tp) not in (Union, _UnionType):
        return {}
    out = {}
    for member in get_args(tp):
        if isinstance(member, type) and issubclass(member, BaseModel):
            for f in member.model_fields.values():
                if get_origin(f.annotation) is Literal:
                    out.update({v: member for v in get_args(f.annotation)})
    return out


def _field_annotation(model: type[BaseModel], key: str):
    for name, f in model.model_fields.items():
        if (f.alias or name) == key:
            return f.annotation
    return None


def _keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _union_tags(model: type[BaseModel], key) -> str:
    return ", ".join(_tagged_members(_field_annotation(model, key)))


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(text: str) -> str:
    return " ".join(text.split())


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys instead of silently keeping the last one."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key; SafeLoader reports it below
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"duplicate key {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)
