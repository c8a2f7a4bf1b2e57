"""One simulation in this process: scenario -> ns-3 network -> executed workload -> output files.

This is what the child process runs (see bridge.runner); it imports ns-3, which may abort the
process on an ns-3 assert, so the CLI and the API never call it in their own process.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cache_store import CacheError

from . import __version__
from .engine.executor import Executor
from .engine.fastforward import FastForward
from .engine.memo import RECORD_MODEL, Memo, fingerprint, open_store
from .engine.state import Ports
from .errors import CacheFileError
from .ns3.loader import load, ns3_version
from .ns3.network import build_network, configure_transport, segment_size, use_tag_simulator
from .report.tables import (IdealFct, RdmaIdealFct, accel_summary, fct_stats, flows_frame, iterations_frame,
                            partitions_frame, write_fct_txt, write_pfc_txt, write_qlen_csv)
from .scenario import AccelSpec, Scenario, with_accel_overrides
from .topology import Topology, build_topology
from .workload.dag import Workload
from .workload.flows import load_flows

DEFAULT_STOP_TIME_NS = 100 * 10**9  # a cap so that a stalled run ends; scenarios may set stop_time
# An accelerated TCP run is not a silent wrong answer: it misses the error bounds on the LLM
# benches (README, Measured: gpt-bench FCT p99 26 %, moe-bench 139 %).
TCP_ACCEL_WARNING = ("on TCP the engine's FCTs miss the error bounds on the LLM benches (README, Measured); "
                     "check this scenario with `wormhole validate` before relying on them")


@dataclass
class RunOptions:
    seed: int | None = None        # overrides the scenario's seed
    stop_time_ns: int | None = None
    accel: bool = False            # the Wormhole engine instead of stock ns-3
    fast_forward: bool = True      # --no-ff ablation when False
    accel_overrides: dict | None = None  # theta, window, tau, ... over the scenario's accel block
    memo: bool = True              # --no-memo ablation when False
    cache: str | None = None       # memo store file; None: default_cache_path()
    nudge_ns: int = 0              # delay the first flow released by this much (validate's nudge floor)
    jitter_ns: int = 0             # delay each flow released by 0..jitter_ns, drawn from the seed (jitter floor)
    jitter_draw: int = 0           # which draw of the seed's jitter (the jitter floor's ensemble)


def build_workload(scenario: Scenario, topology: Topology) -> Workload:
    if scenario.jobs is not None:
        from .workload.training import build_jobs

        return build_jobs(scenario.jobs, topology.hosts, getattr(scenario.topology, "gpus_per_server", None),
                          scenario.source_path)
    if scenario.training is not None:
        from .workload.training import build_training

        return build_training(scenario.training, topology.hosts,
                              getattr(scenario.topology, "gpus_per_server", None),
                              scenario.source_path)
    if scenario.aicb is not None:
        from .workload.aicb import import_aicb

        return import_aicb(scenario.aicb.file, topology.hosts,
                           getattr(scenario.topology, "gpus_per_server", None), scenario.aicb.iterations)
    return load_flows(scenario)


def simulate(scenario: Scenario, out_dir: Path, options: RunOptions,
             progress: Callable[..., None] | None = None,
             stop_requested: Callable[[], str | None] | None = None) -> dict:
    """Run the scenario in this process, write flows.csv, fct.txt, iterations.csv, summary.json
    (and partitions.csv, the mode timeline, when accelerated). progress(sim ns, flows done,
    flows) as the run goes, with a fourth argument, what is being built, before it starts if
    anything is (a first run compiles the patches). `stop_requested` returning a reason
    ("interrupted", "time limit reached") ends the run where it is, with that stop_reason; what
    finished is written."""
    t0 = time.perf_counter()
    scenario = with_accel_overrides(scenario, options.accel_overrides)
    topology = build_topology(scenario.topology)
    workload = build_workload(scenario, topology)
    seed = scenario.seed if options.seed is None else options.seed
    t_import = time.perf_counter()
    h = load(None if progress is None else lambda stage: progress(0, 0, len(workload.flows), stage))
    import_s = time.perf_counter() - t_import
    t_build = time.perf_counter()
    if options.accel:
        use_tag_simulator(h)
    configure_transport(h, scenario.transport, seed)
    net = build_network(h, topology, scenario.transport, len(workload.flows), seed)
    for failure in scenario.link_failures:
        net.builder.ScheduleLinkDown(failure.at, *failure.link)
    ff = None
    unsettled = unsettled_reason(scenario) if options.accel and options.fast_forward else None
    if unsettled:
        print(f"wormhole: warning: {unsettled}; the engine runs without freezing (as --no-ff)", file=sys.stderr)
        options = dataclasses.replace(options, fast_forward=False)
    if options.accel and options.fast_forward and scenario.transport.kind != "rdma":
        print(f"wormhole: warning: {TCP_ACCEL_WARNING}", file=sys.stderr)
    if options.accel:
        memo = open_memo(scenario, options.cache) if options.memo and options.fast_forward else None
        ff = FastForward(net, [t.size for t in workload.flows], scenario.accel, options.fast_forward, memo,
                         port_properties(topology, scenario.transport.mtu),
                         [t.collective.split("_")[0] for t in workload.flows])
    build_s = time.perf_counter() - t_build
    stop = options.stop_time_ns or scenario.stop_time or DEFAULT_STOP_TIME_NS
    executor = Executor(workload, net, stop, progress, fast_forward=ff, nudge_ns=options.nudge_ns,
                        jitter_ns=options.jitter_ns, jitter_seed=(seed, options.jitter_draw),
                        stop_requested=stop_requested)
    # What was built so far lives through the loop: kept out of the collector's scans, as a full
    # collection over the workload and the engine's tables took 50-60 ms of gpt-bench-dcqcn's
    # 0.3 s accelerated loop. Given back after, for processes that run several scenarios.
    gc.freeze()
    try:
        run = executor.run()
    finally:
        gc.unfreeze()

    if net.rdma:
        ideal = RdmaIdealFct(topology, segment_size(scenario.transport))
    else:
        ideal = IdealFct(topology, scenario.transport.mtu, segment_size(scenario.transport))
    flows = flows_frame(workload, run, ideal)
    out_dir.mkdir(parents=True, exist_ok=True)
    flows.to_csv(out_dir / "flows.csv", index=False)
    write_fct_txt(flows, out_dir / "fct.txt")
    summary = {
        "scenario": scenario.name,
        "scenario_file": str(scenario.source_path),
        "scenario_fingerprint": scenario.fingerprint(),
        "seed": seed,
        "mode": _mode(options),
        **({"nudge_ns": options.nudge_ns} if options.nudge_ns else {}),
        **({"jitter_ns": options.jitter_ns, "jitter_draw": options.jitter_draw} if options.jitter_ns else {}),
        "flows": len(flows),
        "flows_finished": int((flows.end_ns >= 0).sum()),
        "bytes": int(flows.size_bytes.sum()),
        "tasks": len(workload.tasks),
        "sim_time_ns": run.sim_time_ns,
        "workload_start_ns": run.workload_start_ns,
        "events": run.events,
        "stop_reason": run.stop_reason,
        "fct": fct_stats(flows),
        "wall_s": {"import": round(import_s, 3), "build": round(build_s, 3),
                   "loop": round(run.loop_s, 3), "total": round(time.perf_counter() - t0, 3)},
        "events_per_s": round(run.events / run.loop_s) if run.loop_s > 0 else None,
        "versions": {"wormhole": __version__, "ns3": ns3_version(), "python": platform.python_version()},
    }
    if net.rdma:
        summary["rdma"] = rdma_summary(net)
        write_pfc_txt(net.builder, out_dir / "pfc.txt")
        write_qlen_csv(net.builder, out_dir / "qlen.csv")
    if ff is not None:
        summary["accel"] = accel_summary(ff, flows, scenario.accel)
        if unsettled:
            summary["accel"]["not_frozen_because"] = unsettled
        partitions_frame(ff.stats.intervals).to_csv(out_dir / "partitions.csv", index=False)
    if workload.iterations:
        iterations = iterations_frame(workload, run)
        iterations.to_csv(out_dir / "iterations.csv", index=False)
        summary["iteration_time_ns"] = [int(x) for x in iterations.time_ns]
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def rdma_summary(net) -> dict:
    """Fabric counters of an RDMA run."""
    b = net.builder
    qps = [net.engine.flows.GetSender(c) for c in range(int(b.GetNQps()))]
    return {"pfc_frames": int(b.GetPfcFrames()), "drops": int(b.GetDrops()), "lost": int(b.GetLost()),
            "ecn_marks": int(b.GetEcnMarks()), "links_down": int(b.GetLinksDown()),
            "down_drops": int(b.GetDownDrops()),
            "retransmitted_bytes": sum(qp.GetRetransmittedBytes() for qp in qps),
            "timeouts": sum(qp.GetTimeouts() for qp in qps)}


def unsettled_reason(scenario: Scenario) -> str | None:
    """Why the engine must not freeze this scenario's flows, if it must not: their paths change
    (a link goes down), or their rates pass the steady test while they are not steady (at a floor,
    or drifting slower than the test's window can see), so a freeze would skip bytes at a wrong
    rate."""
    if scenario.link_failures:
        return ("a link goes down during the run: flows change paths, which the engine's partitions "
                "do not follow")
    transport = scenario.transport
    cc = transport.resolved().cc if transport.kind == "rdma" else None
    if cc == "timely":
        return ("TIMELY's rates sit at a floor or drift for milliseconds while they look steady over "
                "the test's window (frozen so, incast16's flows came out 25x late, tiny-memo-rdma's "
                "without a window 37 % early)")
    if cc == "hpcc-pint":
        return ("HPCC-PINT's quantized feedback lets flows' shares of a bottleneck wander by 10-15 % "
                "for hundreds of us while their sum looks steady (frozen so, tiny-memo-rdma's incast "
                "flows came out up to 16 % off)")
    return None


def _mode(options: RunOptions) -> str:
    if not options.accel:
        return "stock"
    if not options.fast_forward:
        return "accel-no-ff"
    return "accel" if options.memo else "accel-no-memo"


def port_properties(topology: Topology, mtu: int) -> Ports:
    """Per port: label (what a memo record's paths must match), rate and one-hop delay."""
    hosts = set(topology.hosts)
    ports = Ports(labels=[], rates=[], delays=[], propagation=[])
    for link in topology.links:
        rate = link.rate_bps / 8e9                                   # bytes per ns
        for owner in (link.a, link.b):
            ports.labels.append(f"{'h' if owner in hosts else 's'}{link.rate_bps}/{link.delay_ns}")
            ports.rates.append(rate)
            ports.delays.append(link.delay_ns + mtu / rate)
            ports.propagation.append(link.delay_ns)
    return ports


_NOT_IN_FINGERPRINT = {"flow_ends", "episodes", "episode_bytes", "episode_join", "explain_events",
                       "hpcc_recovery", "window_queues"}
_EPISODE_STEPS = ("episode_bytes_step", "episode_age_step")


def open_memo(scenario: Scenario, path: str | Path | None = None) -> Memo:
    """The memo records of this scenario's configuration in the store at `path` (or the default)."""
    transport = scenario.transport
    # An RDMA transport counts by its resolved parameters (its config file by content, not path).
    settings = {"transport": (dataclasses.asdict(transport.resolved()) if transport.kind == "rdma"
                              else transport.model_dump(mode="json")),
                # (how flows end, which partitions are kept as episodes and which HPCC ones freeze
                # as they form do not change what a record holds; episode label steps at their
                # defaults stay out, so that stores made before they were settings stay valid)
                "accel": scenario.accel.model_dump(mode="json", exclude=_NOT_IN_FINGERPRINT | {
                    name for name in _EPISODE_STEPS
                    if getattr(scenario.accel, name) == AccelSpec.model_fields[name].default}),
                "versions": {"wormhole": __version__, "ns3": ns3_version(), "record_model": RECORD_MODEL}}
    try:
        return Memo(open_store(path), fingerprint(settings), f"wormhole-sim {__version__} / ns-3 {ns3_version()}",
                    warn=lambda message: print(f"wormhole: warning: {message}", file=sys.stderr))
    except CacheError as e:
        raise CacheFileError(str(e)) from None


def _child(payload: dict, progress: Callable[[dict], None]) -> dict:
    from .runner import time_limit_reached
    from .scenario import load_scenario

    stop_requested = time_limit_reached(payload)   # (the limit counts from the child's start)
    scenario = load_scenario(payload["scenario"])
    options = RunOptions(seed=payload.get("seed"), stop_time_ns=payload.get("stop_time_ns"),
                         accel=payload.get("accel", False), fast_forward=payload.get("fast_forward", True),
                         accel_overrides=payload.get("accel_overrides"), memo=payload.get("memo", True),
                         cache=payload.get("cache"), nudge_ns=payload.get("nudge_ns", 0),
                         jitter_ns=payload.get("jitter_ns", 0), jitter_draw=payload.get("jitter_draw", 0))
    return simulate(scenario, Path(payload["out"]), options,
                    lambda now, done, total, stage=None: progress(
                        {"sim_ns": now, "flows_done": done, "flows": total, **({"stage": stage} if stage else {})}),
                    stop_requested)


if __name__ == "__main__":
    from .runner import child_main

    child_main(_child)
