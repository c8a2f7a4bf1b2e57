"""Training workload generator: traffic checked against hand-computed values."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bridge.errors import ScenarioError
from bridge.scenario.training import PRESETS, load_training
from bridge.workload.dag import ComputeTask, FlowTask
from bridge.workload.training import build_training, one_f_one_b, place_ranks

# A model small enough to count by hand: h=64, ffn=256, seq=16 (T=16 tokens per micro-batch).
SMALL = {"layers": 1, "hidden": 64, "seq_len": 16, "vocab": 64}
UNIT_GPU = {"peak_tflops": 1.0, "efficiency": 1.0}     # 1000 FLOPs per ns


def make(model=None, gpu=None, iterations=1, **parallelism):
    data = {"model": {**SMALL, **(model or {})}, "parallelism": parallelism,
            "gpu": gpu or UNIT_GPU, "iterations": iterations}
    return load_training(data, "t.yaml")


def flows(workload, collective=None, iteration=0):
    return [f for f in workload.flows
            if f.iteration == iteration and (collective is None or f.collective == collective)]


def assert_valid_dag(workload):
    for i, task in enumerate(workload.tasks):
        assert task.id == i
        assert all(0 <= d < i for d in task.deps), task
        if isinstance(task, FlowTask):
            assert task.src != task.dst and task.size > 0 and task.reuse_connection
            assert task.collective in {"dp_allreduce", "pp_fwd", "pp_bwd", "ep_dispatch",
                                       "ep_combine"}


# --- presets ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, layers, hidden, tp, dp, pp, ep, experts, gpus", [
    ("gpt-7b", 32, 4096, 8, 4, 2, 1, 0, 64),
    ("gpt-13b", 40, 5120, 8, 4, 4, 1, 0, 128),
    ("gpt-22b", 48, 6144, 8, 8, 4, 1, 0, 256),
    ("gpt-175b", 96, 12288, 8, 16, 8, 1, 0, 1024),
    ("moe-8x7b", 32, 4096, 8, 4, 2, 8, 8, 64),
    ("moe-8x13b", 40, 5120, 8, 4, 4, 8, 8, 128),
    ("moe-8x22b", 56, 6144, 8, 8, 4, 8, 8, 256),
    ("moe-32x22b", 56, 6144, 8, 16, 8, 8, 32, 1024),
])
def test_preset_matches_paper_table1(name, layers, hidden, tp, dp, pp, ep, experts, gpus):
    spec = load_training({"preset": name})
    m, par = spec.model, spec.parallelism
    assert (m.layers, m.hidden, m.seq_len, m.vocab) == (layers, hidden, 2048, 50257)
    assert (par.tp, par.dp, par.pp, par.ep, m.experts) == (tp, dp, pp, ep, experts)
    assert par.world == gpus
    assert par.n_micro == pp and par.micro_batch_size == 1   # global batch = DP x PP
    if experts:
        assert m.top_k == 2 and m.gated_mlp


def test_mixtral_preset_dims():
    m = load_training({"preset": "moe-8x7b"}).model
    assert m.ffn == 14336 and m.moe_layers == "all"


def test_preset_fields_are_overridden_key_by_key():
    spec = load_training({"preset": "gpt-tiny", "parallelism": {"dp": 1}, "iterations": 3})
    assert (spec.parallelism.tp, spec.parallelism.pp, spec.parallelism.dp) == (4, 2, 1)
    assert spec.model.hidden == 256 and spec.iterations == 3


def test_defaults_and_size_strings():
    spec = make()
    assert spec.parallelism.bucket_size == 25 * 2**20        # PyTorch DDP's 25 MiB
    assert spec.parallelism.dtype_bytes == 2 and spec.model.ffn == 4 * 64
    assert make(bucket_size="25MB").parallelism.bucket_size == 25_000_000


def test_every_preset_builds_a_valid_dag_on_its_gpu_count():
    for name in ("gpt-tiny", "moe-tiny", "gpt-bench", "moe-bench"):
        spec = load_training({"preset": name, "iterations": 2})
        gps = 4 if "tiny" in name else 8
        w = build_training(spec, list(range(spec.parallelism.world)), gps)
        assert_valid_dag(w)
        assert w.iterations == 2 and {f.iteration for f in w.flows} == {0, 1}


def test_tiny_preset_flow_sizes():
    for name in ("gpt-tiny", "moe-tiny"):
        w = build_training(load_training({"preset": name}), list(range(16)), 4)
        sizes = [f.size for f in w.flows]
        assert 10_000 <= min(sizes) and max(sizes) <= 1_000_000, name


# --- placement ----------------------------------------------------------------------------------

def test_place_ranks_is_rail_aligned_on_roft():
    placement = place_ranks(8, 2, 4, list(range(64)), 8)
    assert placement[(1, 2, 5)] == (1 * 4 + 2) * 8 + 5
    for (s, j, t), host in placement.items():
        assert host % 8 == t        # tp rank = GPU index in the server = rail


def test_no_flow_between_gpus_of_one_server():
    w = build_training(load_training({"preset": "moe-tiny"}), list(range(16)), 4)
    assert all(f.src // 4 != f.dst // 4 for f in w.flows)


# --- data parallel ------------------------------------------------------------------------------

# One dense layer on the only stage: 12*h^2 + embedding and head 2*vocab*h parameters.
DENSE_PARAMS = 12 * 64 * 64 + 2 * 64 * 64       # 57344 -> 114688 bytes of bf16 gradients


def test_ring_allreduce_flow_count_and_chunk_size():
    w = build_training(make(dp=4), [10, 11, 12, 13], None)
    ring = flows(w, "dp_allreduce")
    assert len(ring) == 4 * 2 * (4 - 1)             # N ranks x 2(N-1) steps
    assert {f.size for f in ring} == {DENSE_PARAMS * 2 // 4}
    assert Counter(f.step for f in ring) == {k: 4 for k in range(6)}
    assert {(f.src, f.dst) for f in ring} == {(10, 11), (11, 12), (12, 13), (13, 10)}


def test_ring_step_waits_for_previous_step_into_the_rank():
    w = build_training(make(dp=4), [0, 1, 2, 3], None)
    by_step = {(f.step, f.src): f for f in flows(w, "dp_allreduce")}
    for (k, src), f in by_step.items():
        if k:
            into_src = by_step[(k - 1, (src - 1) % 4)]
            assert into_src.dst == src and into_src.id in f.deps


def test_ring_starts_after_the_ranks_last_backward():
    w = build_training(make(dp=2), [0, 1], None)
    for f in flows(w, "dp_allreduce"):
        if f.step == 0:
            (dep,) = f.deps
            assert w.tasks[dep].label.startswith("bwd/") and w.tasks[dep].host == f.src


def test_gradients_split_into_buckets_that_pipeline_in_order():
    w = build_training(make(dp=4, bucket_size=40_000), list(range(4)), None)
    ring = flows(w, "dp_allreduce")
    groups = Counter(f.group for f in ring)
    assert groups == {"dp/pp0/tp0/b0": 24, "dp/pp0/tp0/b1": 24, "dp/pp0/tp0/b2": 24}
    # 114688 bytes = 40000 + 40000 + 34688; chunks are a quarter of each bucket.
    assert {f.size for f in ring if f.group.endswith("b2")} == {34688 // 4}
    assert sum(f.size for f in ring) == 2 * 3 * DENSE_PARAMS * 2      # 2(N-1)/N * N * bytes
    step0 = {(f.group[-1], f.src): f.id for f in ring if f.step == 0}
    for f in ring:
        if f.step == 0 and not f.group.endswith("b0"):
            prev = str(int(f.group[-1]) - 1)
            assert step0[(prev, f.src)] in f.deps


def test_dp_groups_follow_stage_and_tp_rank():
    # pp=2 x tp=2: four rings of dp=2 ranks; stage 0 holds embedding, stage 1 the head.
    w = build_training(make({"layers": 2}, dp=2, tp=2, pp=2), list(range(8)), None)
    per_group = Counter()
    for f in flows(w, "dp_allreduce"):
        per_group[f.group] += f.size
    buffer = (12 * 64 * 64 + 64 * 64) // 2 * 2      # (layer + embedding or head) / tp * dtype
    # N ranks x 2(N-1) steps x buffer/N = 2(N-1) x buffer; N = 2
    assert per_group == {f"dp/pp{s}/tp{t}": 2 * buffer for s in (0, 1) for t in (0, 1)}


def test_next_iteration_waits_for_gradients():
    w = build_training(make(dp=2, iterations=2), [0, 1], None)
    last_in = {f.dst: f.id for f in flows(w, "dp_allreduce") if f.step == 1}
    for host in (0, 1):
        first = next(t for t in w.tasks if isinstance(t, ComputeTask) and t.iteration == 1
                     and t.host == host)
        assert last_in[host] in first.deps


# --- pipeline parallel --------------------------------------------------------------------------

def test_one_f_one_b_order():
    assert one_f_one_b(0, 2, 3) == [("fwd", 0), ("fwd", 1), ("bwd", 0), ("fwd", 2), ("bwd", 1),
                                    ("bwd", 2)]
    assert one_f_one_b(1, 2, 3) == [("fwd", 0), ("bwd", 0), ("fwd", 1), ("bwd", 1), ("fwd", 2),
                                    ("bwd", 2)]


def test_pp_transfers_per_micro_batch():
    # pp=2, tp=2, dp=1, 3 micro-batches: per micro-batch and tp rank one flow each way.
    w = build_training(make({"layers": 2}, pp=2, tp=2, micro_batches=3), list(range(4)), None)
    fwd, bwd = flows(w, "pp_fwd"), flows(w, "pp_bwd")
    assert len(fwd) == len(bwd) == 3 * 2
    assert {f.size for f in fwd + bwd} == {16 * 64 * 2 // 2}     # T*h*dtype/tp
    assert {(f.src, f.dst) for f in fwd} == {(0, 2), (1, 3)}
    assert {(f.src, f.dst) for f in bwd} == {(2, 0), (3, 1)}
    assert sorted(f.step for f in fwd) == [0, 0, 1, 1, 2, 2]


def test_compute_is_serialized_in_1f1b_order():
    w = build_training(make({"layers": 2}, pp=2, micro_batches=3), [0, 1], None)
    on_stage0 = [t for t in w.tasks if isinstance(t, ComputeTask) and t.host == 0]
    assert [t.label.split("/")[:2] for t in on_stage0] == [
        ["fwd", "mb0"], ["fwd", "mb1"], ["bwd", "mb0"], ["fwd", "mb2"], ["bwd", "mb1"],
        ["bwd", "mb2"]]
    for prev, task in zip(on_stage0, on_stage0[1:]):
        assert prev.id in task.deps
    # Stage 1's forward of micro-batch 0 waits for the activation from stage 0.
    f0 = next(f for f in flows(w, "pp_fwd") if f.step == 0)
    first1 = next(t for t in w.tasks if isinstance(t, ComputeTask) and t.host == 1)
    assert first1.deps == (f0.id,)


def test_compute_durations_from_flops():
    # Forward FLOPs: attention 2*T*4h^2 + 4*T*s*h, MLP 2*T*2h*ffn, head 2*T*h*vocab.
    fwd = 2 * 16 * 4 * 64**2 + 4 * 16 * 16 * 64 + 2 * 16 * 2 * 64 * 256 + 2 * 16 * 64 * 64
    assert fwd == 1_769_472
    w = build_training(make(), [0], None)
    durations = {t.label.split("/")[0]: t.duration_ns for t in w.tasks}
    assert durations == {"fwd": round(fwd / 1000), "bwd": round(2 * fwd / 1000)}
    w = build_training(make(tp=2, gpu={"peak_tflops": 2.0, "efficiency": 0.5}), [0, 1], None)
    assert {t.duration_ns for t in w.tasks if t.label.startswith("fwd")} == {round(fwd / 2000)}


def test_a_straggler_computes_slower_and_holds_up_its_pipeline():
    """A straggler's compute tasks take `slowdown` times as long; the others' do not change, and
    its pipeline peer's next step waits for it."""
    def stage1_forward_deps(w):
        f0 = next(f for f in flows(w, "pp_fwd") if f.step == 0)
        return next(t for t in w.tasks if isinstance(t, ComputeTask) and t.host == 1).deps, f0

    base = build_training(make({"layers": 2}, pp=2), [0, 1], None)
    slow = build_training(load_training({"model": {**SMALL, "layers": 2}, "parallelism": {"pp": 2},
                                         "gpu": UNIT_GPU, "stragglers": [{"hosts": [0], "slowdown": 2.5}]},
                                        "t.yaml"), [0, 1], None)
    durations = {w_name: {(t.host, t.label): t.duration_ns for t in w.tasks if isinstance(t, ComputeTask)}
                 for w_name, w in (("base", base), ("slow", slow))}
    for (host, label), d in durations["base"].items():
        assert durations["slow"][(host, label)] == (round(d * 2.5) if host == 0 else d)
    deps, f0 = stage1_forward_deps(slow)
    assert deps == (f0.id,)           # stage 1 waits for the straggler's activation


