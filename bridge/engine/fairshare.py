"""Max-min fair rates of flows over shared ports (progressive filling).

A flow's rate rises with the others' until one of its ports is full or it reaches its own cap;
then it is fixed, and the rest rise on. This is how QPs at line rate share a NIC (served in turn)
and a switch port (round robin) when nothing cuts their rates: what the engine predicts when a
flow leaves a frozen partition (fastforward._share_gains).

The filling runs on arrays of (flow, port) edges: a frozen partition of moe-8x7b's expert
all-to-alls holds about 50 flows, and the engine fills it once or twice per flow end.
"""

from __future__ import annotations

import numpy as np

TIE = 1 + 1e-12   # a port this close to the level is full with it


def progressive_fill(edge_flows: np.ndarray, edge_ports: np.ndarray, capacity: np.ndarray,
                     caps: np.ndarray, active: np.ndarray | None = None) -> np.ndarray:
    """Per flow, its max-min fair rate. Flow edge_flows[i] sends through port edge_ports[i];
    `capacity` is what each port carries (indexed by port), `caps` the most each flow can send.
    Flows not `active` (all are by default) send nothing."""
    n_ports = len(capacity)
    rates = np.zeros(len(caps))
    active = np.ones(len(caps), dtype=bool) if active is None else active.copy()
    room = capacity.astype(float)
    while active.any():
        live = active[edge_flows]
        users = np.bincount(edge_ports[live], minlength=n_ports)
        used = users > 0
        per_user = np.full(n_ports, np.inf)
        per_user[used] = room[used] / users[used]
        level = min(caps[active].min(), per_user.min(initial=np.inf))
        full = per_user <= level * TIE
        fixed = active & (caps <= level * TIE)
        fixed[edge_flows[live & full[edge_ports]]] = True
        rates[fixed] = level
        active &= ~fixed
        room = np.maximum(0.0, room - level * np.bincount(edge_ports[fixed[edge_flows]], minlength=n_ports))
    return rates


class AckedShares:
    """Max-min fair payload rates of QPs whose ACK frames take time on the ports they cross: a
    port carries its line rate less the ACKs crossing it, at given rates and then at the shares,
    until they settle (three rounds).

    `data` and `acks` are (flow, port) edges of the flows' data and ACK paths, `caps` the most
    each flow can send; per port, `frame_ns` is the ns a data frame of `payload` bytes takes and
    `ack_frame_ns` an ACK frame's, which acknowledges `acked_per_ack` payload bytes."""

    def __init__(self, data: tuple[np.ndarray, np.ndarray], acks: tuple[np.ndarray, np.ndarray],
                 caps: np.ndarray, frame_ns: np.ndarray, ack_frame_ns: np.ndarray, payload: int,
                 acked_per_ack: int):
        self.data, self.acks, self.caps = data, acks, caps
        self.frame_ns, self.payload, self.acked_per_ack = frame_ns, payload, acked_per_ack
        self.edge_ack_ns = ack_frame_ns[acks[1]]

    def shares(self, rates: np.ndarray, without: int | None = None) -> np.ndarray:
        """The shares starting from `rates`; flow `without` sends nothing (neither data nor ACKs)."""
        active = np.ones(len(self.caps), dtype=bool)
        shares = rates
        if without is not None:
            active[without] = False
            shares = rates.copy()
            shares[without] = 0.0
        ack_flows, ack_ports = self.acks
        for _ in range(3):
            busy = np.bincount(ack_ports, weights=shares[ack_flows] / self.acked_per_ack * self.edge_ack_ns,
                               minlength=len(self.frame_ns))      # ns per ns the ACK frames take
            capacity = np.maximum(0.0, 1 - busy) * self.payload / self.frame_ns
            shares = progressive_fill(*self.data, capacity, self.caps, active)
        return shares
