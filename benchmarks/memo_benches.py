"""Memoization on the bench scenarios: stock, steady-only, memo with a cold store, memo warm.

    python benchmarks/memo_benches.py --out out/memo [scenarios ...]   # names under scenarios/ or .yaml files
    python benchmarks/memo_benches.py --out out/memo --cc dctcp moe-bench-dcqcn
    python benchmarks/memo_benches.py --out out/memo --scaling gpt-bench
    python benchmarks/memo_benches.py --out out/memo --repeat 5 moe-8x7b-hpcc
    python benchmarks/memo_benches.py --out out/memo --seeds 1,2,3 moe-8x7b-dcqcn
    python benchmarks/memo_benches.py --out out/memo --floors [MAX_NS] [--draws K] gpt-bench

For each scenario, one after the other in this invocation (ratios of runs made under the same
conditions): a stock run; the accelerated run without memo (`--no-memo`, the paper's steady-only
ablation); the accelerated run with memo on an empty store OUT/<name>/memo.whdb (cold); the same
again on the store the cold run filled (warm); on RDMA, the cold run again with every flow's end
simulated (`--flow-ends simulated`, on its own empty store). Prints the README's memo table: loop seconds,
speedups over stock, the extra speedup of memo over steady-only, warm over cold, FCT error
mean / p99 (and of service times: FCTs without the wait behind earlier flows of the same connection)
and iteration error against stock, memo hits / lookups, and how many times fewer ns-3
events each accelerated run executed than stock (deterministic, unlike this machine's wall times).
Writes OUT/results.json.

--runs K makes each accelerated run of the memo table K times (a cold one on an empty store each
time, a warm one on a copy of the store the first cold run filled) and takes the median of their
loop times: a loop of tenths of a second moves by tens of percent from one run to the next on this
machine. The K runs must give the same events and flows.csv.

--cc runs RDMA scenarios with another congestion control (their transport.cc replaced; rows named
<name>-<cc>).

--scaling runs the accelerated engine (cold store each) on 1 and on 3 training iterations of each
scenario: with memo, later iterations reuse the first one's transients, so the cost grows
sub-linearly (3 iterations should cost less than 1.5x one). With --runs K, the two alternate K
times and their loop times are the medians.

--repeat N runs stock and then the accelerated engine N times on one store (the first on an empty
one): what a study that runs a scenario again and again pays each time, as the store fills.

--seeds S,... runs stock, memo cold and memo warm (a store per seed) with each of these seeds in
place of the scenario's: the seed draws each flow's ECMP path, so it decides which flows collide
on the fabric's links, and with that how much of a run settles into steady or recurring states.

--floors runs stock per scenario: as is, with the first flow released 1 ns later (nudge floor),
and K times (--draws, 1 by default) with each flow released a draw of 0..MAX_NS ns later (jitter
floor, 100 ns by default: about the timing error of the engine's computed ends), and prints how far
the perturbed runs move FCTs and iteration times (the worst of the draws): errors below these are
within the simulator's own sensitivity. It also prints the span of iteration times that stock and
its jittered runs cover, against stock's, and where the accelerated runs of an earlier invocation
into the same OUT (OUT/<name>/{steady,cold,warm}) fall in it.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
import statistics
import sys
from pathlib import Path

import yaml

from checkouts import ROOT, scenario_path

sys.path.insert(0, str(ROOT))

from bridge import api
from bridge.ns3.patches import build_library
from bridge.report.validation import compare, jitter_floor, noise_floor
from bridge.scenario.hpcc_config import CC_MODES

BENCHES = ["gpt-bench", "moe-bench"]
MODES = {"steady": {"memo": False}, "cold": {}, "warm": {}}


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.2f} %"


def _measure(stock: api.RunResult, run: api.RunResult) -> dict:
    c = compare(stock, run)
    memo = run.summary["accel"]["memo"] or {}
    return {"loop_s": run.summary["wall_s"]["loop"], "speedup_loop": c["speedup_loop"],
            "fct_error": c["fct_error"], "service_error": c["service_error"],
            "iteration_error_max": c["iteration_error_max"],
            "events_x": stock.summary["events"] / run.summary["events"],
            "skipped_fraction": c["skipped_fraction"], "simulated_by_collective": c["simulated_by_collective"],
            "hits": memo.get("hits"),
            "lookups": memo.get("lookups"), "records_written": memo.get("records_written")}


def scenario_arg(arg: str) -> tuple[str, Path]:
    """A bundled scenario's name (scenarios/<name>.yaml) or a scenario file's path, and its row
    name (the file's stem)."""
    path = scenario_path(arg).resolve()
    if not path.is_file():
        raise SystemExit(f"{arg}: no such scenario (a name under scenarios/ or a .yaml file)")
    return path.stem, path


def bench(name: str, scenario: Path, out: Path, runs: int = 1) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "memo.whdb"
    cache.unlink(missing_ok=True)
    stock = api.run(scenario, out / "stock")
    row = {"scenario": name, "stock_loop_s": stock.summary["wall_s"]["loop"]}
    for mode, options in MODES.items():
        row[mode] = _repeated(stock, scenario, out, mode, runs, cache, options)
    if api.load_scenario(scenario).transport.kind == "rdma":
        ends_cache = out / "ends_simulated.whdb"           # cold too
        ends_cache.unlink(missing_ok=True)
        row["ends_simulated"] = _measure(stock, api.run(scenario, out / "ends_simulated", accel=True,
                                                        cache=ends_cache,
                                                        accel_overrides={"flow_ends": "simulated"}))
    row["memo_over_steady"] = row["steady"]["loop_s"] / row["cold"]["loop_s"]
    row["warm_over_cold"] = row["cold"]["loop_s"] / row["warm"]["loop_s"]
    return row


def _repeated(stock: api.RunResult, scenario: Path, out: Path, mode: str, runs: int, cache: Path,
              options: dict) -> dict:
    """The accelerated run of `mode`, `runs` times: its measures from the first, its loop time the
    median of all (loop_s_runs: each). Each cold run starts on an empty store, the first on
    `cache`; each warm run on a copy of `cache` as the first cold run left it (warm runs add
    records). The runs must agree event for event and flow for flow (deterministic)."""
    results = []
    for k in range(runs):
        where = out / (mode if k == 0 else f"{mode}-{k + 1}")
        if mode == "warm":
            store = out / f"warm-{k + 1}.whdb"
            shutil.copyfile(out / "cold-filled.whdb", store)
        elif mode == "cold" and k:
            store = out / f"cold-{k + 1}.whdb"
            store.unlink(missing_ok=True)
        else:
            store = cache
        results.append(api.run(scenario, where, accel=True, cache=store, **options))
        if mode == "cold" and k == 0:
            shutil.copyfile(cache, out / "cold-filled.whdb")
        if k and (results[-1].summary["events"] != results[0].summary["events"]
                  or not filecmp.cmp(where / "flows.csv", out / mode / "flows.csv", shallow=False)):
            raise SystemExit(f"{scenario}: {mode} run {k + 1} differs from run 1 (events or flows.csv)")
    measured = _measure(stock, results[0])
    loops = [r.summary["wall_s"]["loop"] for r in results]
    measured["loop_s"] = statistics.median(loops)
    measured["speedup_loop"] = stock.summary["wall_s"]["loop"] / measured["loop_s"]
    measured["loop_s_runs"] = loops
    return measured


def with_cc(name: str, scenario: Path, cc: str, out: Path) -> tuple[str, Path]:
    """A copy of `scenario` in `out` whose RDMA transport runs `cc`, and its row name."""
    data = yaml.safe_load(scenario.read_text())
    if data.get("transport", {}).get("kind") != "rdma":
        raise SystemExit(f"--cc: {name} does not run on RDMA")
    data["transport"]["cc"] = cc
    data["name"] = f"{name}-{cc}"
    path = out / f"{data['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return data["name"], path


def scaling(name: str, scenario: Path, out: Path, runs: int = 1) -> dict:
    """The accelerated engine on 1 and on 3 iterations of the scenario, each on an empty store,
    alternating `runs` times: loop times their medians (each must give the same events)."""
    data = yaml.safe_load(scenario.read_text())
    paths = {}
    for iterations in (1, 3):
        data["training"]["iterations"] = iterations
        paths[iterations] = out / f"{name}-{iterations}it.yaml"
        paths[iterations].parent.mkdir(parents=True, exist_ok=True)
        paths[iterations].write_text(yaml.safe_dump(data))
    loops, events = {1: [], 3: []}, {}
    for k in range(runs):
        for iterations, path in paths.items():
            cache = out / f"{name}-{iterations}it.whdb"
            cache.unlink(missing_ok=True)
            run = api.run(path, out / f"{name}-{iterations}it", accel=True, cache=cache)
            loops[iterations].append(run.summary["wall_s"]["loop"])
            if events.setdefault(iterations, run.summary["events"]) != run.summary["events"]:
                raise SystemExit(f"{name}, {iterations} iterations: run {k + 1} differs from run 1 in events")
    median = {i: statistics.median(v) for i, v in loops.items()}
    return {"scenario": name, "loop_s_1_iteration": median[1], "loop_s_3_iterations": median[3],
            "ratio": median[3] / median[1], "events_ratio": events[3] / events[1],
            "loop_s_runs": {str(i): v for i, v in loops.items()}}


def repeat(name: str, scenario: Path, out: Path, runs: int) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "memo.whdb"
    cache.unlink(missing_ok=True)
    stock = api.run(scenario, out / "stock")
    row = {"scenario": name, "stock_loop_s": stock.summary["wall_s"]["loop"], "runs": []}
    for k in range(1, runs + 1):
        row["runs"].append(_measure(stock, api.run(scenario, out / f"run{k}", accel=True, cache=cache)))
    return row


def seeds(name: str, scenario: Path, out: Path, seed_list: list[int]) -> dict:
    row = {"scenario": name, "seeds": []}
    for seed in seed_list:
        where = out / f"seed{seed}"
        where.mkdir(parents=True, exist_ok=True)
        cache = where / "memo.whdb"
        cache.unlink(missing_ok=True)
        stock = api.run(scenario, where / "stock", seed=seed)
        measured = {"seed": seed, "stock_loop_s": stock.summary["wall_s"]["loop"], "stock_events": stock.summary["events"]}
        for mode in ("cold", "warm"):
            measured[mode] = _measure(stock, api.run(scenario, where / mode, accel=True, cache=cache, seed=seed))
        row["seeds"].append(measured)
    return row


def floors(name: str, scenario: Path, out: Path, jitter_ns: int, draws: int) -> dict:
    stock = api.run(scenario, out / name / "stock")
    row = {"scenario": name, "jitter_ns": jitter_ns,
           "nudge": noise_floor(stock, api.run(scenario, out / name / "stock-nudge", nudge_ns=1))}
    jittered = [api.run(scenario, out / name / f"stock-jitter-{k}", jitter_ns=jitter_ns, jitter_draw=k)
                for k in range(draws)]
    row["jitter"] = jitter_floor(stock, jittered, jitter_ns)
    # Iteration times against stock's: the span stock and its draws cover, and the accelerated runs.
    times = stock.summary["iteration_time_ns"]
    row["iteration_offsets_ns"] = {"jittered span": [[lo - t, hi - t] for (lo, hi), t in
                                                     zip(row["jitter"]["iteration_range_ns"], times)]}
    for mode in MODES:
        if (out / name / mode / "summary.json").exists():
            accelerated = api.read_results(out / name / mode).summary["iteration_time_ns"]
            row["iteration_offsets_ns"][mode] = [a - t for a, t in zip(accelerated, times)]
    return row


def _offsets_us(row: dict) -> str:
    """Per iteration: the jittered span and each accelerated run's time, in us from stock's."""
    offsets = row["iteration_offsets_ns"]
    return "; ".join(
        f"{offsets['jittered span'][i][0] / 1e3:+.1f} .. {offsets['jittered span'][i][1] / 1e3:+.1f}"
        + "".join(f", {mode} {o[i] / 1e3:+.1f}" for mode, o in offsets.items() if mode != "jittered span")
        for i in range(len(offsets["jittered span"])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", default=BENCHES, metavar="scenario",
                        help="a name under scenarios/ or a .yaml file (default: %(default)s)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scaling", action="store_true", help="1 vs 3 iterations, accelerated only")
    parser.add_argument("--floors", type=int, nargs="?", const=100, metavar="MAX_NS",
                        help="stock against stock nudged by 1 ns and jittered by 0..MAX_NS per flow")
    parser.add_argument("--draws", type=int, default=1, metavar="K", help="--floors: K jittered stock runs")
    parser.add_argument("--cc", choices=sorted(CC_MODES), help="RDMA scenarios with this congestion control")
    parser.add_argument("--repeat", type=int, metavar="N", help="stock, then N accelerated runs on one store")
    parser.add_argument("--runs", type=int, default=1, metavar="K",
                        help="memo table and --scaling: each accelerated run K times, its loop time their median")
    parser.add_argument("--seeds", metavar="S,...", help="stock, memo cold and warm with each of these seeds")
    args = parser.parse_args()
    if args.cc and (args.floors is not None or args.scaling or args.repeat or args.seeds):
        parser.error("--cc goes with the memo table only")
    try:
        seed_list = [int(x) for x in args.seeds.split(",")] if args.seeds else []
    except ValueError:
        parser.error(f"--seeds: expected seeds separated by commas, e.g. 1,2,3 (got {args.seeds!r})")
    if args.repeat is not None and args.repeat < 1:
        parser.error("--repeat: N must be at least 1")
    if args.runs < 1:
        parser.error("--runs: K must be at least 1")
    if args.runs > 1 and (args.floors is not None or args.repeat or args.seeds):
        parser.error("--runs goes with the memo table and --scaling only")
    scenarios = [scenario_arg(arg) for arg in args.names]
    build_library()  # a changed patch compiles here, not inside the first timed run
    if args.floors is not None:
        print(f"| scenario | nudge floor: FCT mean / p99, iteration | jitter floor (0-{args.floors} ns, worst of "
              f"{args.draws}): FCT mean / p99, iteration | iteration time, us from stock's: jittered span, "
              "accelerated runs |")
        print("|---|---|---|---|")
        rows = []
        for name, scenario in scenarios:
            r = floors(name, scenario, args.out, args.floors, args.draws)
            rows.append(r)
            print(f"| {name} | " + " | ".join(
                f"{_pct(f['fct_error']['mean'])} / {_pct(f['fct_error']['p99'])}, {_pct(f['iteration_error_max'])}"
                for f in (r["nudge"], r["jitter"])) + f" | {_offsets_us(r)} |", flush=True)
        (args.out / "floors.json").write_text(json.dumps(rows, indent=2) + "\n")
        return
    if args.repeat:
        print("| scenario | run on one store | loop s (x stock) | events, stock / run | FCT error mean / p99 | "
              "iteration error | hits / lookups | records written |")
        print("|---|---|---|---|---|---|---|---|")
        rows = []
        for name, scenario in scenarios:
            r = repeat(name, scenario, args.out / name, args.repeat)
            rows.append(r)
            for k, m in enumerate(r["runs"], 1):
                print(f"| {name} | {k} | {m['loop_s']:.1f} ({m['speedup_loop']:.2f}x) | {m['events_x']:.1f}x | "
                      f"{_pct(m['fct_error']['mean'])} / {_pct(m['fct_error']['p99'])} | "
                      f"{_pct(m['iteration_error_max'])} | {m['hits']} / {m['lookups']} | {m['records_written']} |",
                      flush=True)
        (args.out / "repeat.json").write_text(json.dumps(rows, indent=2) + "\n")
        return
    if seed_list:
        print("| scenario | seed | stock loop s | stock events | events x stock: cold, warm | loop x stock: cold, warm | "
              "FCT error mean / p99 (cold; warm) | service-time error mean / p99 (cold; warm) | "
              "iteration error (cold; warm) |")
        print("|---|---|---|---|---|---|---|---|---|")
        rows = []
        for name, scenario in scenarios:
            r = seeds(name, scenario, args.out / name, seed_list)
            rows.append(r)
            for m in r["seeds"]:
                c, w = m["cold"], m["warm"]
                errors = " | ".join("; ".join(f"{_pct(x[key]['mean'])} / {_pct(x[key]['p99'])}" for x in (c, w))
                                    for key in ("fct_error", "service_error"))
                print(f"| {name} | {m['seed']} | {m['stock_loop_s']:.1f} | {m['stock_events']:,} | "
                      f"{c['events_x']:.1f}x, {w['events_x']:.1f}x | {c['speedup_loop']:.1f}x, {w['speedup_loop']:.1f}x | "
                      f"{errors} | {_pct(c['iteration_error_max'])}; {_pct(w['iteration_error_max'])} |", flush=True)
        (args.out / "seeds.json").write_text(json.dumps(rows, indent=2) + "\n")
        return
    if args.scaling:
        print("| scenario | accel loop s, 1 iteration | accel loop s, 3 iterations | ratio | events ratio |")
        print("|---|---|---|---|---|")
        rows = [scaling(name, scenario, args.out, args.runs) for name, scenario in scenarios]
        for r in rows:
            print(f"| {r['scenario']} | {r['loop_s_1_iteration']:.1f} | {r['loop_s_3_iterations']:.1f} | "
                  f"{r['ratio']:.2f}x | {r['events_ratio']:.2f}x |")
        (args.out / "scaling.json").write_text(json.dumps(rows, indent=2) + "\n")
        return
    rows = []
    print("| scenario | stock loop s | steady-only loop s (x) | memo cold loop s (x) | memo warm loop s (x) | "
          "memo / steady-only | warm / cold | FCT error mean / p99 (cold; warm) | service-time error mean / p99 (cold) | "
          "iteration error (cold; warm) | "
          "hits / lookups (cold) | events, stock / run: steady-only, cold, warm | "
          "simulated ends, cold: events x, FCT error mean / p99, iteration error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, scenario in scenarios:
        if args.cc:
            name, scenario = with_cc(name, scenario, args.cc, args.out)
        r = bench(name, scenario, args.out / name, args.runs)
        rows.append(r)
        s, c, w = r["steady"], r["cold"], r["warm"]
        print(f"| {name} | {r['stock_loop_s']:.1f} | {s['loop_s']:.1f} ({s['speedup_loop']:.2f}x) | "
              f"{c['loop_s']:.1f} ({c['speedup_loop']:.2f}x) | {w['loop_s']:.1f} ({w['speedup_loop']:.2f}x) | "
              f"{r['memo_over_steady']:.2f}x | {r['warm_over_cold']:.2f}x | "
              f"{_pct(c['fct_error']['mean'])} / {_pct(c['fct_error']['p99'])}; "
              f"{_pct(w['fct_error']['mean'])} / {_pct(w['fct_error']['p99'])} | "
              f"{_pct(c['service_error']['mean'])} / {_pct(c['service_error']['p99'])} | "
              f"{_pct(c['iteration_error_max'])}; {_pct(w['iteration_error_max'])} | "
              f"{c['hits']} / {c['lookups']} | "
              + ", ".join(f"{1 / (1 - m['skipped_fraction']):.1f}x" for m in (s, c, w)) + " | "
              + (f"{1 / (1 - e['skipped_fraction']):.1f}x, {_pct(e['fct_error']['mean'])} / "
                 f"{_pct(e['fct_error']['p99'])}, {_pct(e['iteration_error_max'])} |"
                 if (e := r.get("ends_simulated")) else "n/a |"), flush=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
