"""Import a SimAI/AICB workload file (one training iteration, per-rank layer list) as a Workload.

File format (read by SimAI's astra-sim `Workload::initialize_workload`):
- line 1: `HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: <tp> ep: <ep> pp: <pp> vpp: ..
  ga: .. all_gpus: <n> checkpoints: 0 checkpoint_initiates: 0 [pp_comm: <bytes>]`;
- line 2: number of layer rows;
- then one row per layer, 12 whitespace-separated columns: name, reserved (-1), forward compute ns,
  forward comm type, forward comm bytes, input-grad compute ns, type, bytes, weight-grad compute ns,
  type, bytes, weight-update ns. Blank lines and `#` comments are skipped (an extension).

Comm types are ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL or NONE, with an optional group suffix.
As in SimAI, no suffix means the TP group for forward/input-grad comms and the DP group for
weight-grad comms; `_EP` is the expert-parallel group (ep consecutive DP ranks) and `_DP_EP` the
expert-data-parallel group (DP ranks with the same position in their EP group). TP comms stay inside
a server (NVLink) and are not simulated. Bytes are the whole buffer: a ring all-reduce is 2(N-1)
steps of bytes/N per rank, all-gather and reduce-scatter N-1 such steps, an all-to-all bytes/N to
each other member.

Execution follows SimAI's TransformerFwdInBckwd loop on every rank: forward rows in order (compute,
then the blocking comm); backward rows in reverse (input-grad compute, blocking comm, weight-grad
compute, then the weight-grad comm, which does not block); a row's forward in the next iteration
waits for its weight-grad comm. With pp > 1 every stage runs the same rows, and one `pp_comm`-byte
flow hands the forward to the next stage and the backward to the previous one (SimAI only accounts
for PP analytically; GA and vpp are not expanded). Compute of 1 ns or less (AICB's "nothing") and
the weight-update column are ignored. Placement is `training.place_ranks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bridge.errors import ScenarioError
from bridge.workload.collectives import DagBuilder, Deps, merge
from bridge.workload.dag import Workload
from bridge.workload.training import Coord, place_ranks, server_lookup

_POLICIES = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_TRANSFORMER")
_OPS = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "REDUCESCATTER": "reducescatter",
        "ALLTOALL": "alltoall"}
_INT_KEYS = {"model_parallel_NPU_group:": "tp", "ep:": "ep", "pp:": "pp", "vpp:": "vpp",
             "ga:": "ga", "all_gpus:": "all_gpus", "pp_comm:": "pp_comm", "pp_comm": "pp_comm"}


@dataclass(frozen=True)
class AicbPhase:
    """One of a row's three phases: compute, then a collective (op "" for NONE)."""

    compute_ns: int
    op: str            # allreduce | allgather | reducescatter | alltoall | ""
    group: str         # tp | dp | ep | dp_ep
    size: int          # bytes


@dataclass(frozen=True)
class AicbLayer:
    name: str
    line: int
    fwd: AicbPhase
    ig: AicbPhase
    wg: AicbPhase


@dataclass(frozen=True)
class AicbFile:
    tp: int
    ep: int
    pp: int
    all_gpus: int
    pp_comm: int
    layers: list[AicbLayer]

    @property
    def dp(self) -> int:
        return self.all_gpus // (self.tp * self.pp)


def parse_aicb(path: str | Path) -> AicbFile:
    """Parse an AICB workload file. Raises ScenarioError naming the file and line."""
    path = str(path)
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ScenarioError(path, None, f"cannot read AICB workload: {e.strerror}") from None
    lines = [(n, ln.split()) for n, ln in enumerate(text.splitlines(), 1)
             if ln.strip() and not ln.lstrip().startswith("#")]
    if len(lines) < 2:
        raise ScenarioError(path, None, "expected a header line and a layer-count line")
    header = _parse_header(path, *lines[0])
    n_line, count = lines[1]
    if len(count) != 1 or not count[0].isdigit():
        raise ScenarioError(path, f"line {n_line}",
                            f"expected the number of layers, got {' '.join(count)!r}")
    rows = lines[2:]
    if len(rows) != int(count[0]):
        raise ScenarioError(path, f"line {n_line}",
                            f"says {count[0]} layers but the file has {len(rows)} rows")
    return AicbFile(**header, layers=[_parse_row(path, n, cols) for n, cols in rows])


