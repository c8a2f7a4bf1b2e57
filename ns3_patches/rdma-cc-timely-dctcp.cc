// TIMELY (RTT gradient) and DCTCP (ECN fraction) congestion control, both rate-based.
#include "rdma-fabric.h"

namespace wormhole
{

// ---- TIMELY and DCTCP (rate-based, as the reference: the new rate applies from the next packet) ---

void
RdmaFabric::TimelyAck(RdmaQp* qp, const RdmaHeader& h)
{
    if (h.seq <= qp->lastUpdateSeq)
    {
        return; // once per window: no reaction in between
    }
    int64_t rtt = int64_t(uint32_t(uint32_t(Simulator::Now().GetNanoSeconds() - qp->frozenTotalNs) - h.ts));
    if (qp->lastUpdateSeq != 0) // the first window only takes a sample
    {
        double diff = (1 - cfg.timelyAlpha) * qp->rttDiffNs + cfg.timelyAlpha * double(rtt - qp->lastRttNs);
        double gradient = diff / double(cfg.timelyMinRttNs);
        bool decrease = rtt >= cfg.timelyTLowNs && (rtt > cfg.timelyTHighNs || gradient > 0);
        if (decrease)
        {
            double cut = rtt > cfg.timelyTHighNs ? 1 - cfg.timelyBeta * (1 - double(cfg.timelyTHighNs) / double(rtt))
                                                 : std::max(0.0, 1 - cfg.timelyBeta * gradient);
            qp->rate = std::max(double(cfg.minRateBps), qp->refRate * cut);
            qp->incStage = 0;
        }
        else
        {
            double step = double(qp->incStage < 5 ? cfg.rateAiBps : cfg.rateHaiBps);
            qp->rate = std::min(qp->maxRate, qp->refRate + step);
            qp->incStage++;
        }
        qp->refRate = qp->rate;
        qp->rttDiffNs = diff;
    }
    if (qp->sndNxt > qp->lastUpdateSeq)
    {
        qp->lastUpdateSeq = qp->sndNxt;
        qp->lastRttNs = rtt;
    }
}

void
RdmaFabric::DctcpAck(RdmaQp* qp, const RdmaHeader& h)
{
    bool marked = h.flags & FLAG_CNP;
    qp->ecnAcks += marked;
    bool newWindow = h.seq > qp->lastUpdateSeq;
    if (newWindow)
    {
        // alpha follows the fraction of the last window's packets whose ACKs echoed a mark
        if (qp->lastUpdateSeq != 0)
        {
            double marks = std::min(1.0, double(qp->ecnAcks) / double(qp->windowPackets));
            qp->alpha = (1 - cfg.ewmaGain) * qp->alpha + cfg.ewmaGain * marks;
            qp->ecnAcks = 0;
            qp->windowPackets = (qp->sndNxt - h.seq) / cfg.payloadBytes + 1;
        }
        else
        {
            qp->windowPackets = (qp->sndNxt - qp->ccStartSeq) / cfg.payloadBytes + 1;
        }
        qp->lastUpdateSeq = qp->sndNxt;
    }
    if (qp->cwr && h.seq > qp->highSeq)
    {
        qp->cwr = false;
    }
    if (marked && !qp->cwr)
    {
        qp->rate = std::max(double(cfg.minRateBps), qp->rate * (1 - qp->alpha / 2));
        qp->cwr = true; // once per window of data
        qp->highSeq = qp->sndNxt;
    }
    if (!qp->cwr && newWindow)
    {
        qp->rate = std::min(qp->maxRate, qp->rate + double(cfg.dctcpRateAiBps));
    }
}

} // namespace wormhole
