#include "rate-probe.h"

#include "ns3/core-module.h"

#include <algorithm>

namespace wormhole
{
using namespace ns3;

RateProbe::RateProbe(FlowTable* table, PortNetwork* network, uint32_t capacity)
    : m_table(table),
      m_network(network),
      m_capacity(std::max<uint32_t>(1, capacity)),
      m_nFlows(table->GetNFlows()),
      m_nPorts(network->GetNPorts()),
      m_times(m_capacity),
      m_flowBytes(size_t(m_capacity) * m_nFlows),
      m_flowTimes(size_t(m_capacity) * m_nFlows),
      m_portBytes(size_t(m_capacity) * m_nPorts),
      m_recent(m_nFlows),
      m_lastChange(m_nFlows, 0),
      m_unread(m_nFlows)
{
}

void
RateProbe::Start(int64_t tauNs)
{
    m_tauNs = tauNs;
    Simulator::Cancel(m_next);
    // Every slot from the table as it is now; from here on, the flows delivering.
    for (uint32_t slot = 0; slot < m_capacity; slot++)
    {
        m_table->ReadDelivered(&m_flowBytes[size_t(slot) * m_nFlows]);
        m_table->ReadLastDelivery(&m_flowTimes[size_t(slot) * m_nFlows]);
    }
    m_table->TakeDeliveredSince();
    m_readRows = 0;
    Sample();
}

void
RateProbe::Stop()
{
    Simulator::Cancel(m_next);
}

uint64_t
RateProbe::GetNSamples() const
{
    return m_nSamples;
}

void
RateProbe::Sample()
{
    size_t slot = m_nSamples % m_capacity;
    m_times[slot] = Simulator::Now().GetNanoSeconds();
    for (uint32_t flow : m_table->TakeDeliveredSince())
    {
        m_lastChange[flow] = m_nSamples;
        m_recent.Add(flow);
    }
    // A flow is written at each of the m_capacity samples after its latest delivery, then it
    // leaves m_recent: every slot holds its count.
    for (uint32_t flow : m_recent.Flows())
    {
        m_flowBytes[slot * m_nFlows + flow] = m_table->GetDelivered(flow);
        m_flowTimes[slot * m_nFlows + flow] = m_table->GetLastDelivery(flow);
        m_unread.Add(flow);
    }
    m_recent.Retain([this](uint32_t flow) { return m_nSamples + 1 < m_lastChange[flow] + m_capacity; });
    m_network->ReadQueueBytes(&m_portBytes[slot * m_nPorts]);
    m_nSamples++;
    m_next = Simulator::Schedule(NanoSeconds(m_tauNs), &RateProbe::Sample, this);
}

uint32_t
RateProbe::Read(int64_t* times,
                uint64_t* flowBytes,
                int64_t* flowTimes,
                uint32_t* portBytes,
                uint32_t maxSamples)
{
    uint64_t n = std::min<uint64_t>({m_nSamples, m_capacity, maxSamples});
    for (uint64_t k = 0; k < n; k++)
    {
        size_t slot = (m_nSamples - n + k) % m_capacity;
        times[k] = m_times[slot];
        if (k >= m_readRows) // a row the caller has not had yet: every flow
        {
            std::copy_n(&m_flowBytes[slot * m_nFlows], m_nFlows, &flowBytes[k * m_nFlows]);
            std::copy_n(&m_flowTimes[slot * m_nFlows], m_nFlows, &flowTimes[k * m_nFlows]);
        }
        else
        {
            for (uint32_t flow : m_unread.Flows())
            {
                flowBytes[k * m_nFlows + flow] = m_flowBytes[slot * m_nFlows + flow];
                flowTimes[k * m_nFlows + flow] = m_flowTimes[slot * m_nFlows + flow];
            }
        }
        std::copy_n(&m_portBytes[slot * m_nPorts], m_nPorts, &portBytes[k * m_nPorts]);
    }
    m_unread.Take();
    m_readRows = n;
    return n;
}

} // namespace wormhole
