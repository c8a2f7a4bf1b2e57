// Building the RDMA fabric: nodes, links and their port queues, per-flow ECMP routes (again when a
// link goes down), the base RTTs and BDPs the queue pairs use, and its congestion control.
#include "rdma-fabric.h"

namespace wormhole
{

namespace
{

uint32_t
Mix(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6b;
    h ^= h >> 13;
    h *= 0xc2b2ae35;
    h ^= h >> 16;
    return h;
}

/// Per-flow ECMP: the same 5-tuple always takes the same port at a node.
uint32_t
FlowHash(uint32_t seed, uint32_t sip, uint32_t dip, uint16_t sport, uint16_t dport)
{
    uint32_t h = Mix(seed ^ 0x9e3779b9);
    h = Mix(h ^ sip);
    h = Mix(h ^ (dip * 0x27d4eb2d));
    h = Mix(h ^ ((uint32_t(sport) << 16) | dport));
    return h;
}

} // namespace

// ---- Build --------------------------------------------------------------------------------------

void
RdmaFabric::Build(uint32_t nNodes,
                  const uint8_t* host,
                  uint32_t nLinks,
                  const uint32_t* a,
                  const uint32_t* b,
                  const uint64_t* rateBps,
                  const int64_t* delayNs)
{
    cc = RdmaCc::Create(*this);
    nodes.Create(nNodes);
    isHost.assign(host, host + nNodes);
    nodePorts.assign(nNodes, {});
    switches.assign(nNodes, Switch());
    hostIndex.assign(nNodes, -1);
    for (uint32_t n = 0; n < nNodes; n++)
    {
        if (isHost[n])
        {
            hostIndex[n] = int32_t(hosts.size());
            hosts.push_back(n);
        }
        nodeSeed.push_back(Mix(cfg.ecmpSeed * 0x9e3779b1u + n));
    }
    ports.resize(2 * nLinks);
    for (uint32_t i = 0; i < nLinks; i++)
    {
        PointToPointHelper p2p;
        p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(rateBps[i])));
        p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(delayNs[i])));
        NetDeviceContainer devs = p2p.Install(nodes.Get(a[i]), nodes.Get(b[i]));
        for (uint32_t side = 0; side < 2; side++)
        {
            uint32_t p = 2 * i + side;
            Port& port = ports[p];
            port.dev = DynamicCast<PointToPointNetDevice>(devs.Get(side));
            port.node = side == 0 ? a[i] : b[i];
            port.ifIndex = port.dev->GetIfIndex();
            port.rateBps = rateBps[i];
            port.delayNs = delayNs[i];
            port.queue = CreateObject<RdmaPortQueue>();
            port.queue->fabric = this;
            port.queue->port = p;
            port.dev->SetQueue(port.queue);
            port.ecnDraw = CreateObject<UniformRandomVariable>();
            port.ecnDraw->SetStream(int64_t(p) + 1000);
            if (cfg.errorRatePerLink > 0)
            {
                Ptr<RateErrorModel> em = CreateObject<RateErrorModel>();
                em->SetUnit(RateErrorModel::ERROR_UNIT_PACKET);
                em->SetRate(cfg.errorRatePerLink);
                em->AssignStreams(int64_t(p) * 2 + 100000);
                port.dev->SetReceiveErrorModel(em);
                port.dev->TraceConnectWithoutContext("PhyRxDrop", MakeCallback(&RdmaFabric::LinkLoss, this));
            }
            portOfDevice[PeekPointer(port.dev)] = p;
            nodePorts[port.node].push_back(p);
            nodes.Get(port.node)->RegisterProtocolHandler(MakeCallback(&RdmaFabric::Receive, this), ETHER_IPV4,
                                                          port.dev);
            if (!isHost[port.node])
            {
                bool found = false;
                for (const RdmaConfig::Ecn& e : cfg.ecn)
                {
                    if (e.rateBps == rateBps[i])
                    {
                        port.kmin = e.kmin;
                        port.kmax = e.kmax;
                        port.pmax = e.pmax;
                        found = true;
                    }
                }
                NS_ABORT_MSG_IF(cfg.enableEcn && !found,
                                "RDMA: no KMIN/KMAX/PMAX entry for link rate " << rateBps[i] << " bps");
                port.headroom = uint64_t(cfg.headroomBdps * double(rateBps[i]) * double(delayNs[i]) / 8e9);
            }
        }
    }
    for (uint32_t h : hosts)
    {
        for (uint32_t p : nodePorts[h])
        {
            nicRateBps = std::max(nicRateBps, ports[p].rateBps);
        }
    }
    pintDraw = CreateObject<UniformRandomVariable>();
    pintDraw->SetStream(999); // below the ports' ECN streams (1000 + port)
    // PINT's field is as wide as the power of the largest utilization needs (u = PINT_MAX_FLOWS:
    // one byte at base 1.05), two bytes at most.
    double powerBits = std::ceil(std::log2(std::log(PINT_MAX_FLOWS * PINT_MAX_FLOWS) / std::log(cfg.pintLogBase)));
    pintMaxPower = powerBits <= 8 ? 0xff : 0xffff;
    for (uint32_t n = 0; n < nNodes; n++)
    {
        if (isHost[n])
        {
            continue;
        }
        Switch& sw = switches[n];
        for (uint32_t p : nodePorts[n])
        {
            sw.totalHeadroom += ports[p].headroom;
            sw.totalReserve += cfg.reserveBytes;
            // The shared-buffer share shrinks by half per doubling of port rate above the NIC's.
            uint64_t rate = ports[p].rateBps;
            while (rate > nicRateBps && ports[p].shift > 0)
            {
                ports[p].shift--;
                rate /= 2;
            }
        }
    }
    BuildRoutes();
    ComputeBaseRtts();
}

