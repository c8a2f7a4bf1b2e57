"""Memoized transients (the second half of Wormhole).

When a partition forms (a flow starts and merges partitions, or a flow ends and splits one), its
flow conflict graph is built: a vertex per flow, labelled by the flow's rate at that moment
(quantized relative to its first link's rate) and by the rates and delays of the ports on its data
and ACK paths; an edge between flows that share links, weighted by how many, and by how many of
those carry both flows' data the same way or one's data against the other's ACKs. A canonical
form of the labelled graph (nauty, through pynauty) finds the records of isomorphic partitions, and
the two graphs' canonical orders map the stored flows onto the current flows.

A record holds what the partition did from forming until it turned steady: the time it took
(T_conv), the bytes each flow delivered meanwhile, each flow's steady rate and its congestion
state then. Flows too short to turn steady leave a truncated record instead (on RDMA): what the
partition did until just before its first flow could get near its end (a hit skips that much and
simulates on). A partition of short flows that nothing touched until every flow completed leaves an
episode record (on RDMA): when each flow completed, its bytes delivered at the rate samples before,
and its congestion state at its end; a hit completes each flow at that time without simulating it
(an expert-parallel all-to-all is one such episode). Records live in a `cache_store.MemoStore`
under a fingerprint of everything else that changes the dynamics (transport and queue settings,
detection settings, ns-3 and project versions), so a record made under another configuration is
never applied. A run sees the store as it was when the run started plus its own records: the same
scenario, seed and store give the same run.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pynauty

from cache_store import SCHEMA_VERSION, CacheError, MemoStore, format_problem, record_id, record_kind
from cache_store.memo_pb2 import MemoRecord

from ..errors import CacheFileError

# Part of every fingerprint: bump it when what a record means changes, so that old records are
# never applied with the new meaning (2: transient bytes include those on the wire at the end;
# 3: steady rates are the mean of the window's newer blocks, no longer the median block;
# 4: edges tell competing data from flows crossing in opposite directions; 5: truncated records;
# 6: steady rates are timed between the arrivals of the window's first and last bytes;
# 7: graphs are keyed by their canonical form, no longer by a Weisfeiler-Lehman hash; 8: an
# episode's flow times count from when its age was its label's; 9: episode ages in 10 us steps;
# 10: RDMA transient bytes count from the bytes sent when the partition formed; 11: episode labels
# give bytes left in steps, records each flow's clock at the start; 12: episode labels tell a flow
# that took over its QP from one that started on an idle QP).
RECORD_MODEL = 12

FLUSH_EVERY_S = 1.0   # wall seconds a run keeps its new records before appending them to the store


def default_cache_path() -> Path:
    """$WORMHOLE_CACHE, else ~/.cache/wormhole/memo.whdb."""
    env = os.environ.get("WORMHOLE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "wormhole" / "memo.whdb"


def open_store(path: str | Path | None = None) -> MemoStore:
    """The store at `path` (default: default_cache_path()), checked readable: a file that is not a
    store, or one of a newer schema, is a CacheFileError naming it (a missing file is an empty store)."""
    store = MemoStore(Path(path) if path else default_cache_path())
    try:
        store.stats()
    except CacheError as e:
        raise CacheFileError(str(e)) from None
    return store


def fingerprint(settings: dict) -> str:
    """Hex digest of the settings that change the dynamics (JSON-serializable, any nesting)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def rate_bin(rate: float, line_rate: float, bins: int) -> int:
    """A flow's rate as the nearest of `bins` steps of its line rate (0 for a new flow)."""
    return round(rate / line_rate * bins) if line_rate > 0 else 0


