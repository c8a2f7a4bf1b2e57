"""Memoized transients: conflict graphs and lookups (pure Python), then end to end on real ns-3."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bridge import api
from bridge.cli import main
from bridge.engine.transients import _clock_on_record
from bridge.engine.ledger import MODES
from bridge.engine import memo as memo_module
from bridge.engine.memo import ConflictGraph, FlowPorts, Memo, Transient, fingerprint
from bridge.errors import CacheFileError
from bridge.scenario import load_scenario, with_accel_overrides
from bridge.simulation import TCP_ACCEL_WARNING, open_memo
from cache_store import MemoStore

REPO = Path(__file__).resolve().parents[1]
TINY_MEMO = REPO / "scenarios" / "tiny-memo.yaml"


# -- conflict graphs and lookups ---------------------------------------------------------------

def along(*links: int, reverse: bool = False) -> FlowPorts:
    """A flow whose data crosses `links` from their a side (or b side), its ACKs the other way."""
    data = frozenset(2 * link + reverse for link in links)
    return FlowPorts(data, frozenset(p ^ 1 for p in data))


def incast(base: int, labels=("5|a", "3|b", "0|c")):
    """Three flows into one host: flows share the receiver's link, the first two also an uplink."""
    rx, up = base, base + 1
    flows = [10 + base, 11 + base, 12 + base]
    ports = {flows[0]: along(rx, up, base + 2), flows[1]: along(rx, up, base + 3), flows[2]: along(rx, base + 4)}
    return flows, ConflictGraph(flows, ports, dict(zip(flows, labels)))


def test_conflict_graph_weights_are_shared_link_counts():
    _, cg = incast(0)
    assert cg.edges == {(0, 1): (2, 2, 0), (0, 2): (1, 1, 0), (1, 2): (1, 1, 0)}   # (w, c, x)


def test_flows_crossing_in_opposite_directions_do_not_match_competing_flows():
    # Two flows over the same link: the same way they compete for it; opposite ways each one's
    # data only meets the other's ACKs. Same links, same labels, another record.
    same = ConflictGraph([1, 2], {1: along(7), 2: along(7)}, {1: "0|a", 2: "0|a"})
    opposite = ConflictGraph([1, 2], {1: along(7), 2: along(7, reverse=True)}, {1: "0|a", 2: "0|a"})
    assert same.edges == {(0, 1): (1, 1, 0)} and opposite.edges == {(0, 1): (1, 0, 2)}
    assert same.key != opposite.key
    memo = Memo(None, "fp", "test", warn=print)
    memo.record(same, 1, {1: 1, 2: 1}, {1: 1.0, 2: 1.0}, {})
    assert memo.lookup(opposite) == []


def test_isomorphic_partition_elsewhere_hits_with_the_right_mapping(tmp_path):
    memo = Memo(MemoStore(tmp_path / "m.whdb"), "fp", "test", warn=print)
    flows, cg = incast(0)
    memo.record(cg, 70_000, dict(zip(flows, (100, 200, 300))), dict(zip(flows, (1.0, 2.0, 3.0))),
                {flows[0]: {"cwnd": 5.0}})
    memo.flush()
    # The same incast on other ports, its flows listed in another order: the key matches and
    # each flow gets the bytes of the stored flow with its label.
    other_flows, other = incast(100, labels=("5|a", "3|b", "0|c"))
    assert other.key == cg.key
    [hit] = Memo(MemoStore(tmp_path / "m.whdb"), "fp", "test", warn=print).lookup(other)
    assert hit.transient_ns == 70_000
    assert [hit.bytes[f] for f in other_flows] == [100, 200, 300]
    assert hit.rates[other_flows[2]] == 3.0 and hit.states[other_flows[0]] == {"cwnd": 5.0}


def test_flows_alike_in_label_are_mapped_by_their_place_in_the_graph():
    """Three flows with one label: the middle one shares two links with one neighbour and one
    with the other. Listed in another order on other links, each gets the stored flow in its place."""
    def chain(base, order):
        ports = {"left": along(base, base + 1, base + 2), "middle": along(base, base + 1, base + 3),
                 "right": along(base + 3, base + 4)}
        flows = dict(zip(order, range(base, base + 3)))
        return flows, ConflictGraph(list(flows.values()), {flows[k]: ports[k] for k in ports},
                                    dict.fromkeys(flows.values(), "0|a"))
    memo = Memo(None, "fp", "test", warn=print)
    flows, cg = chain(0, ("left", "middle", "right"))
    memo.record(cg, 1, {flows["left"]: 100, flows["middle"]: 200, flows["right"]: 300},
                dict.fromkeys(flows.values(), 1.0), {})
    other, other_cg = chain(50, ("right", "left", "middle"))
    [hit] = memo.lookup(other_cg)
    assert {k: hit.bytes[f] for k, f in other.items()} == {"left": 100, "middle": 200, "right": 300}


def test_which_flow_a_released_flow_waits_for_is_part_of_the_graph(tmp_path):
    """Two incast flows alike, and a reply released by one of them, on the ports of both: the
    release tells the two apart. A record of it, read back from the store, maps the flow a reply
    waits for onto the stored one that released the reply, whichever it is; the same flows
    without the release are another graph."""
    def replied(base, order, waits_for):
        rx, up = base, base + 1
        ports = {"first": along(rx, up, base + 2), "second": along(rx, up, base + 3),
                 "reply": along(rx, up, reverse=True)}
        flows = dict(zip(order, range(base, base + 3)))
        labels = {flows["first"]: "E3|a", flows["second"]: "E3|a", flows["reply"]: "R/N9|b"}
        waits = {flows["reply"]: frozenset({flows[waits_for]})} if waits_for else None
        return flows, ConflictGraph(list(flows.values()), {flows[k]: ports[k] for k in ports}, labels, waits)
    flows, cg = replied(0, ("first", "second", "reply"), "first")
    plain = replied(0, ("first", "second", "reply"), None)[1]
    assert cg.edges[0, 2] == plain.edges[0, 2] + (1,) and cg.edges[1, 2] == plain.edges[1, 2]
    memo = Memo(MemoStore(tmp_path / "m.whdb"), "fp", "test", warn=print)
    memo.record(cg, 1, {flows["first"]: 100, flows["second"]: 200, flows["reply"]: 300},
                dict.fromkeys(flows.values(), 1.0), {})
    memo.flush()
    stored = Memo(MemoStore(tmp_path / "m.whdb"), "fp", "test", warn=print)
    other, other_cg = replied(50, ("reply", "second", "first"), "second")
    [hit] = stored.lookup(other_cg)
    assert {k: hit.bytes[f] for k, f in other.items()} == {"second": 100, "first": 200, "reply": 300}
    assert stored.lookup(plain) == [] and plain.key != cg.key


@pytest.mark.parametrize("labels", [("5|a", "3|b", "1|c"),       # another start rate
                                    ("5|a", "3|b", "0|d")])      # another path (rate or delay)
