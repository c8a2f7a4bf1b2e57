"""AICB/SimAI workload import: parsing, hand-computed traffic, and errors naming file and line."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from bridge.errors import ScenarioError
from bridge.workload.aicb import import_aicb, parse_aicb
from bridge.workload.dag import ComputeTask

EXAMPLE = Path(__file__).parent.parent / "scenarios" / "aicb-example.txt"
HEADER = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {tp} ep: {ep} pp: {pp} vpp: 1 "
          "ga: 1 all_gpus: {gpus} checkpoints: 0 checkpoint_initiates: 0 pp_comm: {pp_comm}")


def write(tmp_path, rows, tp=1, ep=1, pp=1, gpus=4, pp_comm=0, count=None):
    path = tmp_path / "wl.txt"
    lines = [HEADER.format(tp=tp, ep=ep, pp=pp, gpus=gpus, pp_comm=pp_comm),
             str(len(rows) if count is None else count), *rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def by_collective(workload, iteration=0):
    count, volume = Counter(), Counter()
    for f in workload.flows:
        if f.iteration == iteration:
            count[f.collective] += 1
            volume[f.collective] += f.size
    return count, volume


def test_parse_example_header_and_rows():
    wl = parse_aicb(EXAMPLE)
    assert (wl.tp, wl.ep, wl.pp, wl.all_gpus, wl.dp) == (4, 2, 1, 16, 4)
    assert len(wl.layers) == 8
    moe = wl.layers[4]
    assert moe.name == "mlp_moelayer" and moe.line == 9
    assert (moe.fwd.op, moe.fwd.group, moe.fwd.size) == ("alltoall", "ep", 524288)
    assert (moe.wg.op, moe.wg.group, moe.wg.size) == ("allreduce", "dp_ep", 1048576)
    assert (wl.layers[2].fwd.group, wl.layers[7].wg.group) == ("tp", "dp")


def test_example_traffic_matches_hand_count():
    # 16 GPUs on 4 servers x 4: TP4 inside a server, DP4 across servers, EP2 = DP rank pairs.
    w = import_aicb(EXAMPLE, list(range(16)), 4)
    count, volume = by_collective(w)
    # 4 DP rings (one per tp rank) of N=4: all-gather 1 MiB = 3 steps x 4 ranks x 256 KiB.
    assert count["dp_allgather"] == 4 * 4 * 3 and volume["dp_allgather"] == 4 * 12 * 2**18
    assert count["dp_reducescatter"] == 4 * 4 * 3 and volume["dp_reducescatter"] == 4 * 12 * 2**19
    # all-reduce 512 KiB: 2(N-1)=6 steps x 4 ranks x 128 KiB.
    assert count["dp_allreduce"] == 4 * 4 * 6 and volume["dp_allreduce"] == 4 * 24 * 2**17
    # EP all-to-all 512 KiB among 2 ranks: 256 KiB to the other one; 8 groups, fwd + ig, 2 layers.
    assert count["ep_alltoall"] == 8 * 2 * 2 * 2
    assert {f.size for f in w.flows if f.collective == "ep_alltoall"} == {2**18}
    # DP_EP all-reduce 1 MiB among 2 ranks: 2 steps x 2 ranks x 512 KiB; 8 groups, 2 layers.
    assert volume["dp_ep_allreduce"] == 8 * 2 * 2 * 2**19 * 2
    assert all(f.src // 4 != f.dst // 4 for f in w.flows)     # TP comms never hit the network


def test_groups_follow_simai():
    w = import_aicb(EXAMPLE, list(range(16)), 4)
    # placement: (dp j, tp t) -> host 4j + t; EP groups {j=0,1} and {j=2,3} per tp rank,
    # DP_EP groups {j=0,2} and {j=1,3}.
    ep = {(f.src, f.dst) for f in w.flows if f.collective == "ep_alltoall"}
    assert (0, 4) in ep and (8, 12) in ep and (0, 8) not in ep
    dp_ep = {(f.src, f.dst) for f in w.flows if f.collective == "dp_ep_allreduce"}
    assert (1, 9) in dp_ep and (5, 13) in dp_ep and (1, 5) not in dp_ep


def test_blocking_comm_gates_next_compute_and_wg_comm_does_not(tmp_path):
    rows = ["a -1 100 ALLTOALL_EP 4000 100 NONE 0 100 ALLREDUCE 8000 1",
            "b -1 100 NONE 0 100 NONE 0 100 NONE 0 1"]
    w = import_aicb(write(tmp_path, rows, ep=2, gpus=2), [0, 1], None, iterations=2)
    tasks = w.tasks
    fwd_b = [t for t in tasks if isinstance(t, ComputeTask) and t.label == "fwd/b/pp0"
             and t.iteration == 0]
    a2a = [f for f in w.flows if f.collective == "ep_alltoall" and f.iteration == 0
           and f.group.endswith("row0") and f.id < fwd_b[0].id]
    assert {f.size for f in a2a} == {2000}
    for t in fwd_b:
        assert any(f.id in t.deps for f in a2a if f.dst == t.host)
    # Row a's weight-grad all-reduce (2 ranks: 2 steps of 4000 B) is issued last and does not
    # block; next iteration's forward of row a waits for it.
    ring = [f for f in w.flows if f.collective == "dp_allreduce" and f.iteration == 0]
    assert len(ring) == 4 and {f.size for f in ring} == {4000}
    fwd_a_next = [t for t in tasks if isinstance(t, ComputeTask) and t.iteration == 1
                  and t.label == "fwd/a/pp0"]
    for t in fwd_a_next:
        last_in = next(f for f in ring if f.step == 1 and f.dst == t.host)
        assert last_in.id in t.deps
    for i, t in enumerate(tasks):
        assert t.id == i and all(d < i for d in t.deps)


def test_ring_steps_chain(tmp_path):
    rows = ["a -1 10 NONE 0 10 NONE 0 10 REDUCESCATTER 4096 1"]
    w = import_aicb(write(tmp_path, rows, gpus=4), [0, 1, 2, 3], None)
    ring = {(f.step, f.src): f for f in w.flows}
    assert len(ring) == 4 * 3 and {f.size for f in ring.values()} == {1024}
    for (k, src), f in ring.items():
        if k:
            assert ring[(k - 1, (src - 1) % 4)].id in f.deps


def test_pipeline_hand_off(tmp_path):
    rows = ["a -1 10 NONE 0 10 NONE 0 10 NONE 0 1"]
    w = import_aicb(write(tmp_path, rows, pp=2, gpus=2, pp_comm=65536), [0, 1], None)
    assert [(f.collective, f.src, f.dst, f.size) for f in w.flows] == [
        ("pp_fwd", 0, 1, 65536), ("pp_bwd", 1, 0, 65536)]


@pytest.mark.parametrize("rows, kw, line, message", [
    (["a -1 1 NONE 0 1 NONE 0 1 NONE 0"], {}, "line 3", "expected 12 columns, got 11"),
    (["a -1 1 BROADCAST 8 1 NONE 0 1 NONE 0 1"], {}, "line 3", "comm type 'BROADCAST'"),
    (["a -1 1 ALLREDUCEALLTOALL 8 1 NONE 0 1 NONE 0 1"], {}, "line 3", "not supported"),
    (["a -1 x NONE 0 1 NONE 0 1 NONE 0 1"], {}, "line 3", "column 3 'x' is not an integer"),
    (["a -1 1 NONE 0 1 NONE 0 1 NONE 0 1"], {"count": 2}, "line 2", "says 2 layers"),
    ([], {"ep": 3}, "line 1", "ep: 3 does not divide dp = 4"),
    ([], {"tp": 3}, "line 1", "all_gpus: 4 is not a multiple of tp*pp = 3"),
])
def test_malformed_file_fails_naming_line(tmp_path, rows, kw, line, message):
    path = write(tmp_path, rows, **kw)
    with pytest.raises(ScenarioError, match=re.escape(message)) as err:
        parse_aicb(path)
    assert err.value.path == str(path) and err.value.field == line


def test_unknown_policy_fails(tmp_path):
    path = tmp_path / "wl.txt"
    path.write_text("DATA model_parallel_NPU_group: 1 all_gpus: 1\n0\n")
    with pytest.raises(ScenarioError, match="parallelism 'DATA' not supported"):
        parse_aicb(path)


def test_missing_file_fails(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read AICB workload"):
        parse_aicb(tmp_path / "nope.txt")


def test_too_few_hosts_fails():
    with pytest.raises(ScenarioError, match="all_gpus: 16 but the topology has 8 hosts") as err:
        import_aicb(EXAMPLE, list(range(8)), 4)
    assert err.value.field == "line 1"


def test_tp_split_across_servers_fails():
    with pytest.raises(ScenarioError, match="does not divide gpus_per_server=2"):
        import_aicb(EXAMPLE, list(range(16)), 2)