void
RdmaFabric::BuildRoutes()
{
    uint32_t nNodes = nodes.GetN();
    size_t nHosts = hosts.size();
    fibStart.assign(size_t(nNodes) * nHosts, 0);
    fibCount.assign(size_t(nNodes) * nHosts, 0);
    fibPorts.clear();
    std::vector<int32_t> dist(nNodes);
    std::vector<uint32_t> frontier;
    for (size_t hi = 0; hi < nHosts; hi++)
    {
        uint32_t dst = hosts[hi];
        std::fill(dist.begin(), dist.end(), -1);
        dist[dst] = 0;
        frontier.assign(1, dst);
        for (size_t k = 0; k < frontier.size(); k++)
        {
            uint32_t n = frontier[k];
            if (isHost[n] && n != dst)
            {
                continue; // hosts do not forward
            }
            for (uint32_t p : nodePorts[n])
            {
                uint32_t m = ports[p ^ 1].node;
                if (dist[m] < 0 && !ports[p].down)
                {
                    dist[m] = dist[n] + 1;
                    frontier.push_back(m);
                }
            }
        }
        for (uint32_t n = 0; n < nNodes; n++)
        {
            size_t slot = size_t(n) * nHosts + hi;
            fibStart[slot] = uint32_t(fibPorts.size());
            if (dist[n] <= 0)
            {
                continue;
            }
            for (uint32_t p : nodePorts[n])
            {
                uint32_t m = ports[p ^ 1].node;
                if (dist[m] == dist[n] - 1 && (!isHost[m] || m == dst) && !ports[p].down)
                {
                    fibPorts.push_back(p);
                    fibCount[slot]++;
                }
            }
        }
    }
}

uint32_t
RdmaFabric::NextPort(uint32_t node, uint32_t dst, uint32_t sip, uint16_t sport, uint16_t dport) const
{
    size_t slot = size_t(node) * hosts.size() + size_t(hostIndex[dst]);
    uint32_t n = fibCount[slot];
    if (n == 0)
    {
        return NO_PORT; // only after a link went down: the topology is connected at the start
    }
    if (n == 1)
    {
        return fibPorts[fibStart[slot]];
    }
    return fibPorts[fibStart[slot] + FlowHash(nodeSeed[node], sip, dst, sport, dport) % n];
}

void
RdmaFabric::PathDelay(uint32_t src, uint32_t dst, int64_t& delay, int64_t& tx) const
{
    delay = 0;
    tx = 0;
    uint32_t n = src;
    while (n != dst)
    {
        uint32_t p = NextPort(n, dst, src, 0, 0);
        if (p == NO_PORT)
        {
            return;
        }
        delay += ports[p].delayNs;
        tx += int64_t(double(cfg.payloadBytes) * 8e9 / double(ports[p].rateBps));
        n = ports[p ^ 1].node;
    }
}

void
RdmaFabric::ComputeBaseRtts()
{
    // As the reference: RTT = 2 x path delay + one payload's serialization per hop; BDP at the
    // NIC rate. With GLOBAL_T every QP uses the largest over host pairs. Paths of a symmetric
    // topology differ only by hop count, so pairs are sampled from each host's routing tree.
    for (uint32_t src : hosts)
    {
        for (uint32_t dst : hosts)
        {
            if (src == dst)
            {
                continue;
            }
            int64_t delay = 0;
            int64_t tx = 0;
            PathDelay(src, dst, delay, tx);
            int64_t rtt = 2 * delay + tx;
            maxRttNs = std::max(maxRttNs, rtt);
            maxBdp = std::max(maxBdp, uint64_t(double(rtt) * double(nicRateBps) / 8e9));
        }
        if (hosts.size() > 256)
        {
            break; // large fabrics: one source sees every hop count of a Clos
        }
    }
}

// ---- Congestion control -------------------------------------------------------------------------

std::unique_ptr<RdmaCc>
RdmaCc::Create(RdmaFabric& f)
{
    switch (f.cfg.ccMode)
    {
    case CC_DCQCN:
        return MakeDcqcn(f);
    case CC_HPCC:
        return MakeHpcc(f);
    case CC_HPCC_PINT:
        return MakeHpccPint(f);
    case CC_TIMELY:
        return MakeTimely(f);
    case CC_DCTCP:
        return MakeDctcp(f);
    default:
        return std::make_unique<RdmaCc>(f); // (the bridge only passes the modes above)
    }
}

} // namespace wormhole
