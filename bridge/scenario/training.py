"""The `training:` section of a scenario: model, parallel plan, GPU speed, and named presets.

A preset fills defaults and explicit fields override it (dicts are merged before validation). The
GPT presets and the MoE presets follow the workloads of the Wormhole paper's Table 1 (same TP/EP/DP/PP,
public model dimensions, micro-batch 1, global batch DP x PP so micro_batches = PP). `*-tiny` presets
fit 16 hosts and make flows of tens of KB to ~1 MB; `*-bench` presets fit a 64-GPU ROFT and make
multi-MB DP flows. Checks that need the topology live in `bridge.workload.training`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bridge.errors import ScenarioError
from bridge.units import check_positive, parse_size, parse_time

PresetName = Literal[
    "gpt-7b", "gpt-13b", "gpt-22b", "gpt-175b",
    "moe-8x7b", "moe-8x13b", "moe-8x22b", "moe-32x22b",
    "gpt-tiny", "moe-tiny", "gpt-bench", "moe-bench",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(_Frozen):
    """Transformer dimensions. Attention is 4*hidden^2 parameters per layer (no GQA), an MLP or
    expert 2*hidden*ffn_hidden (3*hidden*ffn_hidden with `gated_mlp`, as SwiGLU in Mixtral)."""

    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    vocab: int = Field(gt=0)
    heads: int | None = Field(default=None, gt=0)   # informational: FLOPs do not depend on it
    ffn_hidden: int = Field(default=0, ge=0)        # 0 means 4*hidden
    gated_mlp: bool = False
    experts: int = Field(default=0, ge=0)           # 0 = dense model
    top_k: int = Field(default=1, gt=0)             # ignored for dense models
    moe_layers: Literal["all"] | int = "all"        # "all", or k: layer i is MoE if i % k == 0

    @field_validator("moe_layers")
    @classmethod
    def _every_k_positive(cls, v: str | int) -> str | int:
        if isinstance(v, int) and v <= 0:
            raise ValueError(f"{v!r} must be 'all' or a positive layer period")
        return v

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    def is_moe_layer(self, i: int) -> bool:
        if self.experts == 0:
            return False
        return self.moe_layers == "all" or i % self.moe_layers == 0


class ParallelismSpec(_Frozen):
    """Parallel plan. `micro_batches` (per iteration, per pipeline) defaults to `pp`."""

    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)
    dp: int = Field(default=1, gt=0)
    ep: int = Field(default=1, gt=0)
    micro_batches: int = Field(default=0, ge=0)     # 0 means pp (the paper: global batch DP x PP)
    micro_batch_size: int = Field(default=1, gt=0)
    bucket_size: int = 25 * 2**20                   # bytes; PyTorch DDP's bucket_cap_mb=25 (MiB)
    dtype_bytes: int = Field(default=2, gt=0)       # bf16 activations and gradients

    @field_validator("bucket_size", mode="before")
    @classmethod
    def _parse_bucket(cls, v: Any) -> int:
        return check_positive(parse_size(v), v)

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def n_micro(self) -> int:
        return self.micro_batches or self.pp


class GpuSpec(_Frozen):
    """Sustained compute speed = peak_tflops * efficiency. Default: A100 bf16 at 50% MFU."""

    peak_tflops: float = Field(default=312.0, gt=0)
    efficiency: float = Field(default=0.5, gt=0, le=1)


class StragglerSpec(_Frozen):
    """GPUs (by host id) whose every compute task takes `slowdown` times as long: a slow, throttled
    or degraded GPU, whose rank holds up its pipeline and its all-reduce rings."""

    hosts: tuple[int, ...] = Field(min_length=1)
    slowdown: float = Field(gt=0)


class TrainingSpec(_Frozen):
    """One training job. Validate with `load_training` to get ScenarioError messages."""

    preset: PresetName | None = None
    model: ModelSpec
    parallelism: ParallelismSpec = ParallelismSpec()
    gpu: GpuSpec = GpuSpec()
    iterations: int = Field(default=1, gt=0)
    stragglers: tuple[StragglerSpec, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("preset") is None:
            return data
        if data["preset"] not in PRESETS:
            # Fail here: unmerged, the spec would also report every preset-given field missing.
            raise ValueError(_unknown_preset(data["preset"]))
        return _deep_merge(PRESETS[data["preset"]], data)


class JobSpec(TrainingSpec):
    """One of the training jobs sharing a fabric (a scenario's `jobs`): its ranks are placed from
    the topology's `first_host`-th host on, and it starts at `start` (ns)."""

    name: str | None = Field(default=None, min_length=1)   # default: job<k>
    first_host: int = Field(default=0, ge=0)
    start: int = 0

    @field_validator("start", mode="before")
    @classmethod
    def _parse_start(cls, v: Any) -> int:
        start = parse_time(v)
        if start < 0:
            raise ValueError(f"{v!r} is before the run starts (expected >= 0)")
        return start


def job_field(field: str | None, k: int) -> str:
    """Where a `training` error lies for the k-th of a scenario's `jobs`: training.x -> jobs[k].x."""
    if field and field.startswith("training"):
        return f"jobs[{k}]" + field[len("training"):]
    return field or f"jobs[{k}]"


def _unknown_preset(name: object) -> str:
    return f"unknown preset {name!r} (expected one of {', '.join(PRESETS)})"


def _deep_merge(base: dict, override: dict) -> dict:
    """`override` on top of `base`, merging nested dicts key by key."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _gpt(layers: int, hidden: int, heads: int) -> dict:
    return {"layers": layers, "hidden": hidden, "heads": heads, "seq_len": 2048, "vocab": 50257}


def _moe(layers: int, hidden: int, heads: int, ffn: int, experts: int) -> dict:
    return {**_gpt(layers, hidden, heads), "ffn_hidden": ffn, "gated_mlp": True,
            "experts": experts, "top_k": 2}


def _plan(tp: int, dp: int, pp: int, ep: int = 1, **extra: int) -> dict:
    return {"tp": tp, "dp": dp, "pp": pp, "ep": ep, **extra}


# Table 1 of the Wormhole paper. Model dims: GPT-3 family (7B/13B/175B), Megatron's GPT-22B,
# Mixtral 8x7B and 8x22B; "8x13B" uses LLaMA-2-13B's dims with Mixtral's 8 experts, top-2.
PRESETS: dict[str, dict] = {
    "gpt-7b": {"model": _gpt(32, 4096, 32), "parallelism": _plan(8, 4, 2)},
    "gpt-13b": {"model": _gpt(40, 5120, 40), "parallelism": _plan(8, 4, 4)},
    "gpt-22b": {"model": _gpt(48, 6144, 64), "parallelism": _plan(8, 8, 4)},
    "gpt-175b": {"model": _gpt(96, 12288, 96), "parallelism": _plan(8, 16, 8)},
    "moe-8x7b": {"model": _moe(32, 4096, 32, 14336, 8), "parallelism": _plan(8, 4, 2, 8)},
    "moe-8x13b": {"model": _moe(40, 5120, 40, 13824, 8), "parallelism": _plan(8, 4, 4, 8)},
    "moe-8x22b": {"model": _moe(56, 6144, 48, 16384, 8), "parallelism": _plan(8, 8, 4, 8)},
    "moe-32x22b": {"model": _moe(56, 6144, 48, 16384, 32), "parallelism": _plan(8, 16, 8, 8)},
    # 16 GPUs (4 servers x 4): one packet-level iteration in seconds.
    "gpt-tiny": {
        "model": {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 256, "vocab": 1024},
        "parallelism": _plan(4, 2, 2, micro_batches=4),
    },
    "moe-tiny": {
        "model": {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 256, "vocab": 1024,
                  "experts": 4, "top_k": 2},
        "parallelism": _plan(4, 2, 2, 2, micro_batches=4),
    },
    # 64 GPUs (8 servers x 8), Table 1's 64-GPU plans on GPT-2-small-sized models: a stock
    # packet-level run of 2 iterations takes minutes on one core (about 100 ms per MB here).
    "gpt-bench": {"model": _gpt(12, 768, 12), "parallelism": _plan(8, 4, 2)},
    "moe-bench": {
        "model": {**_gpt(6, 768, 12), "experts": 8, "top_k": 2, "moe_layers": 2},
        "parallelism": _plan(8, 4, 2, 8),
    },
}


def load_training(data: Any, path: str | None = None) -> TrainingSpec:
    """Validate a `training:` mapping into a TrainingSpec.

    Raises ScenarioError naming `training.<field>`; all pydantic errors are reported on one line.
    """
    if isinstance(data, dict) and data.get("preset") is not None and data["preset"] not in PRESETS:
        raise ScenarioError(path, "training.preset", _unknown_preset(data["preset"]))
    try:
        spec = TrainingSpec.model_validate(data)
    except ValidationError as e:
        errors = e.errors()
        field = ".".join(["training", *map(str, errors[0]["loc"])])
        rest = "; ".join(f"{'.'.join(['training', *map(str, x['loc'])])}: {x['msg']}"
                         for x in errors[1:])
        raise ScenarioError(path, field, errors[0]["msg"] + (f"; {rest}" if rest else "")) from None
    check_training(spec, path)
    return spec


def check_training(spec: TrainingSpec, path: str | None = None) -> None:
    """Cross-field checks that need no topology. Raises ScenarioError naming the field."""
    m, par = spec.model, spec.parallelism
    # CORRECTNESS: every pipeline stage holds the same whole number of layers.
    if m.layers % par.pp:
        raise ScenarioError(path, "training.model.layers",
                            f"{m.layers} layers do not split evenly into pp={par.pp} stages")
    # CORRECTNESS: 1F1B needs at least one micro-batch in flight per stage.
    if par.n_micro < par.pp:
        raise ScenarioError(path, "training.parallelism.micro_batches",
                            f"{par.n_micro} micro-batches < pp={par.pp} (1F1B needs >= pp)")
    if m.experts and m.top_k > m.experts:
        raise ScenarioError(path, "training.model.top_k",
                            f"top_k={m.top_k} exceeds experts={m.experts}")
    if par.ep > 1 and not m.experts:
        raise ScenarioError(path, "training.parallelism.ep",
                            f"ep={par.ep} needs an MoE model (set model.experts)")
    if m.experts % par.ep:
        raise ScenarioError(path, "training.parallelism.ep",
                            f"ep={par.ep} does not divide experts={m.experts}")
    # CORRECTNESS: expert-parallel groups are carved out of a stage's dp x tp GPUs.
    if (par.dp * par.tp) % par.ep:
        raise ScenarioError(path, "training.parallelism.ep",
                            f"ep={par.ep} does not divide dp*tp={par.dp * par.tp}")
