"""Port-level network partitions: connected components of the active flows' port graph.

Two flows are in one partition when they share a port (one direction of a link, with its queue),
counting both the data path and the ACK path, and for every port a packet leaves by, the port it
arrives at (the other side of the link: the arrival event carries that port's tag). Then every
event of the simulation belongs to exactly one partition through its tag (the ports it touches,
and the node tags of its hosts: a host has one link, so its node tag can only belong to the
partition using that link), which is what makes freezing a partition exact. Kept incrementally: a
starting flow merges the partitions it touches, a finishing flow splits its partition into the
components that remain, or hands its ports to its connection's next flow (same path: no change).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count


@dataclass
class Partition:
    id: int
    flows: set[int] = field(default_factory=set)
    ports: set[int] = field(default_factory=set)
    hosts: set[int] = field(default_factory=set)

    def tags(self, n_ports: int) -> list[int]:
        """Simulator tags of this partition: its ports, then its hosts' node tags."""
        return sorted(self.ports) + sorted(n_ports + h for h in self.hosts)


class Partitions:
    """The partitions of the active flows, updated as flows start and finish."""

    def __init__(self) -> None:
        self.by_id: dict[int, Partition] = {}
        self.of_port: dict[int, int] = {}
        self.of_flow: dict[int, int] = {}
        self.flow_ports: dict[int, frozenset[int]] = {}
        self.flow_hosts: dict[int, tuple[int, int]] = {}
        self.users: dict[int, set[int]] = {}            # port -> active flows using it
        self.host_users: dict[int, set[int]] = {}       # host -> active flows with an end there
        self.twins: dict[frozenset[int], int] = {}      # ports -> how many active flows use exactly them
        self._ids = count()

    def __iter__(self):
        return iter(self.by_id.values())

    def __len__(self) -> int:
        return len(self.by_id)

    def touching(self, ports) -> set[int]:
        """Ids of the partitions that use any of these ports."""
        return {self.of_port[p] for p in ports if p in self.of_port}

    def add_flow(self, flow: int, ports: frozenset[int], hosts: tuple[int, int]) -> Partition:
        """A flow starts: merge every partition it touches with it; returns the result."""
        merged = sorted(self.touching(ports), key=lambda pid: -len(self.by_id[pid].flows))
        # Keep the largest partition's id so that its history (steady samples) stays attached.
        part = self.by_id[merged[0]] if merged else self._new()
        for pid in merged[1:]:
            other = self.by_id.pop(pid)
            part.flows |= other.flows
            part.ports |= other.ports
            part.hosts |= other.hosts
            for f in other.flows:
                self.of_flow[f] = part.id
            for p in other.ports:
                self.of_port[p] = part.id
        self.flow_ports[flow] = ports
        self.flow_hosts[flow] = hosts
        self.twins[ports] = self.twins.get(ports, 0) + 1
        for h in hosts:
            self.host_users.setdefault(h, set()).add(flow)
        part.flows.add(flow)
        part.ports |= ports
        part.hosts |= set(hosts)
        self.of_flow[flow] = part.id
        for p in ports:
            self.of_port[p] = part.id
            self.users.setdefault(p, set()).add(flow)
        return part

    def replace_flow(self, old: int, new: int) -> Partition:
        """`old` finishes and `new` takes over its ports and hosts (the next flow of a connection):
        the partition keeps its shape; returns it."""
        part = self.by_id[self.of_flow.pop(old)]
        part.flows.remove(old)
        part.flows.add(new)
        self.of_flow[new] = part.id
        self.flow_ports[new] = ports = self.flow_ports.pop(old)
        self.flow_hosts[new] = hosts = self.flow_hosts.pop(old)
        for p in ports:
            self.users[p].remove(old)
            self.users[p].add(new)
        for h in set(hosts):
            self.host_users[h].discard(old)
            self.host_users[h].add(new)
        return part

    def remove_flow(self, flow: int) -> list[Partition]:
        """A flow finishes: split what remains of its partition into components; returns them."""
        pid = self.of_flow.pop(flow)
        ports, hosts = self.flow_ports.pop(flow), set(self.flow_hosts.pop(flow))
        for h in hosts:
            self.host_users[h].discard(flow)
            if not self.host_users[h]:
                del self.host_users[h]
        self.twins[ports] -= 1
        if self.twins[ports]:
            # A flow on exactly its ports remains (its connection's next flow, in a thaw that drops
            # the flows completed while frozen): nothing splits and no port is freed.
            part = self.by_id[pid]
            part.flows.discard(flow)
            for p in ports:
                self.users[p].discard(flow)
            part.hosts -= {h for h in hosts if self.host_users.get(h, set()).isdisjoint(part.flows)}
            return [part]
        del self.twins[ports]
        old = self.by_id.pop(pid)
        gone, kept = [], []                              # its ports no other flow uses, and the others
        for p in ports:
            self.users[p].discard(flow)
            if self.users[p]:
                kept.append(p)
            else:
                del self.users[p]
                gone.append(p)
        rest = old.flows - {flow}
        if rest and self._still_joined(kept):            # no split (the common case): shrink in place
            part = self._new(old.id)
            part.flows, part.ports = rest, old.ports.difference(gone)
            part.hosts = {h for h in old.hosts if h in self.host_users and not self.host_users[h].isdisjoint(rest)}
            for p in gone:
                del self.of_port[p]
            return [part]
        found = components(self.flow_ports, rest, self.users)
        for p in old.ports:
            del self.of_port[p]
        parts = []
        for component in found:
            part = self._new(old.id if not parts else None)  # the largest keeps the id
            for f in component:
                part.flows.add(f)
                part.ports |= self.flow_ports[f]
                part.hosts |= set(self.flow_hosts[f])
                self.of_flow[f] = part.id
            for p in part.ports:
                self.of_port[p] = part.id
            parts.append(part)
        return parts

    def _still_joined(self, ports: list[int]) -> bool:
        """Whether the flows left on these ports (those a finished flow shared) still reach each
        other. Every flow that remains in its partition reached the finished one through one of
        them, so then the partition holds together. The flows on one port reach each other through
        it: a search from the first port stops as soon as it has seen every port."""
        if len(ports) <= 1:
            return True
        targets = set(ports)
        targets.discard(ports[0])
        seen_ports, seen_flows = {ports[0]}, set(self.users[ports[0]])
        stack = list(seen_flows)
        while stack:
            for p in self.flow_ports[stack.pop()]:
                if p in seen_ports:
                    continue
                seen_ports.add(p)
                targets.discard(p)
                if not targets:
                    return True
                for g in self.users[p]:
                    if g not in seen_flows:
                        seen_flows.add(g)
                        stack.append(g)
        return False

    def snapshot(self) -> set[frozenset[int]]:
        """The partitions as sets of flows (for comparisons)."""
        return {frozenset(p.flows) for p in self}

    def _new(self, pid: int | None = None) -> Partition:
        part = Partition(next(self._ids) if pid is None else pid)
        self.by_id[part.id] = part
        return part


def components(flow_ports: dict[int, frozenset[int]], flows: set[int],
               users: dict[int, set[int]] | None = None) -> list[set[int]]:
    """Connected components of `flows` through shared ports, largest first. `users` (port -> flows
    using it, none outside `flows` on their ports) saves building it from flow_ports."""
    if users is None:
        users = {}
        for f in flows:
            for p in flow_ports[f]:
                users.setdefault(p, set()).add(f)
    seen: set[int] = set()
    done_ports: set[int] = set()    # each port's users are scanned once (a port of k flows: not k times)
    found = []
    for start in sorted(flows):
        if start in seen:
            continue
        component, stack = set(), [start]
        seen.add(start)
        while stack:
            f = stack.pop()
            component.add(f)
            for p in flow_ports[f]:
                if p in done_ports:
                    continue
                done_ports.add(p)
                for g in users[p]:
                    if g not in seen:
                        seen.add(g)
                        stack.append(g)
        found.append(component)
    return sorted(found, key=lambda c: (-len(c), min(c)))
