"""wormhole::TagSimulatorImpl on real ns-3: stock identity, tag attribution, freeze/thaw, EventIds."""

from __future__ import annotations

import numpy as np
import pytest

from bridge.ns3.network import build_network, configure_transport
from bridge.scenario import parse_scenario_dict
from bridge.topology import build_topology

LINK = {"rate": "100Gbps", "delay": "1us"}
HOSTS_PER_LEAF = 6
TOPOLOGY = {"kind": "leaf-spine", "leaves": 2, "spines": 2, "hosts_per_leaf": HOSTS_PER_LEAF,
            "host_link": LINK, "fabric_link": LINK}
# Three partitions that share both leaves but no link: A and B stay under one leaf each, C crosses
# the spines (it owns every fabric port, so the ECMP choice does not matter).
GROUPS = {"A": [(0, 1), (2, 3)], "B": [(6, 7), (8, 9)], "C": [(4, 10), (11, 5)]}
NO_TAG = 0xFFFFFFFF
LIMIT_NS = 10**9

HELPERS = r"""
#include "ns3/ipv4-l3-protocol.h"
namespace tagtest {
using namespace ns3;
std::vector<int64_t> firedAt, firedId;
void Fire(uint32_t id) { firedAt.push_back(Simulator::Now().GetNanoSeconds()); firedId.push_back(id); }
EventId At(int64_t delayNs, uint32_t id) { return Simulator::Schedule(NanoSeconds(delayNs), &Fire, id); }
void AtNode(uint32_t node, int64_t delayNs, uint32_t id)
{ Simulator::ScheduleWithContext(node, NanoSeconds(delayNs), &Fire, id); }
// An event on `node` that schedules (inheriting its tag) one event per delay; keeps their EventIds.
std::vector<EventId> spawned;
void DoSpawn(std::vector<int64_t> delays)
{ for (size_t i = 0; i < delays.size(); i++) spawned.push_back(At(delays[i], 100 + i)); }
void Spawn(uint32_t node, int64_t delayNs, std::vector<int64_t> delays)
{ Simulator::ScheduleWithContext(node, NanoSeconds(delayNs), &DoSpawn, delays); }
// An event on `node` that schedules an event on `target` (a packet-like hand-over).
void DoRelay(uint32_t target, int64_t delayNs, uint32_t id) { AtNode(target, delayNs, id); }
void Relay(uint32_t node, int64_t at, uint32_t target, int64_t delayNs, uint32_t id)
{ Simulator::ScheduleWithContext(node, NanoSeconds(at), &DoRelay, target, delayNs, id); }
void Clear() { firedAt.clear(); firedId.clear(); spawned.clear(); }

// Ground truth for attribution: every trace hit on a port (or a host's local delivery) must happen
// in an event whose tag belongs to the partition owning that port (or host).
struct Auditor
{
    std::vector<int> portGroup, nodeGroup;
    std::vector<std::vector<char>> member; // [group][tag]
    uint64_t hits = 0, wrong = 0, unowned = 0;
    Auditor(uint32_t nPorts, uint32_t nNodes, uint32_t nGroups)
        : portGroup(nPorts, -1), nodeGroup(nNodes, -1),
          member(nGroups, std::vector<char>(nPorts + nNodes, 0)) {}
    void Own(int group, uint32_t tag) { member[group][tag] = 1; }
    void Check(int group)
    {
        hits++;
        if (group < 0) { unowned++; return; }
        uint32_t tag = wormhole::TagSimulatorImpl::Get()->GetCurrentTag();
        if (tag >= member[group].size() || !member[group][tag]) wrong++;
    }
    void OnPort(uint32_t port, Ptr<const Packet>) { Check(portGroup[port]); }
    void OnDeliver(uint32_t node, const Ipv4Header&, Ptr<const Packet>, uint32_t)
    { Check(nodeGroup[node]); }
    void Attach(wormhole::NetworkBuilder* net)
    {
        for (uint32_t p = 0; p < portGroup.size(); p++)
            for (const char* name : {"PhyTxBegin", "PhyTxEnd", "PhyRxEnd", "MacRx"})
                net->GetPortDevice(p)->TraceConnectWithoutContext(
                    name, MakeCallback(&Auditor::OnPort, this).Bind(p));
        for (uint32_t n = 0; n < nodeGroup.size(); n++)
            if (nodeGroup[n] >= 0)
                net->GetNode(n)->GetObject<Ipv4L3Protocol>()->TraceConnectWithoutContext(
                    "LocalDeliver", MakeCallback(&Auditor::OnDeliver, this).Bind(n));
    }
};
}
"""