@dataclass(frozen=True)
class FlowPorts:
    """The directed ports (2i: link i's a->b side, 2i+1: b->a) a flow's data and its ACKs leave by."""

    data: frozenset[int]
    acks: frozenset[int]

    @cached_property
    def links(self) -> frozenset[int]:
        return frozenset(p // 2 for p in self.data | self.acks)


class ConflictGraph:
    """A partition's flow conflict graph; vertex i is flows[i], labelled labels[i].

    An edge joins flows sharing links; it carries how many (w), on how many directed ports both
    flows' data compete (c), and on how many one flow's data meets the other's ACKs (x). Flows
    that only cross in opposite directions share links but not bandwidth, and must not match a
    record of flows that compete (4 pipeline flows on 4 spines share each other's ACK links).
    The edges and the canonical form are built when first needed: a lookup needs them only if
    some record has the same vertex labels, a watched partition only when it is recorded.

    `waits` (episodes): flow -> the flows whose completions start it. Such a pair's edge kind has a
    fourth member, 1 (its direction is in the labels: a released flow's says so); the others keep
    three, so graphs without releases keep their keys."""

    def __init__(self, flows: list[int], ports: dict[int, FlowPorts], labels: dict[int, str],
                 waits: dict[int, frozenset[int]] | None = None):
        self.flows = sorted(flows)
        self.labels = [labels[f] for f in self.flows]
        self._ports = [ports[f] for f in self.flows]
        vertex = {f: v for v, f in enumerate(self.flows)}
        self._releases = frozenset((min(vertex[f], vertex[w]), max(vertex[f], vertex[w]))
                                   for f, ws in (waits or {}).items() for w in ws)

    @cached_property
    def layout(self) -> tuple:
        """Vertex by vertex, its label and ports, and the releases: equal layouts are the same
        graph, vertex for vertex (the same flows' places recurring, as a collective does on the
        same hosts)."""
        return tuple(zip(self.labels, self._ports)), tuple(sorted(self._releases))

    @cached_property
    def edges(self) -> dict[tuple[int, int], tuple[int, ...]]:
        """(a, b) with a < b -> (w, c, x), or (w, c, x, 1) if one's completion starts the other."""
        users: dict[int, list[int]] = {}
        for v, ports in enumerate(self._ports):
            for link in ports.links:
                users.setdefault(link, []).append(v)
        pairs = {(a, b) for vs in users.values() for i, a in enumerate(vs) for b in vs[i + 1:]}  # a < b
        edges = {}
        for a, b in sorted(pairs | self._releases):
            pa, pb = self._ports[a], self._ports[b]
            edges[a, b] = (len(pa.links & pb.links), len(pa.data & pb.data),
                           len(pa.data & pb.acks) + len(pa.acks & pb.data)) + ((1,) if (a, b) in self._releases else ())
        return edges

    @cached_property
    def canonical(self) -> CanonicalForm:
        return canonical_form(self.labels, self.edges)

    @property
    def key(self) -> str:
        """Equal for isomorphic graphs (labels and edge weights kept), and only for them."""
        return self.canonical.key


@dataclass(frozen=True)
class CanonicalForm:
    key: str                      # equal exactly for isomorphic graphs
    order: tuple[int, ...]        # order[i]: the vertex at canonical position i

    def mapping_onto(self, other: CanonicalForm) -> dict[int, int]:
        """Each vertex of this graph -> the vertex of an isomorphic `other` in its place."""
        return dict(zip(self.order, other.order))


def canonical_form(labels: list[str], edges: dict[tuple[int, int], tuple[int, ...]]) -> CanonicalForm:
    """nauty's canonical form of a vertex- and edge-labelled graph. nauty colours vertices, not
    edges, so the graph is stacked in layers, one per bit of an edge kind's number: an edge of
    kind k joins its vertices' copies in each layer whose bit of k is set, and each vertex's
    copies are chained across the layers. The key hashes the canonical adjacency with the label
    and kind lists it was built from."""
    n = len(labels)
    kinds = sorted(set(edges.values()))
    number = {kind: i + 1 for i, kind in enumerate(kinds)}
    layers = max(1, len(kinds).bit_length())
    adjacency: dict[int, list[int]] = {v: [] for v in range(n * layers)}
    for (a, b), kind in edges.items():
        for layer in range(layers):
            if number[kind] >> layer & 1:
                adjacency[layer * n + a].append(layer * n + b)
    for layer in range(layers - 1):
        for v in range(n):
            adjacency[layer * n + v].append((layer + 1) * n + v)
    names = sorted(set(labels))
    cells = [{layer * n + v for v in range(n) if labels[v] == name} for layer in range(layers) for name in names]
    graph = pynauty.Graph(n * layers, adjacency_dict=adjacency, vertex_coloring=cells)
    digest = hashlib.sha256(json.dumps([[(name, labels.count(name)) for name in names], kinds]).encode())
    digest.update(pynauty.certificate(graph))
    order = tuple(v for v in pynauty.canon_label(graph) if v < n)   # the first layer's places
    return CanonicalForm(f"{n}:{len(edges)}:{digest.hexdigest()[:32]}", order)


@dataclass
class Transient:
    """A record mapped onto the current flows."""

    transient_ns: int
    bytes: dict[int, int]                     # flow -> bytes to skip: delivered, and on the wire at the end
    rates: dict[int, float]                   # flow -> steady rate, bytes per ns
    states: dict[int, dict[str, float]]       # flow -> congestion state at the end (episode: at its end)
    truncated: bool = False                   # no steady phase follows: the flows go on simulated
    ends: dict[int, int] | None = None        # episode: flow -> its completion, from the start
    progress: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)  # episode: flow -> (ns, bytes)
    leads: dict[int, int] = field(default_factory=dict)  # episode: flow -> where its clock stood at the start

    def delivered(self, flow: int, at_ns: int) -> float:
        """Episode: bytes `flow` had delivered `at_ns` into it, between its recorded samples (none
        at the start, all at its end)."""
        times, sizes = self.progress.get(flow, ([], []))
        return float(np.interp(at_ns, [0, *times, self.ends[flow]], [0, *sizes, self.bytes[flow]]))


