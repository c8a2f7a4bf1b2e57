"""What the run loop calls in the patches, through ctypes (ns3_patches/engine-api.cc).

cppyy compiles a call wrapper the first time each C++ method is called, 2-7 ms apiece; the run
loop calls about forty, which took a third of a short accelerated run's loop. These functions are
compiled into the patch library, so nothing is compiled at run time; a call costs about 0.3 us
(cppyy's: 0.1 us once compiled). Building the network stays on cppyy; the ns-3 settings before it
(the simulator, the seed, TCP's defaults: a wrapper per value type and call, 0.1 s) and, of
reading the results, the per-QP counters (cppyy's first RdmaQp pointer builds its class, 40 ms)
come through here, and the objects the network is built from are made here (cppyy compiled their
constructors, members and all: NetworkBuilder's 130 ms).

Handles keep the C++ methods' names and arguments: `table.GetDelivered(flow)` as before. An array
argument must have the element type of the C++ pointer and be contiguous (checked: ctypes would
pass any buffer).
"""

from __future__ import annotations

import ctypes
from ctypes import c_char_p, c_double, c_int, c_int64, c_uint32, c_uint64, c_void_p
from functools import partial
from pathlib import Path

import numpy as np

_P = c_void_p  # objects and arrays alike
_SIGNATURES = {
    "wh_use_tag_simulator": (None, []),
    "wh_seed": (None, [c_uint32]),
    "wh_configure_tcp": (None, [c_char_p, c_uint32, c_uint32, c_uint32, c_uint32, c_uint32, c_int64, c_int64,
                                c_int, c_uint64]),
    "wh_run_until": (c_int64, [c_int64]),
    "wh_now_ns": (c_int64, []),
    "wh_event_count": (c_uint64, []),
    "wh_ports_of": (_P, [_P, c_int]),
    "wh_ports_read_queue_bytes": (None, [_P, _P]),
    "wh_table_n_flows": (c_uint32, [_P]),
    "wh_table_delivered_array": (_P, [_P]),
    "wh_table_skipped_array": (_P, [_P]),
    "wh_table_start_ns": (c_int64, [_P, c_uint32]),
    "wh_table_end_ns": (c_int64, [_P, c_uint32]),
    "wh_table_pop_completed": (c_uint32, [_P, _P, c_uint32]),
    "wh_sim_get": (_P, []),
    "wh_sim_attach_ports": (None, [_P, _P]),
    "wh_sim_freeze": (c_uint32, [_P, _P, c_uint32]),
    "wh_sim_thaw": (None, [_P, c_uint32, c_int64]),
    "wh_sim_pop_interrupted": (c_uint32, [_P, _P, c_uint32]),
    "wh_sim_error_total": (c_uint64, [_P]),
    "wh_sim_event_count": (c_uint64, [_P]),
    "wh_sim_enable_log": (None, [_P, c_int]),
    "wh_sim_read_log": (c_uint64, [_P, _P, _P, _P, c_uint64]),
    "wh_probe_new": (_P, [_P, _P, c_uint32]),
    "wh_probe_delete": (None, [_P]),
    "wh_probe_start": (None, [_P, c_int64]),
    "wh_probe_stop": (None, [_P]),
    "wh_probe_read": (c_uint32, [_P, _P, _P, _P, _P, c_uint32]),
    "wh_fair_shares_new": (_P, [_P, _P, c_uint32, _P, _P, c_uint32, _P, c_uint32, _P, _P, c_uint32,
                                c_double, c_double]),
    "wh_fair_shares_delete": (None, [_P]),
    "wh_fair_shares_shares": (None, [_P, _P, c_int64, _P]),
}
for _kind in ("tcp", "rdma"):  # FlowManager / RdmaFlowManager and their senders, alike
    _SIGNATURES.update({
        f"wh_{_kind}_table": (_P, [_P]),
        f"wh_{_kind}_open_connection": (c_uint32, [_P, c_uint32, c_uint32]),
        f"wh_{_kind}_connection_path": (c_uint32, [_P, c_uint32, _P, c_uint32]),
        f"wh_{_kind}_start_flow": (None, [_P, c_uint32, c_uint32, c_uint64, c_int]),
        f"wh_{_kind}_skip_flow": (c_uint64, [_P, c_uint32, c_uint32, c_uint64]),
        f"wh_{_kind}_sender": (_P, [_P, c_uint32]),
        f"wh_{_kind}_sender_is_connected": (c_int, [_P]),
        f"wh_{_kind}_sender_get_congestion_state": (c_uint32, [_P, _P, c_uint32]),
        f"wh_{_kind}_sender_set_congestion_state": (None, [_P, c_double, c_double, c_double]),
        f"wh_{_kind}_sender_untransmitted_of": (c_uint64, [_P, c_uint32]),
    })
