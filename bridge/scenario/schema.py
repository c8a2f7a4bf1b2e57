"""The scenario schema: frozen pydantic models holding parsed values (bps, ns, bytes as ints).

Attributes are named as the YAML keys; their units are fixed: rates in bps, times in ns, sizes in
bytes, queue thresholds in packets. Every model forbids unknown keys. These models check
each value on its own; `bridge.scenario.load` adds the checks across fields and files, and is the
only way to get a `Scenario` that is guaranteed valid.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
)

from bridge.scenario.hpcc_config import (
    FRAME_OVERHEAD_BYTES,
    RdmaParameters,
    parse_hpcc_config,
    parse_parameters,
    resolve_rdma,
)
from bridge.scenario.training import JobSpec, TrainingSpec
from bridge.units import parse_rate, parse_size, parse_time

_U32 = 2**32 - 1   # ns-3 attributes such as TcpSocket::SndBufSize are uint32
MAX_SEED = _U32    # ns-3's run number
_I64 = 2**63 - 1   # ns-3 Time is an int64 count of ns


def _bounded(parse, lo: int, hi: int):
    """A before-validator: parse a unit string, then check lo <= value <= hi, quoting the input."""
    def check(value):
        n = parse(value)
        if n < lo:
            raise ValueError(f"{value!r} must be {'> 0' if lo == 1 else f'>= {lo}'}")
        if n > hi:
            raise ValueError(f"{value!r} is too large (max {hi})")
        return n
    return BeforeValidator(check)


RateBps = Annotated[int, _bounded(parse_rate, 1, 2**64 - 1)]
DelayNs = Annotated[int, _bounded(parse_time, 0, _I64)]
DurationNs = Annotated[int, _bounded(parse_time, 1, _I64)]
SizeBytes = Annotated[int, _bounded(parse_size, 1, 2**64 - 1)]
BufferBytes = Annotated[int, _bounded(parse_size, 1, _U32)]
Count = Annotated[StrictInt, Field(ge=1, le=_U32)]
NodeId = Annotated[StrictInt, Field(ge=0)]


def _resolve_file(value: object, info: ValidationInfo) -> Path:
    """Resolve a referenced file against the scenario's directory; it must exist."""
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise ValueError(f"{value!r} is not a file path")
    base = Path((info.context or {}).get("base_dir", "."))
    path = (base / value).resolve()
    if not path.is_file():
        raise ValueError(f"{str(value)!r} not found (looked for {str(path)!r})")
    return path


FilePath = Annotated[Path, BeforeValidator(_resolve_file)]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LinkSpec(_Spec):
    """Rate and one-way propagation delay of a class of links."""

    rate: RateBps
    delay: DelayNs


class LeafSpineSpec(_Spec):
    """Two-tier Clos. After loading, `fabric_link` is always set (derived from oversubscription
    if omitted, with the host link's delay)."""

    kind: Literal["leaf-spine"]
    leaves: Count
    spines: Count
    hosts_per_leaf: Count
    host_link: LinkSpec
    fabric_link: LinkSpec | None = None
    oversubscription: Annotated[StrictFloat, Field(gt=0, allow_inf_nan=False)] | None = None


def _even(k: int) -> int:
    if k % 2:
        raise ValueError(f"k must be even (got {k})")
    return k


class FatTreeSpec(_Spec):
    """k-ary fat-tree; `fabric_link` is every switch-switch link."""

    kind: Literal["fat-tree"]
    k: Annotated[StrictInt, Field(ge=2, le=1000), AfterValidator(_even)]
    host_link: LinkSpec
    fabric_link: LinkSpec


class RoftSpec(_Spec):
    """Rail-optimized fat-tree; one host per GPU. After loading, `servers_per_leaf` is set."""

    kind: Literal["roft"]
    servers: Count
    gpus_per_server: Count
    servers_per_leaf: Count | None = None
    spines: Count
    host_link: LinkSpec
    fabric_link: LinkSpec


class HpccTopologySpec(_Spec):
    """An HPCC topology.txt; `file` is resolved to an absolute path."""

    kind: Literal["hpcc"]
    file: FilePath


TopologySpec = Annotated[
    Union[LeafSpineSpec, FatTreeSpec, RoftSpec, HpccTopologySpec], Field(discriminator="kind")
]


