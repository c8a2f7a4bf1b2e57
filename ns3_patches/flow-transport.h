// Flows over TCP connections: a sender with a shrinkable byte budget, a sink that attributes
// delivered bytes to flows and announces completions, and a table the control plane reads.
//
// A connection carries one or more flows in FIFO order (a loose flow gets its own connection;
// training traffic reuses one connection per host pair, as collective libraries keep theirs open).
// The sender writes each flow's bytes into the socket; the sink counts bytes in arrival order and
// closes a flow when its last byte arrives. Skipping bytes (fast-forward) removes unsent bytes of a
// flow from both ends, so the byte stream stays consistent and the skipped bytes never exist in
// the packet simulation. Completing a flow stops the simulator after the current event so the
// control plane can release dependent work at that exact time.
#ifndef WORMHOLE_FLOW_TRANSPORT_H
#define WORMHOLE_FLOW_TRANSPORT_H

#include "network-builder.h"

#include "ns3/address.h"
#include "ns3/application.h"
#include "ns3/socket.h"

#include <deque>
#include <memory>
#include <utility>
#include <vector>

namespace ns3
{
class TcpTxBuffer;
}

namespace wormhole
{

/// Flow indices in the order they were added, each at most once (until taken or dropped).
class FlowSet
{
  public:
    explicit FlowSet(uint32_t nFlows)
        : m_in(nFlows, 0)
    {
    }

    void Add(uint32_t flow)
    {
        if (!m_in[flow])
        {
            m_in[flow] = 1;
            m_flows.push_back(flow);
        }
    }

    const std::vector<uint32_t>& Flows() const
    {
        return m_flows;
    }

    /// The flows, in order; the set is empty after.
    std::vector<uint32_t> Take()
    {
        for (uint32_t flow : m_flows)
        {
            m_in[flow] = 0;
        }
        return std::exchange(m_flows, {});
    }

    /// Keeps the flows for which keep(flow) holds, in order.
    template <class Keep>
    void Retain(Keep keep)
    {
        size_t kept = 0;
        for (uint32_t flow : m_flows)
        {
            if (keep(flow))
            {
                m_flows[kept++] = flow;
            }
            else
            {
                m_in[flow] = 0;
            }
        }
        m_flows.resize(kept);
    }

  private:
    std::vector<uint32_t> m_flows;
    std::vector<char> m_in;
};

/// Per-flow state shared by senders, sinks, the probe and the control plane.
class FlowTable
{
  public:
    explicit FlowTable(uint32_t nFlows);

    uint32_t GetNFlows() const;
    uint64_t GetDelivered(uint32_t flow) const;
    int64_t GetLastDelivery(uint32_t flow) const; //!< see ReadLastDelivery
    uint64_t GetSkipped(uint32_t flow) const;
    int64_t GetStartNs(uint32_t flow) const;
    int64_t GetEndNs(uint32_t flow) const;
    /// Copy the ids of flows completed since the last call into out (at most cap); returns count.
    uint32_t PopCompleted(uint32_t* out, uint32_t cap);
    /// Delivered bytes of every flow into out[0..nFlows).
    void ReadDelivered(uint64_t* out) const;
    /// Per flow, when its latest delivered bytes arrived (-1: none yet): with ReadDelivered, a
    /// point exactly on its delivery curve, between the steps ACKs or segments make.
    void ReadLastDelivery(int64_t* out) const;
    /// The flows with bytes delivered since the last call (each once), in order of their first
    /// such delivery: the probe copies only those (a run holds 100,000 flows, a few hundred send).
    std::vector<uint32_t> TakeDeliveredSince();
    /// Delivered and skipped bytes per flow in place, nFlows each for as long as the table lives:
    /// the control plane reads them without a call per flow (bridge/ns3/engine_api.py).
    const uint64_t* GetDeliveredArray() const;
    const uint64_t* GetSkippedArray() const;

    // Model side.
    void OnStart(uint32_t flow);
    void OnDelivered(uint32_t flow, uint64_t bytes);
    void OnSkipped(uint32_t flow, uint64_t bytes);
    void OnComplete(uint32_t flow);

  private:
    struct Flow
    {
        int64_t startNs = -1;
        int64_t endNs = -1;
    };

    std::vector<Flow> m_flows;
    // Apart, so that the probe copies each in one block at every sample (a run of gpt-13b's 16,384
    // flows spent a fifth of its time gathering them from the structs), and the control plane
    // reads them in place.
    std::vector<uint64_t> m_delivered;
    std::vector<uint64_t> m_skipped;
    std::vector<int64_t> m_lastDeliveryNs;
    FlowSet m_deliveredSince; //!< TakeDeliveredSince
    std::vector<uint32_t> m_completed;
    size_t m_completedRead = 0;
};

/// Bytes still to arrive per flow on one connection, in send order (shared by sender and sink).
struct DeliveryQueue
{
    std::deque<std::pair<uint32_t, uint64_t>> pending; //!< (flow, bytes still to arrive)
};

/// Sends queued flows over one TCP connection to a FlowSink.
class FlowSender : public ns3::Application
{
  public:
    static ns3::TypeId GetTypeId();

