// Builds a data-center network of stock ns-3 models from flat link arrays in one call.
//
// Every link is a stock PointToPointNetDevice/Channel pair. Queueing happens in a traffic-control
// queue disc on every port (the device queue holds one packet): on switch ports RED with ECN
// marking on the instantaneous queue for DCTCP, or a drop-tail FIFO for loss-based TCP; host NICs
// get a drop-tail FIFO (a NIC does not mark, and marking there would throttle a lone sender). Routing is per-flow ECMP
// over global routing. Building in C++ keeps the Python side to one call per network instead of
// thousands of cppyy calls.
#ifndef WORMHOLE_NETWORK_BUILDER_H
#define WORMHOLE_NETWORK_BUILDER_H

// Headers stay narrow: cppyy parses them at every import (the .cc files include whole modules).
#include "flow-ecmp-routing.h"

#include "ns3/ipv4-address.h"
#include "ns3/node-container.h"
#include "ns3/point-to-point-net-device.h"
#include "ns3/queue-disc.h"

#include <deque>
#include <unordered_map>
#include <vector>

namespace wormhole
{

/// Port queue settings, uniform over the network; ECN thresholds may depend on the link rate.
struct QueueConfig
{
    uint32_t queuePackets = 1000; //!< queue disc capacity per port
    bool ecnMarking = true;       //!< RED marking (DCTCP) instead of drop-tail FIFO
    double kminPackets = 0;       //!< 0: derived from each link's rate
    double kmaxPackets = 0;       //!< 0: derived from each link's rate
    uint32_t meanPacketBytes = 1500;
};

/// The port view of a built network that the tag simulator and the probe use.
class PortNetwork
{
  public:
    virtual ~PortNetwork() = default;
    virtual uint32_t GetNNodes() const = 0;
    virtual uint32_t GetNPorts() const = 0;
    virtual ns3::Ptr<ns3::Node> GetNode(uint32_t node) const = 0;
    virtual ns3::Ptr<ns3::PointToPointNetDevice> GetPortDevice(uint32_t port) const = 0;
    /// Bytes queued per port into out[0..nPorts).
    virtual void ReadQueueBytes(uint32_t* out) const = 0;
    /// Packets each port has sent onto its link, into out[0..nPorts).
    virtual void ReadPortTxPackets(uint64_t* out) const = 0;
    /// The ports a connection's packets from src to dst cross, in order (per-flow ECMP decides as
    /// it will for the real packets). Returns the count written into out (<= cap).
    virtual uint32_t TracePath(uint32_t src, uint32_t dst, uint16_t srcPort, uint16_t dstPort, uint32_t* out,
                               uint32_t cap) const = 0;
};

class NetworkBuilder : public PortNetwork
{
  public:
    /// Create nodes 0..nNodes-1 and one link per (a[i], b[i]); hosts (isHost[node] != 0) get an
    /// address on their link. Port 2i is a[i]'s side of link i (a->b), port 2i+1 is b's (b->a).
    void Build(uint32_t nNodes,
               const uint8_t* isHost,
               uint32_t nLinks,
               const uint32_t* a,
               const uint32_t* b,
               const uint64_t* rateBps,
               const int64_t* delayNs,
               const QueueConfig& config);

    uint32_t GetNNodes() const override;
    uint32_t GetNPorts() const override;
    ns3::Ptr<ns3::Node> GetNode(uint32_t node) const override;
    /// The IPv4 address of a node's first interface (a host's NIC).
    ns3::Ipv4Address GetAddress(uint32_t node) const;
    ns3::Ptr<ns3::PointToPointNetDevice> GetPortDevice(uint32_t port) const override;
    /// Bytes queued per port (queue disc + device queue).
    void ReadQueueBytes(uint32_t* out) const override;
    uint32_t TracePath(uint32_t src, uint32_t dst, uint16_t srcPort, uint16_t dstPort, uint32_t* out, uint32_t cap)
        const override;
    void ReadPortTxPackets(uint64_t* out) const override;
    /// ECN thresholds used for a link of this rate (packets).
    static void DefaultEcnThresholds(uint64_t rateBps, double& kmin, double& kmax);

  private:
    ns3::NodeContainer m_nodes;
    std::vector<ns3::Ipv4Address> m_firstAddress;
    std::vector<ns3::Ptr<ns3::QueueDisc>> m_portQueueDisc;
    std::vector<ns3::Ptr<ns3::PointToPointNetDevice>> m_portDevice;
    std::vector<uint32_t> m_portNode;                       //!< node owning each port
    std::unordered_map<const ns3::NetDevice*, uint32_t> m_portOfDevice;
    std::vector<ns3::Ptr<FlowEcmpRouting>> m_routing;       //!< per node
    std::deque<uint64_t> m_txPackets; //!< per port, on PhyTxBegin (deque: stable addresses)
};

/// Run the simulation until absolute time `ns` or until a model calls Simulator::Stop(), whichever
/// comes first. The stop event is cancelled on an early return so it cannot cut a later run short.
/// Returns the simulation time then, in ns (one call less per run slice for the controller).
int64_t RunUntil(int64_t ns);

} // namespace wormhole

#endif