class TransportSpec(_Spec):
    """TCP and queue settings for every host and port. ECN thresholds left None are derived from
    the link rate by the ns-3 builder."""

    kind: Literal["dctcp", "newreno", "cubic"] = "dctcp"
    mtu: Annotated[StrictInt, Field(ge=576, le=9216)] = 1500        # bytes
    timestamps: StrictBool = True
    min_rto: DurationNs = 1_000_000                                  # ns
    delayed_ack_timeout: DelayNs = 10_000                            # ns
    delayed_ack_count: Count = 2
    initial_cwnd: Count = 10                                         # segments
    # 512 KB is 3-4 BDPs at 100 Gbps: it never limits a flow here, and keeps the bytes written
    # into the socket ahead of delivery (which fast-forward cannot skip) small.
    send_buffer: BufferBytes = 512_000                               # bytes
    recv_buffer: BufferBytes = 2_000_000                             # bytes
    queue_size: Annotated[StrictInt, Field(ge=10, le=_U32)] = 1000  # packets per port
    ecn_kmin: Count | None = None                                    # packets
    ecn_kmax: Count | None = None                                    # packets
    # Loose flows share one connection per host pair, opened before the first flow starts (as
    # collective libraries keep theirs); training traffic always does.
    persistent_connections: StrictBool = False


class RdmaTransportSpec(_Spec):
    """RoCEv2 queue pairs with DCQCN, HPCC, TIMELY or DCTCP, as the HPCC paper's reference simulator.

    Parameters are the reference's config.txt keys: `config` names such a file, `parameters`
    overrides its keys (same syntax, e.g. {RATE_AI: 40Mb/s, BUFFER_SIZE: 4}), `cc` overrides its
    CC_MODE. `resolved()` gives every value in our units. The scenario's own topology, workload,
    stop_time and link_failures apply: the config file's TOPOLOGY_FILE, FLOW_FILE,
    SIMULATOR_STOP_TIME and LINK_DOWN are only used when the file itself is run as a scenario
    (see load.py).
    """

    kind: Literal["rdma"]
    cc: Literal["dcqcn", "hpcc", "timely", "dctcp", "hpcc-pint"] | None = None  # None: CC_MODE of `config`, else dcqcn
    config: FilePath | None = None                      # a reference config.txt
    parameters: Annotated[
        dict[StrictStr, StrictStr | StrictInt | StrictFloat | StrictBool],
        Field(default_factory=dict)]
    rto: DelayNs = 0                                    # ns; 0 = no timeout (as the reference)
    # Loose flows of a host pair share one queue pair, in FIFO order (as collective libraries keep
    # theirs); else one queue pair per flow, as the reference. Training traffic always shares.
    persistent_connections: StrictBool = False

    @field_validator("parameters", mode="before")
    @classmethod
    def _check_parameters(cls, value: object) -> object:
        if value is None:
            return {}
        if isinstance(value, dict):
            parse_parameters(value)  # raises ParameterError naming the key
        return value

    def resolved(self, config_label: str | None = None) -> RdmaParameters:
        """defaults < config file < parameters < cc, in our units.

        Reads `config` (errors name it as `config_label`, default its path). Raises ScenarioError.
        """
        config = parse_hpcc_config(self.config, config_label) if self.config is not None else None
        return resolve_rdma(config, parse_parameters(self.parameters), self.cc, self.rto)

    @property
    def mtu(self) -> int:
        """Bytes of a full data frame: payload + 48 header bytes (as TransportSpec.mtu)."""
        return self.resolved().payload_bytes + FRAME_OVERHEAD_BYTES


def _default_transport_kind(value: object) -> object:
    """A transport mapping without `kind` is TCP (dctcp), as before RDMA existed."""
    if isinstance(value, dict) and "kind" not in value:
        return {"kind": "dctcp", **value}
    return value


AnyTransportSpec = Annotated[
    TransportSpec | RdmaTransportSpec,
    BeforeValidator(_default_transport_kind),
    Field(discriminator="kind"),
]


class FlowSpec(_Spec):
    """One loose flow: `size` bytes from host `src` to host `dst`, starting at `start` ns, or when
    the flows `after` names (positions of earlier flows in the list) have completed, if later."""

    src: NodeId
    dst: NodeId
    size: SizeBytes
    start: DelayNs = 0
    after: tuple[Annotated[StrictInt, Field(ge=0)], ...] = ()


