"""LLM training iterations (Megatron-style TP/PP/DP/EP, 1F1B) as a Workload DAG of flows and compute.

Modelled, per iteration (tokens T = micro_batch_size * seq_len, h = hidden, d = dtype_bytes):
- Placement: rank (pp s, dp j, tp t) -> hosts[(s*dp + j)*tp + t]; a TP group is one server's GPUs, so
  with tp = gpus_per_server the same tp index sits on the same rail and DP/PP/EP peers share a rail.
- TP (+SP) traffic is NVLink inside a server: not simulated. Any other transfer between two GPUs of
  one server is NVLink too and emits no flow (see `collectives`).
- PP, 1F1B per pipeline: per micro-batch and stage boundary, one forward activation flow s -> s+1 and
  one backward gradient flow s+1 -> s, each T*h*d/tp bytes per tp rank (SP-sharded).
- EP: a stage's dp x tp GPUs, numbered t*dp + j (dp index fastest), form EP groups of ep consecutive
  GPUs;
  with ep | dp that is ep DP ranks of the same tp index. Experts are not TP-split (Megatron-Core's
  expert_tensor_parallel_size=1). Per MoE layer and micro-batch: dispatch and combine all-to-alls in
  forward, and the same two in backward; each GPU owns T/tp tokens (SP), sends each to top_k experts
  spread uniformly over the ep ranks, so each ordered pair of distinct ranks carries
  T*top_k*h*d / (tp*ep) bytes per all-to-all (self-traffic stays local).
- DP: after a stage's last backward, each (stage, tp) group of dp ranks ring-all-reduces the stage's
  dense gradients, P_dense/tp*d bytes (P_dense: 4h^2 attention per layer, the MLP of dense layers,
  vocab*h embedding on the first stage and untied vocab*h output head on the last), in buckets of
  bucket_size. A bucket of B bytes on N ranks is 2(N-1) ring steps of B/N bytes per rank. Expert
  gradients, (experts/ep)*P_expert per MoE layer, are ring-all-reduced over the expert-DP group (GPUs
  of the stage with the same EP rank, tp*dp/ep of them). Bucket b+1 starts after bucket b's step 0.
- Compute, per GPU: forward FLOPs 2*T*active_params + 4*T*seq_len*h per layer (attention scores),
  + 2*T*h*vocab for the head; backward = 2x forward; duration = FLOPs / tp / (peak * efficiency).
  Dense stages get one compute task per (micro-batch, direction); MoE stages split it around each
  all-to-all. 1F1B order on each GPU is a dependency chain.
- Iteration i+1 on a GPU starts after every all-reduce chunk of iteration i has reached it.
- Stragglers: the compute of the GPUs a `stragglers` entry lists takes `slowdown` times as long.
Not modelled: recomputation, virtual pipeline stages, the optimizer step's time, embedding-tie and
layernorm/bias gradients, load imbalance across experts, TP traffic.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from bridge.errors import ScenarioError
from bridge.scenario.training import JobSpec, TrainingSpec, check_training, job_field
from bridge.workload.collectives import DagBuilder, Deps, merge
from bridge.workload.dag import FlowTask, Workload

Coord = tuple[int, int, int]   # (pp stage, dp rank, tp rank)


def place_ranks(tp: int, pp: int, dp: int, hosts: list[int], gpus_per_server: int | None = None,
                path: str | os.PathLike | None = None) -> dict[Coord, int]:
    """Map each rank (pp, dp, tp) to a host: hosts[(pp*dp + dp_rank)*tp + tp_rank].

    TP is innermost so a TP group shares a server; with ROFT host numbering (server*gpus_per_server +
    gpu) the tp rank is then the rail. Raises ScenarioError if the plan needs more GPUs than there are
    hosts, or if tp does not divide gpus_per_server.
    """
    world = tp * pp * dp
    if world > len(hosts):
        raise ScenarioError(path, "training.parallelism",
                            f"tp*pp*dp = {world} GPUs but the topology has {len(hosts)} hosts")
    if gpus_per_server and gpus_per_server % tp:
        raise ScenarioError(path, "training.parallelism.tp",
                            f"tp={tp} does not divide gpus_per_server={gpus_per_server} "
                            "(a TP group must sit in one server)")
    return {(s, j, t): hosts[(s * dp + j) * tp + t]
            for s in range(pp) for j in range(dp) for t in range(tp)}


def server_lookup(hosts: list[int], gpus_per_server: int | None) -> Callable[[int], int | None]:
    """host -> server index (position in `hosts` // gpus_per_server), or None if unknown."""
    if not gpus_per_server:
        return lambda host: None
    position = {h: i for i, h in enumerate(hosts)}
    return lambda host: position[host] // gpus_per_server


@dataclass(frozen=True)
class _Segment:
    """One step of a stage's forward pass: a compute chunk, or an all-to-all of MoE layer `layer`."""

    flops: float = 0.0
    a2a: str = ""        # "ep_dispatch" | "ep_combine" | "" (compute)
    layer: int = -1


class _Model:
    """Parameter and FLOP counts of one training spec (see the module docstring)."""

    def __init__(self, spec: TrainingSpec):
        m, par = spec.model, spec.parallelism
        self.m, self.par = m, par
        h, T = m.hidden, par.micro_batch_size * m.seq_len
        self.tokens = T
        self.attn_params = 4 * h * h
        self.mlp_params = (3 if m.gated_mlp else 2) * h * m.ffn
        self.embed_params = m.vocab * h
        self.attn_flops = 2 * T * self.attn_params + 4 * T * m.seq_len * h
        self.mlp_flops = 2 * T * self.mlp_params
        self.moe_flops = 2 * T * (m.top_k * self.mlp_params + h * m.experts)  # experts + router
        self.head_flops = 2 * T * h * m.vocab
        self.layers_per_stage = m.layers // par.pp
        self.flops_per_ns = spec.gpu.peak_tflops * 1e3 * spec.gpu.efficiency

    def stage_layers(self, s: int) -> range:
        return range(s * self.layers_per_stage, (s + 1) * self.layers_per_stage)

    def dense_params(self, s: int) -> int:
        """Parameters of stage s that every DP rank replicates (before TP sharding)."""
        p = sum(self.attn_params + (0 if self.m.is_moe_layer(i) else self.mlp_params)
                for i in self.stage_layers(s))
        p += self.embed_params * ((s == 0) + (s == self.par.pp - 1))
        return p

    def expert_params_per_gpu(self, s: int) -> int:
        n_moe = sum(self.m.is_moe_layer(i) for i in self.stage_layers(s))
        return n_moe * (self.m.experts // self.par.ep) * self.mlp_params

    def forward_segments(self, s: int) -> list[_Segment]:
        """Stage s's forward pass, with compute merged between all-to-alls."""
        segs, flops = [], 0.0
        for i in self.stage_layers(s):
            flops += self.attn_flops
            if not self.m.is_moe_layer(i):
                flops += self.mlp_flops
                continue
            segs += [_Segment(flops), _Segment(a2a="ep_dispatch", layer=i),
                     _Segment(self.moe_flops), _Segment(a2a="ep_combine", layer=i)]
            flops = 0.0
        if s == self.par.pp - 1:
            flops += self.head_flops
        if flops:
            segs.append(_Segment(flops))
        return segs

    def duration_ns(self, flops: float) -> int:
        return max(1, round(flops / self.par.tp / self.flops_per_ns))

    def pp_bytes(self) -> int:
        return self.tokens * self.m.hidden * self.par.dtype_bytes // self.par.tp

    def a2a_pair_bytes(self) -> int:
        par = self.par
        return self.tokens * self.m.top_k * self.m.hidden * par.dtype_bytes // (par.tp * par.ep)


def one_f_one_b(stage: int, pp: int, micro_batches: int) -> list[tuple[str, int]]:
    """1F1B order of (direction, micro-batch) on stage `stage`: warm-up forwards, steady 1F1B pairs,
    cool-down backwards."""
    warmup = min(pp - stage - 1, micro_batches)
    order = [("fwd", mb) for mb in range(warmup)]
    for i in range(micro_batches - warmup):
        order += [("fwd", warmup + i), ("bwd", i)]
    order += [("bwd", mb) for mb in range(micro_batches - warmup, micro_batches)]
    return order


def _ready_order(pp: int, micro_batches: int) -> Iterator[tuple[int, str, int]]:
    """(stage, direction, micro-batch) in an order where each op's upstream stage already ran.

    All pipelines follow the same schedule, so one op covers every GPU of its stage (which is what
    lets an EP all-to-all span several DP ranks). 1F1B never deadlocks, so the sweep terminates.
    """
    orders = [one_f_one_b(s, pp, micro_batches) for s in range(pp)]
    nxt, done = [0] * pp, set()
    while any(nxt[s] < len(orders[s]) for s in range(pp)):
        for s in range(pp):
            while nxt[s] < len(orders[s]):
                direction, mb = orders[s][nxt[s]]
                upstream = (s - 1, "fwd", mb) if direction == "fwd" else (s + 1, "bwd", mb)
                if 0 <= upstream[0] < pp and upstream not in done:
                    break
                done.add((s, direction, mb))
                nxt[s] += 1
                yield s, direction, mb


class _Generator:
    """Emits the tasks of all iterations into one DagBuilder."""

    def __init__(self, spec: TrainingSpec, placement: dict[Coord, int], dag: DagBuilder,
                 slowdown: dict[int, float]):
        self.spec, self.par, self.model = spec, spec.parallelism, _Model(spec)
        self.host, self.dag, self.slowdown = placement, dag, slowdown
        par = self.par
        self.fwd_segments = [self.model.forward_segments(s) for s in range(par.pp)]
        # EP group g of a stage: slab indices g*ep .. g*ep+ep-1, slab index = t*dp + j.
        self.slab = [(j, t) for t in range(par.tp) for j in range(par.dp)]

    def ep_groups(self, s: int) -> list[list[int]]:
        ep = self.par.ep
        return [[self.host[(s, *self.slab[i])] for i in range(g, g + ep)]
                for g in range(0, len(self.slab), ep)]

    def expert_dp_groups(self, s: int) -> list[list[int]]:
        ep = self.par.ep
        return [[self.host[(s, *self.slab[i])] for i in range(r, len(self.slab), ep)]
                for r in range(ep)]

    def run(self) -> None:
        par = self.par
        busy: dict[int, Deps] = {h: () for h in self.host.values()}   # GPU free after these
        for it in range(self.spec.iterations):
            pp_in: dict[tuple[int, str, int, int], Deps] = {}   # (stage, dir, mb, host) -> arrival
            for s, direction, mb in _ready_order(par.pp, par.n_micro):
                self._stage_op(it, s, direction, mb, busy, pp_in)
            synced = self._gradient_sync(it, busy)
            busy = {h: merge(busy[h], synced[h]) for h in busy}

    def _stage_op(self, it: int, s: int, direction: str, mb: int, busy: dict[int, Deps],
                  pp_in: dict) -> None:
        """Forward or backward of micro-batch `mb` on every GPU of stage s, then the PP hand-off."""
        par, model, dag = self.par, self.model, self.dag
        hosts = [self.host[(s, j, t)] for j in range(par.dp) for t in range(par.tp)]
        cur = {h: merge(busy[h], pp_in.get((s, direction, mb, h), ())) for h in hosts}
        segments = self.fwd_segments[s]
        if direction == "bwd":
            segments = segments[::-1]
        for k, seg in enumerate(segments):
            if not seg.a2a:
                flops = seg.flops * (2 if direction == "bwd" else 1)
                for h in hosts:
                    duration = model.duration_ns(flops)
                    if h in self.slowdown:
                        duration = max(1, round(duration * self.slowdown[h]))
                    cur[h] = dag.compute(h, duration, cur[h], iteration=it,
                                         label=f"{direction}/mb{mb}/pp{s}/c{k}")
                continue
            for g, members in enumerate(self.ep_groups(s)):
                cur.update(dag.all_to_all(
                    members, model.a2a_pair_bytes(), cur, iteration=it, collective=seg.a2a,
                    group=f"ep/pp{s}/g{g}/layer{seg.layer}/{direction}", step=mb))
        busy.update(cur)
        peer = s + 1 if direction == "fwd" else s - 1
        if not 0 <= peer < par.pp:
            return
        for j in range(par.dp):
            for t in range(par.tp):
                src, dst = self.host[(s, j, t)], self.host[(peer, j, t)]
                pp_in[(peer, direction, mb, dst)] = dag.send(
                    src, dst, model.pp_bytes(), cur[src], iteration=it,
                    collective=f"pp_{direction}", group=f"pp/dp{j}/tp{t}/pp{min(s, peer)}", step=mb)

    def _gradient_sync(self, it: int, busy: dict[int, Deps]) -> dict[int, Deps]:
        """Bucketed ring all-reduces of every stage; returns per host the deps of "all arrived"."""
        par, model, d = self.par, self.model, self.par.dtype_bytes
        synced: dict[int, list[int]] = {h: [] for h in busy}
        for s in range(par.pp):
            rings = [(f"dp/pp{s}/tp{t}", [self.host[(s, j, t)] for j in range(par.dp)],
                      model.dense_params(s) // par.tp * d) for t in range(par.tp)]
            expert_bytes = model.expert_params_per_gpu(s) * d
            if expert_bytes:
                rings += [(f"edp/pp{s}/e{r}", ring, expert_bytes)
                          for r, ring in enumerate(self.expert_dp_groups(s))]
            for name, ring, total in rings:
                prev = {h: () for h in ring}
                buckets = _buckets(total, par.bucket_size)
                for b, size in enumerate(buckets):
                    start = {h: merge(busy[h], prev[h]) for h in ring}
                    prev, done = self.dag.ring(ring, size, start, phases=2, iteration=it,
                                               collective="dp_allreduce",
                                               group=f"{name}/b{b}" if len(buckets) > 1 else name)
                    for h in ring:
                        synced[h].extend(done[h])
        return {h: merge(v) for h, v in synced.items()}


def _buckets(total: int, bucket_size: int) -> list[int]:
    """Sizes of the DDP buckets holding `total` gradient bytes (the last one may be smaller)."""
    full, rest = divmod(total, bucket_size)
    return [bucket_size] * full + ([rest] if rest else [])


def build_training(spec: TrainingSpec, hosts: list[int], gpus_per_server: int | None,
                   path: str | os.PathLike | None = None) -> Workload:
    """Build `spec.iterations` training iterations on the first tp*pp*dp of `hosts`.

    Raises ScenarioError (naming `training.parallelism...` or `training.model...`) if the plan does
    not fit the model or the topology.
    """
    check_training(spec, path)
    par = spec.parallelism
    placement = place_ranks(par.tp, par.pp, par.dp, hosts, gpus_per_server, path)
    slowdown = _slowdowns(spec, set(placement.values()), path)
    dag = DagBuilder(server_lookup(hosts, gpus_per_server))
    _Generator(spec, placement, dag, slowdown).run()
    workload = Workload(dag.tasks, iterations=spec.iterations)
    workload.meta.update(kind="training", preset=spec.preset, world=par.world,
                         placement={f"pp{s}/dp{j}/tp{t}": h for (s, j, t), h in placement.items()},
                         bytes_per_iteration=bytes_by_collective(workload))
    return workload


def build_jobs(jobs: tuple[JobSpec, ...], hosts: list[int], gpus_per_server: int | None,
               path: str | os.PathLike | None = None) -> Workload:
    """Several training jobs on one fabric: each built as `build_training` on the hosts from its
    `first_host` on, released from its `start`; their tasks carry the job's index, their flow
    groups its name. Raises ScenarioError naming `jobs[k]...` if a job does not fit, does not
    start on a server boundary, or shares a GPU with an earlier job."""
    tasks: list = []
    owner: dict[int, str] = {}    # host -> name of the job running on it
    metas = []
    for k, job in enumerate(jobs):
        name = job.name or f"job{k}"
        if gpus_per_server and job.first_host % gpus_per_server:
            raise ScenarioError(path, f"jobs[{k}].first_host", f"{job.first_host} is inside a server (a job "
                                f"starts on a server's first GPU: a multiple of gpus_per_server={gpus_per_server})")
        if job.first_host + job.parallelism.world > len(hosts):
            raise ScenarioError(path, f"jobs[{k}].first_host", f"the job's {job.parallelism.world} GPUs from host "
                                f"{job.first_host} on do not fit the topology's {len(hosts)} hosts")
        try:
            workload = build_training(job, hosts[job.first_host:], gpus_per_server, path)
        except ScenarioError as e:
            raise ScenarioError(e.path, job_field(e.field, k), e.message) from None
        mine = sorted(set(workload.meta["placement"].values()))
        shared = [h for h in mine if h in owner]
        if shared:
            raise ScenarioError(path, f"jobs[{k}].first_host", f"its GPUs (hosts {mine[0]}-{mine[-1]}) include "
                                f"host {shared[0]} of job {owner[shared[0]]!r}")
        owner.update(dict.fromkeys(mine, name))
        offset = len(tasks)
        for t in workload.tasks:
            extra = {"group": f"{name}/{t.group}"} if isinstance(t, FlowTask) else {}
            tasks.append(replace(t, id=t.id + offset, deps=tuple(d + offset for d in t.deps), job=k,
                                 release_ns=max(t.release_ns, job.start), **extra))
        metas.append({"name": name, "start_ns": job.start, **workload.meta})
    merged = Workload(tasks, iterations=max(job.iterations for job in jobs))
    merged.meta.update(kind="jobs", jobs=metas)
    return merged


def _slowdowns(spec: TrainingSpec, used: set[int], path) -> dict[int, float]:
    """host -> compute slowdown of the stragglers; each must be a GPU of this job, listed once."""
    out: dict[int, float] = {}
    for i, straggler in enumerate(spec.stragglers):
        for host in straggler.hosts:
            field = f"training.stragglers[{i}].hosts"
            if host not in used:
                span = (f"hosts {min(used)}-{max(used)}" if max(used) - min(used) + 1 == len(used)
                        else f"{len(used)} hosts")
                raise ScenarioError(path, field, f"host {host} runs no rank of this job (it runs on {span})")
            if host in out:
                raise ScenarioError(path, field, f"host {host} is listed twice")
            out[host] = straggler.slowdown
    return out


def bytes_by_collective(workload: Workload) -> dict[str, int]:
    """Network bytes of iteration 0 per collective, plus "total"."""
    out: dict[str, int] = {}
    for f in workload.flows:
        if f.iteration == 0:
            out[f.collective] = out.get(f.collective, 0) + f.size
    out["total"] = sum(out.values())
    return out
