"""`wormhole` command line: run and check scenarios. Errors print as one line, exit code 2."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __version__
from .errors import WormholeError
from .units import parse_time


def _time_ns(text: str) -> int:
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_accel_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--accel", action=argparse.BooleanOptionalAction, default=False,
                        help="Wormhole acceleration: freeze steady partitions (default: off, stock ns-3)")
    parser.add_argument("--ff", action=argparse.BooleanOptionalAction, default=True,
                        help="with --accel: --no-ff keeps partitions and probes but never freezes (ablation)")
    parser.add_argument("--memo", action=argparse.BooleanOptionalAction, default=True,
                        help="with --accel: --no-memo fast-forwards steady states only (ablation)")
    parser.add_argument("--cache", type=Path, help="memo store file (default: $WORMHOLE_CACHE, "
                        "else ~/.cache/wormhole/memo.whdb)")
    _add_engine_settings(parser)


def _add_engine_settings(parser: argparse.ArgumentParser) -> None:
    """The accelerated run's settings over the scenario's `accel` block (run and validate)."""
    parser.add_argument("--theta", type=float, help="steady threshold on (max-min)/mean of a flow's rate")
    parser.add_argument("--window", type=int, help="steady window: number of rate samples (l)")
    parser.add_argument("--tau", type=_time_ns, help="rate sample period, e.g. 10us")
    parser.add_argument("--coarse", type=int, help="samples per block of the steady test's coarse scale "
                        "(HPCC's only scale: 1 gives back the faster, less exact fine window)")
    parser.add_argument("--flow-ends", choices=["computed", "simulated"],
                        help="RDMA: flows complete inside frozen partitions at their computed time "
                        "(default), or each flow's end is simulated packet by packet")
    parser.add_argument("--episodes", action=argparse.BooleanOptionalAction,
                        help="RDMA memo: --no-episodes simulates every partition of short flows (ablation)")
    parser.add_argument("--fair-start", action=argparse.BooleanOptionalAction,
                        help="DCQCN, HPCC: --no-fair-start waits for the steady test where a partition forms "
                        "at its NICs' fair shares (ablation)")
    parser.add_argument("--fair-shares", choices=["nics", "links"],
                        help="DCQCN, HPCC: freeze partitions as they form at fair shares set by the NICs "
                        "alone (default), or by switch ports too (links: faster on the GPT benches, "
                        "off them often less exact: README Known limits)")
    parser.add_argument("--hpcc-recovery", type=float, metavar="FRACTION",
                        help="HPCC with --fair-shares links: freeze QPs meeting at a full switch port as they "
                        "form only where HPCC's recovery from their overload costs each at most this "
                        "fraction of its time left (default 0.025; higher is faster and less exact)")
    parser.add_argument("--window-queues", action=argparse.BooleanOptionalAction,
                        help="DCQCN with --fair-shares links: QPs meeting at a switch port freeze once their "
                        "windows queue there, and long flows do not join frozen partitions (slower, more "
                        "exact beside short flows)")
    parser.add_argument("--explain-events", action="store_true", default=None,
                        help="count the simulated events by what the engine did with their partition and "
                        "by collective (summary.json accel.events_by)")


def _accel_overrides(args: argparse.Namespace) -> dict | None:
    given = {k: v for k, v in (("theta", args.theta), ("window", args.window), ("tau", args.tau),
                               ("coarse", args.coarse), ("flow_ends", args.flow_ends),
                               ("episodes", args.episodes), ("fair_start", args.fair_start),
                               ("fair_shares", args.fair_shares), ("hpcc_recovery", args.hpcc_recovery),
                               ("window_queues", args.window_queues),
                               ("explain_events", args.explain_events))
             if v is not None}
    return given or None


def _run(args: argparse.Namespace) -> int:
    import signal

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from . import api
    from .errors import RunInterrupted
    from .runner import make_out_dir
    from .scenario import with_accel_overrides

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    # SIGTERM (kill, a batch scheduler) stops like Ctrl-C: the run ends and keeps what finished.
    signal.signal(signal.SIGTERM, interrupt)
    console = Console(stderr=True)
    scenario = api.load_scenario(args.scenario)  # errors before the progress display stay one line
    overrides = _accel_overrides(args)
    with_accel_overrides(scenario, overrides)
    engine_only = [f"--{name}" for name, given in (("no-ff", not args.ff), ("no-memo", not args.memo))
                   if given] + [f"--{key.replace('_', '-')}" for key in overrides or {}]
    if engine_only and not args.accel:   # else they would be ignored: a stock run
        raise WormholeError(f"{', '.join(engine_only)}: only with --accel (without it the run is stock ns-3)")
    if args.accel and args.ff and args.memo:
        from .engine.memo import open_store

        open_store(args.cache)
    make_out_dir(args.out)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("flows  sim {task.fields[sim]}"), TimeElapsedColumn(),
                  console=console, disable=args.quiet, transient=False) as bar:
        task = bar.add_task(scenario.name, total=None, sim="0 us")

        def progress(p: dict) -> None:
            description = f"{scenario.name}: {p['stage']}" if "stage" in p else scenario.name
            bar.update(task, description=description, total=p["flows"], completed=p["flows_done"],
                       sim=f"{p['sim_ns'] / 1e3:,.1f} us")

        try:
            result = api.run(scenario, args.out, accel=args.accel, fast_forward=args.ff, memo=args.memo,
                             cache=args.cache, accel_overrides=overrides, seed=args.seed,
                             stop_time_ns=args.stop_time, timeout_s=args.timeout, progress=progress)
        except RunInterrupted as e:
            if e.out_dir is None:
                raise
            result = api.read_results(e.out_dir)
    s = result.summary
    wall = s["wall_s"]
    console.print(f"{s['flows_finished']}/{s['flows']} flows, simulated {s['sim_time_ns'] / 1e3:,.1f} us, "
                  f"{s['events']:,} events, wall {wall['total']:.1f} s (import {wall['import']:.1f}, "
                  f"build {wall['build']:.1f}, loop {wall['loop']:.1f}) -> {args.out}")
    if "accel" in s:
        from .report.explain import accel_lines

        for line in accel_lines(s["accel"]):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    if "iteration_time_ns" in s:
        console.print("iteration times: " + ", ".join("unfinished" if t < 0 else f"{t / 1e6:.3f} ms"
                                                      for t in s["iteration_time_ns"]))
    if s["flows_finished"] < s["flows"]:
        console.print(f"[red]{s['flows'] - s['flows_finished']} flows did not finish: {s['stop_reason']}")
        return 130 if s["stop_reason"] == "interrupted" else 1
    return 0


def _check(args: argparse.Namespace) -> int:
    from .scenario import load_scenario
    from .simulation import build_workload
    from .topology import build_topology

    scenario = load_scenario(args.scenario)
    topology = build_topology(scenario.topology)
    workload = build_workload(scenario, topology)
    flows = workload.flows
    print(f"{scenario.name}: {topology.kind}, {len(topology.hosts)} hosts, {topology.n_nodes} nodes, "
          f"{len(topology.links)} links; {len(flows)} flows, {sum(f.size for f in flows):,} bytes, "
          f"{len(workload.tasks) - len(flows)} compute tasks, {workload.iterations} iterations; "
          f"fingerprint {scenario.fingerprint()[:12]}")
    for failure in scenario.link_failures:
        print(f"  link {failure.link[0]}-{failure.link[1]} goes down at {failure.at / 1e3:,.3f} us")
    for k, job in enumerate(scenario.jobs or ()):
        print(f"  job {job.name or f'job{k}'}: {job.parallelism.world} GPUs from host {job.first_host}, "
              f"starts at {job.start / 1e3:,.3f} us")
    specs = scenario.jobs or ((scenario.training,) if scenario.training else ())
    for spec in specs:
        for straggler in spec.stragglers:
            print(f"  hosts {', '.join(map(str, straggler.hosts))} compute {straggler.slowdown:g}x slower")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .runner import make_out_dir
    from .scenario import load_scenario, with_accel_overrides
    from .validate import console_table, validate

    console = Console(stderr=True)
    scenario = load_scenario(args.scenario)  # before the progress display: an error stays one line
    overrides = _accel_overrides(args)
    with_accel_overrides(scenario, overrides)
    make_out_dir(args.out)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("flows  sim {task.fields[sim]}"), TimeElapsedColumn(),
                  console=console, disable=args.quiet, transient=False) as bar:
        tasks: dict[str, int] = {}

        def progress(name: str, p: dict | None) -> None:
            if p is None:
                tasks[name] = bar.add_task(name, total=None, sim="0 us")
            else:
                bar.update(tasks[name], description=f"{name}: {p['stage']}" if "stage" in p else name,
                           total=p["flows"], completed=p["flows_done"], sim=f"{p['sim_ns'] / 1e3:,.1f} us")

        result = validate(scenario, args.out, seed=args.seed, noise_floor=args.noise_floor,
                          nudge_floor=args.nudge_floor, jitter_floor_ns=args.jitter_floor,
                          jitter_draws=args.jitter_draws, accel_runs=args.accel_runs,
                          candidate_accel=args.against_seed is None, candidate_seed=args.against_seed,
                          memo=args.memo, cache=args.cache, accel_overrides=overrides, timeout_s=args.timeout,
                          progress=progress)
    console.print(console_table(result))
    console.print(f"report: {args.out / 'report.md'}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    import os
    import signal

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .runner import make_out_dir
    from .sweep import load_sweep, run_sweep

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    # SIGTERM (kill, a batch scheduler) stops like Ctrl-C: the worker pool is torn down, not orphaned.
    signal.signal(signal.SIGTERM, interrupt)
    console = Console(stderr=True)
    sweep = load_sweep(args.sweep)  # before the progress display: an error stays one line
    make_out_dir(args.out)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("runs"), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task(sweep.name, total=len(sweep.points) * len(sweep.modes))
        results = run_sweep(sweep, args.out, args.workers or os.cpu_count() or 1,
                            lambda done, total: bar.update(task, completed=done, total=total))
    console.print(f"{len(results)} runs of {len(sweep.points)} points -> {args.out / 'results.csv'}")
    return 0


def _cache(args: argparse.Namespace) -> int:
    from cache_store import CacheError, format_problem

    from .engine.memo import open_store
    from .errors import CacheFileError

    if args.action in ("export", "import") and args.file is None:
        raise CacheFileError(f"wormhole cache {args.action} needs a FILE")
    store = open_store(args.cache)
    try:
        if args.action == "stats":
            s = store.stats()
            print(f"{s['path']}: {s['records']} records, {s['size_bytes']:,} bytes, {s['problems']} damaged, "
                  f"schema {s['schema_version']}")
            if s["kinds"]:
                print("  " + ", ".join(f"{n} {kind}" for kind, n in sorted(s["kinds"].items())))
            for fp, n in sorted(s["fingerprints"].items()):
                print(f"  configuration {fp[:16]}: {n} records")
        elif args.action == "verify":
            report = store.verify()
            for problem in report.problems:
                print(format_problem(store.path, problem))
            print(f"{store.path}: {report.n_valid} valid records, {len(report.problems)} damaged")
            return 0 if report.ok else 1
        elif args.action == "clear":
            store.clear()
            print(f"{store.path}: cleared")
        elif args.action == "export":
            print(f"{store.export(args.file)} records -> {args.file}")
        else:
            print(f"{store.import_from(args.file)} new records <- {args.file}")
    except CacheError as e:
        raise CacheFileError(str(e)) from None
    return 0


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _seed(text: str) -> int:
    """As a scenario's `seed`."""
    from .scenario import MAX_SEED

    if not text.isdigit() or int(text) > MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to {MAX_SEED}, got {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wormhole", description=__doc__)
    parser.add_argument("--version", action="version", version=f"wormhole {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="simulate a scenario on ns-3 (stock mode)")
    run.add_argument("scenario", type=Path)
    run.add_argument("--out", type=Path, required=True, help="output folder")
    run.add_argument("--seed", type=_seed, help="override the scenario's seed")
    run.add_argument("--stop-time", type=_time_ns, help="cap on simulated time, e.g. 50ms")
    run.add_argument("--timeout", type=_seconds, help="wall-clock limit in seconds: the run stops there "
                     "and keeps what finished (exit 1)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_accel_arguments(run)
    run.set_defaults(handler=_run)

    validate = sub.add_parser("validate", help="run stock and accelerated, report speedup and error")
    validate.add_argument("scenario", type=Path)
    validate.add_argument("--out", type=Path, required=True, help="output folder")
    validate.add_argument("--noise-floor", action="store_true",
                          help="also run stock on seed + 1: the error the seed alone causes")
    validate.add_argument("--nudge-floor", action="store_true",
                          help="also run stock with the first flow 1 ns later: how chaotic the scenario is")
    validate.add_argument("--jitter-floor", type=_time_ns, nargs="?", const=100, metavar="MAX",
                          help="also run stock with each flow starting 0..MAX later (default 100ns, drawn "
                               "from the seed): how far timing errors as small as the engine's move the results")
    validate.add_argument("--jitter-draws", type=_positive_int, default=1, metavar="K",
                          help="with --jitter-floor: K jittered stock runs, each its own draw (default 1); "
                               "the report gives their worst errors and the span of their iteration times")
    validate.add_argument("--accel-runs", type=_positive_int, default=1, metavar="K",
                          help="make the accelerated run K times, each on the memo store as it was "
                               "before the first; speedups from the median wall times")
    validate.add_argument("--seed", type=_seed, help="override the scenario's seed (both runs)")
    validate.add_argument("--timeout", type=_seconds, help="wall-clock limit per run, in seconds (a run "
                          "reaching it fails the validation)")
    validate.add_argument("--quiet", action="store_true", help="no progress bars")
    validate.add_argument("--memo", action=argparse.BooleanOptionalAction, default=True,
                          help="--no-memo: the accelerated run fast-forwards steady states only (ablation)")
    validate.add_argument("--cache", type=Path, help="memo store file for the accelerated run")
    _add_engine_settings(validate)
    # Testing: compare stock against stock on another seed instead of the accelerated run.
    validate.add_argument("--against-seed", type=_seed, help=argparse.SUPPRESS)
    validate.set_defaults(handler=_validate)

    check = sub.add_parser("check", help="validate a scenario and print what it contains")
    check.add_argument("scenario", type=Path)
    check.set_defaults(handler=_check)

    sweep = sub.add_parser("sweep", help="run a scenario sweep (axes x modes) into a results table")
    sweep.add_argument("sweep", type=Path, help="sweep file (see experiments/)")
    sweep.add_argument("--out", type=Path, required=True, help="output folder (rerun to resume)")
    sweep.add_argument("--workers", type=_positive_int,
                       help="simulations at a time (default: one per core)")
    sweep.set_defaults(handler=_sweep)

    cache = sub.add_parser("cache", help="inspect and manage the memo store")
    store_help = "the store (default: $WORMHOLE_CACHE, else ~/.cache/wormhole/memo.whdb)"
    cache.add_argument("--cache", type=Path, help=store_help)
    # Each action its own parser, so that --cache may come before or after FILE.
    actions = cache.add_subparsers(dest="action", required=True, metavar="{stats,verify,clear,export,import}")
    for name, text, file_help in [
            ("stats", "records per kind and configuration", None),
            ("verify", "check every record's checksum; exits 1 when one is damaged", None),
            ("clear", "delete the store", None),
            ("export", "copy the store's records into FILE", "destination store"),
            ("import", "add FILE's records to the store", "source store")]:
        action = actions.add_parser(name, help=text)
        action.add_argument("--cache", type=Path, default=argparse.SUPPRESS, help=store_help)
        if file_help:
            action.add_argument("file", type=Path, nargs="?", help=file_help)
    cache.set_defaults(handler=_cache, file=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except WormholeError as exc:
        print(f"wormhole: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        kept = getattr(exc, "out_dir", None)
        print("wormhole: interrupted" + (f"; what finished is in {kept}" if kept else ""), file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
