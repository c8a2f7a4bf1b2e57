#include "fair-shares.h"

#include <algorithm>
#include <limits>

namespace wormhole
{

namespace
{
constexpr double kTie = 1 + 1e-12; // a port this close to the level is full with it
}

FairShares::FairShares(const int64_t* dataFlows, const int64_t* dataPorts, uint32_t nData,
                       const int64_t* ackFlows, const int64_t* ackPorts, uint32_t nAcks,
                       const double* caps, uint32_t nFlows, const double* frameNs,
                       const double* ackFrameNs, uint32_t nPorts, double payload,
                       double ackedPerAck)
    : m_dataFlows(dataFlows, dataFlows + nData),
      m_dataPorts(dataPorts, dataPorts + nData),
      m_ackFlows(ackFlows, ackFlows + nAcks),
      m_ackPorts(ackPorts, ackPorts + nAcks),
      m_caps(caps, caps + nFlows),
      m_frameNs(frameNs, frameNs + nPorts),
      m_edgeAckNs(nAcks),
      m_payload(payload),
      m_ackedPerAck(ackedPerAck)
{
    for (uint32_t i = 0; i < nAcks; ++i)
    {
        m_edgeAckNs[i] = ackFrameNs[ackPorts[i]];
    }
}

void
FairShares::Shares(const double* rates, int64_t without, double* out) const
{
    const size_t nFlows = m_caps.size();
    const size_t nPorts = m_frameNs.size();
    std::vector<char> active(nFlows, 1);
    std::vector<double> shares(rates, rates + nFlows);
    if (without >= 0)
    {
        active[without] = 0;
        shares[without] = 0.0;
    }
    std::vector<double> busy(nPorts);
    std::vector<double> capacity(nPorts);
    for (int round = 0; round < 3; ++round)
    {
        std::fill(busy.begin(), busy.end(), 0.0);
        for (size_t i = 0; i < m_ackFlows.size(); ++i)
        {
            busy[m_ackPorts[i]] += shares[m_ackFlows[i]] / m_ackedPerAck * m_edgeAckNs[i];
        }
        for (size_t p = 0; p < nPorts; ++p)
        {
            capacity[p] = std::max(0.0, 1 - busy[p]) * m_payload / m_frameNs[p];
        }
        Fill(capacity.data(), active, shares.data());
    }
    std::copy(shares.begin(), shares.end(), out);
}

void
FairShares::Fill(const double* capacity, const std::vector<char>& activeIn, double* rates) const
{
    const size_t nFlows = m_caps.size();
    const size_t nPorts = m_frameNs.size();
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<char> active(activeIn);
    std::vector<double> room(capacity, capacity + nPorts);
    std::vector<int64_t> users(nPorts);
    std::vector<double> perUser(nPorts);
    std::vector<char> fixed(nFlows);
    std::fill(rates, rates + nFlows, 0.0);
    size_t left = std::count(active.begin(), active.end(), 1);
    while (left > 0)
    {
        std::fill(users.begin(), users.end(), 0);
        for (size_t i = 0; i < m_dataFlows.size(); ++i)
        {
            users[m_dataPorts[i]] += active[m_dataFlows[i]];
        }
        double level = inf;
        for (size_t f = 0; f < nFlows; ++f)
        {
            if (active[f])
            {
                level = std::min(level, m_caps[f]);
            }
        }
        for (size_t p = 0; p < nPorts; ++p)
        {
            perUser[p] = users[p] > 0 ? room[p] / double(users[p]) : inf;
            level = std::min(level, perUser[p]);
        }
        for (size_t f = 0; f < nFlows; ++f)
        {
            fixed[f] = active[f] && m_caps[f] <= level * kTie;
        }
        for (size_t i = 0; i < m_dataFlows.size(); ++i)
        {
            if (active[m_dataFlows[i]] && perUser[m_dataPorts[i]] <= level * kTie)
            {
                fixed[m_dataFlows[i]] = 1;
            }
        }
        std::fill(users.begin(), users.end(), 0); // now: fixed flows per port
        for (size_t i = 0; i < m_dataFlows.size(); ++i)
        {
            users[m_dataPorts[i]] += fixed[m_dataFlows[i]];
        }
        for (size_t f = 0; f < nFlows; ++f)
        {
            if (fixed[f])
            {
                rates[f] = level;
                active[f] = 0;
                --left;
            }
        }
        for (size_t p = 0; p < nPorts; ++p)
        {
            room[p] = std::max(0.0, room[p] - level * double(users[p]));
        }
    }
}

} // namespace wormhole