def test_other_labels_miss(tmp_path, labels):
    memo = Memo(None, "fp", "test", warn=print)
    flows, cg = incast(0)
    memo.record(cg, 1, dict.fromkeys(flows, 1), dict.fromkeys(flows, 1.0), {})
    assert memo.lookup(incast(100, labels)[1]) == []
    assert (memo.stats.hits, memo.stats.misses) == (0, 1)


def test_records_reach_the_store_in_batches(tmp_path, monkeypatch):
    """A run keeps its new records in memory and appends them under one fsync at its end, or
    once they have waited FLUSH_EVERY_S: another process sees them only then."""
    store = MemoStore(tmp_path / "m.whdb")
    memo = Memo(store, "fp", "t", warn=print)
    for shift in (0, 100):
        flows, cg = incast(shift, labels=(f"{shift}|a", "3|b", "0|c"))
        memo.record(cg, 1, dict.fromkeys(flows, 1), dict.fromkeys(flows, 1.0), {})
    assert memo.stats.records_written == 2 and len(store.load().records) == 0
    assert len(memo.lookup(cg)) == 1                      # its own records: at once
    memo.flush()
    assert len(store.load().records) == 2
    monkeypatch.setattr(memo_module, "FLUSH_EVERY_S", 0.0)
    flows, cg = incast(0, labels=("7|a", "3|b", "0|c"))
    memo.record(cg, 1, dict.fromkeys(flows, 1), dict.fromkeys(flows, 1.0), {})
    assert len(store.load().records) == 3


def test_another_fingerprint_is_never_loaded(tmp_path):
    store = MemoStore(tmp_path / "m.whdb")
    flows, cg = incast(0)
    memo = Memo(store, fingerprint({"ecn_kmin": 20}), "t", warn=print)
    memo.record(cg, 1, dict.fromkeys(flows, 1), dict.fromkeys(flows, 1.0), {})
    memo.flush()
    other = Memo(store, fingerprint({"ecn_kmin": 30}), "t", warn=print)
    assert other.stats.records_loaded == 0 and other.lookup(cg) == []
    assert len(Memo(store, fingerprint({"ecn_kmin": 20}), "t", warn=print).lookup(cg)) == 1


def test_episode_label_steps_namespace_records_but_the_episode_bound_does_not(tmp_path):
    """A record made with other label steps never applies (E8 in 64 KiB steps is not E8 in 4 KiB
    steps); steps at their defaults leave the fingerprint as it was before they were settings. The
    bound on episode flows, like `episodes`, changes which partitions are recorded, not what a
    record means."""
    scenario = load_scenario(REPO / "scenarios" / "tiny-memo-rdma.yaml")

    def key(**accel) -> str:
        return open_memo(with_accel_overrides(scenario, accel), tmp_path / "m.whdb").fingerprint

    assert key() == key(episode_bytes_step=4096, episode_age_step=10_000) == key(episode_bytes=2**20)
    assert len({key(), key(episode_bytes_step=65_536), key(episode_age_step=100_000)}) == 3


# -- end to end on ns-3 ------------------------------------------------------------------------

def variant(tmp_path: Path, name: str, **changes) -> Path:
    data = yaml.safe_load(TINY_MEMO.read_text())
    data["name"] = name
    for key, value in changes.items():
        section, field = key.split("__")
        data[section][field] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """tiny-memo stock, steady-only, cold memo and warm memo (same store)."""
    tmp = tmp_path_factory.mktemp("memo")
    cache = tmp / "memo.whdb"
    return {"stock": api.run(TINY_MEMO, tmp / "stock"),
            "steady": api.run(TINY_MEMO, tmp / "steady", accel=True, memo=False, cache=cache),
            "cold": api.run(TINY_MEMO, tmp / "cold", accel=True, cache=cache),
            "warm": api.run(TINY_MEMO, tmp / "warm", accel=True, cache=cache),
            "cache": cache, "tmp": tmp}


def incast_times(flows: pd.DataFrame) -> list[int]:
    """How long each incast takes (its start to its last flow's end)."""
    return [int(flows.end_ns[flows.start_ns == start].max()) - start for start in sorted(set(flows.start_ns))]


def test_cold_run_records_once_and_reuses_on_other_racks(runs):
    memo = runs["cold"].summary["accel"]["memo"]
    assert memo["records_written"] == 1 and memo["hits"] == 2 and memo["not_applied"] == 0
    assert runs["steady"].summary["accel"]["memo"] is None
    assert runs["cold"].summary["events"] < 0.6 * runs["steady"].summary["events"]
    timeline = pd.read_csv(runs["tmp"] / "cold" / "partitions.csv")
    assert (timeline["mode"] == "memo").sum() == 2


def test_warm_run_reuses_the_stored_record_everywhere(runs):
    memo = runs["warm"].summary["accel"]["memo"]
    assert memo["records_loaded"] == 1 and memo["records_written"] == 0 and memo["hits"] == 3
    assert runs["warm"].summary["events"] < 0.5 * runs["cold"].summary["events"]
    assert runs["warm"].summary["flows_finished"] == 6


def test_memo_keeps_incast_completion_times(runs):
    """Each incast ends within 1 % of stock (the steady-only run's own error is of the same order)."""
    stock = incast_times(runs["stock"].flows)
    for name in ("steady", "cold", "warm"):
        for s, a in zip(stock, incast_times(runs[name].flows), strict=True):
            assert abs(a - s) / s < 0.01, (name, stock, incast_times(runs[name].flows))


def test_same_store_state_gives_identical_results(runs, tmp_path):
    copy = tmp_path / "copy.whdb"
    copy.write_bytes(runs["cache"].read_bytes())
    again = api.run(TINY_MEMO, tmp_path / "again", accel=True, cache=copy)
    assert (again.out_dir / "flows.csv").read_bytes() == (runs["tmp"] / "warm" / "flows.csv").read_bytes()


def test_changed_link_delay_misses_and_changed_ecn_is_another_namespace(runs, tmp_path):
    copy = tmp_path / "copy.whdb"
    copy.write_bytes(runs["cache"].read_bytes())
    delay = api.run(variant(tmp_path, "delay", topology__host_link={"rate": "100Gbps", "delay": "2us"}),
                    tmp_path / "delay", accel=True, cache=copy).summary["accel"]["memo"]
    assert delay["records_loaded"] == 1 and delay["records_written"] == 1 and delay["hits"] == 2
    ecn = api.run(variant(tmp_path, "ecn", transport__ecn_kmin=40, transport__ecn_kmax=40),
                  tmp_path / "ecn", accel=True, cache=copy).summary["accel"]["memo"]
    assert ecn["records_loaded"] == 0 and ecn["records_written"] == 1


def test_damaged_store_warns_and_keeps_the_good_records(runs, tmp_path, capfd):
    damaged = tmp_path / "damaged.whdb"
    data = bytearray(runs["cache"].read_bytes())
    store = MemoStore(damaged)
    damaged.write_bytes(bytes(data))
    store.append(store.load().records[0])           # a second copy of the record, then damage the first
    data = bytearray(damaged.read_bytes())
    data[40] ^= 0xFF
    damaged.write_bytes(bytes(data))
    memo = api.run(TINY_MEMO, tmp_path / "run", accel=True, cache=damaged).summary["accel"]["memo"]
    assert memo["records_loaded"] == 1 and memo["hits"] == 3 and len(memo["warnings"]) == 1
    assert str(damaged) in memo["warnings"][0]
    assert capfd.readouterr().err == (f"wormhole: warning: {TCP_ACCEL_WARNING}\n"   # (a TCP scenario)
                                      f"wormhole: warning: {memo['warnings'][0]}\n")   # the user sees it too
    assert main(["cache", "verify", "--cache", str(damaged)]) == 1