@dataclass
class MemoStats:
    lookups: int = 0
    hits: int = 0
    misses: int = 0
    not_applied: int = 0                      # hits whose flows were too short for every match
    applied_truncated: int = 0                # hits applied from a truncated record
    applied_partial: int = 0                  # flows too short for a truncated record: its first part applied
    applied_episode: int = 0                  # hits applied from an episode record
    records_written: int = 0
    records_truncated: int = 0                # of records_written
    records_episode: int = 0                  # of records_written
    records_duplicate: int = 0                # not written: an isomorphic record exists
    records_loaded: int = 0
    lookup_s: float = 0.0
    problems: list[str] = field(default_factory=list)


@dataclass
class _Entry:
    rid: str
    record: MemoRecord
    canonical: CanonicalForm | None = None


class Memo:
    """The records of one configuration: looked up by conflict graph, appended as partitions settle."""

    def __init__(self, store: MemoStore | None, fingerprint_hex: str, producer: str,
                 warn: Callable[[str], None]):
        self.store = store
        self.fingerprint = fingerprint_hex
        self.producer = producer
        self.warn = warn
        self.stats = MemoStats()
        # Records not yet in the store, appended in batches (flush) under one fsync per batch: an
        # fsync per record took 4.7 ms on this machine's disk (40 in gpt-bench-hpcc's cold run, 7 %
        # of its loop).
        self.unwritten: list[MemoRecord] = []
        self.flushed_at = time.monotonic()
        self.index: dict[str, list[_Entry]] = {}
        self.label_sets: set[tuple[str, ...]] = set()   # each record's vertex labels, sorted
        # layout -> its sorted labels and _matches, until a record with those labels is added
        self.found: dict[tuple, tuple[tuple[str, ...], list[tuple[_Entry, dict[int, int]]]]] = {}
        if store is not None:
            loaded = store.load()   # CacheError: not a store, or a newer schema
            for problem in loaded.problems:
                self._warn(format_problem(store.path, problem))
            for record in loaded.records:
                if record.fingerprint == fingerprint_hex and record.schema_version <= SCHEMA_VERSION:
                    problem = _inconsistency(record)
                    if problem:
                        self._warn(f"{store.path}: record {record_id(record)[:12]} skipped: {problem}")
                        continue
                    self._add(record)
                    self.stats.records_loaded += 1

    def lookup(self, cg: ConflictGraph) -> list[Transient]:
        """The records whose start graph is isomorphic to `cg`, mapped onto its flows: the steady
        one first, then the truncated one (for flows too short for the steady one). (Episode graphs
        are labelled apart: their lookups find episode records only.) The matches are kept per
        layout until a record with the same labels is added."""
        t0 = time.perf_counter()
        self.stats.lookups += 1
        labels = tuple(sorted(cg.labels))
        matches = []
        if labels in self.label_sets:                            # else no need to build the graph
            _, matches = self.found.get(cg.layout, (labels, None))
            if matches is None:
                matches = sorted(self._matches(cg), key=lambda m: _KINDS.index(record_kind(m[0].record)))
                self.found[cg.layout] = (labels, matches)
        if matches:
            self.stats.hits += 1
        else:
            self.stats.misses += 1
        self.stats.lookup_s += time.perf_counter() - t0
        return [_mapped(entry.record, cg, mapping) for entry, mapping in matches]

    def _matches(self, cg: ConflictGraph) -> list[tuple[_Entry, dict[int, int]]]:
        """Per kind (steady, truncated, episode), the isomorphic record with the smallest id and its
        mapping. A record's own canonical form is computed again, so one written with a wrong key
        is never applied."""
        found: dict[str, tuple[_Entry, dict[int, int]]] = {}
        for entry in self.index.get(cg.key, ()):
            if record_kind(entry.record) in found:
                continue
            if entry.canonical is None:
                entry.canonical = _stored_canonical(entry.record)
            if entry.canonical.key == cg.key:
                found[record_kind(entry.record)] = (entry, cg.canonical.mapping_onto(entry.canonical))
                if len(found) == len(_KINDS):
                    break
        return list(found.values())

    def record(self, cg: ConflictGraph, transient_ns: int, transient_bytes: dict[int, int],
               rates: dict[int, float], states: dict[int, dict[str, float]], truncated: bool = False,
               ends: dict[int, int] | None = None,
               progress: dict[int, tuple[list[int], list[int]]] | None = None,
               leads: dict[int, int] | None = None) -> None:
        """Keep what the partition of `cg` did until it turned steady, until it was cut short
        (truncated), or until its last flow completed (an episode: `ends`, each flow's completion
        from the start, `progress`, its bytes delivered at times before, and `leads`, where each
        flow's clock stood at the start), in memory and in the store, unless an isomorphic
        partition was recorded so meanwhile (several can form at once)."""
        episode = ends is not None
        record = MemoRecord(schema_version=SCHEMA_VERSION, fingerprint=self.fingerprint, graph_hash=cg.key,
                            transient_ns=transient_ns, producer=self.producer, truncated=truncated,
                            episode=episode)
        if any(record_kind(entry.record) == record_kind(record) for entry, _ in self._matches(cg)):
            self.stats.records_duplicate += 1
            return
        for v, flow in enumerate(cg.flows):
            rec = record.flows.add(vertex=v, label=cg.labels[v],
                                   transient_bytes=transient_bytes[flow], steady_rate=rates[flow],
                                   end_ns=ends[flow] if episode else 0,
                                   lead_ns=(leads or {}).get(flow, 0))
            rec.transport_state.update(states.get(flow, {}))
            times, sizes = (progress or {}).get(flow, ([], []))
            rec.progress_ns.extend(times)
            rec.progress_bytes.extend(sizes)
        for (a, b), (w, c, x, *releases) in sorted(cg.edges.items()):
            record.edges.add(a=a, b=b, weight=w, contended=c, data_ack=x, releases=bool(releases))
        self._add(record, canonical=cg.canonical)
        self.stats.records_written += 1
        self.stats.records_truncated += truncated
        self.stats.records_episode += episode
        if self.store is not None:
            self.unwritten.append(record)
            self.flush_if_due()

    def flush_if_due(self) -> None:
        """Flush if there are records and the last flush was FLUSH_EVERY_S or more ago (the engine
        asks after each run slice): a process killed mid-run loses about that second's records."""
        if self.unwritten and time.monotonic() - self.flushed_at >= FLUSH_EVERY_S:
            self.flush()

    def flush(self) -> None:
        """Append the records not yet in the store, under one lock and one fsync (the run's end,
        FastForward.finish, and flush_if_due). A process killed meanwhile loses those records, never
        the store's others (it tears at most the last)."""
        self.flushed_at = time.monotonic()
        records, self.unwritten = self.unwritten, []
        if self.store is None or not records:
            return
        try:
            self.store.append_many(records)
        except CacheError as e:
            self._warn(f"{e}; records of this run are kept in memory only")
            self.store = None

    def _add(self, record: MemoRecord, canonical: CanonicalForm | None = None) -> None:
        labels = tuple(sorted(f.label for f in record.flows))
        self.label_sets.add(labels)
        for layout in [layout for layout, (known, _) in self.found.items() if known == labels]:
            del self.found[layout]
        entries = self.index.setdefault(record.graph_hash, [])
        entries.append(_Entry(record_id(record), record, canonical))
        entries.sort(key=lambda e: e.rid)

    def _warn(self, message: str) -> None:
        self.stats.problems.append(message)
        self.warn(message)