@pytest.fixture(scope="module")
def h():
    from bridge.ns3.loader import load

    h = load()
    h.cppyy.cppdef(HELPERS)
    return h


@pytest.fixture(autouse=True)
def destroy(h):
    """Each test builds its own simulations; leave the stock implementation selected."""
    yield
    h.ns.Simulator.Destroy()
    select(h, False)
    h.cppyy.gbl.tagtest.Clear()


def select(h, tag: bool) -> None:
    """Choose the implementation of the next simulation (after Destroy, before any event)."""
    name = "wormhole::TagSimulatorImpl" if tag else "ns3::DefaultSimulatorImpl"
    h.ns.GlobalValue.Bind("SimulatorImplementationType", h.ns.StringValue(name))


def errors(sim) -> dict[str, int]:
    kinds = sim.N_ERRORS
    return {sim.GetErrorName(k): int(sim.GetErrorCount(k)) for k in range(kinds) if sim.GetErrorCount(k)}


class Run:
    """One simulation of `flows` [(src, dst, bytes)] on TOPOLOGY, stock or tagged."""

    def __init__(self, h, flows, tag: bool, started: int | None = None):
        h.ns.Simulator.Destroy()
        select(h, tag)
        scenario = parse_scenario_dict({"name": "t", "seed": 1, "topology": TOPOLOGY,
                                        "flows": [{"src": 0, "dst": 1, "size": 1}]}, None)
        self.h, self.flows = h, flows
        self.topo = build_topology(scenario.topology)
        configure_transport(h, scenario.transport, 1)
        self.net = build_network(h, self.topo, scenario.transport, len(flows))
        self.sim = h.wh.TagSimulatorImpl.Get()
        assert bool(self.sim) == tag
        if tag:
            self.sim.AttachPorts(self.net.builder)
        self.table = self.net.flows.GetTable()
        for i, (src, dst, size) in enumerate(flows[:started]):
            self.net.flows.StartFlow(i, self.net.flows.OpenConnection(src, dst), size)

    def run_to(self, t_ns: int) -> None:
        """Advance to t_ns exactly (every flow completion stops the run)."""
        while self.net.now_ns() < t_ns:
            self.h.wh.RunUntil(t_ns)

    def finish(self) -> None:
        """Run until every flow completed."""
        for _ in range(10 * len(self.flows)):
            if (self.ends() >= 0).all():
                return
            self.h.wh.RunUntil(LIMIT_NS)
        raise AssertionError("flows did not complete")

    def ends(self) -> np.ndarray:
        return np.array([self.table.GetEndNs(i) for i in range(len(self.flows))], dtype=np.int64)

    def port_tx(self) -> np.ndarray:
        out = np.zeros(self.net.n_ports, dtype=np.uint64)
        self.net.builder.ReadPortTxPackets(out)
        return out

    def host_ports(self, host: int) -> list[int]:
        link = next(i for i, l in enumerate(self.topo.links) if host in (l.a, l.b))
        return [2 * link, 2 * link + 1]

    def group_tags(self, name: str) -> list[int]:
        """Ports of the group's links (both directions) and its hosts' node tags."""
        hosts = sorted({n for pair in GROUPS[name] for n in pair})
        ports = [p for host in hosts for p in self.host_ports(host)]
        if name == "C":
            first_fabric = len(self.topo.hosts)
            ports += list(range(2 * first_fabric, 2 * len(self.topo.links)))
        return sorted(ports) + [self.net.n_ports + host for host in hosts]