@pytest.mark.parametrize("stragglers, words", [
    ([{"hosts": [5], "slowdown": 2}], ["host 5 runs no rank of this job", "hosts 0-1"]),
    ([{"hosts": [0], "slowdown": 2}, {"hosts": [0], "slowdown": 3}], ["host 0 is listed twice"]),
])
def test_straggler_errors_name_the_field(stragglers, words):
    spec = load_training({"model": {**SMALL, "layers": 2}, "parallelism": {"pp": 2}, "stragglers": stragglers},
                         "s.yaml")
    with pytest.raises(ScenarioError) as err:
        build_training(spec, [0, 1, 2, 3, 4, 5], None, "s.yaml")
    assert err.value.field.startswith("training.stragglers[") and err.value.field.endswith("].hosts")
    for w in words:
        assert w in err.value.message


# --- expert parallel ----------------------------------------------------------------------------

MOE = {"experts": 4, "top_k": 2}
PAIR = 16 * 2 * 64 * 2 // (1 * 4)     # T*top_k*h*dtype / (tp*ep) = 1024 bytes


def test_all_to_all_volume_and_flow_count():
    w = build_training(make(MOE, dp=4, ep=4), list(range(4)), None)
    dispatch, combine = flows(w, "ep_dispatch"), flows(w, "ep_combine")
    # fwd + bwd, each a 4 x 3 all-to-all, for one layer and one micro-batch.
    assert len(dispatch) == len(combine) == 2 * 4 * 3
    assert {f.size for f in dispatch + combine} == {PAIR}
    assert Counter((f.src, f.dst) for f in dispatch) == {
        (a, b): 2 for a in range(4) for b in range(4) if a != b}


