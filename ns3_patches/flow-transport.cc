#include "flow-transport.h"

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"

#include <algorithm>

namespace wormhole
{
using namespace ns3;

namespace
{
// Memoization reads and restores TCP state ns-3 keeps protected (TcpSocketBase::m_tcb) or private
// (TcpDctcp::m_alpha); fast-forward trims a TCP send buffer's private lists. An explicit
// instantiation may name any member; the friend function Get(Name()) hands out the
// pointer-to-member without changing the stock classes.
template <typename Tag, typename Tag::type Member>
struct Expose
{
    friend typename Tag::type Get(Tag)
    {
        return Member;
    }
};

#define WORMHOLE_EXPOSE(Name, Type, Class, member)                                                \
    struct Name                                                                                    \
    {                                                                                              \
        using type = Type Class::*;                                                                \
        friend type Get(Name);                                                                     \
    };                                                                                             \
    template struct Expose<Name, &Class::member>

WORMHOLE_EXPOSE(TcbMember, Ptr<TcpSocketState>, TcpSocketBase, m_tcb);
WORMHOLE_EXPOSE(CongestionOpsMember, Ptr<TcpCongestionOps>, TcpSocketBase, m_congestionControl);
WORMHOLE_EXPOSE(DctcpAlphaMember, double, TcpDctcp, m_alpha);
WORMHOLE_EXPOSE(TxBufferMember, Ptr<TcpTxBuffer>, TcpSocketBase, m_txBuffer);
WORMHOLE_EXPOSE(AppListMember, std::list<TcpTxItem*>, TcpTxBuffer, m_appList);
WORMHOLE_EXPOSE(BufferSizeMember, uint32_t, TcpTxBuffer, m_size);
WORMHOLE_EXPOSE(ItemPacketMember, Ptr<Packet>, TcpTxItem, m_packet);
#undef WORMHOLE_EXPOSE

// Bytes in a TCP send buffer that were never transmitted (its application list).
uint64_t
NeverSent(const Ptr<TcpTxBuffer>& buffer)
{
    uint64_t n = 0;
    for (const TcpTxItem* item : (*buffer).*Get(AppListMember()))
    {
        n += item->GetSeqSize();
    }
    return n;
}

// Remove up to `bytes` never-transmitted bytes from the tail of a TCP send buffer; returns how
// many. Payloads are anonymous, so which flow's bytes they were only matters to the accounting.
uint64_t
TrimNeverSent(const Ptr<TcpTxBuffer>& buffer, uint64_t bytes)
{
    auto& app = (*buffer).*Get(AppListMember());
    auto& size = (*buffer).*Get(BufferSizeMember());
    uint64_t trimmed = 0;
    while (trimmed < bytes && !app.empty())
    {
        TcpTxItem* item = app.back();
        Ptr<Packet>& packet = (*item).*Get(ItemPacketMember());
        uint32_t length = packet->GetSize();
        uint32_t take = static_cast<uint32_t>(std::min<uint64_t>(length, bytes - trimmed));
        if (take == length)
        {
            delete item; // TcpTxBuffer owns its items through raw pointers
            app.pop_back();
        }
        else
        {
            packet = packet->CreateFragment(0, length - take);
        }
        size -= take;
        trimmed += take;
    }
    return trimmed;
}
} // namespace

// ---- FlowTable ----------------------------------------------------------------------------

FlowTable::FlowTable(uint32_t nFlows)
    : m_flows(nFlows),
      m_delivered(nFlows, 0),
      m_skipped(nFlows, 0),
      m_lastDeliveryNs(nFlows, -1),
      m_deliveredSince(nFlows)
{
}

uint32_t
FlowTable::GetNFlows() const
{
    return m_flows.size();
}

uint64_t
FlowTable::GetDelivered(uint32_t flow) const
{
    return m_delivered.at(flow);
}

int64_t
FlowTable::GetLastDelivery(uint32_t flow) const
{
    return m_lastDeliveryNs[flow];
}

uint64_t
FlowTable::GetSkipped(uint32_t flow) const
{
    return m_skipped.at(flow);
}

int64_t
FlowTable::GetStartNs(uint32_t flow) const
{
    return m_flows.at(flow).startNs;
}

int64_t
FlowTable::GetEndNs(uint32_t flow) const
{
    return m_flows.at(flow).endNs;
}

uint32_t
FlowTable::PopCompleted(uint32_t* out, uint32_t cap)
{
    uint32_t n = 0;
    while (m_completedRead < m_completed.size() && n < cap)
    {
        out[n++] = m_completed[m_completedRead++];
    }
    if (m_completedRead == m_completed.size())
    {
        m_completed.clear();
        m_completedRead = 0;
    }
    return n;
}

void
FlowTable::ReadDelivered(uint64_t* out) const
{
    std::copy(m_delivered.begin(), m_delivered.end(), out);
}

void
FlowTable::ReadLastDelivery(int64_t* out) const
{
    std::copy(m_lastDeliveryNs.begin(), m_lastDeliveryNs.end(), out);
}

std::vector<uint32_t>
FlowTable::TakeDeliveredSince()
{
    return m_deliveredSince.Take();
}

const uint64_t*
FlowTable::GetDeliveredArray() const
{
    return m_delivered.data();
}

const uint64_t*
FlowTable::GetSkippedArray() const
{
    return m_skipped.data();
}

void
FlowTable::OnStart(uint32_t flow)
{
    m_flows.at(flow).startNs = Simulator::Now().GetNanoSeconds();
}

void
FlowTable::OnDelivered(uint32_t flow, uint64_t bytes)
{
    m_delivered[flow] += bytes;
    m_lastDeliveryNs[flow] = Simulator::Now().GetNanoSeconds();
    m_deliveredSince.Add(flow);
}

void
FlowTable::OnSkipped(uint32_t flow, uint64_t bytes)
{
    m_skipped[flow] += bytes;
}

void
FlowTable::OnComplete(uint32_t flow)
{
    m_flows[flow].endNs = Simulator::Now().GetNanoSeconds();
    m_completed.push_back(flow);
    Simulator::Stop(); // after this event: the control plane releases dependents at this time
}

// ---- FlowSender ---------------------------------------------------------------------------

NS_OBJECT_ENSURE_REGISTERED(FlowSender);

TypeId
FlowSender::GetTypeId()
{
    static TypeId tid = TypeId("wormhole::FlowSender")
                            .SetParent<Application>()
                            .SetGroupName("Wormhole")
                            .AddConstructor<FlowSender>();
    return tid;
}

void
FlowSender::Setup(FlowTable* table,
                  std::shared_ptr<DeliveryQueue> delivery,
                  uint16_t localPort,
                  const Address& peer)
{
    m_localPort = localPort;
    m_table = table;
    m_delivery = std::move(delivery);
    m_peer = peer;
}

void
FlowSender::Enqueue(uint32_t flow, uint64_t bytes)
{
    m_table->OnStart(flow);
    bool idle = m_unsent.empty(); // else the socket's send callback pushes the new bytes in turn
    m_unsent.emplace_back(flow, bytes);
    m_delivery->pending.emplace_back(flow, bytes);
    if (idle)
    {
        // Not for a flow queued behind unsent bytes: that event would land in a frozen partition.
        Simulator::ScheduleWithContext(GetNode()->GetId(), Seconds(0), &FlowSender::PushIfConnected, this);
    }
}

void
FlowSender::PushIfConnected()
{
    if (m_connected)
    {
        Push();
    }
}

uint64_t
FlowSender::Skip(uint32_t flow, uint64_t bytes)
{
    uint64_t n = 0;
    auto unsent = std::find_if(m_unsent.begin(), m_unsent.end(), [flow](const auto& e) {
        return e.first == flow;
    });
    if (unsent != m_unsent.end())
    {
        n = std::min(bytes, unsent->second);
        unsent->second -= n;
        if (unsent->second == 0)
        {
            m_unsent.erase(unsent);
        }
    }
    if (n < bytes && IsSoleFlow(flow))
    {
        n += TrimNeverSent(GetTxBuffer(), bytes - n);
    }
    if (n == 0)
    {
        return 0;
    }
    auto pending = std::find_if(m_delivery->pending.begin(),
                                m_delivery->pending.end(),
                                [flow](const auto& e) { return e.first == flow; });
    pending->second -= n; // never below zero: untransmitted bytes are a part of bytes still to arrive
    m_skipped += n;
    m_table->OnSkipped(flow, n);
    return n;
}

bool
FlowSender::IsSoleFlow(uint32_t flow) const
{
    const auto& pending = m_delivery->pending;
    return pending.size() == 1 && pending.front().first == flow && GetTxBuffer();
}

Ptr<TcpTxBuffer>
FlowSender::GetTxBuffer() const
{
    auto tcp = DynamicCast<TcpSocketBase>(m_socket);
    return tcp ? (*tcp).*Get(TxBufferMember()) : nullptr;
}

uint64_t
FlowSender::GetSent() const
{
    return m_sent;
}

uint64_t
FlowSender::GetAcked() const
{
    Ptr<TcpSocketBase> tcp = DynamicCast<TcpSocketBase>(m_socket);
    if (!tcp || !tcp->GetTxBuffer())
    {
        return 0;
    }
    // The sequence space starts at 1 after the SYN.
    return tcp->GetTxBuffer()->HeadSequence().GetValue() - 1;
}

uint64_t
FlowSender::GetSkipped() const
{
    return m_skipped;
}

uint64_t
FlowSender::GetUntransmittedOf(uint32_t flow) const
{
    uint64_t n = IsSoleFlow(flow) ? NeverSent(GetTxBuffer()) : 0;
    for (const auto& e : m_unsent)
    {
        if (e.first == flow)
        {
            n += e.second;
        }
    }
    return n;
}

bool
FlowSender::IsConnected() const
{
    return m_connected;
}

uint32_t
FlowSender::GetCongestionState(double* out, uint32_t cap) const
{
    auto tcp = DynamicCast<TcpSocketBase>(m_socket);
    if (!tcp || cap < 3)
    {
        return 0;
    }
    const auto& tcb = (*tcp).*Get(TcbMember());
    out[0] = tcb->m_cWnd.Get();
    out[1] = tcb->m_ssThresh.Get();
    auto dctcp = DynamicCast<TcpDctcp>((*tcp).*Get(CongestionOpsMember()));
    out[2] = dctcp ? (*dctcp).*Get(DctcpAlphaMember()) : -1.0;
    return 3;
}

void
FlowSender::SetCongestionState(double cwnd, double ssthresh, double alpha)
{
    auto tcp = DynamicCast<TcpSocketBase>(m_socket);
    NS_ABORT_MSG_IF(!tcp, "SetCongestionState on a connection without a TCP socket");
    auto& tcb = (*tcp).*Get(TcbMember());
    const uint32_t mss = tcb->m_segmentSize;
    tcb->m_cWnd = std::max<uint32_t>(mss, static_cast<uint32_t>(cwnd));
    tcb->m_cWndInfl = tcb->m_cWnd.Get();
    tcb->m_ssThresh = std::max<uint32_t>(2 * mss, static_cast<uint32_t>(ssthresh));
    auto dctcp = DynamicCast<TcpDctcp>((*tcp).*Get(CongestionOpsMember()));
    if (dctcp && alpha >= 0)
    {
        (*dctcp).*Get(DctcpAlphaMember()) = alpha;
    }
}

void
FlowSender::StartApplication()
{
    m_socket = Socket::CreateSocket(GetNode(), TcpSocketFactory::GetTypeId());
    m_socket->Bind(InetSocketAddress(Ipv4Address::GetAny(), m_localPort));
    m_socket->ShutdownRecv();
    m_socket->SetConnectCallback(MakeCallback(&FlowSender::ConnectionSucceeded, this),
                                 MakeCallback(&FlowSender::ConnectionFailed, this));
    m_socket->SetSendCallback(MakeCallback(&FlowSender::SpaceAvailable, this));
    m_socket->Connect(m_peer);
}

void
FlowSender::StopApplication()
{
    if (m_socket)
    {
        m_socket->Close();
    }
}

void
FlowSender::ConnectionSucceeded(Ptr<Socket>)
{
    m_connected = true;
    Push();
}

void
FlowSender::ConnectionFailed(Ptr<Socket>)
{
    m_connected = false; // flows stay unfinished; the control plane reports them
}

void
FlowSender::SpaceAvailable(Ptr<Socket>, uint32_t)
{
    if (m_connected)
    {
        Push();
    }
}

void
FlowSender::Push()
{
    while (!m_unsent.empty())
    {
        auto& head = m_unsent.front();
        uint64_t n = std::min<uint64_t>({head.second, kChunk, m_socket->GetTxAvailable()});
        if (n == 0)
        {
            break;
        }
        int written = m_socket->Send(Create<Packet>(n));
        if (written <= 0)
        {
            break;
        }
        head.second -= written;
        m_sent += written;
        if (head.second == 0)
        {
            m_unsent.pop_front();
        }
    }
}

// ---- FlowSink -----------------------------------------------------------------------------

NS_OBJECT_ENSURE_REGISTERED(FlowSink);

TypeId
FlowSink::GetTypeId()
{
    static TypeId tid = TypeId("wormhole::FlowSink")
                            .SetParent<Application>()
                            .SetGroupName("Wormhole")
                            .AddConstructor<FlowSink>();
    return tid;
}

void
FlowSink::Setup(FlowTable* table, std::shared_ptr<DeliveryQueue> delivery, uint16_t port)
{
    m_table = table;
    m_delivery = std::move(delivery);
    m_port = port;
}

void
FlowSink::Deliver(uint64_t bytes)
{
    auto& pending = m_delivery->pending;
    while (!pending.empty())
    {
        auto& head = pending.front();
        uint64_t n = std::min(bytes, head.second);
        head.second -= n;
        bytes -= n;
        if (n > 0)
        {
            m_table->OnDelivered(head.first, n);
        }
        if (head.second > 0)
        {
            break;
        }
        m_table->OnComplete(head.first);
        pending.pop_front();
    }
}

void
FlowSink::StartApplication()
{
    m_listener = Socket::CreateSocket(GetNode(), TcpSocketFactory::GetTypeId());
    m_listener->Bind(InetSocketAddress(Ipv4Address::GetAny(), m_port));
    m_listener->Listen();
    m_listener->ShutdownSend();
    m_listener->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                  MakeCallback(&FlowSink::Accept, this));
}