def group_flows(sizes: dict[str, int]) -> tuple[list, dict[str, list[int]]]:
    flows, index = [], {}
    for name, pairs in GROUPS.items():
        index[name] = list(range(len(flows), len(flows) + len(pairs)))
        flows += [(s, d, sizes[name]) for s, d in pairs]
    return flows, index


# ---- Identity with nothing frozen ---------------------------------------------------------

def test_tag_impl_runs_event_for_event_like_the_default_impl(h):
    # 14 flows of 1 MB, most across the spines, and a 3-to-1 incast into host 11.
    flows = [(i, (i + 5) % 12, 1_000_000) for i in range(12)] + [(1, 11, 1_000_000), (2, 11, 1_000_000)]
    results = {}
    for tag in (False, True, False):  # the implementation follows the global value after Destroy
        run = Run(h, flows, tag)
        run.finish()
        events_at_end = run.net.events()
        run.run_to(int(run.ends().max()) + 100_000)
        results.setdefault(tag, []).append((events_at_end, run.net.events(), run.ends(), run.port_tx()))
        if tag:
            assert errors(run.sim) == {}
            assert run.sim.GetEventCount() == run.net.events()
            counts = np.zeros(run.sim.GetNTags(), dtype=np.uint64)
            run.sim.ReadTagEventCounts(counts, len(counts))
            assert int(counts.sum() + run.sim.GetEventCountOfTag(NO_TAG)) == run.net.events()
    for stock in results[False]:
        tagged = results[True][0]
        assert stock[0] == tagged[0] and stock[1] == tagged[1]
        assert (stock[2] == tagged[2]).all()
        assert (stock[3] == tagged[3]).all()


# ---- Attribution --------------------------------------------------------------------------

def test_every_port_and_delivery_touch_carries_its_partitions_tag(h):
    flows, _ = group_flows({"A": 1_000_000, "B": 1_000_000, "C": 1_000_000})
    run = Run(h, flows, True)
    sim, n_ports = run.sim, run.net.n_ports
    auditor, control = (h.cppyy.gbl.tagtest.Auditor(n_ports, run.topo.n_nodes, len(GROUPS))
                        for _ in range(2))
    union = set()
    for g, name in enumerate(GROUPS):
        tags = run.group_tags(name)
        union |= set(tags)
        for tag in tags:
            auditor.Own(g, tag)
            control.Own({0: 1, 1: 0}.get(g, g), tag)  # A and B swapped: must be caught
            for a in (auditor, control):
                if tag < n_ports:
                    a.portGroup[tag] = g
                else:
                    a.nodeGroup[tag - n_ports] = g
    auditor.Attach(run.net.builder)
    control.Attach(run.net.builder)
    sim.EnableLog(True)
    run.finish()
    assert auditor.hits > 50_000
    assert (auditor.wrong, auditor.unowned) == (0, 0)
    assert control.wrong > auditor.hits / 3
    assert errors(sim) == {}
    # Every event after t=0 (node and channel initialization) belongs to a partition or is the
    # control plane's (stop events).
    n = int(sim.GetLogSize())
    ts, ctx, tag = np.zeros(n, np.int64), np.zeros(n, np.uint32), np.zeros(n, np.uint32)
    assert sim.ReadLog(ts, ctx, tag, n) == n and sim.GetLogSize() == 0
    later = tag[ts > 0]
    assert np.isin(later, list(union) + [NO_TAG]).all()
    assert (later == NO_TAG).sum() < 20
    for name in GROUPS:
        assert np.isin(later, run.group_tags(name)).sum() > 1_000


# ---- Freeze and thaw ----------------------------------------------------------------------

