"""Max-min fair rates of flows over shared ports (progressive filling).

A flow's rate rises with the others' until one of its ports is full or it reaches its own cap;
then it is fixed, and the rest rise on. This is how QPs at line rate share a NIC (served in turn)
and a switch port (round robin) when nothing cuts their rates: what the engine predicts when a
flow leaves a frozen partition (fastforward._share_gains).
"""

from __future__ import annotations


def max_min_rates(paths: dict[int, frozenset[int]], capacity: dict[int, float],
                  caps: dict[int, float]) -> dict[int, float]:
    """Per flow, its max-min fair rate: `paths` are the ports each flow's data leaves by,
    `capacity` what each port carries, `caps` the most each flow can send."""
    rates: dict[int, float] = {}
    room = {p: capacity[p] for ports in paths.values() for p in ports}
    active = set(paths)
    while active:
        users: dict[int, list[int]] = {}
        for f in active:
            for p in paths[f]:
                users.setdefault(p, []).append(f)
        level = min(min(caps[f] for f in active),
                    min((room[p] / len(fs) for p, fs in users.items()), default=float("inf")))
        full = {p for p, fs in users.items() if room[p] / len(fs) <= level * (1 + 1e-12)}
        fixed = sorted(f for f in active if caps[f] <= level * (1 + 1e-12) or not full.isdisjoint(paths[f]))
        for f in fixed:
            rates[f] = level
            active.discard(f)
            for p in paths[f]:
                room[p] = max(0.0, room[p] - level)
    return rates