class LinkFailureSpec(_Spec):
    """The link between nodes `link` goes down at `at` ns (RDMA): what its ports hold is lost,
    and every switch routes around it from then on (the reference's LINK_DOWN)."""

    link: tuple[NodeId, NodeId]
    at: DurationNs


class AccelSpec(_Spec):
    """Steady-state detection and fast-forward settings (see bridge/engine/fastforward.py).

    A partition is steady when, for each of its flows, (max - min) / mean of the delivered rate over
    the last `window` samples of period `tau` is below `theta`, or the same over the last `window`
    blocks of `coarse` samples (for flows whose per-tau rate is noisy but stationary); on HPCC only
    the latter (its rates swing over ~150 us).
    """

    theta: Annotated[float, Field(gt=0, le=1)] = 0.10
    window: Annotated[StrictInt, Field(ge=2, le=10_000)] = 4
    tau: DurationNs = 10_000                                         # ns
    coarse: Annotated[StrictInt, Field(ge=1, le=1000)] = 4
    min_freeze: DurationNs = 20_000                                  # ns: shorter skips aren't worth it
    margin: SizeBytes = 65_536                                       # unsent bytes every flow keeps
    # Memo vertex labels: a flow's rate when its partition forms, in steps of 1/memo_bins of its
    # line rate (coarser: more reuse, less exact).
    memo_bins: Annotated[StrictInt, Field(ge=1, le=1000)] = 10
    # DCQCN and HPCC: a partition that forms with every QP at line rate (HPCC: above its share to its
    # end, HPCC's cut per round trip included where a switch port is loaded past U_TARGET; no switch
    # port full), no queue on its switch ports, and max-min fair shares set by the hosts' NICs alone
    # (served in turn, nothing marked) is frozen at once at those shares, its flows' ends computed,
    # without waiting for the steady test; on DCQCN a flow starting where those shares still hold
    # with it joins it frozen.
    fair_start: bool = True
    # "links" (DCQCN): a partition is also frozen as it forms at max-min fair shares that switch
    # ports set (flows meeting on a switch port), and flows join it where those shares hold; DCQCN
    # gets there after a transient of marks and cuts that the freeze skips. Exact enough for long
    # flows on few-way shared ports (gpt-bench-dcqcn: 32x -> 536x fewer events than stock cold, FCT
    # p99 2.8 %), not for short all-to-all flows beside pipeline sends (moe-bench-dcqcn's
    # steady-only p99 0.8 -> 6.8 %) nor many QPs at full spine ports (leafspine-bench-dcqcn: 49 %).
    # "links" (HPCC): also frozen as it forms at the shares of switch ports held below U_TARGET,
    # where the QPs meeting at a full port pace alike at or above their shares and HPCC's recovery
    # from their overload costs them little of their time left (no joins; gpt-xl-hpcc: 70x -> 121x
    # fewer events cold, moe-bench-hpcc 5.4x -> 6.3x, their errors the same or lower). A partition
    # not pacing so yet is tried again every 10 us (and frozen at its NICs' shares if they bind its
    # QPs to their ends meanwhile), ends beside others' data are computed, and at a thaw the QPs cut
    # go on from their shares (gpt-bench-hpcc cold: 24.7x, FCT p99 4.38 %). Off the
    # ROFT benches no better than "nics" (leaf-spine, tiny scenarios: README Known limits).
    fair_shares: Literal["nics", "links"] = "nics"
    # HPCC with "links": QPs meeting at a full switch port freeze as they form only where HPCC's
    # recovery from their overload (about two round trips per share of it) costs each at most this
    # fraction of its time left. Higher: faster, less exact (gpt-bench-hpcc steady-only: 0.025
    # 21.5x fewer events than stock at FCT p99 4.92 %, 0.3 28.1x at 7.08 %, 1 33.5x at 8.80 %).
    hpcc_recovery: Annotated[float, Field(gt=0, le=1)] = 0.025
    # DCQCN with "links": QPs whose share a switch port sets freeze only once their windows are in
    # flight, the queue they leave at that port (up to its KMIN) with them, and such a flow longer
    # than its window does not join a frozen partition (moe-bench-dcqcn steady-only, "links": 20.5x
    # fewer events than stock at FCT p99 8.03 %, with this 12.5x at 1.28 %; gpt-bench-dcqcn: 4,216x
    # at 2.78 %, with this 38x at 1.90 %).
    window_queues: StrictBool = False
    # RDMA: a flow completes inside its frozen partition when the model has delivered its bytes,
    # and its connection's next flow takes over ("computed", the paper's way); or every flow's last
    # `margin` bytes are simulated packet by packet ("simulated"). TCP: always simulated.
    flow_ends: Literal["computed", "simulated"] = "computed"
    # RDMA memo: a partition of flows too short to be frozen steady (each with less than
    # margin + min_freeze at its line rate left, or less than `episode_bytes` if given) is kept as
    # an episode, until every flow completed, and a hit completes its flows at the recorded times.
    episodes: bool = True
    episode_bytes: SizeBytes | None = None
    # Episode labels give each flow's bytes left in steps of `episode_bytes_step` and how long it
    # has been sending in steps of `episode_age_step`. Coarser steps replay all-to-alls whose hosts
    # joined microseconds apart (moe-8x7b on HPCC: scenarios/moe-8x7b-hpcc.yaml, docs/rdma.md), finer
    # ones tell flows apart better (moe-bench-hpcc's p99 went 3.9 % -> 5.9 % with 64 KiB / 100 us).
    episode_bytes_step: SizeBytes = 4096
    episode_age_step: DurationNs = 10_000
    # An episode also holds the flows known to start on its ports within `episode_join` ns of its
    # forming (released by compute finishing then), labelled by their start in age steps: it is
    # looked up when the first host of an all-to-all starts, not when the last one has joined, and
    # a replay takes the others in still frozen. 0: off.
    episode_join: DelayNs = 0
    # An episode also holds the flows that its own flows' completions start (all they still wait
    # for is in it: an all-to-all's receivers start the next one, or the pipeline send after it),
    # labelled as released and joined to the flows they wait for: a replay takes them in still frozen.
    episode_chains: bool = False
    # Count the simulated events by what the engine did with their partition and by its flows'
    # collectives (summary.json accel.events_by; bridge/engine/ledger.py). A diagnostic, off by default.
    explain_events: bool = False


