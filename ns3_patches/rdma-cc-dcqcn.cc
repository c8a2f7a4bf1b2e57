// DCQCN congestion control at the sender (CNP reaction, alpha, rate decrease and increase timers).
#include "rdma-fabric.h"

namespace wormhole
{

// ---- DCQCN (Mellanox-style timers, as the reference) --------------------------------------------

namespace
{

/// GetCongestionState: {rate, target rate, alpha} (RdmaCc's defaults).
class DcqcnCc : public RdmaCc
{
  public:
    using RdmaCc::RdmaCc;

    void OnAck(RdmaQp* qp, Ptr<Packet>, const RdmaHeader& h) override
    {
        if (h.flags & FLAG_CNP)
        {
            CnpReceived(qp);
        }
    }

    void MoveRateIncrease(RdmaQp* qp, Time delay) override
    {
        // In the sender's node context (so in its partition's tags): the control plane calls this
        // between events, and ScheduleWithContext gives no EventId to keep in increaseTimer.
        qp->rateStepNs = (Simulator::Now() + delay).GetNanoSeconds();
        Simulator::ScheduleWithContext(qp->src, delay, &DcqcnCc::MovedRateIncrease, this, qp, ++qp->rateStepGen);
    }

    void OnStateSet(RdmaQp* qp) override
    {
        // The state is one cuts left (a memo record's): a cut arms the rate-increase timer, and a
        // QP set below line rate without it never climbed back (a 655 KB flow alone at 2.5 Gbps,
        // 1.8 ms late on moe-8x13b-128-dcqcn warm). Its phase is unknown: a full RP_TIMER.
        int64_t now = Simulator::Now().GetNanoSeconds();
        if (qp->rate < qp->maxRate && !qp->increaseTimer.IsPending() && qp->rateStepNs < now)
        {
            MoveRateIncrease(qp, NanoSeconds(cfg.rpTimerNs));
        }
    }

  private:
    void CnpReceived(RdmaQp* qp);
    void UpdateAlpha(RdmaQp* qp);
    void CheckRateDecrease(RdmaQp* qp);
    void RateIncreaseTimer(RdmaQp* qp);

    void MovedRateIncrease(RdmaQp* qp, uint32_t gen)
    {
        if (gen != qp->rateStepGen || qp->increaseTimer.IsPending()) // replaced, or a cut restarted the timer
        {
            return;
        }
        qp->rateStepNs = -1;
        RateIncreaseTimer(qp);
    }
};

} // namespace

void
DcqcnCc::CnpReceived(RdmaQp* qp)
{
    qp->alphaCnpArrived = true;
    qp->decreaseCnpArrived = true;
    if (qp->firstCnp)
    {
        qp->alpha = 1;
        qp->alphaCnpArrived = false;
        qp->alphaTimer = Simulator::Schedule(NanoSeconds(cfg.alphaResumeIntervalNs), &DcqcnCc::UpdateAlpha, this, qp);
        // +1 ns: the first decrease runs after the alpha update of the same instant.
        qp->decreaseTimer =
            Simulator::Schedule(NanoSeconds(cfg.rateDecreaseIntervalNs + 1), &DcqcnCc::CheckRateDecrease, this, qp);
        qp->rate *= cfg.rateOnFirstCnp;
        qp->targetRate = qp->rate;
        qp->firstCnp = false;
    }
}

void
DcqcnCc::UpdateAlpha(RdmaQp* qp)
{
    qp->alpha = (1 - cfg.ewmaGain) * qp->alpha + (qp->alphaCnpArrived ? cfg.ewmaGain : 0);
    qp->alphaCnpArrived = false;
    qp->alphaTimer = Simulator::Schedule(NanoSeconds(cfg.alphaResumeIntervalNs), &DcqcnCc::UpdateAlpha, this, qp);
}

void
DcqcnCc::CheckRateDecrease(RdmaQp* qp)
{
    qp->decreaseTimer =
        Simulator::Schedule(NanoSeconds(cfg.rateDecreaseIntervalNs), &DcqcnCc::CheckRateDecrease, this, qp);
    if (!qp->decreaseCnpArrived)
    {
        return;
    }
    if (cfg.clampTargetRate || qp->stage != 0)
    {
        qp->targetRate = qp->rate;
    }
    qp->rate = std::max(double(cfg.minRateBps), qp->rate * (1 - qp->alpha / 2));
    qp->stage = 0;
    qp->decreaseCnpArrived = false;
    qp->increaseTimer.Cancel();
    qp->increaseTimer = Simulator::Schedule(NanoSeconds(cfg.rpTimerNs), &DcqcnCc::RateIncreaseTimer, this, qp);
}

void
DcqcnCc::RateIncreaseTimer(RdmaQp* qp)
{
    qp->increaseTimer = Simulator::Schedule(NanoSeconds(cfg.rpTimerNs), &DcqcnCc::RateIncreaseTimer, this, qp);
    if (qp->stage == cfg.fastRecoveryTimes)
    {
        qp->targetRate = std::min(qp->maxRate, qp->targetRate + double(cfg.rateAiBps));
    }
    else if (qp->stage > cfg.fastRecoveryTimes)
    {
        qp->targetRate = std::min(qp->maxRate, qp->targetRate + double(cfg.rateHaiBps));
    }
    qp->rate = qp->rate / 2 + qp->targetRate / 2;
    qp->stage++;
}

std::unique_ptr<RdmaCc>
MakeDcqcn(RdmaFabric& f)
{
    return std::make_unique<DcqcnCc>(f);
}

} // namespace wormhole
