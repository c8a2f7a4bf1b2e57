// HPCC congestion control (in-band telemetry, optionally a rate per hop) and HPCC-PINT (one
// encoded utilization per packet).
#include "rdma-fabric.h"

namespace wormhole
{

// ---- HPCC (rate-based, as the reference) --------------------------------------------------------

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
RdmaFabric::HpccAck(RdmaQp* qp, Ptr<Packet> p, const RdmaHeader& h)
{
    auto found = telemetry.find(p->GetUid());
    if (found == telemetry.end())
    {
        return;
    }
    const IntStack& tag = found->second;
    if (qp->lastUpdateSeq == 0)
    {
        // First RTT: only remember the telemetry.
        qp->lastUpdateSeq = qp->sndNxt;
        qp->nHops = tag.nHops;
        std::copy(tag.hops, tag.hops + tag.nHops, qp->hops);
        return;
    }
    bool full = h.seq > qp->lastUpdateSeq;
    if (!full && !cfg.fastReact)
    {
        return;
    }
    if (cfg.multiRate)
    {
        HpccMultiRate(qp, tag, full);
        return;
    }
    double uMax = 0;
    int64_t dt = 0;
    bool updated = false;
    for (uint32_t i = 0; i < tag.nHops; i++)
    {
        RdmaQp::Hop now = Received(qp, tag.hops[i]);
        if (cfg.sampleFeedback && !full && now.qlen == 0)
        {
            continue; // SAMPLE_FEEDBACK: between full updates an empty queue is no news (kept unread)
        }
        const RdmaQp::Hop& last = qp->hops[i];
        if (i < qp->nHops && now.timeNs != last.timeNs)
        {
            updated = true;
            int64_t tau = now.timeNs - last.timeNs;
            double u = HopUtilization(qp, now, last);
            if (u > uMax)
            {
                uMax = u;
                dt = tau;
            }
        }
        qp->hops[i] = now;
    }
    qp->nHops = tag.nHops;
    if (updated)
    {
        int64_t T = qp->baseRttNs;
        dt = std::min(dt, T);
        qp->u = (qp->u * double(T - dt) + uMax * double(dt)) / double(T);
        auto [rate, stage] = HpccRate(qp->refRate, qp->incStage, qp->u, qp->maxRate);
        ChangeRate(qp, rate);
        if (full)
        {
            qp->refRate = rate;
            qp->incStage = stage;
        }
    }
    if (full)
    {
        qp->lastUpdateSeq = std::max(qp->lastUpdateSeq, qp->sndNxt);
    }
}

void
RdmaFabric::HpccMultiRate(RdmaQp* qp, const IntStack& tag, bool full)
{
    // MULTI_RATE: each hop keeps its own utilization (EWMA over its own interval), reference rate
    // and stage; the QP sends at the smallest hop rate, hops without news at their last one.
    double rate = qp->maxRate;
    double hopRate[MAX_INT_HOPS];
    uint32_t hopStage[MAX_INT_HOPS];
    bool updated[MAX_INT_HOPS] = {};
    bool any = false;
    int64_t T = qp->baseRttNs;
    for (uint32_t i = 0; i < tag.nHops; i++)
    {
        RdmaQp::Hop now = Received(qp, tag.hops[i]);
        if (cfg.sampleFeedback && !full && now.qlen == 0)
        {
            rate = std::min(rate, qp->hopRate[i]);
            continue;
        }
        const RdmaQp::Hop& last = qp->hops[i];
        if (i < qp->nHops && now.timeNs != last.timeNs)
        {
            double u = HopUtilization(qp, now, last);
            int64_t tau = std::min(now.timeNs - last.timeNs, T);
            qp->hopU[i] = (qp->hopU[i] * double(T - tau) + u * double(tau)) / double(T);
            std::tie(hopRate[i], hopStage[i]) = HpccRate(qp->hopRate[i], qp->hopStage[i], qp->hopU[i], qp->maxRate);
            rate = std::min(rate, hopRate[i]);
            updated[i] = any = true;
        }
        else
        {
            rate = std::min(rate, qp->hopRate[i]);
        }
        qp->hops[i] = now;
    }
    qp->nHops = tag.nHops;
    qp->u = *std::max_element(qp->hopU, qp->hopU + std::max(1u, qp->nHops)); // the bottleneck's, for the engine
    if (any)
    {
        ChangeRate(qp, rate);
    }
    if (full)
    {
        for (uint32_t i = 0; i < tag.nHops; i++)
        {
            if (updated[i])
            {
                qp->hopRate[i] = hopRate[i];
                qp->hopStage[i] = hopStage[i];
            }
        }
        if (any)
        {
            qp->refRate = rate; // (what the engine reads and a memo hit restores)
        }
        qp->lastUpdateSeq = std::max(qp->lastUpdateSeq, qp->sndNxt);
    }
}

// ---- HPCC-PINT: one utilization per packet, the path's largest, log-encoded ----------------------

void
RdmaFabric::PintStamp(Port& out, IntStack& stack, uint64_t qlen)
{
    // U <- U (T - dt) / T + (qlen / T + last frame / dt) dt / (B): the egress port's utilization
    // averaged over T, the largest base RTT (the reference computes the same with hardware-style
    // log approximations).
    double T = double(maxRttNs);
    double dt = std::min(double(Simulator::Now().GetNanoSeconds() - out.pintLastNs), T);
    double bytesPerNs = double(out.rateBps) / 8e9;
    out.pintU = out.pintU * (T - dt) / T + (double(qlen) * dt / T + double(out.pintLastBytes)) / (bytesPerNs * T);
    stack.power = std::max(stack.power, PintEncode(out.pintU));
}

uint16_t
RdmaFabric::PintEncode(double u)
{
    // u * PINT_MAX_FLOWS (at least 1) as a power of the log base, rounded up or down at random
    // in proportion to where it lies between the two powers (unbiased on average).
    double x = std::max(1.0, std::ceil(u * PINT_MAX_FLOWS));
    double power = std::log(x) / std::log(cfg.pintLogBase);
    double lo = std::floor(power);
    double below = std::pow(cfg.pintLogBase, lo);
    double above = std::pow(cfg.pintLogBase, lo + 1);
    double p = lo + (pintDraw->GetValue() < (x - below) / (above - below) ? 1 : 0);
    return uint16_t(std::min(p, double(pintMaxPower)));
}

double
RdmaFabric::PintDecode(uint16_t power) const
{
    return std::pow(cfg.pintLogBase, power) / PINT_MAX_FLOWS;
}

void
RdmaFabric::PintAck(RdmaQp* qp, Ptr<Packet> p, const RdmaHeader& h)
{
    if (cfg.pintProb < 1 && pintDraw->GetValue() >= cfg.pintProb)
    {
        return; // PINT_PROB: this ACK is not sampled
    }
    auto found = telemetry.find(p->GetUid());
    if (found == telemetry.end())
    {
        return;
    }
    if (qp->lastUpdateSeq == 0)
    {
        qp->lastUpdateSeq = qp->sndNxt; // first RTT: no reaction
        return;
    }
    bool full = h.seq > qp->lastUpdateSeq;
    if (!full && !cfg.fastReact)
    {
        return;
    }
    // As HPCC with the path's utilization read off the packet instead of computed per hop.
    qp->u = PintDecode(found->second.power);
    auto [rate, stage] = HpccRate(qp->refRate, qp->incStage, qp->u, qp->maxRate);
    ChangeRate(qp, rate);
    if (full)
    {
        qp->refRate = rate;
        qp->incStage = stage;
        qp->lastUpdateSeq = std::max(qp->lastUpdateSeq, qp->sndNxt);
    }
}

} // namespace wormhole