    void Setup(FlowTable* table,
               std::shared_ptr<DeliveryQueue> delivery,
               uint16_t localPort,
               const ns3::Address& peer);
    /// Append a flow of `bytes` behind the flows already queued on this connection now (so its
    /// budget can be read and skipped at once); its bytes go into the socket in an event at this
    /// time, in the sender node's context.
    void Enqueue(uint32_t flow, uint64_t bytes);
    /// Remove up to `bytes` of `flow` never transmitted (not yet written into the socket, or, when
    /// it is the connection's only flow, still in the socket's send buffer); returns bytes removed.
    uint64_t Skip(uint32_t flow, uint64_t bytes);

    uint64_t GetSent() const;    //!< bytes written into the socket
    uint64_t GetAcked() const;   //!< bytes acknowledged by the receiver
    uint64_t GetSkipped() const; //!< bytes removed by Skip
    uint64_t GetUntransmittedOf(uint32_t flow) const; //!< bytes Skip could remove now
    bool IsConnected() const;
    /// The socket's congestion state into out: {cwnd, ssthresh (bytes), DCTCP alpha or -1}; returns 3.
    uint32_t GetCongestionState(double* out, uint32_t cap) const;
    /// Set a memoized congestion state (cwnd, ssthresh in bytes; alpha < 0 leaves alpha as it is).
    void SetCongestionState(double cwnd, double ssthresh, double alpha);

  private:
    void StartApplication() override;
    void StopApplication() override;
    void ConnectionSucceeded(ns3::Ptr<ns3::Socket> socket);
    void ConnectionFailed(ns3::Ptr<ns3::Socket> socket);
    void SpaceAvailable(ns3::Ptr<ns3::Socket> socket, uint32_t available);
    void PushIfConnected();
    void Push();
    bool IsSoleFlow(uint32_t flow) const; //!< the only flow with bytes still to arrive
    ns3::Ptr<ns3::TcpTxBuffer> GetTxBuffer() const;

    FlowTable* m_table = nullptr;
    std::shared_ptr<DeliveryQueue> m_delivery;
    uint16_t m_localPort = 0;
    ns3::Address m_peer;
    ns3::Ptr<ns3::Socket> m_socket;
    bool m_connected = false;
    std::deque<std::pair<uint32_t, uint64_t>> m_unsent; //!< (flow, bytes not yet written)
    uint64_t m_sent = 0;
    uint64_t m_skipped = 0;
    static constexpr uint32_t kChunk = 65536;
};

/// Accepts one connection and attributes the bytes it delivers to flows, in order.
class FlowSink : public ns3::Application
{
  public:
    static ns3::TypeId GetTypeId();

    void Setup(FlowTable* table, std::shared_ptr<DeliveryQueue> delivery, uint16_t port);
    /// Attribute `bytes` arriving now; completes flows whose last byte arrived.
    void Deliver(uint64_t bytes);

  private:
    void StartApplication() override;
    void StopApplication() override;
    void Accept(ns3::Ptr<ns3::Socket> socket, const ns3::Address& from);
    void Receive(ns3::Ptr<ns3::Socket> socket);

    FlowTable* m_table = nullptr;
    std::shared_ptr<DeliveryQueue> m_delivery;
    uint16_t m_port = 0;
    ns3::Ptr<ns3::Socket> m_listener;
    std::vector<ns3::Ptr<ns3::Socket>> m_accepted;
};

/// The control plane's handle: open connections, start and skip flows.
class FlowManager
{
  public:
    FlowManager(NetworkBuilder* network, uint32_t nFlows);

    /// Create a sender on `src` and a sink on `dst`; the handshake starts now. Returns its id.
    uint32_t OpenConnection(uint32_t src, uint32_t dst);
    /// Ports crossed by the connection's data (src -> dst) then its ACKs (dst -> src).
    uint32_t GetConnectionPath(uint32_t conn, uint32_t* out, uint32_t cap) const;
    /// Start `flow` of `bytes` on connection `conn` at the current time, in the source's context.
    void StartFlow(uint32_t flow, uint32_t conn, uint64_t bytes);
    /// Remove up to `bytes` unsent bytes of `flow` (on `conn`); returns bytes removed.
    uint64_t SkipFlow(uint32_t flow, uint32_t conn, uint64_t bytes);

    FlowTable& GetTable();
    ns3::Ptr<FlowSender> GetSender(uint32_t conn) const;

  private:
    NetworkBuilder* m_network;
    FlowTable m_table;
    std::vector<ns3::Ptr<FlowSender>> m_senders;
    std::vector<uint32_t> m_srcNode;
    std::vector<uint32_t> m_dstNode;
    std::vector<uint16_t> m_srcPort;
    std::vector<uint16_t> m_dstPort;
    std::vector<uint32_t> m_nextSinkPort;   //!< per node: listening ports from 1024 up
    std::vector<uint32_t> m_nextSenderPort; //!< per node: chosen, not ephemeral, so paths are known
};

} // namespace wormhole

#endif
