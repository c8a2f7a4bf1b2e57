// Samples per-flow delivered bytes (and when the latest of them arrived) and per-port queue bytes
// every tau into ring buffers.
//
// The steady-state test needs rates over a sliding window of samples; sampling inside the
// simulation (one event per tau) costs far less than stepping Python every tau, and one Read()
// copies the window into numpy arrays. A sample writes only the flows that delivered bytes in
// the last `capacity` sample periods: every slot of the others already holds their count (a
// warm run of moe-8x7b-dcqcn, 101,632 flows, spent 1.9 s of its 9.4 s in ns-3 copying them all).
#ifndef WORMHOLE_RATE_PROBE_H
#define WORMHOLE_RATE_PROBE_H

#include "flow-transport.h"

#include "ns3/event-id.h"

namespace wormhole
{

class RateProbe
{
  public:
    /// Keep the latest `capacity` samples of every flow of `table` and every port of `network`.
    RateProbe(FlowTable* table, PortNetwork* network, uint32_t capacity);

    /// Sample now and then every `tauNs` until Stop().
    void Start(int64_t tauNs);
    void Stop();
    uint64_t GetNSamples() const; //!< samples taken since Start (may exceed capacity)

    /// Copy the latest min(nSamples, capacity, maxSamples) samples, oldest first: times[k],
    /// flowBytes[k * nFlows + f], flowTimes[k * nFlows + f] (when those bytes had arrived),
    /// portBytes[k * nPorts + p]. Returns the count. The flow arrays must be those of the
    /// previous Read: in rows it returned then, only flows sampled since are copied (every sample
    /// of each other flow holds the same count); rows new since (at most `capacity` after Start)
    /// get every flow.
    uint32_t Read(int64_t* times, uint64_t* flowBytes, int64_t* flowTimes, uint32_t* portBytes,
                  uint32_t maxSamples);

  private:
    void Sample();

    FlowTable* m_table;
    PortNetwork* m_network;
    uint32_t m_capacity;
    uint32_t m_nFlows;
    uint32_t m_nPorts;
    int64_t m_tauNs = 0;
    uint64_t m_nSamples = 0;
    FlowSet m_recent;                      //!< flows delivering within the last m_capacity samples
    std::vector<uint64_t> m_lastChange;    //!< per flow: the sample after its latest delivery
    FlowSet m_unread;                      //!< flows written at a sample since the last Read
    uint64_t m_readRows = 0;               //!< rows the last Read returned (all flows in them)
    std::vector<int64_t> m_times;
    std::vector<uint64_t> m_flowBytes;
    std::vector<int64_t> m_flowTimes;
    std::vector<uint32_t> m_portBytes;
    ns3::EventId m_next;
};

} // namespace wormhole

#endif