class AicbSpec(_Spec):
    """A SimAI/AICB workload file (one iteration), replayed `iterations` times."""

    file: FilePath
    iterations: Annotated[StrictInt, Field(ge=1, le=1000)] = 1


class Scenario(_Spec):
    """A parsed scenario. Build it with `load_scenario` / `parse_scenario_dict`, which guarantee:

    - exactly one workload: `flows` (inline or read from `flow_file`), `training`, `jobs` or `aicb`;
    - every flow runs between two distinct hosts of the topology;
    - the topology is connected, its files parse, and its size is within the caps;
    - `topology.fabric_link` (leaf-spine) and `topology.servers_per_leaf` (roft) are set;
    - ecn_kmin <= ecn_kmax <= queue_size where given;
    - an rdma transport's config file and parameters parse, its ECN maps agree and have an entry
      for the rate of every link at a switch.
    """

    name: Annotated[StrictStr, Field(min_length=1)]
    seed: Annotated[StrictInt, Field(ge=0, le=MAX_SEED)] = 1
    topology: TopologySpec
    transport: AnyTransportSpec = TransportSpec()
    flows: tuple[FlowSpec, ...] | None = None
    flow_file: FilePath | None = None
    training: TrainingSpec | None = None
    jobs: tuple[JobSpec, ...] | None = None                          # several trainings on one fabric
    aicb: AicbSpec | None = None
    accel: AccelSpec = AccelSpec()
    stop_time: DurationNs | None = None                              # ns
    link_failures: tuple[LinkFailureSpec, ...] = ()
    _source_path: Path | None = PrivateAttr(None)

    @property
    def source_path(self) -> Path | None:
        """The scenario file this was loaded from (None for a dict without a file)."""
        return self._source_path

    def fingerprint(self) -> str:
        """sha256 hex of a canonical JSON of the parsed scenario.

        Referenced files count by content (sha256), not by path, so a moved scenario keeps its
        fingerprint; `source_path` is left out. Flows read from `flow_file` are in `flows` too.
        """
        data = self.model_dump(mode="json")
        for holder, key in ((data, "flow_file"), (data["topology"], "file"), (data.get("aicb") or {}, "file"),
                            (data["transport"], "config")):
            if holder.get(key):
                holder[key] = {"sha256": hashlib.sha256(Path(holder[key]).read_bytes()).hexdigest()}
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(canonical.encode()).hexdigest()