for _made in ("queue_config", "tcp_network", "rdma_config", "rdma_network"):
    _SIGNATURES.update({f"wh_{_made}_new": (_P, []), f"wh_{_made}_delete": (None, [_P])})
for _made in ("tcp_flow_manager", "rdma_flow_manager"):
    _SIGNATURES.update({f"wh_{_made}_new": (_P, [_P, c_uint32]), f"wh_{_made}_delete": (None, [_P])})
_SIGNATURES["wh_rdma_resume"] = (None, [_P, c_uint32])
_SIGNATURES["wh_rdma_sender_shift_times"] = (None, [_P, c_int64])
_SIGNATURES["wh_rdma_sender_rate_bps"] = (c_double, [_P])
_SIGNATURES["wh_rdma_sender_rate_step_ns"] = (c_int64, [_P, c_int64])
_SIGNATURES["wh_rdma_sender_keep_rate_step"] = (None, [_P, c_int64])
_SIGNATURES["wh_rdma_sender_retransmitted_bytes"] = (c_uint64, [_P])
_SIGNATURES["wh_rdma_sender_timeouts"] = (c_uint64, [_P])
_SIGNATURES["wh_rdma_sender_window_bound"] = (c_int, [_P])
_SIGNATURES["wh_rdma_sender_window"] = (c_uint64, [_P])

_libraries: dict[Path, ctypes.CDLL] = {}


def library(path: Path) -> ctypes.CDLL:
    """The patch library at `path` (the one cppyy loaded: the same objects), its functions typed."""
    lib = _libraries.get(path)
    if lib is None:
        lib = ctypes.CDLL(str(path))
        for name, (restype, argtypes) in _SIGNATURES.items():
            function = getattr(lib, name)
            function.restype, function.argtypes = restype, argtypes
        lib = _libraries[path] = lib
    return lib


def pointer(values: np.ndarray, dtype) -> int:
    """The address of a contiguous array of `dtype`, to pass where C++ takes a pointer."""
    if values.dtype != dtype or not values.flags.c_contiguous:
        raise TypeError(f"expected a contiguous {np.dtype(dtype)} array, got {values.dtype}")
    if values.flags.writeable and values.nbytes:
        return ctypes.addressof(ctypes.c_char.from_buffer(values))   # (0.3 us; .ctypes.data: 1 us)
    return values.ctypes.data


def _view(address: int, n: int) -> np.ndarray:
    """A read-only array over `n` uint64 the C++ side keeps at `address` (and updates)."""
    view = np.ctypeslib.as_array((c_uint64 * n).from_address(address)) if n else np.zeros(0, np.uint64)
    view.flags.writeable = False
    return view


class _Reused:
    """The address of the array a call site passes every time (an output buffer after each run
    slice): taken once, about 1 us each time otherwise. Holding the array keeps its address."""

    __slots__ = ("dtype", "array", "address")

    def __init__(self, dtype):
        self.dtype, self.array, self.address = dtype, None, 0

    def __call__(self, values: np.ndarray) -> int:
        if values is not self.array:
            self.address, self.array = pointer(values, self.dtype), values
        return self.address


class Table:
    """wormhole::FlowTable: per flow, bytes delivered and skipped (read in place: the engine asks
    for them millions of times in a large run, 0.14 us each so, 0.3 us through a call), start
    and end."""

    def __init__(self, lib: ctypes.CDLL, address: int):
        self.address = address
        n_flows = lib.wh_table_n_flows(address)
        self.delivered = _view(lib.wh_table_delivered_array(address), n_flows)
        self.skipped = _view(lib.wh_table_skipped_array(address), n_flows)
        self.GetDelivered = self.delivered.item
        self.GetSkipped = self.skipped.item
        self.GetStartNs = partial(lib.wh_table_start_ns, address)
        self.GetEndNs = partial(lib.wh_table_end_ns, address)
        self._pop = partial(lib.wh_table_pop_completed, address)
        self._completed = _Reused(np.uint32)

    def PopCompleted(self, out: np.ndarray, cap: int) -> int:
        return self._pop(self._completed(out), min(cap, len(out)))