_KINDS = ("steady", "truncated", "episode")


def _inconsistency(record: MemoRecord) -> str | None:
    """What makes an intact record unusable (its checksum held, but a writer got it wrong)."""
    vertices = sorted(f.vertex for f in record.flows)
    if vertices != list(range(len(vertices))):
        return "its flows are not vertices 0..n-1"
    if any(not (e.a < len(vertices) and e.b < len(vertices)) for e in record.edges):
        return "an edge names a vertex it does not have"
    if any(e.a == e.b for e in record.edges):
        return "an edge joins a vertex to itself"
    for f in record.flows:
        if len(f.progress_ns) != len(f.progress_bytes):
            return f"flow {f.vertex} has {len(f.progress_ns)} progress times but {len(f.progress_bytes)} sizes"
        if record.episode and (f.end_ns < 0 or any(not 0 < t < (f.end_ns or record.transient_ns)
                                                   for t in f.progress_ns)):
            return f"flow {f.vertex}'s progress is not within its episode"
        if record.episode and not f.lead_ns <= f.end_ns:   # (< 0: it started after the forming)
            return f"flow {f.vertex}'s clock at the start is not within its episode"
    return None


def _stored_canonical(record: MemoRecord) -> CanonicalForm:
    labels = [f.label for f in sorted(record.flows, key=lambda f: f.vertex)]
    return canonical_form(labels, {(min(e.a, e.b), max(e.a, e.b)): (e.weight, e.contended, e.data_ack)
                                   + ((1,) if e.releases else ()) for e in record.edges})


def _mapped(record: MemoRecord, cg: ConflictGraph, mapping: dict[int, int]) -> Transient:
    by_vertex = {f.vertex: f for f in record.flows}
    t = Transient(transient_ns=record.transient_ns, bytes={}, rates={}, states={}, truncated=record.truncated,
                  ends={} if record.episode else None)
    for v, flow in enumerate(cg.flows):
        stored = by_vertex[mapping[v]]
        t.bytes[flow] = stored.transient_bytes
        t.rates[flow] = stored.steady_rate
        t.states[flow] = dict(stored.transport_state)
        if t.ends is not None:
            t.ends[flow] = stored.end_ns
            t.progress[flow] = (list(stored.progress_ns), list(stored.progress_bytes))
            t.leads[flow] = stored.lead_ns
    return t