def _parse_header(path: str, n: int, tokens: list[str]) -> dict:
    if tokens[0] not in _POLICIES:
        raise ScenarioError(path, f"line {n}", f"parallelism {tokens[0]!r} not supported "
                            f"(expected {' or '.join(_POLICIES)})")
    values = {"tp": 0, "ep": 1, "pp": 1, "all_gpus": 0, "pp_comm": 0}
    for key, value in zip(tokens[1:], tokens[2:]):
        if key in _INT_KEYS:
            if not value.isdigit():
                raise ScenarioError(path, f"line {n}", f"{key} {value!r} is not a whole number")
            values[_INT_KEYS[key]] = int(value)
    for key, token in (("tp", "model_parallel_NPU_group:"), ("all_gpus", "all_gpus:"),
                       ("ep", "ep:"), ("pp", "pp:")):
        if values[key] <= 0:
            raise ScenarioError(path, f"line {n}", f"{token} must be given and > 0")
    if values["all_gpus"] % (values["tp"] * values["pp"]):
        raise ScenarioError(path, f"line {n}", f"all_gpus: {values['all_gpus']} is not a multiple "
                            f"of tp*pp = {values['tp'] * values['pp']}")
    dp = values["all_gpus"] // (values["tp"] * values["pp"])
    if dp % values["ep"]:
        raise ScenarioError(path, f"line {n}", f"ep: {values['ep']} does not divide dp = {dp}")
    return {k: values[k] for k in ("tp", "ep", "pp", "all_gpus", "pp_comm")}


def _parse_row(path: str, n: int, cols: list[str]) -> AicbLayer:
    if len(cols) != 12:
        raise ScenarioError(path, f"line {n}", f"expected 12 columns, got {len(cols)}")
    numbers = {}
    for i in (2, 4, 5, 7, 8, 10):
        try:
            numbers[i] = int(cols[i])
        except ValueError:
            raise ScenarioError(path, f"line {n}",
                                f"column {i + 1} {cols[i]!r} is not an integer") from None
    phases = [
        _phase(path, n, numbers[c], cols[c + 1], numbers[c + 2], default_group)
        for c, default_group in ((2, "tp"), (5, "tp"), (8, "dp"))
    ]
    return AicbLayer(cols[0], n, *phases)


def _phase(path: str, n: int, compute_ns: int, comm: str, size: int,
           default_group: str) -> AicbPhase:
    if comm == "NONE":
        return AicbPhase(compute_ns, "", default_group, 0)
    base, _, suffix = comm.partition("_")
    groups = {"": default_group, "EP": "ep", "DP_EP": "dp_ep"}
    if base not in _OPS or suffix not in groups:
        raise ScenarioError(path, f"line {n}", f"comm type {comm!r} not supported (expected NONE "
                            "or ALLREDUCE/ALLGATHER/REDUCESCATTER/ALLTOALL, optionally _EP/_DP_EP)")
    if size < 0:
        raise ScenarioError(path, f"line {n}", f"comm size {size} is negative")
    return AicbPhase(compute_ns, _OPS[base], groups[suffix], size)


