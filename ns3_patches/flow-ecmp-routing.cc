#include "flow-ecmp-routing.h"

#include "ns3/internet-module.h"
#include "ns3/network-module.h"

namespace wormhole
{
using namespace ns3;

NS_OBJECT_ENSURE_REGISTERED(FlowEcmpRouting);

uint64_t FlowEcmpRouting::s_seed = 0;

TypeId
FlowEcmpRouting::GetTypeId()
{
    static TypeId tid = TypeId("wormhole::FlowEcmpRouting")
                            .SetParent<Ipv4GlobalRouting>()
                            .SetGroupName("Wormhole")
                            .AddConstructor<FlowEcmpRouting>();
    return tid;
}

void
FlowEcmpRouting::SetHashSeed(uint64_t seed)
{
    s_seed = seed;
}

void
FlowEcmpRouting::SetIpv4(Ptr<Ipv4> ipv4)
{
    m_ipv4 = ipv4;
    Ipv4GlobalRouting::SetIpv4(ipv4);
}

bool
FlowEcmpRouting::RouteInput(Ptr<const Packet> p,
                            const Ipv4Header& header,
                            Ptr<const NetDevice> idev,
                            const UnicastForwardCallback& ucb,
                            const MulticastForwardCallback& mcb,
                            const LocalDeliverCallback& lcb,
                            const ErrorCallback& ecb)
{
    uint32_t iif = m_ipv4->GetInterfaceForDevice(idev);
    if (m_ipv4->IsDestinationAddress(header.GetDestination(), iif))
    {
        if (lcb.IsNull())
        {
            return false;
        }
        lcb(p, header, iif);
        return true;
    }
    if (!m_ipv4->IsForwarding(iif))
    {
        ecb(p, header, Socket::ERROR_NOROUTETOHOST);
        return true;
    }
    Ptr<Ipv4Route> route = Lookup(header, p);
    if (!route)
    {
        return false;
    }
    ucb(route, p, header);
    return true;
}

static uint64_t
Mix(uint64_t x)
{
    // splitmix64 finalizer: cheap, well spread, deterministic across runs.
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

Ipv4RoutingTableEntry*
FlowEcmpRouting::Choose(Ipv4Address src, Ipv4Address dst, uint32_t ports, uint8_t protocol)
{
    const auto& candidates = Candidates(dst);
    if (candidates.empty())
    {
        return nullptr;
    }
    size_t idx = 0;
    if (candidates.size() > 1)
    {
        uint64_t key = (uint64_t(src.Get()) << 32) ^ dst.Get() ^ (uint64_t(ports) << 24) ^ protocol;
        uint64_t salt = Mix(s_seed ^ (uint64_t(m_ipv4->GetObject<Node>()->GetId()) + 1) * 0x9e3779b97f4a7c15ULL);
        idx = Mix(key ^ salt) % candidates.size();
    }
    return candidates[idx];
}

Ptr<NetDevice>
FlowEcmpRouting::ChooseDevice(Ipv4Address src, Ipv4Address dst, uint16_t srcPort, uint16_t dstPort, uint8_t protocol)
{
    Ipv4RoutingTableEntry* e = Choose(src, dst, (uint32_t(srcPort) << 16) | dstPort, protocol);
    return e ? m_ipv4->GetNetDevice(e->GetInterface()) : nullptr;
}

Ptr<Ipv4Route>
FlowEcmpRouting::Lookup(const Ipv4Header& header, Ptr<const Packet> p)
{
    uint8_t b[4] = {0, 0, 0, 0}; // L4 source and destination ports lead the payload
    p->CopyData(b, 4);
    uint32_t ports = (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
    Ipv4RoutingTableEntry* e = Choose(header.GetSource(), header.GetDestination(), ports, header.GetProtocol());
    if (!e)
    {
        return nullptr;
    }
    Ptr<Ipv4Route> route = Create<Ipv4Route>();
    route->SetDestination(e->GetDest());
    route->SetSource(m_ipv4->GetAddress(e->GetInterface(), 0).GetLocal());
    route->SetGateway(e->GetGateway());
    route->SetOutputDevice(m_ipv4->GetNetDevice(e->GetInterface()));
    return route;
}

const std::vector<Ipv4RoutingTableEntry*>&
FlowEcmpRouting::Candidates(Ipv4Address dst)
{
    auto [it, inserted] = m_candidates.try_emplace(dst.Get());
    if (!inserted)
    {
        return it->second;
    }
    // Global routing lists host routes before network routes; the first matching kind wins.
    int kind = -1;
    for (uint32_t i = 0; i < GetNRoutes(); i++)
    {
        Ipv4RoutingTableEntry* e = GetRoute(i);
        int k = e->IsHost() ? 0 : 1;
        bool match = e->IsHost() ? e->GetDest() == dst
                                 : e->GetDestNetworkMask().IsMatch(dst, e->GetDestNetwork());
        if (!match)
        {
            continue;
        }
        if (kind == -1)
        {
            kind = k;
        }
        if (k != kind)
        {
            break;
        }
        it->second.push_back(e);
    }
    return it->second;
}

namespace
{
class FlowEcmpHelper : public Ipv4RoutingHelper
{
  public:
    FlowEcmpHelper* Copy() const override
    {
        return new FlowEcmpHelper(*this);
    }

    Ptr<Ipv4RoutingProtocol> Create(Ptr<Node> node) const override
    {
        Ptr<GlobalRouter> router = CreateObject<GlobalRouter>();
        node->AggregateObject(router);
        Ptr<FlowEcmpRouting> routing = CreateObject<FlowEcmpRouting>();
        router->SetRoutingProtocol(routing);
        return routing;
    }
};
} // namespace

void
UseFlowEcmp(InternetStackHelper& stack)
{
    Ipv4StaticRoutingHelper staticRouting;
    FlowEcmpHelper ecmp;
    Ipv4ListRoutingHelper list;
    list.Add(staticRouting, 0);
    list.Add(ecmp, -10);
    stack.SetRoutingHelper(list);
}

} // namespace wormhole
