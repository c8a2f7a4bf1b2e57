// RDMA NICs: queue pairs, pacing and windows, data frames, ACK/NACK generation and reception,
// go-back-N and the retransmission timeout.
#include "rdma-fabric.h"

namespace wormhole
{

// ---- NIC ----------------------------------------------------------------------------------------

RdmaQp*
RdmaFabric::OpenQp(uint32_t src, uint32_t dst)
{
    NS_ABORT_MSG_UNLESS(src < isHost.size() && dst < isHost.size() && isHost[src] && isHost[dst] && src != dst,
                        "RDMA: a queue pair needs two distinct hosts (" << src << " -> " << dst << ")");
    auto qp = std::make_unique<RdmaQp>();
    qp->fabric = this;
    qp->id = uint32_t(qps.size());
    qp->src = src;
    qp->dst = dst;
    // As the reference: source ports per host pair from 10000; destination port 100.
    auto [it, fresh] = nextSport.try_emplace((uint64_t(src) << 32) | dst, 10000);
    qp->sport = uint16_t(it->second++);
    qp->dport = 100;
    qp->port = NextPort(src, dst, src, qp->sport, qp->dport);
    if (qp->port == NO_PORT)
    {
        qp->port = nodePorts[src].at(0); // its NIC's link is down: it will not send
    }
    qp->maxRate = double(ports[qp->port].rateBps);
    int64_t delay = 0;
    int64_t tx = 0;
    PathDelay(src, dst, delay, tx);
    int64_t rtt = cfg.globalT ? maxRttNs : 2 * delay + tx;
    qp->baseRttNs = rtt;
    qp->window = !cfg.hasWin ? 0 : cfg.globalT ? maxBdp : uint64_t(double(rtt) * qp->maxRate / 8e9);
    ResetCc(qp.get());
    ports[qp->port].qps.push_back(qp.get());
    rx.emplace_back();
    qps.push_back(std::move(qp));
    return qps.back().get();
}

void
RdmaFabric::ResetCc(RdmaQp* qp)
{
    qp->rate = qp->maxRate;
    qp->alpha = 1;
    qp->targetRate = qp->maxRate;
    qp->alphaCnpArrived = false;
    qp->decreaseCnpArrived = false;
    qp->firstCnp = true;
    qp->stage = 0;
    qp->alphaTimer.Cancel();
    qp->decreaseTimer.Cancel();
    qp->increaseTimer.Cancel();
    qp->rateStepNs = -1;
    qp->rateStepGen++; // a step KeepRateStep moved, still ahead, is dropped
    qp->u = 1;
    qp->refRate = qp->maxRate;
    qp->incStage = 0;
    qp->lastUpdateSeq = 0;
    qp->nHops = 0;
    std::fill(std::begin(qp->hopU), std::end(qp->hopU), 1.0);
    std::fill(std::begin(qp->hopRate), std::end(qp->hopRate), qp->maxRate);
    std::fill(std::begin(qp->hopStage), std::end(qp->hopStage), 0u);
    qp->lastRttNs = 0;
    qp->rttDiffNs = 0;
    qp->ecnAcks = 0;
    qp->windowPackets = 0;
    qp->cwr = false;
    qp->highSeq = 0;
    qp->ccStartSeq = qp->sndUna;
}

uint64_t
RdmaFabric::Window(const RdmaQp* qp) const
{
    if (qp->window == 0)
    {
        return 0;
    }
    if (!cfg.varWin)
    {
        return qp->window;
    }
    return std::max<uint64_t>(1, uint64_t(double(qp->window) * qp->rate / qp->maxRate));
}

RdmaQp*
RdmaFabric::PickQp(uint32_t port, bool commit)
{
    Port& P = ports[port];
    size_t n = P.qps.size();
    int64_t nowPs = Simulator::Now().GetPicoSeconds();
    if (P.queue->paused[cfg.dataClass])
    {
        return nullptr;
    }
    for (size_t i = 0; i < n; i++)
    {
        size_t idx = (P.rr + i) % n;
        RdmaQp* qp = P.qps[idx];
        if (BytesLeft(qp) == 0 || WindowBound(qp) || qp->nextAvailPs > nowPs)
        {
            continue;
        }
        if (commit)
        {
            P.rr = uint32_t(idx + 1);
        }
        return qp;
    }
    return nullptr;
}

bool
RdmaFabric::CanSend(uint32_t port)
{
    RdmaPortQueue& q = *ports[port].queue;
    if (!isHost[ports[port].node])
    {
        return q.NextClass() >= 0;
    }
    uint32_t ackCls = cfg.ackHighPrio ? 0 : cfg.dataClass;
    if (!q.q[ackCls].empty() && (ackCls == 0 || !q.paused[ackCls]))
    {
        return true;
    }
    return PickQp(port, false) != nullptr;
}

Ptr<Packet>
RdmaFabric::HostDequeue(uint32_t port)
{
    RdmaPortQueue& q = *ports[port].queue;
    uint32_t ackCls = cfg.ackHighPrio ? 0 : cfg.dataClass;
    // ACKs and NACKs first (the reference's high-priority NIC queue), unless their class is paused.
    if (!q.q[ackCls].empty() && (ackCls == 0 || !q.paused[ackCls]))
    {
        Ptr<Packet> p = q.q[ackCls].front().packet;
        q.q[ackCls].pop_front();
        q.bytes -= p->GetSize();
        ports[port].txBytes += p->GetSize();
        ports[port].txPackets++;
        return p;
    }
    RdmaQp* qp = PickQp(port, true);
    if (qp == nullptr)
    {
        ScheduleWake(port);
        return nullptr;
    }
    Ptr<Packet> p = MakeData(qp);
    ports[port].txBytes += p->GetSize();
    ports[port].txPackets++;
    return p;
}

Ptr<Packet>
RdmaFabric::MakeData(RdmaQp* qp)
{
    uint32_t payload = uint32_t(std::min<uint64_t>(cfg.payloadBytes, BytesLeft(qp)));
    RdmaHeader h;
    h.type = DATA;
    h.cls = uint8_t(cfg.dataClass);
    h.sip = qp->src;
    h.dip = qp->dst;
    h.sport = qp->sport;
    h.dport = qp->dport;
    h.qpn = qp->id;
    h.seq = qp->sndNxt;
    h.len = uint16_t(payload);
    h.wireBytes =
        uint16_t(std::max<uint32_t>(RdmaHeader::FIXED, cfg.dataOverheadBytes - PPP_BYTES + cc->wire.extraDataBytes));
    cc->OnSend(qp, h);
    if (qp->sndNxt + payload == qp->size)
    {
        h.flags |= FLAG_LAST;
    }
    Ptr<Packet> p = Create<Packet>(payload);
    p->AddHeader(h);
    if (cc->wire.telemetry)
    {
        telemetry[p->GetUid()] = IntStack();
    }
    PppHeader ppp;
    ppp.SetProtocol(PPP_IPV4);
    p->AddHeader(ppp);
    if (qp->sndNxt < qp->highestSent)
    {
        qp->retransmitted += payload;
    }
    qp->sndNxt += payload;
    qp->highestSent = std::max(qp->highestSent, qp->sndNxt);
    qp->lastPacketBytes = p->GetSize();
    if (cfg.rateBound)
    {
        qp->nextAvailPs = Simulator::Now().GetPicoSeconds() +
                          int64_t(std::llround(double(p->GetSize()) * 8e12 / qp->rate));
    }
    ArmRto(qp);
    return p;
}

void
RdmaFabric::ScheduleWake(uint32_t port)
{
    // Only pacing can make a QP eligible without another event: wake at the earliest paced time.
    Port& P = ports[port];
    int64_t earliest = std::numeric_limits<int64_t>::max();
    int64_t nowPs = Simulator::Now().GetPicoSeconds();
    if (P.queue->paused[cfg.dataClass] || P.down)
    {
        return; // the resume kicks it
    }
    for (RdmaQp* qp : P.qps)
    {
        if (BytesLeft(qp) == 0 || WindowBound(qp) || qp->nextAvailPs <= nowPs)
        {
            continue;
        }
        earliest = std::min(earliest, qp->nextAvailPs);
    }
    if (earliest == std::numeric_limits<int64_t>::max())
    {
        return;
    }
    if (P.wake.IsPending() && P.wakeAtPs <= earliest)
    {
        return;
    }
    P.wake.Cancel();
    P.wakeAtPs = earliest;
    int64_t delayNs = (earliest - nowPs + 999) / 1000;
    P.wake = Simulator::Schedule(NanoSeconds(delayNs), &RdmaFabric::Wake, this, port);
}

void
RdmaFabric::Wake(uint32_t port)
{
    ports[port].wakeAtPs = std::numeric_limits<int64_t>::max();
    Kick(port);
    if (!ports[port].wake.IsPending())
    {
        ScheduleWake(port);
    }
}

void
RdmaFabric::Kick(uint32_t port)
{
    Port& P = ports[port];
    if (P.queue->busy || P.queue->inDequeue || P.down)
    {
        return; // the device will dequeue when its wire frees up, or is choosing right now
    }
    if (!CanSend(port))
    {
        if (isHost[P.node])
        {
            ScheduleWake(port); // an idle NIC whose QPs are only held back by pacing
        }
        return;
    }
    P.queue->swallow = true;
    P.dev->Send(Create<Packet>(), P.dev->GetBroadcast(), ETHER_IPV4);
    P.queue->swallow = false;
}

void
RdmaFabric::ChangeRate(RdmaQp* qp, double rate)
{
    // The pending send was paced at the old rate: move it as if the last packet went at the new one.
    if (qp->lastPacketBytes > 0)
    {
        double bits = double(qp->lastPacketBytes) * 8e12;
        qp->nextAvailPs += int64_t(std::llround(bits / rate - bits / qp->rate));
    }
    qp->rate = rate;
    ScheduleWake(qp->port); // a faster rate may pull the NIC's wake-up earlier
}

void
RdmaFabric::HostReceive(uint32_t port, Ptr<Packet> p, const RdmaHeader& h)
{
    if (h.type == DATA)
    {
        ReceiveData(port, p, h);
    }
    else
    {
        ReceiveAck(p, h);
    }
    if (cc->wire.telemetry)
    {
        telemetry.erase(p->GetUid()); // it has arrived: its telemetry was read or copied
    }
}

void
RdmaFabric::LinkLoss(Ptr<const Packet> p)
{
    lost++;
    telemetry.erase(p->GetUid());
}

void
RdmaFabric::ReceiveData(uint32_t port, Ptr<Packet> p, const RdmaHeader& h)
{
    Rx& r = rx.at(h.qpn);
    bool cnp = h.flags & FLAG_CE;
    if (h.seq == r.expected)
    {
        r.expected += h.len;
        r.sinceAck += h.len;
        if (r.sinceAck >= cfg.ackIntervalBytes || r.expected % cfg.chunkBytes == 0 || (h.flags & FLAG_LAST))
        {
            r.sinceAck = 0;
            SendControl(port, h, ACK, r.expected, cnp, p);
        }
    }
    else if (h.seq > r.expected)
    {
        int64_t now = Simulator::Now().GetNanoSeconds();
        if (now >= r.nackTimerNs || r.lastNack != r.expected)
        {
            r.nackTimerNs = now + cfg.nackIntervalNs;
            r.lastNack = r.expected;
            SendControl(port, h, NACK, r.expected, cnp, p);
        }
    }
    else if (cfg.rtoNs > 0)
    {
        // A duplicate: the reference ignores it, so a lost last ACK would hang; with a timeout
        // the sender retransmits and needs this ACK to finish.
        SendControl(port, h, ACK, r.expected, cnp, p);
    }
}

void
RdmaFabric::SendControl(uint32_t port, const RdmaHeader& data, uint8_t type, uint64_t seq, bool cnp,
                        Ptr<Packet> dataPacket)
{
    RdmaHeader h;
    h.type = type;
    h.flags = cnp ? FLAG_CNP : 0;
    h.cls = data.cls;
    h.sip = data.dip;
    h.dip = data.sip;
    h.sport = data.dport;
    h.dport = data.sport;
    h.qpn = data.qpn;
    h.seq = seq;
    h.ts = data.ts;
    h.wireBytes = uint16_t(std::max<uint32_t>(RdmaHeader::FIXED,
                                              cfg.ackBytes - PPP_BYTES + cc->wire.extraAckBytes));
    Ptr<Packet> p = Create<Packet>();
    p->AddHeader(h);
    if (cc->wire.telemetry)
    {
        telemetry[p->GetUid()] = telemetry[dataPacket->GetUid()];
    }
    // ACKs leave on the port the data came in on (one NIC port per host in the reference).
    Enqueue(port, cfg.ackHighPrio ? 0 : cfg.dataClass, p, port);
}

void
RdmaFabric::ReceiveAck(Ptr<Packet> p, const RdmaHeader& h)
{
    RdmaQp* qp = qps.at(h.qpn).get();
    Acknowledge(qp, h.seq);
    if (h.type == NACK)
    {
        qp->sndNxt = qp->sndUna; // go-back-N
    }
    if (qp->sndUna == qp->size)
    {
        ResetCc(qp); // idle: the next flow starts like a new QP, as the reference's one QP per flow
    }
    else
    {
        cc->OnAck(qp, p, h);
    }
    Kick(qp->port);
}

void
RdmaFabric::Acknowledge(RdmaQp* qp, uint64_t seq)
{
    if (seq <= qp->sndUna)
    {
        return;
    }
    uint64_t from = qp->sndUna;
    qp->sndUna = seq;
    qp->sndNxt = std::max(qp->sndNxt, qp->sndUna);
    qp->lastProgressNs = Simulator::Now().GetNanoSeconds();
    // Attribute the newly acknowledged bytes to the QP's flows in order; finish those covered,
    // including a flow the engine left with no bytes (all skipped) right at the boundary.
    uint64_t start = qp->flowsStart;
    for (auto it = qp->flows.begin(); it != qp->flows.end();)
    {
        uint64_t end = it->second;
        if (from < end && from < seq)
        {
            uint64_t upto = std::min(end, seq);
            table->OnDelivered(it->first, upto - from);
            from = upto;
        }
        if (end > seq)
        {
            break;
        }
        table->OnComplete(it->first);
        start = end;
        it = qp->flows.erase(it);
    }
    qp->flowsStart = start;
}

void
RdmaFabric::ArmRto(RdmaQp* qp)
{
    if (cfg.rtoNs <= 0 || qp->rtoTimer.IsPending())
    {
        return;
    }
    qp->lastProgressNs = Simulator::Now().GetNanoSeconds();
    qp->rtoTimer = Simulator::Schedule(NanoSeconds(cfg.rtoNs), &RdmaFabric::CheckRto, this, qp);
}

void
RdmaFabric::CheckRto(RdmaQp* qp)
{
    if (qp->sndUna >= qp->highestSent)
    {
        return; // nothing outstanding: the next send re-arms
    }
    int64_t now = Simulator::Now().GetNanoSeconds();
    int64_t due = qp->lastProgressNs + cfg.rtoNs;
    if (now >= due)
    {
        qp->sndNxt = qp->sndUna; // timeout: go back to the first unacknowledged byte
        qp->lastProgressNs = now;
        qp->timeouts++;
        due = now + cfg.rtoNs;
        Kick(qp->port);
    }
    qp->rtoTimer = Simulator::Schedule(NanoSeconds(due - now), &RdmaFabric::CheckRto, this, qp);
}

} // namespace wormhole