def _method(lib: ctypes.CDLL, prefix: str, address: int, name: str):
    """The C entry point `prefix`_`name`, bound to the object at `address` (its first argument)."""
    return partial(getattr(lib, f"{prefix}_{name}"), address)


class Sender:
    """A connection's sender: wormhole::FlowSender (TCP) or wormhole::RdmaQp."""

    def __init__(self, lib: ctypes.CDLL, kind: str, address: int, state_buffer: _Reused):
        self._state_buffer = state_buffer
        method = partial(_method, lib, f"wh_{kind}_sender", address)
        self.IsConnected = method("is_connected")
        self.SetCongestionState = method("set_congestion_state")
        self.GetUntransmittedOf = method("untransmitted_of")
        self._get_state = method("get_congestion_state")
        if kind == "rdma":
            self.ShiftTimes = method("shift_times")
            self.GetRateBps = method("rate_bps")   # (GetCongestionState's first value, in one call)
            self.GetRateStepNs = method("rate_step_ns")
            self.KeepRateStep = method("keep_rate_step")
            self.GetRetransmittedBytes = method("retransmitted_bytes")
            self.GetTimeouts = method("timeouts")
            self.IsWindowBound = method("window_bound")
            self.GetWindow = method("window")

    def GetCongestionState(self, out: np.ndarray, cap: int) -> int:
        return self._get_state(self._state_buffer(out), min(cap, len(out)))


class Flows:
    """wormhole::FlowManager (TCP) or RdmaFlowManager: connections and flows."""

    def __init__(self, lib: ctypes.CDLL, kind: str, address: int):
        self._lib, self._kind = lib, kind
        method = partial(_method, lib, f"wh_{kind}", address)
        self.OpenConnection = method("open_connection")
        self.SkipFlow = method("skip_flow")
        self._start = method("start_flow")
        self._path = method("connection_path")
        self._sender = method("sender")
        if kind == "rdma":
            self.Resume = method("resume")
        self.table = Table(lib, getattr(lib, f"wh_{kind}_table")(address))
        self._state_buffer = _Reused(np.float64)      # (the engine reads every sender's into one)

    def StartFlow(self, flow: int, conn: int, size: int, kick: bool = True) -> None:
        """kick=False (RDMA): the QP holds it until Resume."""
        self._start(flow, conn, size, kick)

    def GetConnectionPath(self, conn: int, out: np.ndarray, cap: int) -> int:
        return self._path(conn, pointer(out, np.uint32), min(cap, len(out)))

    def GetSender(self, conn: int) -> Sender:
        return Sender(self._lib, self._kind, self._sender(conn), self._state_buffer)


class TagSimulator:
    """wormhole::TagSimulatorImpl, the running simulator."""

    def __init__(self, lib: ctypes.CDLL, address: int):
        self.address = address
        self.AttachPorts = partial(lib.wh_sim_attach_ports, address)
        self.Thaw = partial(lib.wh_sim_thaw, address)
        self.GetErrorTotal = partial(lib.wh_sim_error_total, address)
        self.GetEventCount = partial(lib.wh_sim_event_count, address)
        self._enable_log = partial(lib.wh_sim_enable_log, address)
        self._freeze = partial(lib.wh_sim_freeze, address)
        self._pop_interrupted = partial(lib.wh_sim_pop_interrupted, address)
        self._read_log = partial(lib.wh_sim_read_log, address)
        self._interrupted = _Reused(np.uint32)

    def Freeze(self, tags: np.ndarray, n: int) -> int:
        return self._freeze(pointer(tags, np.uint32), min(n, len(tags)))

    def PopInterrupted(self, out: np.ndarray, cap: int) -> int:
        return self._pop_interrupted(self._interrupted(out), min(cap, len(out)))

    def EnableLog(self, on: bool) -> None:
        self._enable_log(on)

    def ReadLog(self, ts: np.ndarray, ctx: np.ndarray, tags: np.ndarray, most: int) -> int:
        most = min(most, len(ts), len(ctx), len(tags))
        return self._read_log(pointer(ts, np.int64), pointer(ctx, np.uint32), pointer(tags, np.uint32), most)