class _Importer:
    """Replays the parsed rows on every rank, for `iterations` iterations."""

    def __init__(self, wl: AicbFile, placement: dict[Coord, int], dag: DagBuilder):
        self.wl, self.host, self.dag = wl, placement, dag

    def groups(self, kind: str, s: int) -> list[tuple[str, list[int]]]:
        """The (name, ring-ordered hosts) of every `kind` group of stage s."""
        wl, out = self.wl, []
        for t in range(wl.tp):
            if kind == "dp":
                parts = {"": range(wl.dp)}
            elif kind == "ep":
                parts = {f"/g{g}": range(g * wl.ep, (g + 1) * wl.ep) for g in range(wl.dp // wl.ep)}
            else:   # dp_ep
                parts = {f"/e{r}": range(r, wl.dp, wl.ep) for r in range(wl.ep)}
            out += [(f"{kind}/pp{s}/tp{t}{suffix}", [self.host[(s, j, t)] for j in dps])
                    for suffix, dps in parts.items()]
        return out

    def comm(self, it: int, s: int, row: int, phase: AicbPhase,
             cur: dict[int, Deps]) -> dict[int, Deps]:
        """Run `phase`'s collective on every group of stage s; return per host "arrived" deps."""
        if not phase.op or phase.group == "tp" or phase.size == 0:
            return dict(cur)
        out = dict(cur)
        collective = f"{phase.group}_{phase.op}"
        for name, members in self.groups(phase.group, s):
            group = f"{name}/row{row}"
            if phase.op == "alltoall":
                out.update(self.dag.all_to_all(
                    members, phase.size // len(members), cur, iteration=it, collective=collective,
                    group=group, step=0))
            else:
                phases = 2 if phase.op == "allreduce" else 1
                _, done = self.dag.ring(members, phase.size, cur, phases=phases, iteration=it,
                                        collective=collective, group=group)
                out.update({h: merge(cur[h], done[h]) for h in members})
        return out

    def compute(self, it: int, ns: int, cur: dict[int, Deps], hosts: list[int], label: str) -> None:
        if ns > 1:
            for h in hosts:
                cur[h] = self.dag.compute(h, ns, cur[h], iteration=it, label=label)

    def run(self, iterations: int) -> None:
        wl = self.wl
        stage_hosts = [[self.host[(s, j, t)] for j in range(wl.dp) for t in range(wl.tp)]
                       for s in range(wl.pp)]
        cur: dict[int, Deps] = {h: () for h in self.host.values()}
        wg_done: dict[int, dict[int, Deps]] = {}     # row -> host -> last iteration's wg comm
        for it in range(iterations):
            for s, hosts in enumerate(stage_hosts):
                for i, layer in enumerate(wl.layers):
                    for h in hosts:
                        cur[h] = merge(cur[h], wg_done.get(i, {}).get(h, ()))
                    self.compute(it, layer.fwd.compute_ns, cur, hosts, f"fwd/{layer.name}/pp{s}")
                    cur.update(self.comm(it, s, i, layer.fwd, cur))
                self._hand_off(it, s, s + 1, "fwd", cur)
            wg_done = {}
            for s in reversed(range(wl.pp)):
                hosts = stage_hosts[s]
                for i in reversed(range(len(wl.layers))):
                    layer = wl.layers[i]
                    self.compute(it, layer.ig.compute_ns, cur, hosts, f"ig/{layer.name}/pp{s}")
                    cur.update(self.comm(it, s, i, layer.ig, cur))
                    self.compute(it, layer.wg.compute_ns, cur, hosts, f"wg/{layer.name}/pp{s}")
                    done = self.comm(it, s, i, layer.wg, cur)
                    wg_done.setdefault(i, {}).update(done)
                self._hand_off(it, s, s - 1, "bwd", cur)

    def _hand_off(self, it: int, s: int, peer: int, direction: str, cur: dict[int, Deps]) -> None:
        """PP flow of pp_comm bytes from every GPU of stage s to its peer on stage `peer`."""
        if not 0 <= peer < self.wl.pp:
            return
        for j in range(self.wl.dp):
            for t in range(self.wl.tp):
                src, dst = self.host[(s, j, t)], self.host[(peer, j, t)]
                cur[dst] = merge(cur[dst], self.dag.send(
                    src, dst, self.wl.pp_comm, cur[src], iteration=it, collective=f"pp_{direction}",
                    group=f"pp/dp{j}/tp{t}/pp{min(s, peer)}", step=0))


def import_aicb(path: str | Path, hosts: list[int], gpus_per_server: int | None,
                iterations: int = 1) -> Workload:
    """Parse the AICB file at `path` and replay it `iterations` times on the first all_gpus hosts.

    Raises ScenarioError naming the file (and line) if it is malformed or does not fit the topology.
    """
    wl = parse_aicb(path)
    if wl.all_gpus > len(hosts):
        raise ScenarioError(str(path), "line 1", f"all_gpus: {wl.all_gpus} but the topology has "
                            f"{len(hosts)} hosts")
    if gpus_per_server and gpus_per_server % wl.tp:
        raise ScenarioError(str(path), "line 1", f"model_parallel_NPU_group: {wl.tp} does not "
                            f"divide gpus_per_server={gpus_per_server} (TP must stay in a server)")
    placement = place_ranks(wl.tp, wl.pp, wl.dp, hosts, gpus_per_server, str(path))
    dag = DagBuilder(server_lookup(hosts, gpus_per_server))
    _Importer(wl, placement, dag).run(iterations)
    workload = Workload(dag.tasks, iterations=iterations)
    workload.meta.update(kind="aicb", source=str(path), world=wl.all_gpus)
    return workload
