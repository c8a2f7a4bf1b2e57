// TIMELY (RTT gradient) and DCTCP (ECN fraction) congestion control, both rate-based.
#include "rdma-fabric.h"

namespace wormhole
{

namespace
{

/// GetCongestionState: {rate, reference rate, the last RTT sample (ns)}.
class TimelyCc : public RdmaCc
{
  public:
    explicit TimelyCc(RdmaFabric& f)
        : RdmaCc(f, {f.cfg.timestampBytes, 0, false})
    {
    }

    void OnAck(RdmaQp* qp, Ptr<Packet>, const RdmaHeader& h) override { Ack(qp, h); }

    void OnSend(const RdmaQp* qp, RdmaHeader& h) override
    {
        // The device sends it now (the queue built it on dequeue), on a clock that stops while its
        // partition is frozen: an RTT over any number of freezes is the network's, as in stock.
        h.ts = uint32_t(Simulator::Now().GetNanoSeconds() - qp->frozenTotalNs);
    }

    void GetState(const RdmaQp& qp, double* out) const override
    {
        out[0] = qp.rate;
        out[1] = qp.refRate;
        out[2] = double(qp.lastRttNs);
    }

    double& ReferenceRate(RdmaQp& qp) const override { return qp.refRate; }

    void SetThird(RdmaQp& qp, double value) const override { qp.lastRttNs = int64_t(value); }

  private:
    void Ack(RdmaQp* qp, const RdmaHeader& h);
};

/// GetCongestionState: {rate, rate, alpha}.
class DctcpCc : public RdmaCc
{
  public:
    using RdmaCc::RdmaCc;

    void OnAck(RdmaQp* qp, Ptr<Packet>, const RdmaHeader& h) override { Ack(qp, h); }

    void GetState(const RdmaQp& qp, double* out) const override
    {
        out[0] = qp.rate;
        out[1] = qp.rate;
        out[2] = qp.alpha;
    }

  private:
    void Ack(RdmaQp* qp, const RdmaHeader& h);
};

} // namespace

// ---- TIMELY and DCTCP (rate-based, as the reference: the new rate applies from the next packet) ---

void
TimelyCc::Ack(RdmaQp* qp, const RdmaHeader& h)
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
DctcpCc::Ack(RdmaQp* qp, const RdmaHeader& h)
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

std::unique_ptr<RdmaCc>
MakeTimely(RdmaFabric& f)
{
    return std::make_unique<TimelyCc>(f);
}

std::unique_ptr<RdmaCc>
MakeDctcp(RdmaFabric& f)
{
    return std::make_unique<DctcpCc>(f);
}

} // namespace wormhole
