// Per-flow ECMP: Ipv4GlobalRouting that picks one of the equal-cost routes by a 5-tuple hash.
//
// Stock ns-3 only offers RandomEcmpRouting, which sprays packets one by one; the reordering makes
// TCP (DCTCP) abort on an assert. Hashing the 5-tuple keeps every packet of a connection (and its
// ACKs, in the reverse direction) on one path. The hash is salted per node so that switches in
// different tiers do not make correlated choices (ECMP polarization), and by the scenario seed.
// PopulateRoutingTables() fills the route table as for stock global routing. The topology is
// static, so candidate routes are cached per destination and never invalidated.
#ifndef WORMHOLE_FLOW_ECMP_ROUTING_H
#define WORMHOLE_FLOW_ECMP_ROUTING_H

#include "ns3/internet-stack-helper.h"
#include "ns3/ipv4-global-routing.h"

#include <unordered_map>
#include <vector>

namespace wormhole
{

class FlowEcmpRouting : public ns3::Ipv4GlobalRouting
{
  public:
    static ns3::TypeId GetTypeId();

    void SetIpv4(ns3::Ptr<ns3::Ipv4> ipv4) override;
    bool RouteInput(ns3::Ptr<const ns3::Packet> p,
                    const ns3::Ipv4Header& header,
                    ns3::Ptr<const ns3::NetDevice> idev,
                    const UnicastForwardCallback& ucb,
                    const MulticastForwardCallback& mcb,
                    const LocalDeliverCallback& lcb,
                    const ErrorCallback& ecb) override;

    /// Seed mixed into every node's hash (the scenario seed): a new seed, new path choices.
    static void SetHashSeed(uint64_t seed);

    /// The output device this node uses for a TCP/UDP 5-tuple (nullptr: no route).
    ns3::Ptr<ns3::NetDevice> ChooseDevice(ns3::Ipv4Address src,
                                          ns3::Ipv4Address dst,
                                          uint16_t srcPort,
                                          uint16_t dstPort,
                                          uint8_t protocol);

  private:
    ns3::Ipv4RoutingTableEntry* Choose(ns3::Ipv4Address src,
                                       ns3::Ipv4Address dst,
                                       uint32_t ports,
                                       uint8_t protocol);
    ns3::Ptr<ns3::Ipv4Route> Lookup(const ns3::Ipv4Header& header, ns3::Ptr<const ns3::Packet> p);
    const std::vector<ns3::Ipv4RoutingTableEntry*>& Candidates(ns3::Ipv4Address dst);

    ns3::Ptr<ns3::Ipv4> m_ipv4;
    std::unordered_map<uint32_t, std::vector<ns3::Ipv4RoutingTableEntry*>> m_candidates;
    static uint64_t s_seed;
};

/// Configure `stack` as the default stack does (static routing first), with FlowEcmpRouting
/// in place of Ipv4GlobalRouting.
void UseFlowEcmp(ns3::InternetStackHelper& stack);

} // namespace wormhole

#endif
