"""Build a topology in ns-3 and configure the transport (DCTCP/RED-ECN default, NewReno, Cubic, RDMA)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from ..topology import Topology
from .engine_api import EngineApi, library

TCP_TYPES = {"dctcp": "ns3::TcpDctcp", "newreno": "ns3::TcpNewReno", "cubic": "ns3::TcpCubic"}
IP_TCP_HEADERS = 40
PPP_HEADER = 2  # PointToPointNetDevice adds a 2-byte PPP header to every frame
TIMESTAMP_OPTION = 12  # 10-byte option padded to 12


def segment_size(transport) -> int:
    """Payload per packet: TCP's for the transport's MTU, RDMA's configured payload."""
    if transport.kind == "rdma":
        return transport.resolved().payload_bytes
    return transport.mtu - IP_TCP_HEADERS - (TIMESTAMP_OPTION if transport.timestamps else 0)


@dataclass
class Ns3Network:
    """Handles on one built simulation: the builder, the flow manager and ns-3 itself (through
    cppyy), and `engine`, the run loop's handles on the same objects (through ctypes)."""

    h: SimpleNamespace          # loader handles: ns, wh, cppyy
    builder: object             # wormhole::NetworkBuilder
    flows: object               # wormhole::FlowManager
    n_ports: int
    engine: EngineApi
    rdma: bool = False          # RdmaNetwork / RdmaFlowManager instead of TCP/IP
    # Names of the three numbers a sender's Get/SetCongestionState carry (memo records keep them).
    cc_state_keys: tuple[str, str, str] = ("cwnd", "ssthresh", "alpha")
    # RDMA frames on the wire (PPP header included): a data frame and its payload, and the payload
    # bytes one ACK acknowledges. How fast a flow goes when another's ACKs leave its link.
    payload_bytes: int = 0
    data_frame_bytes: int = 0
    ack_frame_bytes: int = 0
    acked_per_ack: int = 0
    utilization_cc: bool = False   # HPCC, HPCC-PINT: rates follow the links' measured utilization
    # DCQCN: a QP at line rate stays there until a CNP, and QPs share links in turn (max-min).
    # Not DCTCP, whose rates ramp back after each window's marks (tiny-memo-rdma with DCTCP:
    # predicted shares put an incast's flows 0.6 % off).
    fair_share_cc: bool = False
    # HPCC (not PINT, whose utilization is coded): U_TARGET. Its QPs climb to line rate while
    # every link they cross carries less, and a NIC serves its QPs in turn. 0: another transport.
    u_target: float = 0.0
    # RDMA: per link rate (bps), the queue bytes a switch port marks ECN above (KMIN).
    ecn_kmin_bytes: dict[int, int] = field(default_factory=dict)

    def now_ns(self) -> int:
        return self.engine.now_ns()

    def events(self) -> int:
        return self.engine.event_count()


def use_tag_simulator(h: SimpleNamespace) -> None:
    """Select the partition-tag simulator (must happen before any node or event exists)."""
    library(h.library).wh_use_tag_simulator()


def configure_transport(h: SimpleNamespace, transport, seed: int) -> None:
    """Set ns-3 defaults before any node exists (wh_configure_tcp in ns3_patches/engine-api.cc
    lists TCP's); the same seed gives the same run."""
    lib = library(h.library)
    lib.wh_seed(seed)
    if transport.kind == "rdma":
        return  # RDMA settings travel in its RdmaConfig (build_network)
    lib.wh_configure_tcp(TCP_TYPES[transport.kind].encode(), segment_size(transport), transport.send_buffer,
                         transport.recv_buffer, transport.initial_cwnd, transport.delayed_ack_count,
                         transport.delayed_ack_timeout, transport.min_rto, transport.timestamps, seed)