void
FlowSink::StopApplication()
{
    if (m_listener)
    {
        m_listener->Close();
    }
}

void
FlowSink::Accept(Ptr<Socket> socket, const Address&)
{
    socket->SetRecvCallback(MakeCallback(&FlowSink::Receive, this));
    m_accepted.push_back(socket);
}

void
FlowSink::Receive(Ptr<Socket> socket)
{
    while (Ptr<Packet> packet = socket->Recv())
    {
        if (packet->GetSize() == 0)
        {
            break;
        }
        Deliver(packet->GetSize());
    }
}

// ---- FlowManager --------------------------------------------------------------------------

FlowManager::FlowManager(NetworkBuilder* network, uint32_t nFlows)
    : m_network(network),
      m_table(nFlows),
      m_nextSinkPort(network->GetNNodes(), 1024),
      m_nextSenderPort(network->GetNNodes(), 49152)
{
}

uint32_t
FlowManager::OpenConnection(uint32_t src, uint32_t dst)
{
    NS_ABORT_MSG_IF(m_nextSinkPort.at(dst) >= 49152, "more than 48128 connections into node " << dst);
    NS_ABORT_MSG_IF(m_nextSenderPort.at(src) > 65535, "more than 16384 connections from node " << src);
    uint16_t port = m_nextSinkPort[dst]++;
    uint16_t localPort = m_nextSenderPort[src]++;
    auto delivery = std::make_shared<DeliveryQueue>();

    Ptr<FlowSink> sink = CreateObject<FlowSink>();
    sink->Setup(&m_table, delivery, port);
    m_network->GetNode(dst)->AddApplication(sink);
    sink->SetStartTime(Seconds(0)); // relative to now when added during the run

    Ptr<FlowSender> sender = CreateObject<FlowSender>();
    sender->Setup(&m_table, delivery, localPort, InetSocketAddress(m_network->GetAddress(dst), port));
    m_network->GetNode(src)->AddApplication(sender);
    sender->SetStartTime(Seconds(0));

    m_senders.push_back(sender);
    m_srcNode.push_back(src);
    m_dstNode.push_back(dst);
    m_srcPort.push_back(localPort);
    m_dstPort.push_back(port);
    return m_senders.size() - 1;
}

uint32_t
FlowManager::GetConnectionPath(uint32_t conn, uint32_t* out, uint32_t cap) const
{
    uint32_t n = m_network->TracePath(m_srcNode.at(conn), m_dstNode[conn], m_srcPort[conn], m_dstPort[conn], out, cap);
    return n + m_network->TracePath(m_dstNode[conn], m_srcNode[conn], m_dstPort[conn], m_srcPort[conn], out + n, cap - n);
}

void
FlowManager::StartFlow(uint32_t flow, uint32_t conn, uint64_t bytes)
{
    m_senders.at(conn)->Enqueue(flow, bytes);
}

uint64_t
FlowManager::SkipFlow(uint32_t flow, uint32_t conn, uint64_t bytes)
{
    return m_senders.at(conn)->Skip(flow, bytes);
}

FlowTable&
FlowManager::GetTable()
{
    return m_table;
}

Ptr<FlowSender>
FlowManager::GetSender(uint32_t conn) const
{
    return m_senders.at(conn);
}

} // namespace wormhole