class RateProbe:
    """wormhole::RateProbe sampling into the arrays it is given (read by `Read`)."""

    def __init__(self, lib: ctypes.CDLL, table: Table, ports: int, times: np.ndarray, delivered: np.ndarray,
                 arrived: np.ndarray, queues: np.ndarray):
        capacity = len(times)
        if not (delivered.shape[0] == arrived.shape[0] == queues.shape[0] == capacity):
            raise ValueError("the probe's arrays must hold the same number of samples")
        self._arrays = (times, delivered, arrived, queues)   # (kept alive: C++ writes into them)
        self._delete = lib.wh_probe_delete
        self.address = lib.wh_probe_new(table.address, ports, capacity)
        self.Start = partial(lib.wh_probe_start, self.address)
        self.Stop = partial(lib.wh_probe_stop, self.address)
        self._read = partial(lib.wh_probe_read, self.address, pointer(times, np.int64),
                             pointer(delivered, np.uint64), pointer(arrived, np.int64),
                             pointer(queues, np.uint32), capacity)

    def Read(self) -> int:
        """Copy the latest samples into the arrays (rate-probe.h); returns how many."""
        return self._read()

    def __del__(self):
        self._delete(self.address)


class FairSharesKernel:
    """wormhole::FairShares (ns3_patches/fair-shares.h); arrays as its constructor takes them."""

    def __init__(self, lib: ctypes.CDLL, data_flows: np.ndarray, data_ports: np.ndarray, ack_flows: np.ndarray,
                 ack_ports: np.ndarray, caps: np.ndarray, frame_ns: np.ndarray, ack_frame_ns: np.ndarray,
                 n_data: int, n_acks: int, n_flows: int, n_ports: int, payload: float, acked_per_ack: float):
        i64, f64 = np.int64, np.float64
        self._delete = lib.wh_fair_shares_delete
        self.address = lib.wh_fair_shares_new(
            pointer(data_flows, i64), pointer(data_ports, i64), n_data, pointer(ack_flows, i64),
            pointer(ack_ports, i64), n_acks, pointer(caps, f64), n_flows, pointer(frame_ns, f64),
            pointer(ack_frame_ns, f64), n_ports, payload, acked_per_ack)
        self._shares = partial(lib.wh_fair_shares_shares, self.address)

    def Shares(self, rates: np.ndarray, without: int, out: np.ndarray) -> None:
        self._shares(pointer(rates, np.float64), without, pointer(out, np.float64))

    def __del__(self):
        self._delete(self.address)


class EngineApi:
    """One built network's handles for the run loop: `flows` (and `table`), the ports, the
    simulator, and the probe and fair-share kernels it creates."""

    def __init__(self, library_path: Path, builder_address: int, flows_address: int, n_ports: int, rdma: bool):
        lib = self.lib = library(library_path)
        self.n_ports = n_ports
        self.flows = Flows(lib, "rdma" if rdma else "tcp", flows_address)
        self.table = self.flows.table
        self.ports = lib.wh_ports_of(builder_address, rdma)            # PortNetwork*
        self.run_until = lib.wh_run_until
        self.now_ns = lib.wh_now_ns
        self.event_count = lib.wh_event_count

    def ReadQueueBytes(self, out: np.ndarray) -> None:
        """Bytes queued per port (PortNetwork::ReadQueueBytes)."""
        if len(out) < self.n_ports:
            raise ValueError(f"{len(out)} entries for {self.n_ports} ports")
        self.lib.wh_ports_read_queue_bytes(self.ports, pointer(out, np.uint32))

    def simulator(self) -> TagSimulator | None:
        """The partition-tag simulator, if it is the one running."""
        address = self.lib.wh_sim_get()
        return TagSimulator(self.lib, address) if address else None

    def rate_probe(self, times: np.ndarray, delivered: np.ndarray, arrived: np.ndarray,
                   queues: np.ndarray) -> RateProbe:
        return RateProbe(self.lib, self.table, self.ports, times, delivered, arrived, queues)
