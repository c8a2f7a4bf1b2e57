// The public side of the RDMA model (rdma.h): RdmaConfig, RdmaQp's accessors, RdmaNetwork and
// RdmaFlowManager; the model itself is RdmaFabric (rdma-fabric.h).
#include "rdma.h"

#include "rdma-fabric.h"

namespace wormhole
{

void
RdmaConfig::AddEcnThreshold(uint64_t rateBps, uint64_t kminBytes, uint64_t kmaxBytes, double pmax)
{
    ecn.push_back({rateBps, kminBytes, kmaxBytes, pmax});
}

// ---- RdmaQp -------------------------------------------------------------------------------------

uint32_t
RdmaQp::GetCongestionState(double* out, uint32_t cap) const
{
    if (cap < 3)
    {
        return 0;
    }
    fabric->cc->GetState(*this, out);
    return 3;
}

void
RdmaQp::SetCongestionState(double newRate, double target, double newAlpha)
{
    rate = std::clamp(newRate, double(fabric->cfg.minRateBps), maxRate);
    double& reference = fabric->cc->ReferenceRate(*this); // (DCTCP: unused)
    reference = std::clamp(target, double(fabric->cfg.minRateBps), maxRate);
    if (fabric->cfg.multiRate)
    {
        std::fill(std::begin(hopRate), std::end(hopRate), reference); // every hop at the QP's rate
    }
    if (newAlpha >= 0)
    {
        fabric->cc->SetThird(*this, newAlpha);
    }
    fabric->cc->OnStateSet(this);
}

uint64_t
RdmaQp::GetUntransmittedOf(uint32_t flow) const
{
    uint64_t start = flowsStart;
    for (const auto& [f, end] : flows)
    {
        if (f == flow)
        {
            uint64_t from = std::max(start, highestSent);
            return end > from ? end - from : 0;
        }
        start = end;
    }
    return 0;
}

void
RdmaQp::ShiftTimes(int64_t shiftNs)
{
    int64_t now = Simulator::Now().GetNanoSeconds();
    nextAvailPs += shiftNs * 1000;
    lastProgressNs += shiftNs;
    for (uint32_t i = 0; i < nHops; i++)
    {
        hops[i].timeNs += shiftNs;
    }
    if (shiftNs > 0) // a thaw at the freeze's own instant must not hide an earlier freeze from telemetry
    {
        frozenFromNs = now - shiftNs;
        frozenShiftNs = shiftNs;
    }
    frozenTotalNs += shiftNs;
    fabric->rx.at(id).nackTimerNs += shiftNs;
    fabric->ports[port].wakeAtPs = std::numeric_limits<int64_t>::max();
}

int64_t
RdmaQp::GetRateStepNs(int64_t quietNs) const
{
    int64_t now = Simulator::Now().GetNanoSeconds();
    if (rate >= maxRate)
    {
        return -1;
    }
    if (!increaseTimer.IsPending())
    {
        return rateStepNs >= now ? rateStepNs : -1; // one KeepRateStep moved
    }
    // A cut (and a step) restarts the timer at RP_TIMER: what is left of it tells how long ago
    // the last one was.
    int64_t left = Simulator::GetDelayLeft(increaseTimer).GetNanoSeconds();
    if (fabric->cfg.rpTimerNs - left < quietNs)
    {
        return -1;
    }
    return now + left;
}

void
RdmaQp::KeepRateStep(int64_t shiftNs)
{
    int64_t now = Simulator::Now().GetNanoSeconds();
    int64_t at;
    if (increaseTimer.IsPending())
    {
        at = now + Simulator::GetDelayLeft(increaseTimer).GetNanoSeconds() - shiftNs;
        increaseTimer.Cancel();
    }
    else if (rateStepNs >= 0) // moved before, its event held by this freeze and shifted: replaced
    {
        at = rateStepNs;
    }
    else
    {
        return;
    }
    fabric->cc->MoveRateIncrease(this, NanoSeconds(std::max(now, at) - now));
}

double
RdmaQp::GetRateBps() const
{
    return rate;
}

uint64_t
RdmaQp::GetSndNxt() const
{
    return sndNxt;
}

uint64_t
RdmaQp::GetSndUna() const
{
    return sndUna;
}

uint64_t
RdmaQp::GetRetransmittedBytes() const
{
    return retransmitted;
}

uint64_t
RdmaQp::GetTimeouts() const
{
    return timeouts;
}

bool
RdmaQp::IsWindowBound() const
{
    return fabric->WindowBound(this);
}

uint64_t
RdmaQp::GetWindow() const
{
    return fabric->Window(this);
}

// ---- RdmaNetwork --------------------------------------------------------------------------------

RdmaNetwork::RdmaNetwork()
    : m_fabric(std::make_unique<RdmaFabric>())
{
}

RdmaNetwork::~RdmaNetwork() = default;

void
RdmaNetwork::Build(uint32_t nNodes,
                   const uint8_t* isHost,
                   uint32_t nLinks,
                   const uint32_t* a,
                   const uint32_t* b,
                   const uint64_t* rateBps,
                   const int64_t* delayNs,
                   const RdmaConfig& config)
{
    m_fabric->cfg = config;
    m_fabric->Build(nNodes, isHost, nLinks, a, b, rateBps, delayNs);
}

uint32_t
RdmaNetwork::GetNNodes() const
{
    return m_fabric->nodes.GetN();
}

uint32_t
RdmaNetwork::GetNPorts() const
{
    return uint32_t(m_fabric->ports.size());
}

Ptr<Node>
RdmaNetwork::GetNode(uint32_t node) const
{
    return m_fabric->nodes.Get(node);
}

Ptr<PointToPointNetDevice>
RdmaNetwork::GetPortDevice(uint32_t port) const
{
    return m_fabric->ports.at(port).dev;
}

void
RdmaNetwork::ReadQueueBytes(uint32_t* out) const
{
    for (size_t p = 0; p < m_fabric->ports.size(); p++)
    {
        out[p] = uint32_t(std::min<uint64_t>(m_fabric->ports[p].queue->bytes, UINT32_MAX));
    }
}

void
RdmaNetwork::ReadPortTxPackets(uint64_t* out) const
{
    for (size_t p = 0; p < m_fabric->ports.size(); p++)
    {
        out[p] = m_fabric->ports[p].txPackets;
    }
}

uint32_t
RdmaNetwork::TracePath(uint32_t src, uint32_t dst, uint16_t srcPort, uint16_t dstPort, uint32_t* out, uint32_t cap)
    const
{
    uint32_t n = 0;
    uint32_t node = src;
    while (node != dst && n < cap)
    {
        uint32_t p = m_fabric->NextPort(node, dst, src, srcPort, dstPort);
        if (p == NO_PORT)
        {
            break; // cut off by a link gone down: the path so far
        }
        out[n++] = p;
        node = m_fabric->ports[p ^ 1].node;
    }
    return n;
}

int64_t
RdmaNetwork::GetBaseRttNs(uint32_t src, uint32_t dst) const
{
    if (m_fabric->cfg.globalT)
    {
        return m_fabric->maxRttNs;
    }
    int64_t delay = 0;
    int64_t tx = 0;
    m_fabric->PathDelay(src, dst, delay, tx);
    return 2 * delay + tx;
}

uint64_t
RdmaNetwork::GetBdpBytes(uint32_t src, uint32_t dst) const
{
    return uint64_t(double(GetBaseRttNs(src, dst)) * double(m_fabric->nicRateBps) / 8e9);
}

uint32_t
RdmaNetwork::GetNQps() const
{
    return uint32_t(m_fabric->qps.size());
}

uint64_t
RdmaNetwork::GetSharedUsed(uint32_t node) const
{
    return m_fabric->switches.at(node).sharedUsed;
}

uint64_t
RdmaNetwork::GetPfcThreshold(uint32_t port) const
{
    return m_fabric->PfcThreshold(port);
}

uint64_t
RdmaNetwork::GetPfcFrames() const
{
    return m_fabric->pfcFrames;
}

uint64_t
RdmaNetwork::GetDrops() const
{
    return m_fabric->drops;
}

uint64_t
RdmaNetwork::GetLost() const
{
    return m_fabric->lost;
}

uint64_t
RdmaNetwork::GetEcnMarks() const
{
    return m_fabric->ecnMarks;
}

uint64_t
RdmaNetwork::GetPfcLogSize() const
{
    return m_fabric->pfcLog.size();
}

uint32_t
RdmaNetwork::ReadPfcLog(int64_t* timeNs,
                        uint32_t* node,
                        uint32_t* nodeType,
                        uint32_t* ifIndex,
                        uint32_t* type,
                        uint32_t cap) const
{
    uint32_t n = uint32_t(std::min<size_t>(cap, m_fabric->pfcLog.size()));
    for (uint32_t i = 0; i < n; i++)
    {
        const RdmaFabric::PfcEvent& e = m_fabric->pfcLog[i];
        timeNs[i] = e.timeNs;
        node[i] = e.node;
        nodeType[i] = e.nodeType;
        ifIndex[i] = e.ifIndex;
        type[i] = e.type;
    }
    return n;
}

void
RdmaNetwork::ScheduleLinkDown(int64_t atNs, uint32_t a, uint32_t b)
{
    int64_t now = Simulator::Now().GetNanoSeconds();
    Simulator::Schedule(NanoSeconds(std::max<int64_t>(0, atNs - now)), &RdmaFabric::TakeDownLink, m_fabric.get(), a,
                        b);
}

uint64_t
RdmaNetwork::GetLinksDown() const
{
    return m_fabric->linksDown;
}

uint64_t
RdmaNetwork::GetDownDrops() const
{
    return m_fabric->downDrops;
}

void
RdmaNetwork::MonitorQueues(int64_t startNs, int64_t endNs, int64_t intervalNs)
{
    int64_t now = Simulator::Now().GetNanoSeconds();
    if (endNs <= std::max(startNs, now) || intervalNs <= 0)
    {
        return;
    }
    Simulator::Schedule(NanoSeconds(std::max(startNs, now) - now), &RdmaFabric::SampleQueues, m_fabric.get(), endNs,
                        intervalNs);
}

uint64_t
RdmaNetwork::GetQueueSampleCount() const
{
    return m_fabric->queueSamples.size();
}

uint32_t
RdmaNetwork::ReadQueueSamples(int64_t* timeNs, uint32_t* node, uint32_t* ifIndex, uint64_t* bytes, uint32_t cap)
    const
{
    uint32_t n = uint32_t(std::min<size_t>(cap, m_fabric->queueSamples.size()));
    for (uint32_t i = 0; i < n; i++)
    {
        const RdmaFabric::QueueSample& q = m_fabric->queueSamples[i];
        timeNs[i] = q.timeNs;
        node[i] = q.node;
        ifIndex[i] = q.ifIndex;
        bytes[i] = q.bytes;
    }
    return n;
}

RdmaFabric*
RdmaNetwork::GetFabric() const
{
    return m_fabric.get();
}

// ---- RdmaFlowManager ----------------------------------------------------------------------------

RdmaFlowManager::RdmaFlowManager(RdmaNetwork* network, uint32_t nFlows)
    : m_network(network),
      m_table(nFlows)
{
    m_network->GetFabric()->table = &m_table;
}

uint32_t
RdmaFlowManager::OpenConnection(uint32_t src, uint32_t dst)
{
    return m_network->GetFabric()->OpenQp(src, dst)->id;
}

uint32_t
RdmaFlowManager::GetConnectionPath(uint32_t conn, uint32_t* out, uint32_t cap) const
{
    RdmaQp* qp = GetSender(conn);
    uint32_t n = m_network->TracePath(qp->src, qp->dst, qp->sport, qp->dport, out, cap);
    return n + m_network->TracePath(qp->dst, qp->src, qp->dport, qp->sport, out + n, cap - n);
}

void
RdmaFlowManager::StartFlow(uint32_t flow, uint32_t conn, uint64_t bytes, bool kick)
{
    RdmaQp* qp = GetSender(conn);
    m_table.OnStart(flow);
    bool idle = qp->sndNxt >= qp->size; // else its own ACKs and timers keep it sending
    qp->size += bytes;
    qp->flows.emplace_back(flow, qp->size);
    if (idle && kick)
    {
        Resume(conn);
    }
}

void
RdmaFlowManager::Resume(uint32_t conn)
{
    RdmaQp* qp = GetSender(conn);
    if (qp->sndNxt < qp->size)
    {
        // Kick in an event in the sender's context (the control plane runs between events). Not
        // for a flow queued behind unsent bytes: that event would land in a frozen partition.
        Simulator::ScheduleWithContext(qp->src, Seconds(0), &RdmaFabric::Kick, m_network->GetFabric(),
                                       qp->port);
    }
}

uint64_t
RdmaFlowManager::SkipFlow(uint32_t flow, uint32_t conn, uint64_t bytes)
{
    RdmaQp* qp = GetSender(conn);
    uint64_t removed = std::min(bytes, qp->GetUntransmittedOf(flow));
    if (removed == 0)
    {
        return 0;
    }
    // Never-sent bytes vanish from the QP's byte stream: this flow's end and every later one move.
    bool after = false;
    for (auto& [f, end] : qp->flows)
    {
        after = after || f == flow;
        if (after)
        {
            end -= removed;
        }
    }
    qp->size -= removed;
    m_table.OnSkipped(flow, removed);
    return removed;
}

FlowTable&
RdmaFlowManager::GetTable()
{
    return m_table;
}

RdmaQp*
RdmaFlowManager::GetSender(uint32_t conn) const
{
    return m_network->GetFabric()->qps.at(conn).get();
}

} // namespace wormhole