def test_expert_compute_waits_for_all_incoming_dispatch():
    w = build_training(make(MOE, dp=4, ep=4), list(range(4)), None)
    fwd_dispatch = [f for f in flows(w, "ep_dispatch") if f.group.endswith("fwd")]
    for host in range(4):
        expert = next(t for t in w.tasks if isinstance(t, ComputeTask) and t.host == host
                      and t.label.endswith("/c2"))
        incoming = {f.id for f in fwd_dispatch if f.dst == host}
        assert len(incoming) == 3 and incoming <= set(expert.deps)
        attention = next(t for t in w.tasks if isinstance(t, ComputeTask) and t.host == host)
        assert all(f.deps == (attention.id,) for f in fwd_dispatch if f.src == attention.host)


def test_intra_server_all_to_all_pairs_are_nvlink():
    # 2 servers x 2 GPUs, ep=4: each GPU has one peer on its own server, two across.
    w = build_training(make(MOE, dp=4, ep=4), list(range(4)), 2)
    assert len([f for f in flows(w, "ep_dispatch") if f.group.endswith("fwd")]) == 4 * 2


def test_ep_groups_are_dp_ranks_of_one_tp_rank_and_expert_grads_ring_over_the_rest():
    # tp=2, dp=2, ep=2: EP groups {(dp0,tp t),(dp1,tp t)}; expert-DP groups {(dp j,tp0),(dp j,tp1)}.
    w = build_training(make(MOE, dp=2, tp=2, ep=2), list(range(4)), None)
    placement = place_ranks(2, 1, 2, list(range(4)))
    ep_pairs = {(f.src, f.dst) for f in flows(w, "ep_dispatch")}
    assert ep_pairs == {(placement[(0, 0, t)], placement[(0, 1, t)]) for t in (0, 1)} | {
        (placement[(0, 1, t)], placement[(0, 0, t)]) for t in (0, 1)}
    # per-pair bytes with tp=2: T*top_k*h*d/(tp*ep) = 512
    assert {f.size for f in flows(w, "ep_dispatch")} == {16 * 2 * 64 * 2 // (2 * 2)}
    edp = [f for f in flows(w, "dp_allreduce") if f.group.startswith("edp")]
    expert_bytes = (4 // 2) * 2 * 64 * 256 * 2      # experts/ep * 2*h*ffn params * dtype
    assert len(edp) == 2 * 2 * 2                     # 2 groups x N=2 ranks x 2(N-1) steps
    assert {f.size for f in edp} == {expert_bytes // 2}
    assert {(f.src, f.dst) for f in edp} == {
        (placement[(0, j, a)], placement[(0, j, 1 - a)]) for j in (0, 1) for a in (0, 1)}


def test_moe_layers_every_k():
    w = build_training(make({**MOE, "layers": 4, "moe_layers": 2}, dp=2, ep=2), [0, 1], None)
    assert {f.group.split("/")[3] for f in flows(w, "ep_dispatch")} == {"layer0", "layer2"}


# --- validation errors --------------------------------------------------------------------------

@pytest.mark.parametrize("override, field", [
    ({"parallelism": {"dp": 0}}, "training.parallelism.dp"),
    ({"parallelism": {"bucket_size": "25XB"}}, "training.parallelism.bucket_size"),
    ({"parallelism": {"micro_batches": 1, "pp": 2}}, "training.parallelism.micro_batches"),
    ({"parallelism": {"pp": 3}}, "training.model.layers"),
    ({"gpu": {"efficiency": 1.5}}, "training.gpu.efficiency"),
    ({"model": {"flavour": "x"}}, "training.model.flavour"),
    ({"model": {"moe_layers": 0}}, "training.model.moe_layers"),
    ({"model": {"experts": 2, "top_k": 3}}, "training.model.top_k"),
    ({"parallelism": {"ep": 2}}, "training.parallelism.ep"),
    ({"model": {"experts": 6}, "parallelism": {"ep": 4, "dp": 4}}, "training.parallelism.ep"),
    ({"model": {"experts": 8}, "parallelism": {"ep": 8, "dp": 2, "tp": 2}},
     "training.parallelism.ep"),
    ({"preset": "gpt-9000"}, "training.preset"),
    ({"iterations": 0}, "training.iterations"),
    ({"stragglers": [{"hosts": [0], "slowdown": 0}]}, "training.stragglers.0.slowdown"),
    ({"stragglers": [{"hosts": [], "slowdown": 2}]}, "training.stragglers.0.hosts"),
])
def test_bad_spec_fails_naming_the_field(override, field):
    data = {"preset": "gpt-tiny", **override}
    for key in ("model", "parallelism", "gpu"):
        if key in override:
            data[key] = override[key]
    with pytest.raises(ScenarioError) as err:
        load_training(data, "s.yaml")
    assert err.value.field == field
    assert str(err.value).startswith(f"s.yaml: {field}: ")


def test_more_ranks_than_hosts_fails():
    with pytest.raises(ScenarioError, match="16 GPUs but the topology has 8 hosts") as err:
        build_training(load_training({"preset": "gpt-tiny"}), list(range(8)), 4, "s.yaml")
    assert err.value.field == "training.parallelism"


def test_tp_not_dividing_server_fails():
    with pytest.raises(ScenarioError, match="tp=4 does not divide gpus_per_server=6") as err:
        build_training(load_training({"preset": "gpt-tiny"}), list(range(24)), 6, "s.yaml")
    assert err.value.field == "training.parallelism.tp"


def test_all_presets_are_valid():
    for name in PRESETS:
        load_training({"preset": name})


# --- any small plan -----------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2]), pp=st.sampled_from([1, 2]), dp=st.sampled_from([1, 2, 4]),
       ep=st.sampled_from([1, 2]), extra_mb=st.integers(0, 2), layers_per_stage=st.integers(1, 2))
def test_any_small_plan_gives_formula_counts(tp, pp, dp, ep, extra_mb, layers_per_stage):
    assume((dp * tp) % ep == 0)
    m = pp + extra_mb
    moe = {"experts": 2, "top_k": 1} if ep > 1 else {}
    spec = make({**moe, "layers": pp * layers_per_stage}, tp=tp, pp=pp, dp=dp, ep=ep,
                micro_batches=m)
    w = build_training(spec, list(range(tp * pp * dp)), None)
    assert_valid_dag(w)
    count = Counter(f.collective for f in w.flows)
    assert count["pp_fwd"] == count["pp_bwd"] == (pp - 1) * m * dp * tp
    # per MoE layer and micro-batch: 4 all-to-alls of (dp*tp/ep) groups x ep(ep-1) flows
    assert count["ep_dispatch"] + count["ep_combine"] == (
        (ep > 1) * pp * layers_per_stage * m * 4 * dp * tp * (ep - 1))
    dense = [f for f in w.flows if f.group.startswith("dp/")]
    h, vocab = 64, 64
    mlp = 0 if ep > 1 else 8 * h * h
    params = pp * layers_per_stage * (4 * h * h + mlp) + 2 * vocab * h
    # a ring all-reduce of B bytes on N ranks moves 2(N-1)B bytes in total
    expected = sum(2 * (dp - 1) * (p // tp * 2) for p in _stage_params(pp, layers_per_stage,
                                                                     4 * h * h + mlp, vocab * h)
                   for _ in range(tp))
    assert sum(f.size for f in dense) == expected
    assert sum(_stage_params(pp, layers_per_stage, 4 * h * h + mlp, vocab * h)) == params


def _stage_params(pp, layers_per_stage, per_layer, embed):
    return [layers_per_stage * per_layer + embed * ((s == 0) + (s == pp - 1)) for s in range(pp)]
