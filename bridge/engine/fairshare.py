"""Max-min fair rates of queue pairs over shared ports, with their ACK frames taking port time.

Progressive filling: a flow's rate rises with the others' until one of its ports is full or it
reaches its own cap; then it is fixed, and the rest rise on. This is how QPs at line rate share a
NIC (served in turn) and a switch port (round robin) when nothing cuts their rates: what the
engine predicts when a flow leaves a frozen partition (computed_ends._share_gains). A port carries
its line rate less the ACK frames crossing it, at the flows' rates and then at their shares, over
three rounds.

The filling runs in C++ (ns3_patches/fair-shares.cc): a frozen partition of moe-8x7b's expert
all-to-alls holds about 50 flows, and the engine fills it once or twice per flow end.
"""

from __future__ import annotations

import numpy as np

from ..ns3.engine_api import FairSharesKernel


class AckedShares:
    """The fair shares of a set of flows. `data` and `acks` are (flow, port) edges of the flows'
    data and ACK paths (flows numbered from 0), `caps` the most each flow can send (payload bytes
    per ns); per port, `frame_ns` is the ns a data frame of `payload` bytes takes and
    `ack_frame_ns` an ACK frame's, which acknowledges `acked_per_ack` payload bytes. `lib` is the
    patch library (bridge.ns3.engine_api.library)."""

    def __init__(self, lib, data: tuple[np.ndarray, np.ndarray], acks: tuple[np.ndarray, np.ndarray],
                 caps: np.ndarray, frame_ns: np.ndarray, ack_frame_ns: np.ndarray, payload: float,
                 acked_per_ack: float):
        ints = [_buffer(a, np.int64) for a in (*data, *acks)]
        self.n_flows = len(caps)
        self._kernel = FairSharesKernel(lib, *ints, _buffer(caps, np.float64), _buffer(frame_ns, np.float64),
                                        _buffer(ack_frame_ns, np.float64), len(data[0]), len(acks[0]),
                                        len(caps), len(frame_ns), float(payload), float(acked_per_ack))

    def shares(self, rates: np.ndarray, without: int | None = None) -> np.ndarray:
        """The shares starting from `rates`; flow `without` sends nothing (neither data nor ACKs)."""
        rates = np.ascontiguousarray(rates, dtype=np.float64)
        out = np.empty(self.n_flows)
        self._kernel.Shares(rates, -1 if without is None else without, out)
        return out


def _buffer(values: np.ndarray, dtype) -> np.ndarray:
    """A contiguous array of `dtype`, to pass as a C++ pointer."""
    return np.ascontiguousarray(values, dtype=dtype)