def build_network(h: SimpleNamespace, topology: Topology, transport, n_flows: int, seed: int = 1) -> Ns3Network:
    """Create nodes, links, port queues and routing; one C++ call for the whole network."""
    links = topology.links
    a = np.array([l.a for l in links], dtype=np.uint32)
    b = np.array([l.b for l in links], dtype=np.uint32)
    rate = np.array([l.rate_bps for l in links], dtype=np.uint64)
    delay = np.array([l.delay_ns for l in links], dtype=np.int64)
    is_host = np.zeros(topology.n_nodes, dtype=np.uint8)
    is_host[topology.hosts] = 1
    if transport.kind == "rdma":
        from .rdma import rdma_config

        params = transport.resolved()
        config = rdma_config(lambda: _made(h, "rdma_config"), params)
        config.ecmpSeed = seed
        builder = _made(h, "rdma_network")
        builder.Build(topology.n_nodes, is_host, len(links), a, b, rate, delay, config)
        builder.MonitorQueues(params.qlen_mon_start_ns, params.qlen_mon_end_ns, params.qlen_mon_interval_ns)
        flows = _made(h, "rdma_flow_manager", h.cppyy.addressof(builder), n_flows)
        # (DCTCP has no target rate: its rate stands in)
        keys = {"hpcc": ("rate_bps", "reference_rate_bps", "u"),
                "hpcc-pint": ("rate_bps", "reference_rate_bps", "u"),
                "timely": ("rate_bps", "reference_rate_bps", "last_rtt_ns"),
                }.get(params.cc, ("rate_bps", "target_rate_bps", "alpha"))
        # On data frames and ACKs. The overheads hold the PPP header (ns3_patches/rdma.h): counted
        # twice, HPCC's 1080-byte frames took 87 ns at 100 Gbps instead of 86 in the fair-share model.
        telemetry = {"hpcc": config.intBytes, "hpcc-pint": config.pintBytes}.get(params.cc, 0)
        timestamp = config.timestampBytes if params.cc == "timely" else 0    # on data frames
        payload = int(config.payloadBytes)
        acked_per_ack = min(max(int(config.ackIntervalBytes), payload), max(int(config.chunkBytes), payload))
        n_ports = int(builder.GetNPorts())
        return Ns3Network(h=h, builder=builder, flows=flows, n_ports=n_ports, rdma=True,
                          engine=_engine_api(h, builder, flows, n_ports, rdma=True),
                          cc_state_keys=keys, payload_bytes=payload,
                          data_frame_bytes=payload + config.dataOverheadBytes + telemetry + timestamp,
                          ack_frame_bytes=config.ackBytes + telemetry, acked_per_ack=acked_per_ack,
                          utilization_cc=params.cc in ("hpcc", "hpcc-pint"), fair_share_cc=params.cc == "dcqcn",
                          u_target=params.u_target if params.cc == "hpcc" else 0.0,
                          ecn_kmin_bytes={int(rate): int(kmin) for rate, kmin, _, _ in params.ecn})
    config = _made(h, "queue_config")
    config.queuePackets = transport.queue_size
    config.ecnMarking = transport.kind == "dctcp"
    config.kminPackets = float(transport.ecn_kmin or 0)
    config.kmaxPackets = float(transport.ecn_kmax or 0)
    config.meanPacketBytes = transport.mtu
    builder = _made(h, "tcp_network")
    builder.Build(topology.n_nodes, is_host, len(links), a, b, rate, delay, config)
    flows = _made(h, "tcp_flow_manager", h.cppyy.addressof(builder), n_flows)
    n_ports = int(builder.GetNPorts())
    return Ns3Network(h=h, builder=builder, flows=flows, n_ports=n_ports,
                      engine=_engine_api(h, builder, flows, n_ports, rdma=False))


# What _made makes, by its name in ns3_patches/engine-api.cc.
_CLASSES = {"queue_config": "wormhole::QueueConfig", "tcp_network": "wormhole::NetworkBuilder",
            "tcp_flow_manager": "wormhole::FlowManager", "rdma_config": "wormhole::RdmaConfig",
            "rdma_network": "wormhole::RdmaNetwork", "rdma_flow_manager": "wormhole::RdmaFlowManager"}


def _made(h: SimpleNamespace, kind: str, *args):
    """A new C++ object made by the patches (wh_<kind>_new: cppyy would compile its constructor,
    members and all), bound for cppyy and deleted when its proxy goes."""
    lib = library(h.library)
    address = getattr(lib, f"wh_{kind}_new")(*args)
    made = h.cppyy.bind_object(address, _CLASSES[kind])
    weakref.finalize(made, getattr(lib, f"wh_{kind}_delete"), address)
    return made


def _engine_api(h: SimpleNamespace, builder, flows, n_ports: int, rdma: bool) -> EngineApi:
    return EngineApi(h.library, h.cppyy.addressof(builder), h.cppyy.addressof(flows), n_ports, rdma)
