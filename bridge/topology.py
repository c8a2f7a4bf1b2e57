"""Topologies as plain graphs: leaf-spine, k-ary fat-tree, rail-optimized fat-tree, HPCC file.

No ns-3 here. Node ids are dense 0..n_nodes-1; `hosts` lists the end hosts (for the built-in kinds
hosts come first, so host i is node i). The ns-3 builder creates node i for topology node i.
Errors are `ScenarioError`s without a path (the scenario loader adds the scenario file); their
field is relative to the topology spec or names the file and line ("topology.txt line 4: rate").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import networkx as nx

from bridge.errors import ScenarioError
from bridge.units import parse_rate, parse_time

if TYPE_CHECKING:
    from bridge.scenario.schema import TopologySpec

# Caps that keep a typo (hosts_per_leaf: 100000000) from hanging the loader; far above what a
# packet-level ns-3 run can simulate.
MAX_NODES = 200_000
MAX_LINKS = 1_000_000


@dataclass(frozen=True)
class Link:
    """A full-duplex point-to-point link between nodes a and b."""

    a: int
    b: int
    rate_bps: int
    delay_ns: int


@dataclass
class Topology:
    kind: str
    n_nodes: int
    hosts: list[int]
    links: list[Link]
    node_names: list[str] = field(default_factory=list)
    host_coords: dict[int, tuple[int, int]] = field(default_factory=dict)
    """ROFT only: host -> (server, gpu); gpu is also the rail index."""

    @property
    def switches(self) -> list[int]:
        """Every node that is not a host, ascending."""
        hosts = set(self.hosts)
        return [n for n in range(self.n_nodes) if n not in hosts]

    @cached_property
    def graph(self) -> nx.Graph:
        """Undirected graph; nodes carry `name` and `host`, edges `rate_bps` and `delay_ns`.

        Cached: build the Topology completely before first use.
        """
        g = nx.Graph()
        hosts = set(self.hosts)
        for n in range(self.n_nodes):
            name = self.node_names[n] if self.node_names else str(n)
            g.add_node(n, name=name, host=n in hosts)
        for link in self.links:
            g.add_edge(link.a, link.b, rate_bps=link.rate_bps, delay_ns=link.delay_ns)
        return g


LinkParams = tuple[int, int]
"""(rate_bps, delay_ns) of one class of links."""


def build_topology(spec: TopologySpec) -> Topology:
    """Build the graph a validated topology spec (`bridge.scenario.schema`) describes.

    PRECONDITION: a leaf-spine spec has `fabric_link` set (the loader derives it from
    `oversubscription`) and a ROFT spec has `servers_per_leaf` set.
    Raises ScenarioError if the graph would be too large or an HPCC file is malformed.
    """
    if spec.kind == "hpcc":
        return read_hpcc_topology(spec.file)
    host = (spec.host_link.rate, spec.host_link.delay)
    fabric = (spec.fabric_link.rate, spec.fabric_link.delay)
    if spec.kind == "leaf-spine":
        return leaf_spine(spec.leaves, spec.spines, spec.hosts_per_leaf, host, fabric)
    if spec.kind == "fat-tree":
        return fat_tree(spec.k, host, fabric)
    if spec.kind == "roft":
        return roft(spec.servers, spec.gpus_per_server, spec.servers_per_leaf, spec.spines,
                    host, fabric)
    raise ScenarioError(None, "kind", f"unknown topology kind {spec.kind!r}")


def _check_size(n_nodes: int, n_links: int) -> None:
    if n_nodes > MAX_NODES or n_links > MAX_LINKS:
        raise ScenarioError(
            None, None, f"{n_nodes} nodes and {n_links} links is too large "
            f"(at most {MAX_NODES} nodes and {MAX_LINKS} links)")


def leaf_spine(leaves: int, spines: int, hosts_per_leaf: int,
               host: LinkParams, fabric: LinkParams) -> Topology:
    """Two-tier Clos: host h under leaf h // hosts_per_leaf, every leaf linked to every spine.

    Nodes: hosts, then leaves, then spines. Links: host links, then leaf-spine links.
    """
    n_hosts = leaves * hosts_per_leaf
    _check_size(n_hosts + leaves + spines, n_hosts + leaves * spines)
    leaf0, spine0 = n_hosts, n_hosts + leaves
    links = [Link(h, leaf0 + h // hosts_per_leaf, *host) for h in range(n_hosts)]
    links += [Link(leaf0 + l, spine0 + s, *fabric) for l in range(leaves) for s in range(spines)]
    names = ([f"host{h}" for h in range(n_hosts)] + [f"leaf{l}" for l in range(leaves)]
             + [f"spine{s}" for s in range(spines)])
    return Topology("leaf-spine", spine0 + spines, list(range(n_hosts)), links, names)


def fat_tree(k: int, host: LinkParams, fabric: LinkParams) -> Topology:
    """k-ary fat-tree (Al-Fares et al.): k pods of k/2 edge and k/2 aggregation switches, and
    (k/2)^2 core switches.

    Nodes: hosts (k^3/4), edge, aggregation, core switches. Host h sits in pod h // (k^2/4) under
    edge switch h // (k/2). Aggregation switch j of each pod links to cores j*k/2 .. j*k/2 + k/2-1.
    """
    half = k // 2
    n_hosts, n_edge, n_core = k**3 // 4, k * half, half * half
    _check_size(n_hosts + 2 * n_edge + n_core, 3 * n_hosts)
    edge0, agg0 = n_hosts, n_hosts + n_edge
    core0 = agg0 + n_edge
    links = [Link(h, edge0 + h // half, *host) for h in range(n_hosts)]
    for pod in range(k):
        for i in range(half):
            for j in range(half):
                links.append(Link(edge0 + pod * half + i, agg0 + pod * half + j, *fabric))
    for pod in range(k):
        for j in range(half):
            for i in range(half):
                links.append(Link(agg0 + pod * half + j, core0 + j * half + i, *fabric))
    names = ([f"host{h}" for h in range(n_hosts)] + [f"edge{e}" for e in range(n_edge)]
             + [f"agg{a}" for a in range(n_edge)] + [f"core{c}" for c in range(n_core)])
    return Topology("fat-tree", core0 + n_core, list(range(n_hosts)), links, names)


def roft(servers: int, gpus_per_server: int, servers_per_leaf: int, spines: int,
         host: LinkParams, fabric: LinkParams) -> Topology:
    """Rail-optimized fat-tree: each GPU is a host with its own NIC on its rail's leaf.

    Servers form groups of `servers_per_leaf` (the last group may be smaller); each group has one
    leaf per rail. Host s*gpus_per_server + g (GPU g of server s) links to leaf
    group(s)*gpus_per_server + g; every leaf links to every spine.
    Nodes: hosts, then leaves, then spines. `host_coords[h]` is (server, gpu).
    """
    n_hosts = servers * gpus_per_server
    groups = -(-servers // servers_per_leaf)
    n_leaves = groups * gpus_per_server
    _check_size(n_hosts + n_leaves + spines, n_hosts + n_leaves * spines)
    leaf0, spine0 = n_hosts, n_hosts + n_leaves
    links, coords = [], {}
    for s in range(servers):
        for g in range(gpus_per_server):
            h = s * gpus_per_server + g
            coords[h] = (s, g)
            links.append(Link(h, leaf0 + (s // servers_per_leaf) * gpus_per_server + g, *host))
    links += [Link(leaf0 + l, spine0 + p, *fabric) for l in range(n_leaves) for p in range(spines)]
    names = ([f"server{s}/gpu{g}" for s, g in coords.values()]
             + [f"leaf{l // gpus_per_server}/rail{l % gpus_per_server}" for l in range(n_leaves)]
             + [f"spine{p}" for p in range(spines)])
    return Topology("roft", spine0 + spines, list(range(n_hosts)), links, names, coords)


def read_hpcc_topology(file: Path, label: str | None = None) -> Topology:
    """Read an HPCC `topology.txt`; node ids stay as in the file, hosts are the non-switch ids.

    Format: line 1 "nodes switches links"; line 2 the switch ids; then one link per line,
    "src dst rate delay error_rate" (e.g. "0 8 100Gbps 0.001ms 0"). Blank lines are skipped.
    Only error_rate 0 is accepted: nothing here models random loss.
    Raises ScenarioError naming `label` (default: the path) and the line for anything malformed,
    out of range, duplicated, or a graph that is not connected.
    """
    label = label or str(file)
    lines = read_lines(file, label)

    def fail(line: int, column: str, message: str):
        raise ScenarioError(None, f"{label} line {line}: {column}", message)

    if not lines:
        raise ScenarioError(None, label, "file is empty (expected 'nodes switches links' first)")
    line_no, head = lines[0]
    if len(head) != 3 or not all(_is_uint(t) for t in head):
        fail(line_no, "header",
             f"expected 'nodes switches links' as 3 ints, got {' '.join(head)!r}")
    n_nodes, n_switches, n_links = map(int, head)
    if n_nodes > MAX_NODES or n_links > MAX_LINKS:
        fail(line_no, "header", f"{n_nodes} nodes and {n_links} links is too large "
             f"(at most {MAX_NODES} nodes and {MAX_LINKS} links)")
    if n_switches >= n_nodes:
        fail(line_no, "switches", f"{n_switches} switches leave no hosts among {n_nodes} nodes")

    body = lines[1:]
    switches: set[int] = set()
    if n_switches:
        if not body:
            raise ScenarioError(None, label, f"missing the line of {n_switches} switch ids")
        line_no, ids = body.pop(0)
        if len(ids) != n_switches:
            fail(line_no, "switches", f"expected {n_switches} switch ids (line 1), got {len(ids)}")
        for tok in ids:
            sid = _node_id(tok, n_nodes, lambda m: fail(line_no, "switches", m))
            if sid in switches:
                fail(line_no, "switches", f"switch {sid} listed twice")
            switches.add(sid)
    if len(body) != n_links:
        where = body[n_links][0] if len(body) > n_links else (body or lines)[-1][0]
        fail(where, "links", f"line 1 declares {n_links} links but the file has {len(body)}")

    links: list[Link] = []
    seen: dict[tuple[int, int], int] = {}
    for line_no, toks in body:
        if len(toks) != 5:
            fail(line_no, "link",
                 f"expected 'src dst rate delay error_rate', got {' '.join(toks)!r}")
        a = _node_id(toks[0], n_nodes, lambda m: fail(line_no, "src", m))
        b = _node_id(toks[1], n_nodes, lambda m: fail(line_no, "dst", m))
        if a == b:
            fail(line_no, "dst", f"link from node {a} to itself")
        pair = (min(a, b), max(a, b))
        if pair in seen:
            fail(line_no, "dst", f"duplicate link {a}-{b} (first on line {seen[pair]})")
        seen[pair] = line_no
        rate = _parse_column(parse_rate, toks[2], lambda m: fail(line_no, "rate", m))
        if rate <= 0:
            fail(line_no, "rate", f"{toks[2]!r} must be > 0")
        delay = _parse_column(parse_time, toks[3], lambda m: fail(line_no, "delay", m))
        if delay < 0:
            fail(line_no, "delay", f"{toks[3]!r} must be >= 0")
        if toks[4] not in ("0", "0.0"):
            fail(line_no, "error_rate", f"{toks[4]!r} not supported (only 0: no random loss)")
        links.append(Link(a, b, rate, delay))

    hosts = [n for n in range(n_nodes) if n not in switches]
    names = [f"switch{n}" if n in switches else f"host{n}" for n in range(n_nodes)]
    topo = Topology("hpcc", n_nodes, hosts, links, names)
    _check_connected(topo, label)
    return topo


def _check_connected(topo: Topology, label: str) -> None:
    """CORRECTNESS: every host must reach every other, so the graph must be one component."""
    parts = sorted(nx.connected_components(topo.graph), key=min)
    if len(parts) > 1:
        stray = sorted(parts[1])
        shown = ", ".join(map(str, stray[:10])) + (", ..." if len(stray) > 10 else "")
        raise ScenarioError(None, label, f"node {stray[0]} is not connected to node 0 "
                            f"({len(parts)} components; this one has nodes {shown})")


def read_lines(file: Path, label: str) -> list[tuple[int, list[str]]]:
    """Return (1-based line number, tokens) of the non-blank lines, or raise ScenarioError."""
    try:
        text = Path(file).read_text(encoding="utf-8")
    except OSError as e:
        raise ScenarioError(None, label, f"cannot read {str(file)!r}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ScenarioError(None, label, f"not UTF-8 text (bad byte at offset {e.start})") from None
    return [(i, line.split()) for i, line in enumerate(text.splitlines(), 1) if line.strip()]


def _is_uint(tok: str) -> bool:
    return tok.isascii() and tok.isdigit()


def _node_id(tok: str, n_nodes: int, fail) -> int:
    if not _is_uint(tok):
        fail(f"{tok!r} is not a node id (expected an int in 0..{n_nodes - 1})")
    if int(tok) >= n_nodes:
        fail(f"{tok} is not a node (line 1 declares {n_nodes} nodes: 0..{n_nodes - 1})")
    return int(tok)


def _parse_column(parse, tok: str, fail) -> int:
    try:
        return parse(tok)
    except ValueError as e:
        fail(str(e))