def test_freezing_an_idle_partition_changes_no_completion_time(h):
    flows, index = group_flows({"A": 100_000, "B": 1_500_000, "C": 1_000_000})
    stock = Run(h, flows, False)
    stock.finish()
    run = Run(h, flows, True)
    t_freeze = 60_000
    run.run_to(t_freeze)
    assert all(run.table.GetEndNs(i) > 0 for i in index["A"])  # A is done: only timers remain
    group = run.sim.Freeze(np.array(run.group_tags("A"), np.uint32), len(run.group_tags("A")))
    run.run_to(t_freeze + 30_000)
    run.sim.Thaw(group, 30_000)
    run.finish()
    assert (run.ends() == stock.ends()).all()
    assert errors(run.sim) == {} and run.sim.GetNIntoFrozen() == 0


def test_a_partition_frozen_for_dt_finishes_exactly_dt_later(h):
    flows, index = group_flows({"A": 2_000_000, "B": 1_500_000, "C": 1_000_000})
    stock = Run(h, flows, False)
    stock.finish()
    run = Run(h, flows, True)
    t_freeze, dt = 50_000, 123_457
    run.run_to(t_freeze)
    assert all(0 < run.table.GetDelivered(i) < 2_000_000 for i in index["A"])
    tags = np.array(run.group_tags("A"), np.uint32)
    pending = run.sim.GetNPending()
    group = run.sim.Freeze(tags, len(tags))
    held = run.sim.GetNHeld(group)
    assert held > 0 and run.sim.GetNPending() == pending - held
    run.run_to(t_freeze + dt)
    assert all(run.table.GetDelivered(i) < 2_000_000 for i in index["A"])
    assert run.sim.GetNHeld(group) == held
    run.sim.Thaw(group, dt)
    assert run.sim.GetNHeld(group) == 0
    run.finish()
    ends, base = run.ends(), stock.ends()
    assert (ends[index["A"]] == base[index["A"]] + dt).all()
    others = index["B"] + index["C"]
    assert (ends[others] == base[others]).all()
    assert errors(run.sim) == {} and run.sim.GetNIntoFrozen() == 0


def test_a_flow_started_in_a_frozen_partition_interrupts_and_runs_on_time(h):
    flows, index = group_flows({"A": 500_000, "B": 500_000, "C": 500_000})
    flows = [flows[i] for i in index["A"] + index["B"]] + [(0, 1, 100_000)]
    run = Run(h, flows, True, started=4)  # A's third flow starts while A is frozen
    run.run_to(20_000)
    tags = np.array(run.group_tags("A"), np.uint32)
    group = run.sim.Freeze(tags, len(tags))
    run.run_to(30_000)
    held = run.sim.GetNHeld(group)
    # The control plane opens a connection and starts a flow on frozen hosts: the events are
    # held at their absolute time, the group is reported and the next run stops at once.
    run.net.flows.StartFlow(4, run.net.flows.OpenConnection(0, 1), 100_000)
    assert run.sim.GetNHeld(group) == held + 3  # sink and sender start, the flow start
    h.wh.RunUntil(40_000)  # the next run returns at once
    assert run.net.now_ns() == 30_000
    out = np.zeros(4, np.uint32)
    assert run.sim.PopInterrupted(out, 4) == 1 and out[0] == group
    assert run.sim.PopInterrupted(out, 4) == 0
    run.sim.Thaw(group, 10_000)  # skip-back: thawed at once, frozen events shift by 10 us
    assert run.sim.GetNHeld(group) == 0
    run.finish()
    assert run.table.GetStartNs(4) == 30_000
    assert run.table.GetDelivered(4) == 100_000
    assert errors(run.sim) == {} and run.sim.GetNIntoFrozen() == 3


# ---- Custom events: interrupts from inside a run, EventIds of held and shifted events -----

