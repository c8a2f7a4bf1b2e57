#include "network-builder.h"

#include "flow-ecmp-routing.h"

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <cmath>

namespace wormhole
{
using namespace ns3;

void
NetworkBuilder::DefaultEcnThresholds(uint64_t rateBps, double& kmin, double& kmax)
{
    // DCTCP's rule K > C * RTT / 7, with a 20 us reference RTT (a few hops of 1 us plus
    // serialization at the edge), floored at 20 packets as in ns-3's dctcp-example.
    // 100 Gbps: K = 24 packets; kmax = 3 K keeps RED's linear marking region short.
    double bdpPackets = double(rateBps) * 20e-6 / 8.0 / 1500.0;
    kmin = std::max(20.0, std::ceil(bdpPackets / 7.0));
    kmax = 3 * kmin;
}

static void
CountPacket(uint64_t* counter, ns3::Ptr<const ns3::Packet>)
{
    ++*counter;
}

void
NetworkBuilder::Build(uint32_t nNodes,
                      const uint8_t* isHost,
                      uint32_t nLinks,
                      const uint32_t* a,
                      const uint32_t* b,
                      const uint64_t* rateBps,
                      const int64_t* delayNs,
                      const QueueConfig& config)
{
    m_nodes.Create(nNodes);
    InternetStackHelper stack;
    UseFlowEcmp(stack);
    stack.Install(m_nodes);

    Ipv4AddressHelper addresses;
    addresses.SetBase(Ipv4Address("10.0.0.0"), Ipv4Mask("255.255.255.0"));
    m_firstAddress.assign(nNodes, Ipv4Address());
    std::vector<bool> addressed(nNodes, false);

    for (uint32_t i = 0; i < nLinks; i++)
    {
        PointToPointHelper p2p;
        p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(rateBps[i])));
        p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(delayNs[i])));
        p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", QueueSizeValue(QueueSize("1p")));
        NetDeviceContainer devices = p2p.Install(m_nodes.Get(a[i]), m_nodes.Get(b[i]));

        // The queue disc must be installed before Assign(), which would install FqCoDel.
        QueueSizeValue maxSize(QueueSize(QueueSizeUnit::PACKETS, config.queuePackets));
        TrafficControlHelper fifo;
        fifo.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", maxSize);
        TrafficControlHelper tch;
        if (config.ecnMarking)
        {
            double kmin = config.kminPackets;
            double kmax = config.kmaxPackets;
            if (kmin <= 0 || kmax <= 0)
            {
                double dmin;
                double dmax;
                DefaultEcnThresholds(rateBps[i], dmin, dmax);
                kmin = kmin > 0 ? kmin : dmin;
                kmax = kmax > 0 ? kmax : std::max(dmax, kmin);
            }
            tch.SetRootQueueDisc("ns3::RedQueueDisc",
                                 "UseEcn", BooleanValue(true),
                                 "UseHardDrop", BooleanValue(false),
                                 "QW", DoubleValue(1.0),
                                 "MinTh", DoubleValue(kmin),
                                 "MaxTh", DoubleValue(kmax),
                                 "MeanPktSize", UintegerValue(config.meanPacketBytes),
                                 "MaxSize", maxSize,
                                 "LinkBandwidth", DataRateValue(DataRate(rateBps[i])),
                                 "LinkDelay", TimeValue(NanoSeconds(delayNs[i])));
        }
        else
        {
            tch = fifo;
        }
        QueueDiscContainer qdiscs;
        for (uint32_t side = 0; side < 2; side++)
        {
            bool host = isHost[side == 0 ? a[i] : b[i]];
            qdiscs.Add((host ? fifo : tch).Install(devices.Get(side)));
        }
        Ipv4InterfaceContainer interfaces = addresses.Assign(devices);
        addresses.NewNetwork();

        for (uint32_t side = 0; side < 2; side++)
        {
            uint32_t node = side == 0 ? a[i] : b[i];
            if (!addressed[node])
            {
                addressed[node] = true;
                m_firstAddress[node] = interfaces.GetAddress(side);
            }
            m_portQueueDisc.push_back(qdiscs.Get(side));
            m_portDevice.push_back(DynamicCast<PointToPointNetDevice>(devices.Get(side)));
            m_portNode.push_back(node);
            m_portOfDevice[PeekPointer(devices.Get(side))] = m_portDevice.size() - 1;
            m_txPackets.push_back(0);
            uint64_t* counter = &m_txPackets.back();
            devices.Get(side)->TraceConnectWithoutContext(
                "PhyTxBegin",
                MakeBoundCallback(&CountPacket, counter));
        }
    }
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();
    for (uint32_t n = 0; n < nNodes; n++)
    {
        Ptr<Ipv4ListRouting> list =
            DynamicCast<Ipv4ListRouting>(m_nodes.Get(n)->GetObject<Ipv4>()->GetRoutingProtocol());
        Ptr<FlowEcmpRouting> ecmp;
        for (uint32_t i = 0; list && i < list->GetNRoutingProtocols() && !ecmp; i++)
        {
            int16_t priority;
            ecmp = DynamicCast<FlowEcmpRouting>(list->GetRoutingProtocol(i, priority));
        }
        m_routing.push_back(ecmp);
    }
}

uint32_t
NetworkBuilder::TracePath(uint32_t src,
                          uint32_t dst,
                          uint16_t srcPort,
                          uint16_t dstPort,
                          uint32_t* out,
                          uint32_t cap) const
{
    Ipv4Address from = GetAddress(src);
    Ipv4Address to = GetAddress(dst);
    uint32_t n = 0;
    for (uint32_t node = src; node != dst && n < cap;)
    {
        Ptr<NetDevice> device = m_routing.at(node)->ChooseDevice(from, to, srcPort, dstPort, 6);
        auto port = device ? m_portOfDevice.find(PeekPointer(device)) : m_portOfDevice.end();
        if (port == m_portOfDevice.end())
        {
            break; // no route: the caller sees a path that does not reach dst
        }
        out[n++] = port->second;
        node = m_portNode[port->second ^ 1]; // the other end of the link
    }
    return n;
}

uint32_t
NetworkBuilder::GetNNodes() const
{
    return m_nodes.GetN();
}

uint32_t
NetworkBuilder::GetNPorts() const
{
    return m_portDevice.size();
}

Ptr<Node>
NetworkBuilder::GetNode(uint32_t node) const
{
    return m_nodes.Get(node);
}

Ipv4Address
NetworkBuilder::GetAddress(uint32_t node) const
{
    return m_firstAddress.at(node);
}

Ptr<PointToPointNetDevice>
NetworkBuilder::GetPortDevice(uint32_t port) const
{
    return m_portDevice.at(port);
}

void
NetworkBuilder::ReadQueueBytes(uint32_t* out) const
{
    for (size_t p = 0; p < m_portDevice.size(); p++)
    {
        out[p] = m_portQueueDisc[p]->GetNBytes() + m_portDevice[p]->GetQueue()->GetNBytes();
    }
}

void
NetworkBuilder::ReadPortTxPackets(uint64_t* out) const
{
    for (size_t p = 0; p < m_portDevice.size(); p++)
    {
        out[p] = m_txPackets[p];
    }
}

static void
StopNow()
{
    Simulator::Stop();
}

int64_t
RunUntil(int64_t ns)
{
    int64_t now = Simulator::Now().GetNanoSeconds();
    EventId stop = Simulator::Schedule(NanoSeconds(std::max<int64_t>(0, ns - now)), &StopNow);
    Simulator::Run();
    Simulator::Cancel(stop);
    return Simulator::Now().GetNanoSeconds();
}

} // namespace wormhole