def test_a_file_that_is_not_a_store_is_a_one_line_error_and_is_left_alone(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("my notes\n")
    with pytest.raises(CacheFileError, match="notes.txt"):
        api.run(TINY_MEMO, tmp_path / "run", accel=True, cache=bad)
    assert main(["run", str(TINY_MEMO), "--out", str(tmp_path / "cli"), "--accel", "--cache", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "notes.txt" in err and "Traceback" not in err
    assert bad.read_text() == "my notes\n" and not (tmp_path / "cli").exists()


def test_cache_commands(runs, tmp_path, capsys):
    store = tmp_path / "s.whdb"
    store.write_bytes(runs["cache"].read_bytes())
    assert main(["cache", "stats", "--cache", str(store)]) == 0
    out = capsys.readouterr().out
    assert "1 records" in out and "1 steady" in out
    assert main(["cache", "verify", "--cache", str(store)]) == 0
    assert main(["cache", "export", str(tmp_path / "e.whdb"), "--cache", str(store)]) == 0
    assert main(["cache", "import", str(tmp_path / "e.whdb"), "--cache", str(tmp_path / "i.whdb")]) == 0
    assert len(MemoStore(tmp_path / "i.whdb").load().records) == 1
    # --cache before the FILE, or before the action, names the same store
    assert main(["cache", "export", "--cache", str(store), str(tmp_path / "e2.whdb")]) == 0
    assert main(["cache", "--cache", str(tmp_path / "i2.whdb"), "import", str(tmp_path / "e2.whdb")]) == 0
    assert len(MemoStore(tmp_path / "i2.whdb").load().records) == 1
    assert main(["cache", "clear", "--cache", str(store)]) == 0 and not store.exists()
    assert main(["cache", "export", "--cache", str(store)]) == 2


def test_summary_reports_memo_counters(runs):
    summary = json.loads((runs["tmp"] / "cold" / "summary.json").read_text())
    memo = summary["accel"]["memo"]
    assert summary["mode"] == "accel" and memo["lookups"] == memo["hits"] + memo["misses"]
    assert memo["lookup_wall_s"] >= 0 and memo["cache"].endswith("memo.whdb")


# -- on RDMA: steady and truncated records, hits on time -----------------------------------------

TINY_MEMO_RDMA = REPO / "scenarios" / "tiny-memo-rdma.yaml"


# The short flows then leave truncated records: not episodes, nor frozen at their NICs' fair shares
# as they form (fair_start).
TRUNCATED_RECORDS = {"episodes": False, "fair_start": False}


@pytest.fixture(scope="module")
def rdma_runs(tmp_path_factory):
    """tiny-memo-rdma stock and with memo on an empty store, without episodes."""
    tmp = tmp_path_factory.mktemp("memo-rdma")
    cache = tmp / "memo.whdb"
    return {"stock": api.run(TINY_MEMO_RDMA, tmp / "stock"),
            "cold": api.run(TINY_MEMO_RDMA, tmp / "cold", accel=True, cache=cache, accel_overrides=TRUNCATED_RECORDS),
            "cache": cache}


def test_flows_too_short_to_turn_steady_leave_a_truncated_record_that_others_reuse(rdma_runs):
    memo = rdma_runs["cold"].summary["accel"]["memo"]
    # The first short incast matches the long incasts' steady record, too long for it (not applied);
    # so do the short flows' last 80 KB after their truncated hits thaw (DCQCN looks up every
    # partition whose flows have more than the margin left), and the first one's, unrecorded, misses.
    assert (memo["records_written"], memo["hits"], memo["misses"], memo["not_applied"]) == (3, 8, 3, 3)
    assert (memo["records_truncated"], memo["applied_truncated"]) == (2, 3)
    records = MemoStore(rdma_runs["cache"]).load().records
    assert sorted(r.truncated for r in records) == [False, True, True]
    # The short incast's flows share a link: at line rate the first could near its end after
    # (400 - 64) KB / 12.5 GB/s = 27 us; slower, the record is planned again and taken later.
    short_incast = next(r for r in records if r.truncated and len(r.flows) == 2)
    assert short_incast.transient_ns > 35_000
    flows = rdma_runs["cold"].flows
    short = flows[flows.size_bytes < 1_000_000]
    # The first of each kind is simulated and recorded; the others skip most of their bytes.
    assert list(short.bytes_skipped > 0) == [False, True, True, False, False, True, True]
    skipping = short[short.bytes_skipped > 0]
    assert (skipping.bytes_skipped > 0.5 * skipping.size_bytes).all()


def test_rdma_memo_hits_end_flows_on_time(rdma_runs):
    """Every flow within 0.2 % of stock. A hit restarts its flows with empty pipes and credits the
    bytes in flight; RDMA counts a byte delivered when its ACK is back, so the credit covers the
    ACK path too (without it the short flows were 10 % late, the incasts 0.4 %)."""
    stock, cold = rdma_runs["stock"].flows, rdma_runs["cold"].flows
    error = (cold.fct_ns - stock.fct_ns).abs() / stock.fct_ns
    assert error.max() < 0.002, error.tolist()


def test_a_flow_the_model_has_all_delivered_at_a_thaw_still_completes(tmp_path):
    """gpt-bench-hpcc, cold: at some thaws the model has a ring's last step delivered or on the
    wire entirely (a hit's flows are credited their bytes on the wire), so every byte of it is
    skipped and none is left for ns-3 to complete it. It completes at its computed end; before,
    3 flows never finished and the run went on to its stop time. (With the NICs' fair shares, as
    when it was found: at the links' its rings freeze as they form.)"""
    run = api.run(REPO / "scenarios" / "gpt-bench-hpcc.yaml", tmp_path / "cold", accel=True,
                  cache=tmp_path / "m.whdb", stop_time_ns=30_000_000, timeout_s=120,
                  accel_overrides={"fair_shares": "nics"})
    assert run.summary["stop_reason"] == "done"
    assert run.summary["flows_finished"] == run.summary["flows"]


def test_what_a_thaw_leaves_of_a_partition_is_looked_up(tmp_path):
    """HPCC: h1 -> h2 (4 MB) beside h2 -> h1 (16 MB), each one's ACKs crossing the other's data.
    The short flow ends inside the frozen partition, which thaws one sample later (HPCC climbs to
    the capacity those ACKs leave over round trips: the model does not know how). The long flow
    left is looked up, as a partition a simulated flow's end re-forms: the first pair records its
    transient, the same pair 3 ms later under another leaf replays it and freezes again at once.
    Before, it was simulated until its steady test passed."""
    data = yaml.safe_load(TINY_MEMO_RDMA.read_text())
    data["transport"]["cc"] = "hpcc"
    data["flows"] = [{"src": 1, "dst": 2, "size": "4MB", "start": "0us"},
                     {"src": 2, "dst": 1, "size": "16MB", "start": "0us"},
                     {"src": 5, "dst": 6, "size": "4MB", "start": "3ms"},
                     {"src": 6, "dst": 5, "size": "16MB", "start": "3ms"}]
    path = tmp_path / "pairs.yaml"
    path.write_text(yaml.safe_dump(data))
    stock = api.run(path, tmp_path / "stock")
    cold = api.run(path, tmp_path / "cold", accel=True, cache=tmp_path / "m.whdb",
                   accel_overrides={**TRUNCATED_RECORDS, "explain_events": True})
    accel = cold.summary["accel"]
    assert (accel["memo"]["lookups"], accel["memo"]["hits"], accel["memo"]["records_written"]) == (4, 2, 2)
    assert "simulated_after_thaw" not in accel["events_by"]
    assert cold.flows.set_index("flow_id").bytes_skipped[3] == 16_000_000
    error = (cold.flows.fct_ns - stock.flows.fct_ns).abs() / stock.flows.fct_ns
    assert error.max() < 0.003, error.tolist()


def test_what_a_thaw_at_a_flow_end_leaves_is_looked_up(tmp_path):
    """HPCC: three 2-to-1 incasts of 4 MB and 4.2 MB flows, 2 ms apart. Frozen steady, each thaws
    when its shorter flow nears its end beside the other's data (HPCC climbs to the capacity an
    end leaves over round trips: the model does not know how). Both flows then have less left than
    an episode holds: the tail is looked up as an episode. The second incast, frozen on the first's
    steady record, records its tail (the first's stood elsewhere on its clock); the third replays
    it, and every byte of its flows is skipped. Before, each tail was simulated until the shorter
    flow's end re-formed the partition."""
    data = yaml.safe_load(TINY_MEMO_RDMA.read_text())
    data["transport"]["cc"] = "hpcc"
    data["flows"] = [{"src": src, "dst": dst, "size": size, "start": f"{2 * k}ms"}
                     for k, (dst, srcs) in enumerate([(0, (1, 2)), (4, (5, 6)), (8, (9, 10))])
                     for src, size in zip(srcs, ("4MB", "4.2MB"))]
    path = tmp_path / "tails.yaml"
    path.write_text(yaml.safe_dump(data))
    stock = api.run(path, tmp_path / "stock")
    cold = api.run(path, tmp_path / "cold", accel=True, cache=tmp_path / "m.whdb",
                   accel_overrides={"explain_events": True})
    accel = cold.summary["accel"]
    assert accel["memo"]["applied_episode"] == 1
    assert "simulated_after_thaw" not in accel["events_by"], accel["events_by"]
    flows = cold.flows.set_index("flow_id")
    assert (flows.bytes_skipped[[4, 5]] == flows.size_bytes[[4, 5]]).all()
    # The replay ends its flows as the recorded tail ended; every incast is about 5 % late, the
    # HPCC incast frozen on a slowly decaying oscillation (README, Known limits), as before.
    assert (flows.fct_ns[[4, 5]].to_numpy() - flows.fct_ns[[2, 3]].to_numpy() == 0).all()
    error = (cold.flows.fct_ns - stock.flows.fct_ns).abs() / stock.flows.fct_ns
    assert error.max() < 0.07, error.tolist()


def two_incasts(tmp_path, sizes: tuple[str, str], second_ns: int, replay_second_ns: int,
                accel_overrides: dict | None = None):
    """Stock and memo cold runs of two 2-to-1 incasts on tiny-memo-rdma (hosts 1, 2 -> 0 from 0,
    then 5, 6 -> 4 from 500 us, flows of `sizes`), the second flow of each starting `second_ns` and
    `replay_second_ns` after the first."""
    data = yaml.safe_load(TINY_MEMO_RDMA.read_text())
    data["flows"] = [{"src": 1, "dst": 0, "size": sizes[0], "start": "0us"},
                     {"src": 2, "dst": 0, "size": sizes[1], "start": f"{second_ns}ns"},
                     {"src": 5, "dst": 4, "size": sizes[0], "start": "500us"},
                     {"src": 6, "dst": 4, "size": sizes[1], "start": f"{500_000 + replay_second_ns}ns"}]
    path = tmp_path / "incasts.yaml"
    path.write_text(yaml.safe_dump(data))
    return (api.run(path, tmp_path / "stock"),
            api.run(path, tmp_path / "cold", accel=True, cache=tmp_path / "m.whdb", accel_overrides=accel_overrides))


def test_a_hit_credits_the_bytes_its_flows_have_in_flight_once(tmp_path):
    """Two 2-to-1 incasts of 2 MB flows, the second flow 3 us after the first: when the partition
    forms, the first flow has bytes in flight, in the recorded run and in the replay. The replay
    freezes them where they are and they arrive after the thaw, so the record counts its bytes
    from those sent, not those delivered (which made the replayed flows 6.0 and 3.0 us early)."""
    stock, cold = two_incasts(tmp_path, ("2MB", "2MB"), 3_000, 3_000)
    memo = cold.summary["accel"]["memo"]
    # The transient hits; the last flow's end is simulated (every byte of it is on the wire by then:
    # no episode).
    assert (memo["hits"], memo["applied_episode"]) == (1, 0)
    assert (cold.flows.bytes_skipped[2:] > 0.9 * cold.flows.size_bytes[2:]).all()
    late = cold.flows.end_ns - stock.flows.end_ns
    assert late.abs().max() < 200, late.tolist()


def test_an_episode_whose_flows_have_delivered_a_little_more_replays_them_by_their_bytes(tmp_path):
    """The second flow joins 6.0 us after the first in the recorded incast and 6.1 us in the
    replay, when the first has delivered some 1.2 KB more: the replay still hits (episode labels
    give bytes left in steps) and places the first flow where the recorded one had its bytes left.
    Both end within the 100 ns offset of stock (the second keeps its recorded FCT from its own
    start; in stock the shared link ends both at the same time as before). With exact bytes left
    in the label it was simulated."""
    stock, cold = two_incasts(tmp_path, ("100KB", "200KB"), 6_000, 6_100)
    assert cold.summary["accel"]["memo"]["applied_episode"] == 1
    assert (cold.flows.bytes_skipped[2:] > 0).all()
    late = cold.flows.end_ns - stock.flows.end_ns
    assert late.abs().max() <= 100, late.tolist()


@pytest.mark.parametrize("steps, replays", [({}, 0), ({"episode_bytes_step": "64KiB"}, 1)])
def test_coarser_episode_labels_replay_an_incast_whose_flows_joined_apart(tmp_path, steps, replays):
    """The recorded incast's flows start together; the second incast's second flow 8 us after its
    first, which has delivered a few KB by then: in 4 KiB steps its bytes left tell it apart from
    the recorded one (simulated, as in stock), in 64 KiB steps they do not. The replayed flows
    complete as the recorded ones did from where each stands on the recorded clock; the pattern
    differed (the first had the link to itself for 8 us), so stock ends them 7-8 us earlier: the
    price of coarser labels."""
    stock, cold = two_incasts(tmp_path, ("200KB", "200KB"), 0, 8_000, accel_overrides=steps)
    assert cold.summary["accel"]["memo"]["applied_episode"] == replays
    fct = cold.flows.fct_ns
    error = (fct - stock.flows.fct_ns).abs() / stock.flows.fct_ns
    if replays:
        assert (cold.flows.bytes_skipped[2:] > 0).all()
        assert fct[3] == fct[1] and abs(fct[2] - fct[0]) < 1_000, fct.tolist()
        assert error[2:].between(0.2, 0.3).all(), error.tolist()
    else:
        assert error.max() < 0.01, error.tolist()


def test_a_replayed_flow_is_placed_on_its_recorded_clock_by_its_bytes_once_it_has_delivered_some():
    """The recorded flow had 50000 bytes left 100 ns into its clock and ended 25000 ns after: 2
    bytes per ns. A flow with 2000 bytes fewer left stands 1000 ns further; one that has delivered
    less than a label step, or whose recorded flow had nothing left, at its own lead. Never more
    than an age step from the recorded flow: flow 2's last 10 bytes took 7 us to be acknowledged,
    and by that rate a flow with 1000 bytes left would stand 693 us early."""
    hit = Transient(transient_ns=25_100, bytes={0: 50_000, 1: 0, 2: 10}, rates={}, states={},
                    ends={0: 25_100, 1: 5_000, 2: 7_100}, leads={0: 100, 1: 100, 2: 100})
    assert _clock_on_record(hit, 0, 98_304, 48_000, 300, 4096, 10_000) == 1_100
    assert _clock_on_record(hit, 0, 98_304, 50_000, 300, 4096, 10_000) == 300
    assert _clock_on_record(hit, 0, 50_000, 48_000, 300, 4096, 10_000) == 300
    assert _clock_on_record(hit, 1, 98_304, 1_500, 300, 4096, 10_000) == 300
    assert _clock_on_record(hit, 0, 98_304, 48_000, 300, 65_536, 10_000) == 300   # 50,304 bytes: under a step
    assert _clock_on_record(hit, 0, 98_304, 48_000, 300, 4096, 500) == 600   # 1000 ns on, bounded by a 500 ns step
    assert _clock_on_record(hit, 2, 524_288, 1_000, 300, 4096, 10_000) == 100 - 10_000


def skips_the_last_flows_within_2_percent(tmp_path, data: dict, last_start_ns: int) -> api.RunResult:
    """Run `data` (without episodes or fair starts) stock and on an empty store; the flows starting
    at `last_start_ns` skip more than 30 % of their bytes, and every flow is within 2 % of stock."""
    data["accel"] = TRUNCATED_RECORDS
    path = tmp_path / "flows.yaml"
    path.write_text(yaml.safe_dump(data))
    stock = api.run(path, tmp_path / "stock")
    cold = api.run(path, tmp_path / "cold", accel=True, cache=tmp_path / "memo.whdb")
    last = cold.flows[cold.flows.start_ns == last_start_ns]
    assert (last.bytes_skipped > 0.3 * last.size_bytes).all()
    error = (cold.flows.fct_ns - stock.flows.fct_ns).abs() / stock.flows.fct_ns
    assert error.max() < 0.02, error.tolist()
    return cold


def test_flows_too_short_for_a_truncated_record_apply_its_first_part(tmp_path):
    """A 250 KB 2-to-1 incast matches the 400 KB incasts' truncated record but cannot outlast it by
    the margin: it is frozen through the record's first part (its bytes spread evenly over it)
    until its flows near their end, then simulated. At line rate its flows would near their end
    within min_freeze (20 us); sharing a link, the record has them take 31 us to get there. (DCQCN:
    a partition is looked up whenever its flows have more than the margin left.)"""
    data = yaml.safe_load(TINY_MEMO_RDMA.read_text())
    data["flows"] += [{"src": 5, "dst": 4, "size": "250KB", "start": "3500us"},
                      {"src": 6, "dst": 4, "size": "250KB", "start": "3500us"}]
    cold = skips_the_last_flows_within_2_percent(tmp_path, data, 3_500_000)
    assert cold.summary["accel"]["memo"]["applied_partial"] == 1


def test_young_flows_sharing_a_nic_are_recorded_by_how_long_their_fair_shares_last(tmp_path):
    """A host sends 250 KB to two others, and later another host does the same. At line rate the
    first pair's flows would near their end within min_freeze ((250 - 64) KB / 12.5 GB/s = 15 us:
    too short to record, and the second pair was simulated whole); at their fair share of their
    NIC, half of it, they take 30 us: the first pair is recorded, the second skips through the
    record."""
    data = yaml.safe_load(TINY_MEMO_RDMA.read_text())
    data["flows"] = [{"src": 1, "dst": 0, "size": "250KB", "start": "0us"},
                     {"src": 1, "dst": 2, "size": "250KB", "start": "0us"},
                     {"src": 5, "dst": 4, "size": "250KB", "start": "500us"},
                     {"src": 5, "dst": 6, "size": "250KB", "start": "500us"}]
    memo = skips_the_last_flows_within_2_percent(tmp_path, data, 500_000).summary["accel"]["memo"]
    assert (memo["records_written"], memo["records_truncated"]) == (1, 1)
    assert memo["applied_truncated"] + memo["applied_partial"] == 1


def test_a_partition_holding_a_flow_near_its_end_is_simulated_without_a_lookup(tmp_path):
    """A 40 KB flow (less than the 64 KiB margin to send) starts beside a 4 MB one: their partition
    is simulated as "ending", not looked up, until the short flow completes; the long flow alone is
    then looked up once, and watched to record its transient."""
    data = yaml.safe_load(TINY_MEMO_RDMA.read_text())
    data["flows"] = [{"src": 1, "dst": 0, "size": "4MB", "start": "0us"},
                     {"src": 2, "dst": 0, "size": "40KB", "start": "0us"}]
    data["accel"] = {**TRUNCATED_RECORDS, "explain_events": True}
    path = tmp_path / "ending.yaml"
    path.write_text(yaml.safe_dump(data))
    run = api.run(path, tmp_path / "run", accel=True, cache=tmp_path / "memo.whdb")
    by = run.summary["accel"]["events_by"]
    assert by["simulated_ending"]["events"] > 0 and by["watched_transient"]["events"] > 0
    assert "simulated_too_short" not in by
    assert run.summary["accel"]["memo"]["lookups"] == 1


def test_a_graph_keeps_one_steady_and_one_truncated_record(tmp_path):
    flows, cg = incast(0)
    memo = Memo(MemoStore(tmp_path / "m.whdb"), "fp", "t", warn=print)
    for truncated, transient_ns in ((True, 30_000), (False, 70_000), (True, 40_000)):
        memo.record(cg, transient_ns, dict.fromkeys(flows, 1), dict.fromkeys(flows, 1.0), {}, truncated=truncated)
    assert (memo.stats.records_written, memo.stats.records_duplicate) == (2, 1)
    memo.flush()
    steady, truncated = Memo(MemoStore(tmp_path / "m.whdb"), "fp", "t", warn=print).lookup(incast(100)[1])
    assert (steady.truncated, steady.transient_ns) == (False, 70_000)
    assert (truncated.truncated, truncated.transient_ns) == (True, 30_000)


def test_rdma_runs_on_the_same_store_state_are_identical(rdma_runs, tmp_path):
    outputs = []
    for name in ("a", "b"):
        copy = tmp_path / f"{name}.whdb"
        copy.write_bytes(rdma_runs["cache"].read_bytes())
        run = api.run(TINY_MEMO_RDMA, tmp_path / name, accel=True, cache=copy, accel_overrides=TRUNCATED_RECORDS)
        assert run.summary["accel"]["memo"]["records_truncated"] == 0   # all loaded: nothing new to record
        outputs.append((tmp_path / name / "flows.csv").read_bytes())
    assert outputs[0] == outputs[1]


def test_tcp_makes_no_truncated_records(tmp_path):
    """The same short flows on TCP are not recorded truncated (their hits made TCP flows late)."""
    data = yaml.safe_load(TINY_MEMO_RDMA.read_text())
    data["name"], data["transport"] = "tiny-memo-tcp", {"persistent_connections": True}
    scenario = tmp_path / "tiny-memo-tcp.yaml"
    scenario.write_text(yaml.safe_dump(data))
    memo = api.run(scenario, tmp_path / "run", accel=True, cache=tmp_path / "m.whdb").summary["accel"]["memo"]
    assert memo["records_written"] >= 1
    assert (memo["records_truncated"], memo["applied_truncated"]) == (0, 0)


# -- episodes (RDMA): partitions of short flows kept until every flow completed ----------------

def test_an_episode_record_maps_each_flows_end(tmp_path):
    flows, cg = incast(0, labels=("E1|a", "E2|b", "E3|c"))
    memo = Memo(MemoStore(tmp_path / "m.whdb"), "fp", "t", warn=print)
    ends = dict(zip(flows, (30_000, 50_000, 40_000)))
    memo.record(cg, 50_000, dict.fromkeys(flows, 1), dict.fromkeys(flows, 1.0), {}, ends=ends)
    memo.record(cg, 60_000, dict.fromkeys(flows, 1), dict.fromkeys(flows, 1.0), {}, ends=ends)
    assert (memo.stats.records_episode, memo.stats.records_duplicate) == (1, 1)
    memo.flush()
    other, cg_other = incast(100, labels=("E1|a", "E2|b", "E3|c"))
    [hit] = Memo(MemoStore(tmp_path / "m.whdb"), "fp", "t", warn=print).lookup(cg_other)
    assert hit.ends == dict(zip(other, (30_000, 50_000, 40_000)))
    assert Memo(MemoStore(tmp_path / "m.whdb"), "fp", "t", warn=print).lookup(incast(100)[1]) == []


def test_an_intact_but_inconsistent_record_is_skipped_with_a_warning(tmp_path):
    """A record whose checksum holds but whose episode progress a writer got wrong is not loaded:
    a one-line warning names the store and the record; the good records load."""
    flows, cg = incast(0, labels=("E1|a", "E2|b", "E3|c"))
    store = MemoStore(tmp_path / "m.whdb")
    memo = Memo(store, "fp", "t", warn=print)
    memo.record(cg, 50_000, dict.fromkeys(flows, 1), dict.fromkeys(flows, 1.0), {},
                ends=dict(zip(flows, (30_000, 50_000, 40_000))))
    memo.flush()
    bad = MemoStore(tmp_path / "m.whdb").load().records[0]
    bad.flows[0].progress_ns.append(10_000)                  # a time without a size
    bad.transient_ns += 1                                    # (another record id)
    store.append(bad)
    warnings = []
    loaded = Memo(MemoStore(tmp_path / "m.whdb"), "fp", "t", warn=warnings.append)
    assert loaded.stats.records_loaded == 1
    assert len(warnings) == 1 and str(tmp_path / "m.whdb") in warnings[0]
    assert "flow 0 has 1 progress times but 0 sizes" in warnings[0]


def test_an_episode_record_whose_flow_clock_starts_past_its_end_is_skipped(tmp_path):
    flows, cg = incast(0, labels=("E1|a", "E2|b", "E3|c"))
    store = MemoStore(tmp_path / "m.whdb")
    memo = Memo(store, "fp", "t", warn=print)
    memo.record(cg, 50_000, dict.fromkeys(flows, 1), dict.fromkeys(flows, 1.0), {},
                ends=dict(zip(flows, (30_000, 50_000, 40_000))), leads=dict.fromkeys(flows, 500))
    memo.flush()
    bad = MemoStore(tmp_path / "m.whdb").load().records[0]
    bad.flows[1].lead_ns = bad.flows[1].end_ns + 1
    bad.transient_ns += 1                                    # (another record id)
    store.append(bad)
    warnings = []
    loaded = Memo(MemoStore(tmp_path / "m.whdb"), "fp", "t", warn=warnings.append)
    assert loaded.stats.records_loaded == 1
    assert len(warnings) == 1 and "flow 1's clock at the start is not within its episode" in warnings[0]


# Episodes are for flows too short to be frozen steady: with min_freeze 30 us, those with less
# than 64 KiB + 30 us at 100 Gbps (439 KB) left, so tiny-memo-rdma's 400 KB flows.
LONGER_FREEZES = {"min_freeze": "30us"}


@pytest.fixture(scope="module")
def episode_runs(tmp_path_factory):
    """tiny-memo-rdma stock, and with memo (episodes on) on an empty store, then warm."""
    tmp = tmp_path_factory.mktemp("memo-episodes")
    cache = tmp / "memo.whdb"
    return {"stock": api.run(TINY_MEMO_RDMA, tmp / "stock"),
            "cold": api.run(TINY_MEMO_RDMA, tmp / "cold", accel=True, cache=cache, accel_overrides=LONGER_FREEZES),
            "warm": api.run(TINY_MEMO_RDMA, tmp / "warm", accel=True, cache=cache, accel_overrides=LONGER_FREEZES)}


def test_short_flows_complete_at_their_episodes_recorded_times(episode_runs):
    """The first short flow and the first short incast are simulated and kept as episodes; their
    copies on other racks are not simulated at all, and end within 0.1 % of stock."""
    stock, cold, warm = (episode_runs[k] for k in ("stock", "cold", "warm"))
    memo = cold.summary["accel"]["memo"]
    assert memo["records_episode"] >= 2 and memo["applied_episode"] >= 3
    short = cold.flows.size_bytes < 1_000_000
    whole = cold.flows.bytes_skipped == cold.flows.size_bytes
    assert list(whole[short]) == [False, True, True, False, False, True, True]
    assert (warm.flows.bytes_skipped[short] == warm.flows.size_bytes[short]).all()
    assert warm.summary["accel"]["memo"]["records_episode"] == 0
    for run in (cold, warm):
        error = (run.flows.fct_ns - stock.flows.fct_ns).abs() / stock.flows.fct_ns
        assert error[short].max() < 0.001, error.tolist()
    assert warm.summary["events"] < cold.summary["events"] < stock.summary["events"]


def short_incasts(tmp_path, third: dict) -> Path:
    """A 100 KB + 200 KB incast on rack 0, then the same on rack 1 with a `third` flow."""
    data = yaml.safe_load(TINY_MEMO_RDMA.read_text())
    data["flows"] = [{"src": 1, "dst": 0, "size": "100KB", "start": "0us"},
                     {"src": 2, "dst": 0, "size": "200KB", "start": "0us"},
                     {"src": 5, "dst": 4, "size": "100KB", "start": "500us"},
                     {"src": 6, "dst": 4, "size": "200KB", "start": "500us"}, third]
    path = tmp_path / "incasts.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_each_replayed_flow_is_timed_from_its_own_start(tmp_path):
    """The second incast's flows start 600 ns apart, within one of the steps that episode labels
    give ages in; the replay starts when the second joins. Each replayed flow completes its
    recorded FCT after its own start: timed from the replay's start, the first one came out 1.17
    us late (in stock it ends 0.57 us earlier still: it had the link to itself for 600 ns)."""
    stock, cold = two_incasts(tmp_path, ("100KB", "200KB"), 0, 600)
    assert cold.summary["accel"]["memo"]["applied_episode"] == 1
    assert (cold.flows.bytes_skipped[2:] > 0).all()
    assert cold.flows.fct_ns[2:].tolist() == cold.flows.fct_ns[:2].tolist()
    late = cold.flows.end_ns - stock.flows.end_ns
    assert late[:2].tolist() == [0, 0] and late[2:].between(0, 600).all(), late.tolist()


def test_a_flow_on_a_completed_flows_ports_leaves_the_episode_frozen(tmp_path):
    """The 100 KB flow ends at 20.6 us; a flow from its sender starts at 25 us. The episode sheds
    the completed flow and stays frozen: the 200 KB flow still ends at its recorded time (in the
    recorded run the partition had split there). Every flow ends as in stock."""
    path = short_incasts(tmp_path, {"src": 5, "dst": 7, "size": "100KB", "start": "525us"})
    stock = api.run(path, tmp_path / "stock")
    cold = api.run(path, tmp_path / "cold", accel=True, cache=tmp_path / "m.whdb")
    accel = cold.summary["accel"]
    assert (accel["memo"]["applied_episode"], accel["episodes_interrupted"], accel["skip_backs"]) == (1, 0, 0)
    assert list(cold.flows.bytes_skipped == cold.flows.size_bytes) == [False, False, True, True, False]
    assert (cold.flows.fct_ns - stock.flows.fct_ns).abs().max() <= 10, (cold.flows.fct_ns - stock.flows.fct_ns).tolist()


def test_a_flow_on_a_running_flows_ports_thaws_the_episode(tmp_path):
    """A third flow joins the replayed incast 10 us in: the episode thaws (a skip-back), each flow
    is credited the bytes the record had it deliver by then plus those on the wire, and the rest
    is simulated. The record knows neither the flows' queue then nor their congestion state: the
    flows end within 15 % of stock (the 200 KB one within 0.2 %)."""
    path = short_incasts(tmp_path, {"src": 7, "dst": 4, "size": "100KB", "start": "510us"})
    stock = api.run(path, tmp_path / "stock")
    cold = api.run(path, tmp_path / "cold", accel=True, cache=tmp_path / "m.whdb")
    accel = cold.summary["accel"]
    assert (accel["memo"]["applied_episode"], accel["episodes_interrupted"], accel["skip_backs"]) == (1, 1, 1)
    replayed = cold.flows.iloc[2:4]
    assert ((replayed.bytes_skipped > 0) & (replayed.bytes_skipped < replayed.size_bytes)).all()
    error = (cold.flows.fct_ns - stock.flows.fct_ns).abs() / stock.flows.fct_ns
    assert error.max() < 0.15 and error[3] < 0.002, error.tolist()


def test_a_flow_thawing_an_episode_within_a_lag_of_a_flows_end_leaves_that_end_recorded(tmp_path):
    """The third flow starts 1 us before the 200 KB flow's recorded end (29 us), on its receiver's
    link: the completed 100 KB flow is shed, the episode thaws, and the 200 KB flow, whose last
    bytes are already on the wire in the record, completes at its recorded time instead of one
    lag after the thaw. Every flow ends as in stock."""
    path = short_incasts(tmp_path, {"src": 7, "dst": 4, "size": "100KB", "start": "528us"})
    stock = api.run(path, tmp_path / "stock")
    cold = api.run(path, tmp_path / "cold", accel=True, cache=tmp_path / "m.whdb")
    accel = cold.summary["accel"]
    assert (accel["memo"]["applied_episode"], accel["episodes_interrupted"], accel["ends_computed"]) == (1, 1, 2)
    assert (cold.flows.fct_ns - stock.flows.fct_ns).abs().max() <= 10, (cold.flows.fct_ns - stock.flows.fct_ns).tolist()


def joining_incasts(tmp_path, third: dict | None = None) -> Path:
    """A 200 KB 2-to-1 incast on rack 0 whose second flow starts 5 us after the first, the same on
    rack 1 from 500 us, and a `third` flow; flows of a host pair share a QP (so that flows
    released ahead are known to start on it)."""
    data = yaml.safe_load(TINY_MEMO_RDMA.read_text())
    data["transport"]["persistent_connections"] = True
    data["flows"] = [{"src": 1, "dst": 0, "size": "200KB", "start": "0us"},
                     {"src": 2, "dst": 0, "size": "200KB", "start": "5us"},
                     {"src": 5, "dst": 4, "size": "200KB", "start": "500us"},
                     {"src": 6, "dst": 4, "size": "200KB", "start": "505us"}, *([third] if third else [])]
    path = tmp_path / "incasts.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


JOINS = {"episode_join": "10us"}


def test_an_episode_holds_the_flows_known_to_join_it(tmp_path):
    """With episode_join 10 us, each incast is looked up when its first flow starts, with the
    second one, known to start 5 us later, in its graph. The first is recorded; the second
    replays from its start: its second flow starts inside the frozen episode (its QP held), and
    neither is simulated at all. Both end as in stock, to the ns. Without it, the second incast
    replays only from when its second flow joined: its first 5 us are simulated."""
    path = joining_incasts(tmp_path)
    stock = api.run(path, tmp_path / "stock")
    joined = api.run(path, tmp_path / "joined", accel=True, cache=tmp_path / "j.whdb", accel_overrides=JOINS)
    later = api.run(path, tmp_path / "later", accel=True, cache=tmp_path / "l.whdb")
    accel = joined.summary["accel"]
    assert (accel["memo"]["applied_episode"], accel["episode_joins"], accel["skip_backs"]) == (1, 1, 0)
    assert accel["tagging_errors"] == 0
    assert list(joined.flows.bytes_skipped == joined.flows.size_bytes) == [False, False, True, True]
    assert (joined.flows.end_ns - stock.flows.end_ns).abs().max() <= 10, (joined.flows.end_ns - stock.flows.end_ns).tolist()
    assert later.summary["accel"]["memo"]["applied_episode"] == 1
    assert later.summary["accel"]["episode_joins"] == 0
    assert later.flows.bytes_skipped[2] < joined.flows.bytes_skipped[2]
    assert joined.summary["events"] < later.summary["events"]


def test_a_flow_nobody_expected_thaws_an_episode_with_a_joined_flow(tmp_path):
    """A third flow on the replayed incast's receiver link 12 us after its first flow started
    (after the expected one joined; further on than episode_join, so not known when the incast
    was looked up): the episode thaws, and the joined flow's held QP is kicked into sending what
    the record had not delivered yet. Every flow completes, within 15 % of stock."""
    path = joining_incasts(tmp_path, {"src": 7, "dst": 4, "size": "100KB", "start": "512us"})
    stock = api.run(path, tmp_path / "stock")
    cold = api.run(path, tmp_path / "cold", accel=True, cache=tmp_path / "m.whdb", accel_overrides=JOINS)
    accel = cold.summary["accel"]
    assert cold.summary["flows_finished"] == cold.summary["flows"] == 5
    assert (accel["memo"]["applied_episode"], accel["episode_joins"], accel["episodes_interrupted"]) == (1, 1, 1)
    assert accel["tagging_errors"] == 0
    replayed = cold.flows.iloc[2:4]
    assert ((replayed.bytes_skipped > 0) & (replayed.bytes_skipped < replayed.size_bytes)).all()
    error = (cold.flows.fct_ns - stock.flows.fct_ns).abs() / stock.flows.fct_ns
    assert error.max() < 0.15, error.tolist()


def chained_incasts(tmp_path) -> Path:
    """A 2-to-1 incast on rack 0 (100 KB and 200 KB), and the receiver's 100 KB reply to the
    first sender once its flow has arrived, while the other still runs (the reply's data leaves
    by the port its ACKs do); the same on rack 1 from 500 us. Flows of a host pair share a QP."""
    data = yaml.safe_load(TINY_MEMO_RDMA.read_text())
    data["transport"]["persistent_connections"] = True
    data["flows"] = [{"src": 1, "dst": 0, "size": "100KB", "start": "0us"},
                     {"src": 2, "dst": 0, "size": "200KB", "start": "0us"},
                     {"src": 0, "dst": 1, "size": "100KB", "after": [0]},
                     {"src": 5, "dst": 4, "size": "100KB", "start": "500us"},
                     {"src": 6, "dst": 4, "size": "200KB", "start": "500us"},
                     {"src": 4, "dst": 5, "size": "100KB", "after": [3]}]
    path = tmp_path / "chained.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_an_episode_holds_the_flows_its_own_completions_start(tmp_path):
    """With episode_chains, the reply is in the incast's episode, joined to the flow it waits
    for: the first incast is recorded with it, and the second replays whole. Its reply starts
    inside the frozen episode when the flow it waits for completes there (its QP held) and
    completes at its recorded time from its own start; nothing of the second incast is
    simulated. Every flow ends as in stock, within 10 ns. Without it, the first reply starting
    ends the watch of the first incast, which is never recorded: the second is simulated."""
    path = chained_incasts(tmp_path)
    stock = api.run(path, tmp_path / "stock")
    chained = api.run(path, tmp_path / "chained", accel=True, cache=tmp_path / "c.whdb",
                      accel_overrides={"episode_chains": True})
    plain = api.run(path, tmp_path / "plain", accel=True, cache=tmp_path / "p.whdb")
    accel = chained.summary["accel"]
    assert (accel["memo"]["applied_episode"], accel["episode_joins"], accel["skip_backs"]) == (1, 1, 0)
    assert accel["tagging_errors"] == 0
    rack_1 = chained.flows.src >= 4
    assert ((chained.flows.bytes_skipped == chained.flows.size_bytes) == rack_1).all()
    assert (chained.flows.end_ns - stock.flows.end_ns).abs().max() <= 10, \
        (chained.flows.end_ns - stock.flows.end_ns).tolist()
    replies = plain.flows.src.isin([0, 4])
    assert (plain.flows.bytes_skipped[~replies] == 0).all()
    assert chained.summary["events"] < plain.summary["events"]
    # summary.json says why: the plain run gave up both incasts' watches at their replies (and
    # watched and kept the partition the first reply formed, which the second reply replays).
    watches = plain.summary["accel"]["episode_watches"]
    assert (watches["watched"], watches["completed"], watches["given_up"]["flow_start"]) == (3, 1, 2), watches
    watches = chained.summary["accel"]["episode_watches"]
    assert (watches["watched"], watches["completed"], sum(watches["given_up"].values())) == (1, 1, 0), watches


def test_episodes_are_turned_off_on_the_command_line(tmp_path):
    path = short_incasts(tmp_path, {"src": 5, "dst": 7, "size": "100KB", "start": "525us"})
    for flag, episodes in (("--episodes", 1), ("--no-episodes", 0)):
        out = tmp_path / flag
        assert main(["run", str(path), "--out", str(out), "--accel", "--cache", str(tmp_path / f"{flag}.whdb"),
                     flag]) == 0
        memo = json.loads((out / "summary.json").read_text())["accel"]["memo"]
        assert (memo["applied_episode"], memo["records_episode"] > 0) == (episodes, bool(episodes))


def test_explained_events_add_up_and_show_what_the_memo_missed(tmp_path):
    """--explain-events counts every event by what the engine did with its partition, and changes
    nothing in the run: cold, events go to the transients the memo records; warm, none do."""

    cache = tmp_path / "memo.whdb"
    explain = {**TRUNCATED_RECORDS, "explain_events": True}
    plain = api.run(TINY_MEMO_RDMA, tmp_path / "plain", accel=True, cache=tmp_path / "other.whdb",
                    accel_overrides=TRUNCATED_RECORDS)
    cold = api.run(TINY_MEMO_RDMA, tmp_path / "cold", accel=True, cache=cache, accel_overrides=explain)
    warm = api.run(TINY_MEMO_RDMA, tmp_path / "warm", accel=True, cache=cache, accel_overrides=explain)
    assert "events_by" not in plain.summary["accel"]
    assert cold.flows.equals(plain.flows) and cold.summary["events"] == plain.summary["events"]
    for run in (cold, warm):
        by = run.summary["accel"]["events_by"]
        assert sum(m["events"] for m in by.values()) == run.summary["accel"]["events_executed"]
        assert all(sum(m["by_collectives"].values()) == m["events"] for m in by.values())
        assert set(by) <= set(MODES)
    assert cold.summary["accel"]["events_by"]["watched_transient"]["events"] > 0
    # Warm, every partition froze on a hit as it formed: what is simulated came after its thaw,
    # looked up again there and too close to its flows' ends for another record.
    warm_by = warm.summary["accel"]["events_by"]
    assert "watched_transient" not in warm_by and "simulated_formed" not in warm_by
    near_ends = sum(warm_by.get(m, {"events": 0})["events"] for m in ("simulated_ending", "simulated_too_short"))
    assert near_ends > 0.5 * warm.summary["accel"]["events_executed"]