def test_an_event_into_a_frozen_tag_stops_the_run_and_late_thaws_are_counted(h):
    select(h, True)
    sim, t = h.wh.TagSimulatorImpl.Get(), h.cppyy.gbl.tagtest
    # No network attached: node n has tag n.
    group = sim.Freeze(np.array([2], np.uint32), 1)
    t.Relay(1, 100, 2, 50, 7)   # at 100 on node 1: an event for node 2 at 150
    t.AtNode(3, 120, 8)
    h.wh.RunUntil(1_000)
    assert sim.Now().GetNanoSeconds() == 100  # stopped right after the relaying event
    out = np.zeros(2, np.uint32)
    assert sim.PopInterrupted(out, 2) == 1 and out[0] == group
    h.wh.RunUntil(1_000)  # thawed too late: node 2's event runs at thaw time, counted late
    sim.Thaw(group, 1_000)
    h.wh.RunUntil(2_000)
    assert list(zip(t.firedAt, t.firedId)) == [(120, 8), (1_000, 7)]
    assert errors(sim) == {"late": 1}
    # Thaw shorter than the time frozen: clamped to now, counted; bad calls are counted too.
    t.AtNode(4, 100, 11)
    group = sim.Freeze(np.array([4, NO_TAG], np.uint32), 2)
    t.AtNode(4, 0, 9)   # held at its absolute time 2000 (the control plane schedules into it)
    assert sim.PopInterrupted(out, 2) == 1
    t.Spawn(5, 0, [10])  # not frozen
    h.wh.RunUntil(2_500)  # returns at once: an event waits in a frozen group
    assert sim.Now().GetNanoSeconds() == 2_000
    h.wh.RunUntil(2_500)  # the control plane goes on anyway: the event will be late
    sim.Thaw(group, 100)  # frozen 500 ns: event 11 (due 2100 + 100) is clamped to now
    sim.Thaw(group, 100)
    h.wh.RunUntil(3_000)
    assert list(zip(t.firedAt, t.firedId))[2:] == [(2_010, 100), (2_500, 11), (2_500, 9)]
    assert errors(sim) == {"late": 2, "thaw_past": 1, "bad_call": 2}


def test_event_ids_of_held_and_shifted_events(h):
    select(h, True)
    sim, t, ns = h.wh.TagSimulatorImpl.Get(), h.cppyy.gbl.tagtest, h.ns
    # Five events tagged 3 (node 3); `soon` is due at 100, after the stop event at 100.
    t.Spawn(3, 0, [1_000, 1_000, 1_000, 1_000, 100])
    h.wh.RunUntil(100)
    run1, cancel, remove, remove_later, soon = list(t.spawned)
    group = sim.Freeze(np.array([3], np.uint32), 1)
    assert sim.GetNHeld(group) == 5 and sim.GetNPending() == 0
    assert run1.IsPending() and ns.Simulator.GetDelayLeft(run1).GetNanoSeconds() == 900
    ns.Simulator.Cancel(cancel)
    ns.Simulator.Remove(remove)
    assert cancel.IsExpired() and remove.IsExpired() and not run1.IsExpired()
    h.wh.RunUntil(450)
    assert ns.Simulator.GetDelayLeft(run1).GetNanoSeconds() == 900  # partition time stands still
    assert ns.Simulator.GetDelayLeft(soon).GetNanoSeconds() == 0
    events = sim.GetEventCount()  # the stop events at 100 and 450, and Spawn
    sim.Thaw(group, 350)
    # `soon` runs at 100 + 350 = now with an older uid than the stop event already run at 450: the
    # stock expiry rule would call it expired.
    assert soon.IsPending() and ns.Simulator.GetDelayLeft(soon).GetNanoSeconds() == 0
    assert ns.Simulator.GetDelayLeft(run1).GetNanoSeconds() == 900
    ns.Simulator.Remove(remove_later)
    assert remove_later.IsExpired()
    h.wh.RunUntil(5_000)
    assert list(zip(t.firedAt, t.firedId)) == [(450, 104), (1_350, 100)]
    assert run1.IsExpired() and soon.IsExpired()
    # Executed: soon, run1, the cancelled one (stock counts cancelled events), the stop at 5000.
    assert sim.GetEventCount() == events + 4
    assert sim.GetEventCountOfTag(3) == 4 and errors(sim) == {}
