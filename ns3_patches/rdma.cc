#include "rdma.h"

#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/ppp-header.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <unordered_map>

using namespace ns3;

namespace wormhole
{

void
RdmaConfig::AddEcnThreshold(uint64_t rateBps, uint64_t kminBytes, uint64_t kmaxBytes, double pmax)
{
    ecn.push_back({rateBps, kminBytes, kmaxBytes, pmax});
}

// ---- Wire format ------------------------------------------------------------------------------

namespace
{

enum PacketType : uint8_t
{
    DATA = 1,
    ACK = 2,
    NACK = 3,
    PFC = 4,
};

enum Flags : uint8_t
{
    FLAG_CE = 1,   //!< marked by a switch
    FLAG_CNP = 2,  //!< on an ACK/NACK: the data it answers was marked
    FLAG_LAST = 4, //!< the QP's last byte so far: ACK it at once
};

enum CcMode : uint32_t // CC_MODE values, as the reference's
{
    CC_DCQCN = 1,
    CC_HPCC = 3,
    CC_TIMELY = 7,
    CC_DCTCP = 8,
    CC_HPCC_PINT = 10,
};

constexpr double PINT_MAX_FLOWS = 512; // PINT encodes u * this (the reference's max_concurrent)

constexpr uint16_t PPP_IPV4 = 0x0021; // the stock PPP header only carries IPv4/IPv6
constexpr uint16_t ETHER_IPV4 = 0x0800;
constexpr uint32_t PPP_BYTES = 2;
constexpr uint32_t MAX_INT_HOPS = 5; // as the reference's INT header
constexpr uint32_t NCLASS = 8;
constexpr uint32_t NO_PORT = 0xFFFFFFFF;

/// Our RoCE-like header: the fields of IPv4 + UDP + BTH that the models read, padded to the
/// reference's frame size (wireBytes counts the header itself, not the PPP header).
class RdmaHeader : public Header
{
  public:
    static constexpr uint32_t FIXED = 36;
    uint8_t type = DATA;
    uint8_t flags = 0;
    uint8_t cls = 0;
    uint32_t sip = 0;
    uint32_t dip = 0;
    uint16_t sport = 0;
    uint16_t dport = 0;
    uint32_t qpn = 0;
    uint64_t seq = 0;    //!< DATA: first byte; ACK/NACK: next expected byte; PFC: 1 pause, 0 resume
    uint16_t len = 0;    //!< DATA payload bytes
    uint16_t wireBytes = FIXED;
    uint32_t ts = 0;     //!< TIMELY: the data frame's send time (ns, mod 2^32), echoed by its ACK

    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("wormhole::RdmaHeader").SetParent<Header>().AddConstructor<RdmaHeader>();
        return tid;
    }

    TypeId GetInstanceTypeId() const override { return GetTypeId(); }

    uint32_t GetSerializedSize() const override { return wireBytes; }

    void Serialize(Buffer::Iterator it) const override
    {
        it.WriteU8(type);
        it.WriteU8(flags);
        it.WriteU8(cls);
        it.WriteU8(0);
        it.WriteHtonU32(sip);
        it.WriteHtonU32(dip);
        it.WriteHtonU16(sport);
        it.WriteHtonU16(dport);
        it.WriteHtonU32(qpn);
        it.WriteHtonU64(seq);
        it.WriteHtonU16(len);
        it.WriteHtonU16(wireBytes);
        it.WriteHtonU32(ts);
        if (wireBytes > FIXED)
        {
            it.WriteU8(0, wireBytes - FIXED);
        }
    }

    uint32_t Deserialize(Buffer::Iterator it) override
    {
        type = it.ReadU8();
        flags = it.ReadU8();
        cls = it.ReadU8();
        it.ReadU8();
        sip = it.ReadNtohU32();
        dip = it.ReadNtohU32();
        sport = it.ReadNtohU16();
        dport = it.ReadNtohU16();
        qpn = it.ReadNtohU32();
        seq = it.ReadNtohU64();
        len = it.ReadNtohU16();
        wireBytes = it.ReadNtohU16();
        ts = it.ReadNtohU32();
        return wireBytes;
    }

    void Print(std::ostream& os) const override
    {
        os << "rdma type=" << int(type) << " flags=" << int(flags) << " cls=" << int(cls) << " " << sip << ":"
           << sport << "->" << dip << ":" << dport << " qpn=" << qpn << " seq=" << seq << " len=" << len;
    }
};

/// HPCC in-band telemetry: one record per switch egress, stamped at the dequeue instant (HPCC-PINT:
/// one encoded utilization, the path's largest). Kept by
/// the fabric per packet uid while the packet is in flight (its bytes on the wire are part of the
/// header's padding): a packet tag would be serialized and copied at every hop.
struct IntStack
{
    uint32_t nHops = 0;
    RdmaQp::Hop hops[MAX_INT_HOPS];
    uint16_t power = 0; //!< HPCC-PINT: the largest encoded utilization along the path
};

uint32_t
Mix(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x85ebca6b;
    h ^= h >> 13;
    h *= 0xc2b2ae35;
    h ^= h >> 16;
    return h;
}

/// Per-flow ECMP: the same 5-tuple always takes the same port at a node.
uint32_t
FlowHash(uint32_t seed, uint32_t sip, uint32_t dip, uint16_t sport, uint16_t dport)
{
    uint32_t h = Mix(seed ^ 0x9e3779b9);
    h = Mix(h ^ sip);
    h = Mix(h ^ (dip * 0x27d4eb2d));
    h = Mix(h ^ ((uint32_t(sport) << 16) | dport));
    return h;
}

} // namespace

// ---- Port queue ---------------------------------------------------------------------------------

/// Eight classes, class 0 strict priority (PFC frames, and ACKs with ACK_HIGH_PRIO), packet
/// round-robin over the other classes that are not paused. Packets enter through RdmaFabric, not
/// through the device's Send; Send only carries the kick marker.
class RdmaPortQueue : public Queue<Packet>
{
  public:
    struct Item
    {
        Ptr<Packet> packet;
        uint32_t inPort;
        bool data; //!< a DATA frame (ECN and INT apply)
    };

    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("wormhole::RdmaPortQueue").SetParent<Queue<Packet>>().SetGroupName("Network");
        return tid;
    }

    RdmaFabric* fabric = nullptr;
    uint32_t port = 0;
    std::deque<Item> q[NCLASS];
    uint64_t bytes = 0; //!< all classes (HPCC's INT qlen)
    bool paused[NCLASS] = {};
    uint32_t rrLast = 0;
    bool swallow = false;   //!< the next Enqueue is the kick marker
    bool inDequeue = false; //!< the device is inside our Dequeue: a kick now would re-enter it
    bool busy = false;      //!< the device is transmitting what our last Dequeue returned

    bool Enqueue(Ptr<Packet>) override
    {
        NS_ABORT_MSG_UNLESS(swallow, "RdmaPortQueue: packets must enter through the RDMA models");
        swallow = false;
        return true;
    }

    Ptr<Packet> Dequeue() override;

    Ptr<Packet> Remove() override { NS_FATAL_ERROR("RdmaPortQueue::Remove is not supported"); }

    Ptr<const Packet> Peek() const override { return nullptr; }

    /// The class a switch port would send next, or -1.
    int NextClass() const
    {
        if (!q[0].empty())
        {
            return 0;
        }
        for (uint32_t i = 1; i < NCLASS; i++)
        {
            uint32_t c = 1 + (rrLast + i - 1) % (NCLASS - 1);
            if (!q[c].empty() && !paused[c])
            {
                return int(c);
            }
        }
        return -1;
    }
};

NS_OBJECT_ENSURE_REGISTERED(RdmaPortQueue);

// ---- The models ---------------------------------------------------------------------------------

class RdmaFabric
{
  public:
    struct Port
    {
        Ptr<PointToPointNetDevice> dev;
        Ptr<RdmaPortQueue> queue;
        uint32_t node = 0;
        uint32_t ifIndex = 0;
        uint64_t rateBps = 0;
        int64_t delayNs = 0;
        uint64_t txPackets = 0;
        uint64_t txBytes = 0;
        uint64_t kmin = 0;
        uint64_t kmax = 0;
        double pmax = 0;
        uint64_t headroom = 0;
        uint32_t shift = 3;
        Ptr<UniformRandomVariable> ecnDraw; //!< per port, so marking elsewhere doesn't shift it
        // HPCC-PINT at a switch egress: utilization (EWMA over the largest base RTT) and the last frame sent
        double pintU = 0;
        uint64_t pintLastBytes = 0;
        int64_t pintLastNs = 0;
        // MMU, per class: this port as ingress (bytes admitted, headroom used, pause sent) and
        // as egress (bytes queued, for ECN).
        uint64_t ingress[NCLASS] = {};
        uint64_t hdrm[NCLASS] = {};
        bool pauseSent[NCLASS] = {};
        uint64_t egress[NCLASS] = {};
        // Host NIC: QPs sending on this port, round-robin.
        std::vector<RdmaQp*> qps;
        uint32_t rr = 0;
        EventId wake;
        int64_t wakeAtPs = std::numeric_limits<int64_t>::max();
        bool down = false; //!< its link went down (LINK_DOWN): it sends nothing more
    };

    struct Switch
    {
        uint64_t sharedUsed = 0;
        uint64_t totalHeadroom = 0;
        uint64_t totalReserve = 0;
    };

    struct Rx
    {
        uint64_t expected = 0;
        int64_t nackTimerNs = 0;
        uint64_t lastNack = std::numeric_limits<uint64_t>::max();
        uint64_t sinceAck = 0; //!< bytes since the last ACK
    };

    struct PfcEvent
    {
        int64_t timeNs;
        uint32_t node;
        uint32_t nodeType;
        uint32_t ifIndex;
        uint32_t type;
    };

    RdmaConfig cfg;
    NodeContainer nodes;
    std::vector<uint8_t> isHost;
    std::vector<Port> ports;
    std::vector<std::vector<uint32_t>> nodePorts;
    std::unordered_map<const NetDevice*, uint32_t> portOfDevice;
    std::vector<uint32_t> hosts;
    std::vector<int32_t> hostIndex;
    std::vector<uint32_t> fibStart; //!< [node * nHosts + host index] -> into fibPorts
    std::vector<uint16_t> fibCount;
    std::vector<uint32_t> fibPorts;
    std::vector<uint32_t> nodeSeed;
    std::vector<Switch> switches; //!< per node (unused for hosts)
    std::vector<std::unique_ptr<RdmaQp>> qps;
    std::vector<Rx> rx; //!< per QP: its receiver
    std::unordered_map<uint64_t, uint32_t> nextSport; //!< per (src, dst)
    FlowTable* table = nullptr;
    int64_t maxRttNs = 0;
    uint64_t maxBdp = 0;
    uint64_t nicRateBps = 0;
    uint64_t pfcFrames = 0;
    uint64_t drops = 0;
    uint64_t lost = 0;
    uint64_t linksDown = 0;
    uint64_t downDrops = 0;   //!< packets lost to a link going down: queued at its ports, or without a route
    std::unordered_map<uint64_t, IntStack> telemetry; //!< HPCC, HPCC-PINT: per packet uid in flight
    Ptr<UniformRandomVariable> pintDraw;   //!< HPCC-PINT: rounding of encoded utilizations, ACK sampling
    uint32_t pintMaxPower = 0;             //!< the largest power PINT's field holds
    uint64_t ecnMarks = 0;
    std::vector<PfcEvent> pfcLog;

    struct QueueSample
    {
        int64_t timeNs;
        uint32_t node;
        uint32_t ifIndex;
        uint64_t bytes;
    };

    std::vector<QueueSample> queueSamples;

    void SampleQueues(int64_t endNs, int64_t intervalNs)
    {
        int64_t now = Simulator::Now().GetNanoSeconds();
        for (const Port& port : ports)
        {
            if (!isHost[port.node] && port.queue->bytes > 0)
            {
                queueSamples.push_back({now, port.node, port.ifIndex, port.queue->bytes});
            }
        }
        if (now + intervalNs < endNs)
        {
            Simulator::Schedule(NanoSeconds(intervalNs), &RdmaFabric::SampleQueues, this, endNs, intervalNs);
        }
    }

    void Build(uint32_t nNodes,
               const uint8_t* host,
               uint32_t nLinks,
               const uint32_t* a,
               const uint32_t* b,
               const uint64_t* rateBps,
               const int64_t* delayNs);
    void BuildRoutes();
    /// LINK_DOWN: the link between nodes a and b stops carrying frames (what its ports hold is
    /// dropped, with the MMU released), and every node's routes are computed again without it.
    void TakeDownLink(uint32_t a, uint32_t b);
    void DropQueued(uint32_t port);
    /// A packet of class `cls` (not 0) that came in by `inPort` leaves `out`'s queue: its buffer is freed.
    void ReleaseBuffer(Port& out, uint32_t inPort, uint32_t cls, uint64_t size);
    /// PFC resume of `inPort`'s class once its use of the buffer has fallen far enough.
    void ResumeIfBelow(uint32_t inPort, uint32_t cls);
    void ComputeBaseRtts();
    /// One-way delay (ns) and serialization of one payload per hop (ns) from src to dst.
    void PathDelay(uint32_t src, uint32_t dst, int64_t& delayNs, int64_t& txNs) const;
    /// The port a packet leaves `node` by (per-flow ECMP), NO_PORT if `dst` is unreachable.
    uint32_t NextPort(uint32_t node, uint32_t dst, uint32_t sip, uint16_t sport, uint16_t dport) const;

    // Switch
    void Receive(Ptr<NetDevice> dev, Ptr<const Packet> packet, uint16_t, const Address&, const Address&,
                 NetDevice::PacketType);
    void Forward(uint32_t inPort, Ptr<Packet> p, const RdmaHeader& h);
    uint64_t PfcThreshold(uint32_t port) const;
    /// Bytes of an ingress (port, class) beyond its reserve: its use of the shared buffer.
    uint64_t SharedBytes(const Port& in, uint32_t cls) const
    {
        return in.ingress[cls] > cfg.reserveBytes ? in.ingress[cls] - cfg.reserveBytes : 0;
    }
    void SendPfc(uint32_t port, uint32_t cls, bool pause);
    Ptr<Packet> SwitchDequeue(uint32_t port);

    // NIC
    RdmaQp* OpenQp(uint32_t src, uint32_t dst);
    void HostReceive(uint32_t port, Ptr<Packet> p, const RdmaHeader& h);
    void LinkLoss(Ptr<const Packet> p);
    void ReceiveData(uint32_t port, Ptr<Packet> p, const RdmaHeader& h);
    void ReceiveAck(Ptr<Packet> p, const RdmaHeader& h);
    void SendControl(uint32_t port, const RdmaHeader& data, uint8_t type, uint64_t seq, bool cnp, Ptr<Packet> dataPacket);
    /// The QP a host port sends next (commit: advance round-robin), or nullptr.
    RdmaQp* PickQp(uint32_t port, bool commit);
    bool CanSend(uint32_t port);
    Ptr<Packet> HostDequeue(uint32_t port);
    Ptr<Packet> MakeData(RdmaQp* qp);
    void ScheduleWake(uint32_t port);
    void Wake(uint32_t port);
    void Kick(uint32_t port);
    void Enqueue(uint32_t port, uint32_t cls, Ptr<Packet> p, uint32_t inPort, bool data = false);

    // QP state
    uint64_t Window(const RdmaQp* qp) const;
    bool WindowBound(const RdmaQp* qp) const
    {
        uint64_t w = Window(qp);
        return w != 0 && qp->sndNxt - qp->sndUna >= w;
    }
    uint64_t BytesLeft(const RdmaQp* qp) const { return qp->size - qp->sndNxt; }
    void Acknowledge(RdmaQp* qp, uint64_t seq);
    void ResetCc(RdmaQp* qp);
    void ArmRto(RdmaQp* qp);
    void CheckRto(RdmaQp* qp);
    // DCQCN
    void CnpReceived(RdmaQp* qp);
    void UpdateAlpha(RdmaQp* qp);
    void CheckRateDecrease(RdmaQp* qp);
    void RateIncreaseTimer(RdmaQp* qp);
    // HPCC
    void HpccAck(RdmaQp* qp, Ptr<Packet> p, const RdmaHeader& h);
    /// HPCC's rule: from reference rate `ref` at stage `stage`, utilization `u` gives the new rate
    /// (multiplicative over U_TARGET or after MI_THRESH additive steps, then RATE_AI) and stage.
    std::pair<double, uint32_t> HpccRate(double ref, uint32_t stage, double u, double maxRate) const
    {
        double k = u / cfg.uTarget;
        bool multiplicative = k >= 1 || stage >= cfg.miThresh;
        double rate = (multiplicative ? ref / k : ref) + double(cfg.rateAiBps);
        return {std::clamp(rate, double(cfg.minRateBps), maxRate), multiplicative ? 0 : stage + 1};
    }
    void HpccMultiRate(RdmaQp* qp, const IntStack& tag, bool full);
    /// A hop record as the QP reads it: one stamped before the QP's last freeze moves with it.
    static RdmaQp::Hop Received(const RdmaQp* qp, RdmaQp::Hop hop)
    {
        if (hop.timeNs < qp->frozenFromNs)
        {
            hop.timeNs += qp->frozenShiftNs; // stamped before a freeze, carried through it
        }
        return hop;
    }
    /// HPCC's utilization of a hop between two of its records: bytes sent over the line rate, plus
    /// the queue both saw over the QP's window (scaled to the line rate).
    static double HopUtilization(const RdmaQp* qp, const RdmaQp::Hop& now, const RdmaQp::Hop& last)
    {
        double txRate = double(now.txBytes - last.txBytes) * 8e9 / double(now.timeNs - last.timeNs);
        return txRate / double(now.rateBps) +
               double(std::min(now.qlen, last.qlen)) * qp->maxRate / double(now.rateBps) / double(qp->window);
    }
    void PintAck(RdmaQp* qp, Ptr<Packet> p, const RdmaHeader& h);
    void PintStamp(Port& out, IntStack& stack, uint64_t qlen);
    uint16_t PintEncode(double u);
    double PintDecode(uint16_t power) const;
    void ChangeRate(RdmaQp* qp, double rate);
    // TIMELY, DCTCP
    void TimelyAck(RdmaQp* qp, const RdmaHeader& h);
    void DctcpAck(RdmaQp* qp, const RdmaHeader& h);

    /// Data-frame bytes beyond the fixed overhead: HPCC's telemetry, PINT's field, TIMELY's send time.
    uint32_t ExtraDataBytes() const
    {
        return cfg.ccMode == CC_HPCC        ? cfg.intBytes
               : cfg.ccMode == CC_HPCC_PINT ? cfg.pintBytes
               : cfg.ccMode == CC_TIMELY    ? cfg.timestampBytes
                                            : 0;
    }

    /// ACK/NACK bytes beyond ackBytes: the telemetry or PINT field the ACK echoes.
    uint32_t ExtraAckBytes() const
    {
        return cfg.ccMode == CC_HPCC ? cfg.intBytes : cfg.ccMode == CC_HPCC_PINT ? cfg.pintBytes : 0;
    }

    bool Telemetry() const { return cfg.ccMode == CC_HPCC || cfg.ccMode == CC_HPCC_PINT; }

    uint32_t ClassOf(uint8_t type, uint8_t cls) const
    {
        return (type == PFC || (cfg.ackHighPrio && (type == ACK || type == NACK))) ? 0 : cls;
    }
};

Ptr<Packet>
RdmaPortQueue::Dequeue()
{
    if (fabric->ports[port].down)
    {
        busy = false;
        return nullptr;
    }
    inDequeue = true;
    Ptr<Packet> p = fabric->isHost[fabric->ports[port].node] ? fabric->HostDequeue(port) : fabric->SwitchDequeue(port);
    inDequeue = false;
    // The stock device dequeues exactly when its wire is free (in Send when idle, in
    // TransmitComplete otherwise): a packet returned here keeps it busy until the next call.
    busy = p != nullptr;
    return p;
}

// ---- Build --------------------------------------------------------------------------------------

void
RdmaFabric::Build(uint32_t nNodes,
                  const uint8_t* host,
                  uint32_t nLinks,
                  const uint32_t* a,
                  const uint32_t* b,
                  const uint64_t* rateBps,
                  const int64_t* delayNs)
{
    nodes.Create(nNodes);
    isHost.assign(host, host + nNodes);
    nodePorts.assign(nNodes, {});
    switches.assign(nNodes, Switch());
    hostIndex.assign(nNodes, -1);
    for (uint32_t n = 0; n < nNodes; n++)
    {
        if (isHost[n])
        {
            hostIndex[n] = int32_t(hosts.size());
            hosts.push_back(n);
        }
        nodeSeed.push_back(Mix(cfg.ecmpSeed * 0x9e3779b1u + n));
    }
    ports.resize(2 * nLinks);
    for (uint32_t i = 0; i < nLinks; i++)
    {
        PointToPointHelper p2p;
        p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(rateBps[i])));
        p2p.SetChannelAttribute("Delay", TimeValue(NanoSeconds(delayNs[i])));
        NetDeviceContainer devs = p2p.Install(nodes.Get(a[i]), nodes.Get(b[i]));
        for (uint32_t side = 0; side < 2; side++)
        {
            uint32_t p = 2 * i + side;
            Port& port = ports[p];
            port.dev = DynamicCast<PointToPointNetDevice>(devs.Get(side));
            port.node = side == 0 ? a[i] : b[i];
            port.ifIndex = port.dev->GetIfIndex();
            port.rateBps = rateBps[i];
            port.delayNs = delayNs[i];
            port.queue = CreateObject<RdmaPortQueue>();
            port.queue->fabric = this;
            port.queue->port = p;
            port.dev->SetQueue(port.queue);
            port.ecnDraw = CreateObject<UniformRandomVariable>();
            port.ecnDraw->SetStream(int64_t(p) + 1000);
            if (cfg.errorRatePerLink > 0)
            {
                Ptr<RateErrorModel> em = CreateObject<RateErrorModel>();
                em->SetUnit(RateErrorModel::ERROR_UNIT_PACKET);
                em->SetRate(cfg.errorRatePerLink);
                em->AssignStreams(int64_t(p) * 2 + 100000);
                port.dev->SetReceiveErrorModel(em);
                port.dev->TraceConnectWithoutContext("PhyRxDrop", MakeCallback(&RdmaFabric::LinkLoss, this));
            }
            portOfDevice[PeekPointer(port.dev)] = p;
            nodePorts[port.node].push_back(p);
            nodes.Get(port.node)->RegisterProtocolHandler(MakeCallback(&RdmaFabric::Receive, this), ETHER_IPV4,
                                                          port.dev);
            if (!isHost[port.node])
            {
                bool found = false;
                for (const RdmaConfig::Ecn& e : cfg.ecn)
                {
                    if (e.rateBps == rateBps[i])
                    {
                        port.kmin = e.kmin;
                        port.kmax = e.kmax;
                        port.pmax = e.pmax;
                        found = true;
                    }
                }
                NS_ABORT_MSG_IF(cfg.enableEcn && !found,
                                "RDMA: no KMIN/KMAX/PMAX entry for link rate " << rateBps[i] << " bps");
                port.headroom = uint64_t(cfg.headroomBdps * double(rateBps[i]) * double(delayNs[i]) / 8e9);
            }
        }
    }
    for (uint32_t h : hosts)
    {
        for (uint32_t p : nodePorts[h])
        {
            nicRateBps = std::max(nicRateBps, ports[p].rateBps);
        }
    }
    pintDraw = CreateObject<UniformRandomVariable>();
    pintDraw->SetStream(999); // below the ports' ECN streams (1000 + port)
    // PINT's field is as wide as the power of the largest utilization needs (u = PINT_MAX_FLOWS:
    // one byte at base 1.05), two bytes at most.
    double powerBits = std::ceil(std::log2(std::log(PINT_MAX_FLOWS * PINT_MAX_FLOWS) / std::log(cfg.pintLogBase)));
    pintMaxPower = powerBits <= 8 ? 0xff : 0xffff;
    for (uint32_t n = 0; n < nNodes; n++)
    {
        if (isHost[n])
        {
            continue;
        }
        Switch& sw = switches[n];
        for (uint32_t p : nodePorts[n])
        {
            sw.totalHeadroom += ports[p].headroom;
            sw.totalReserve += cfg.reserveBytes;
            // The shared-buffer share shrinks by half per doubling of port rate above the NIC's.
            uint64_t rate = ports[p].rateBps;
            while (rate > nicRateBps && ports[p].shift > 0)
            {
                ports[p].shift--;
                rate /= 2;
            }
        }
    }
    BuildRoutes();
    ComputeBaseRtts();
}

void
RdmaFabric::BuildRoutes()
{
    uint32_t nNodes = nodes.GetN();
    size_t nHosts = hosts.size();
    fibStart.assign(size_t(nNodes) * nHosts, 0);
    fibCount.assign(size_t(nNodes) * nHosts, 0);
    fibPorts.clear();
    std::vector<int32_t> dist(nNodes);
    std::vector<uint32_t> frontier;
    for (size_t hi = 0; hi < nHosts; hi++)
    {
        uint32_t dst = hosts[hi];
        std::fill(dist.begin(), dist.end(), -1);
        dist[dst] = 0;
        frontier.assign(1, dst);
        for (size_t k = 0; k < frontier.size(); k++)
        {
            uint32_t n = frontier[k];
            if (isHost[n] && n != dst)
            {
                continue; // hosts do not forward
            }
            for (uint32_t p : nodePorts[n])
            {
                uint32_t m = ports[p ^ 1].node;
                if (dist[m] < 0 && !ports[p].down)
                {
                    dist[m] = dist[n] + 1;
                    frontier.push_back(m);
                }
            }
        }
        for (uint32_t n = 0; n < nNodes; n++)
        {
            size_t slot = size_t(n) * nHosts + hi;
            fibStart[slot] = uint32_t(fibPorts.size());
            if (dist[n] <= 0)
            {
                continue;
            }
            for (uint32_t p : nodePorts[n])
            {
                uint32_t m = ports[p ^ 1].node;
                if (dist[m] == dist[n] - 1 && (!isHost[m] || m == dst) && !ports[p].down)
                {
                    fibPorts.push_back(p);
                    fibCount[slot]++;
                }
            }
        }
    }
}

uint32_t
RdmaFabric::NextPort(uint32_t node, uint32_t dst, uint32_t sip, uint16_t sport, uint16_t dport) const
{
    size_t slot = size_t(node) * hosts.size() + size_t(hostIndex[dst]);
    uint32_t n = fibCount[slot];
    if (n == 0)
    {
        return NO_PORT; // only after a link went down: the topology is connected at the start
    }
    if (n == 1)
    {
        return fibPorts[fibStart[slot]];
    }
    return fibPorts[fibStart[slot] + FlowHash(nodeSeed[node], sip, dst, sport, dport) % n];
}

void
RdmaFabric::PathDelay(uint32_t src, uint32_t dst, int64_t& delay, int64_t& tx) const
{
    delay = 0;
    tx = 0;
    uint32_t n = src;
    while (n != dst)
    {
        uint32_t p = NextPort(n, dst, src, 0, 0);
        if (p == NO_PORT)
        {
            return;
        }
        delay += ports[p].delayNs;
        tx += int64_t(double(cfg.payloadBytes) * 8e9 / double(ports[p].rateBps));
        n = ports[p ^ 1].node;
    }
}

void
RdmaFabric::ComputeBaseRtts()
{
    // As the reference: RTT = 2 x path delay + one payload's serialization per hop; BDP at the
    // NIC rate. With GLOBAL_T every QP uses the largest over host pairs. Paths of a symmetric
    // topology differ only by hop count, so pairs are sampled from each host's routing tree.
    for (uint32_t src : hosts)
    {
        for (uint32_t dst : hosts)
        {
            if (src == dst)
            {
                continue;
            }
            int64_t delay = 0;
            int64_t tx = 0;
            PathDelay(src, dst, delay, tx);
            int64_t rtt = 2 * delay + tx;
            maxRttNs = std::max(maxRttNs, rtt);
            maxBdp = std::max(maxBdp, uint64_t(double(rtt) * double(nicRateBps) / 8e9));
        }
        if (hosts.size() > 256)
        {
            break; // large fabrics: one source sees every hop count of a Clos
        }
    }
}

// ---- Switch -------------------------------------------------------------------------------------

void
RdmaFabric::Receive(Ptr<NetDevice> dev,
                    Ptr<const Packet> packet,
                    uint16_t,
                    const Address&,
                    const Address&,
                    NetDevice::PacketType)
{
    uint32_t port = portOfDevice.at(PeekPointer(dev));
    Ptr<Packet> p = ConstCast<Packet>(packet); // the device hands over its own copy
    RdmaHeader h;
    p->PeekHeader(h);
    if (h.type == PFC)
    {
        RdmaPortQueue& q = *ports[port].queue;
        bool pause = h.seq != 0;
        q.paused[h.cls] = pause;
        pfcLog.push_back({Simulator::Now().GetNanoSeconds(), ports[port].node, isHost[ports[port].node] ? 0u : 1u,
                          ports[port].ifIndex, pause ? 1u : 0u});
        if (!pause)
        {
            Kick(port);
        }
        return;
    }
    if (isHost[ports[port].node])
    {
        HostReceive(port, p, h);
    }
    else
    {
        Forward(port, p, h);
    }
}

uint64_t
RdmaFabric::PfcThreshold(uint32_t port) const
{
    const Switch& sw = switches[ports[port].node];
    int64_t free = int64_t(cfg.bufferBytes) - int64_t(sw.totalHeadroom) - int64_t(sw.totalReserve) -
                   int64_t(sw.sharedUsed);
    // The reference computes this unsigned: a buffer smaller than headroom + reserve wraps around
    // and never pauses. Here it clamps at 0: no shared buffer left.
    return free > 0 ? uint64_t(free) >> ports[port].shift : 0;
}

void
RdmaFabric::Forward(uint32_t inPort, Ptr<Packet> p, const RdmaHeader& h)
{
    uint32_t node = ports[inPort].node;
    uint32_t out = NextPort(node, h.dip, h.sip, h.sport, h.dport);
    if (out == NO_PORT)
    {
        downDrops++;
        telemetry.erase(p->GetUid());
        return;
    }
    uint32_t cls = ClassOf(h.type, h.cls);
    uint64_t size = p->GetSize() + PPP_BYTES;
    if (cls != 0)
    {
        Port& in = ports[inPort];
        Switch& sw = switches[node];
        uint64_t shared = SharedBytes(in, cls);
        if (size + in.hdrm[cls] > in.headroom && size + shared > PfcThreshold(inPort))
        {
            drops++;
            telemetry.erase(p->GetUid());
            return;
        }
        uint64_t after = in.ingress[cls] + size;
        if (after <= cfg.reserveBytes)
        {
            in.ingress[cls] = after;
        }
        else if (after - cfg.reserveBytes > PfcThreshold(inPort))
        {
            in.hdrm[cls] += size;
        }
        else
        {
            in.ingress[cls] = after;
            sw.sharedUsed += std::min(size, after - cfg.reserveBytes);
        }
        ports[out].egress[cls] += size;
        shared = SharedBytes(in, cls);
        if (!in.pauseSent[cls] && (in.hdrm[cls] > 0 || shared >= PfcThreshold(inPort)))
        {
            in.pauseSent[cls] = true;
            SendPfc(inPort, cls, true);
        }
    }
    Enqueue(out, cls, p, inPort, h.type == DATA);
}

void
RdmaFabric::SendPfc(uint32_t port, uint32_t cls, bool pause)
{
    RdmaHeader h;
    h.type = PFC;
    h.cls = uint8_t(cls);
    h.seq = pause ? 1 : 0;
    h.wireBytes = uint16_t(std::max<uint32_t>(RdmaHeader::FIXED, cfg.pfcBytes - PPP_BYTES));
    Ptr<Packet> p = Create<Packet>();
    p->AddHeader(h);
    pfcFrames++;
    Enqueue(port, 0, p, port);
}

void
RdmaFabric::Enqueue(uint32_t port, uint32_t cls, Ptr<Packet> p, uint32_t inPort, bool data)
{
    if (ports[port].down)
    {
        downDrops++; // (an ACK or PFC frame for a link that went down; forwarded data never comes here)
        telemetry.erase(p->GetUid());
        return;
    }
    PppHeader ppp;
    ppp.SetProtocol(PPP_IPV4);
    p->AddHeader(ppp);
    RdmaPortQueue& q = *ports[port].queue;
    q.bytes += p->GetSize();
    q.q[cls].push_back({p, inPort, data});
    Kick(port);
}

Ptr<Packet>
RdmaFabric::SwitchDequeue(uint32_t port)
{
    RdmaPortQueue& q = *ports[port].queue;
    int cls = q.NextClass();
    if (cls < 0)
    {
        return nullptr;
    }
    if (cls > 0)
    {
        q.rrLast = uint32_t(cls);
    }
    RdmaPortQueue::Item item = q.q[cls].front();
    q.q[cls].pop_front();
    Ptr<Packet> p = item.packet;
    uint64_t size = p->GetSize();
    q.bytes -= size;
    Port& out = ports[port];
    if (cls != 0)
    {
        ReleaseBuffer(out, item.inPort, cls, size);
        if (item.data)
        {
            bool mark = false;
            if (cfg.enableEcn && out.egress[cls] > out.kmin)
            {
                mark = out.egress[cls] > out.kmax ||
                       out.ecnDraw->GetValue() <
                           out.pmax * double(out.egress[cls] - out.kmin) / double(out.kmax - out.kmin);
            }
            if (mark)
            {
                // Headers are only taken apart for a mark (rare): set CE in place of the old header.
                PppHeader ppp;
                RdmaHeader h;
                p->RemoveHeader(ppp);
                p->RemoveHeader(h);
                ecnMarks += (h.flags & FLAG_CE) ? 0 : 1;
                h.flags |= FLAG_CE;
                p->AddHeader(h);
                p->AddHeader(ppp);
            }
            if (cfg.ccMode == CC_HPCC)
            {
                IntStack& stack = telemetry[p->GetUid()];
                if (stack.nHops < MAX_INT_HOPS)
                {
                    stack.hops[stack.nHops++] = {Simulator::Now().GetNanoSeconds(), out.txBytes, q.bytes, out.rateBps};
                }
            }
            else if (cfg.ccMode == CC_HPCC_PINT)
            {
                PintStamp(out, telemetry[p->GetUid()], q.bytes);
            }
        }
        ResumeIfBelow(item.inPort, cls);
    }
    out.txBytes += size;
    out.txPackets++;
    out.pintLastBytes = size; // (every frame a switch sends counts in PINT's utilization)
    out.pintLastNs = Simulator::Now().GetNanoSeconds();
    return p;
}

void
RdmaFabric::ReleaseBuffer(Port& out, uint32_t inPort, uint32_t cls, uint64_t size)
{
    Port& in = ports[inPort];
    uint64_t fromHdrm = std::min(in.hdrm[cls], size);
    uint64_t fromShared = std::min(size - fromHdrm, SharedBytes(in, cls));
    switches[out.node].sharedUsed -= fromShared;
    in.ingress[cls] -= size - fromHdrm;
    in.hdrm[cls] -= fromHdrm;
    out.egress[cls] -= size;
}

void
RdmaFabric::ResumeIfBelow(uint32_t inPort, uint32_t cls)
{
    Port& in = ports[inPort];
    uint64_t shared = SharedBytes(in, cls);
    if (in.pauseSent[cls] && in.hdrm[cls] == 0 &&
        (shared == 0 || shared + cfg.resumeOffsetBytes <= PfcThreshold(inPort)))
    {
        in.pauseSent[cls] = false;
        SendPfc(inPort, cls, false);
    }
}

void
RdmaFabric::TakeDownLink(uint32_t a, uint32_t b)
{
    for (uint32_t p : nodePorts[a])
    {
        if (ports[p ^ 1].node == b && !ports[p].down)
        {
            ports[p].down = ports[p ^ 1].down = true;
            linksDown++;
            DropQueued(p);
            DropQueued(p ^ 1);
            BuildRoutes();
            return;
        }
    }
    NS_ABORT_MSG("RDMA: LINK_DOWN: no link up between nodes " << a << " and " << b);
}

void
RdmaFabric::DropQueued(uint32_t port)
{
    Port& out = ports[port];
    RdmaPortQueue& q = *out.queue;
    for (uint32_t cls = 0; cls < NCLASS; cls++)
    {
        while (!q.q[cls].empty())
        {
            RdmaPortQueue::Item item = q.q[cls].front();
            q.q[cls].pop_front();
            uint64_t size = item.packet->GetSize();
            q.bytes -= size;
            downDrops++;
            telemetry.erase(item.packet->GetUid());
            if (cls != 0 && !isHost[out.node])
            {
                ReleaseBuffer(out, item.inPort, cls, size);
                ResumeIfBelow(item.inPort, cls);
            }
        }
    }
}

// ---- NIC ----------------------------------------------------------------------------------------

RdmaQp*
RdmaFabric::OpenQp(uint32_t src, uint32_t dst)
{
    NS_ABORT_MSG_UNLESS(src < isHost.size() && dst < isHost.size() && isHost[src] && isHost[dst] && src != dst,
                        "RDMA: a queue pair needs two distinct hosts (" << src << " -> " << dst << ")");
    auto qp = std::make_unique<RdmaQp>();
    qp->fabric = this;
    qp->id = uint32_t(qps.size());
    qp->src = src;
    qp->dst = dst;
    // As the reference: source ports per host pair from 10000; destination port 100.
    auto [it, fresh] = nextSport.try_emplace((uint64_t(src) << 32) | dst, 10000);
    qp->sport = uint16_t(it->second++);
    qp->dport = 100;
    qp->port = NextPort(src, dst, src, qp->sport, qp->dport);
    if (qp->port == NO_PORT)
    {
        qp->port = nodePorts[src].at(0); // its NIC's link is down: it will not send
    }
    qp->maxRate = double(ports[qp->port].rateBps);
    int64_t delay = 0;
    int64_t tx = 0;
    PathDelay(src, dst, delay, tx);
    int64_t rtt = cfg.globalT ? maxRttNs : 2 * delay + tx;
    qp->baseRttNs = rtt;
    qp->window = !cfg.hasWin ? 0 : cfg.globalT ? maxBdp : uint64_t(double(rtt) * qp->maxRate / 8e9);
    ResetCc(qp.get());
    ports[qp->port].qps.push_back(qp.get());
    rx.emplace_back();
    qps.push_back(std::move(qp));
    return qps.back().get();
}

void
RdmaFabric::ResetCc(RdmaQp* qp)
{
    qp->rate = qp->maxRate;
    qp->alpha = 1;
    qp->targetRate = qp->maxRate;
    qp->alphaCnpArrived = false;
    qp->decreaseCnpArrived = false;
    qp->firstCnp = true;
    qp->stage = 0;
    qp->alphaTimer.Cancel();
    qp->decreaseTimer.Cancel();
    qp->increaseTimer.Cancel();
    qp->u = 1;
    qp->refRate = qp->maxRate;
    qp->incStage = 0;
    qp->lastUpdateSeq = 0;
    qp->nHops = 0;
    std::fill(std::begin(qp->hopU), std::end(qp->hopU), 1.0);
    std::fill(std::begin(qp->hopRate), std::end(qp->hopRate), qp->maxRate);
    std::fill(std::begin(qp->hopStage), std::end(qp->hopStage), 0u);
    qp->lastRttNs = 0;
    qp->rttDiffNs = 0;
    qp->ecnAcks = 0;
    qp->windowPackets = 0;
    qp->cwr = false;
    qp->highSeq = 0;
    qp->ccStartSeq = qp->sndUna;
}

uint64_t
RdmaFabric::Window(const RdmaQp* qp) const
{
    if (qp->window == 0)
    {
        return 0;
    }
    if (!cfg.varWin)
    {
        return qp->window;
    }
    return std::max<uint64_t>(1, uint64_t(double(qp->window) * qp->rate / qp->maxRate));
}

RdmaQp*
RdmaFabric::PickQp(uint32_t port, bool commit)
{
    Port& P = ports[port];
    size_t n = P.qps.size();
    int64_t nowPs = Simulator::Now().GetPicoSeconds();
    if (P.queue->paused[cfg.dataClass])
    {
        return nullptr;
    }
    for (size_t i = 0; i < n; i++)
    {
        size_t idx = (P.rr + i) % n;
        RdmaQp* qp = P.qps[idx];
        if (BytesLeft(qp) == 0 || WindowBound(qp) || qp->nextAvailPs > nowPs)
        {
            continue;
        }
        if (commit)
        {
            P.rr = uint32_t(idx + 1);
        }
        return qp;
    }
    return nullptr;
}

bool
RdmaFabric::CanSend(uint32_t port)
{
    RdmaPortQueue& q = *ports[port].queue;
    if (!isHost[ports[port].node])
    {
        return q.NextClass() >= 0;
    }
    uint32_t ackCls = cfg.ackHighPrio ? 0 : cfg.dataClass;
    if (!q.q[ackCls].empty() && (ackCls == 0 || !q.paused[ackCls]))
    {
        return true;
    }
    return PickQp(port, false) != nullptr;
}

Ptr<Packet>
RdmaFabric::HostDequeue(uint32_t port)
{
    RdmaPortQueue& q = *ports[port].queue;
    uint32_t ackCls = cfg.ackHighPrio ? 0 : cfg.dataClass;
    // ACKs and NACKs first (the reference's high-priority NIC queue), unless their class is paused.
    if (!q.q[ackCls].empty() && (ackCls == 0 || !q.paused[ackCls]))
    {
        Ptr<Packet> p = q.q[ackCls].front().packet;
        q.q[ackCls].pop_front();
        q.bytes -= p->GetSize();
        ports[port].txBytes += p->GetSize();
        ports[port].txPackets++;
        return p;
    }
    RdmaQp* qp = PickQp(port, true);
    if (qp == nullptr)
    {
        ScheduleWake(port);
        return nullptr;
    }
    Ptr<Packet> p = MakeData(qp);
    ports[port].txBytes += p->GetSize();
    ports[port].txPackets++;
    return p;
}

Ptr<Packet>
RdmaFabric::MakeData(RdmaQp* qp)
{
    uint32_t payload = uint32_t(std::min<uint64_t>(cfg.payloadBytes, BytesLeft(qp)));
    RdmaHeader h;
    h.type = DATA;
    h.cls = uint8_t(cfg.dataClass);
    h.sip = qp->src;
    h.dip = qp->dst;
    h.sport = qp->sport;
    h.dport = qp->dport;
    h.qpn = qp->id;
    h.seq = qp->sndNxt;
    h.len = uint16_t(payload);
    h.wireBytes = uint16_t(std::max<uint32_t>(RdmaHeader::FIXED, cfg.dataOverheadBytes - PPP_BYTES + ExtraDataBytes()));
    if (cfg.ccMode == CC_TIMELY)
    {
        // The device sends it now (the queue built it on dequeue), on a clock that stops while its
        // partition is frozen: an RTT over any number of freezes is the network's, as in stock.
        h.ts = uint32_t(Simulator::Now().GetNanoSeconds() - qp->frozenTotalNs);
    }
    if (qp->sndNxt + payload == qp->size)
    {
        h.flags |= FLAG_LAST;
    }
    Ptr<Packet> p = Create<Packet>(payload);
    p->AddHeader(h);
    if (Telemetry())
    {
        telemetry[p->GetUid()] = IntStack();
    }
    PppHeader ppp;
    ppp.SetProtocol(PPP_IPV4);
    p->AddHeader(ppp);
    if (qp->sndNxt < qp->highestSent)
    {
        qp->retransmitted += payload;
    }
    qp->sndNxt += payload;
    qp->highestSent = std::max(qp->highestSent, qp->sndNxt);
    qp->lastPacketBytes = p->GetSize();
    if (cfg.rateBound)
    {
        qp->nextAvailPs = Simulator::Now().GetPicoSeconds() +
                          int64_t(std::llround(double(p->GetSize()) * 8e12 / qp->rate));
    }
    ArmRto(qp);
    return p;
}

void
RdmaFabric::ScheduleWake(uint32_t port)
{
    // Only pacing can make a QP eligible without another event: wake at the earliest paced time.
    Port& P = ports[port];
    int64_t earliest = std::numeric_limits<int64_t>::max();
    int64_t nowPs = Simulator::Now().GetPicoSeconds();
    if (P.queue->paused[cfg.dataClass] || P.down)
    {
        return; // the resume kicks it
    }
    for (RdmaQp* qp : P.qps)
    {
        if (BytesLeft(qp) == 0 || WindowBound(qp) || qp->nextAvailPs <= nowPs)
        {
            continue;
        }
        earliest = std::min(earliest, qp->nextAvailPs);
    }
    if (earliest == std::numeric_limits<int64_t>::max())
    {
        return;
    }
    if (P.wake.IsPending() && P.wakeAtPs <= earliest)
    {
        return;
    }
    P.wake.Cancel();
    P.wakeAtPs = earliest;
    int64_t delayNs = (earliest - nowPs + 999) / 1000;
    P.wake = Simulator::Schedule(NanoSeconds(delayNs), &RdmaFabric::Wake, this, port);
}

void
RdmaFabric::Wake(uint32_t port)
{
    ports[port].wakeAtPs = std::numeric_limits<int64_t>::max();
    Kick(port);
    if (!ports[port].wake.IsPending())
    {
        ScheduleWake(port);
    }
}

void
RdmaFabric::Kick(uint32_t port)
{
    Port& P = ports[port];
    if (P.queue->busy || P.queue->inDequeue || P.down)
    {
        return; // the device will dequeue when its wire frees up, or is choosing right now
    }
    if (!CanSend(port))
    {
        if (isHost[P.node])
        {
            ScheduleWake(port); // an idle NIC whose QPs are only held back by pacing
        }
        return;
    }
    P.queue->swallow = true;
    P.dev->Send(Create<Packet>(), P.dev->GetBroadcast(), ETHER_IPV4);
    P.queue->swallow = false;
}

void
RdmaFabric::HostReceive(uint32_t port, Ptr<Packet> p, const RdmaHeader& h)
{
    if (h.type == DATA)
    {
        ReceiveData(port, p, h);
    }
    else
    {
        ReceiveAck(p, h);
    }
    if (Telemetry())
    {
        telemetry.erase(p->GetUid()); // it has arrived: its telemetry was read or copied
    }
}

void
RdmaFabric::LinkLoss(Ptr<const Packet> p)
{
    lost++;
    telemetry.erase(p->GetUid());
}

void
RdmaFabric::ReceiveData(uint32_t port, Ptr<Packet> p, const RdmaHeader& h)
{
    Rx& r = rx.at(h.qpn);
    bool cnp = h.flags & FLAG_CE;
    if (h.seq == r.expected)
    {
        r.expected += h.len;
        r.sinceAck += h.len;
        if (r.sinceAck >= cfg.ackIntervalBytes || r.expected % cfg.chunkBytes == 0 || (h.flags & FLAG_LAST))
        {
            r.sinceAck = 0;
            SendControl(port, h, ACK, r.expected, cnp, p);
        }
    }
    else if (h.seq > r.expected)
    {
        int64_t now = Simulator::Now().GetNanoSeconds();
        if (now >= r.nackTimerNs || r.lastNack != r.expected)
        {
            r.nackTimerNs = now + cfg.nackIntervalNs;
            r.lastNack = r.expected;
            SendControl(port, h, NACK, r.expected, cnp, p);
        }
    }
    else if (cfg.rtoNs > 0)
    {
        // A duplicate: the reference ignores it, so a lost last ACK would hang; with a timeout
        // the sender retransmits and needs this ACK to finish.
        SendControl(port, h, ACK, r.expected, cnp, p);
    }
}

void
RdmaFabric::SendControl(uint32_t port, const RdmaHeader& data, uint8_t type, uint64_t seq, bool cnp,
                        Ptr<Packet> dataPacket)
{
    RdmaHeader h;
    h.type = type;
    h.flags = cnp ? FLAG_CNP : 0;
    h.cls = data.cls;
    h.sip = data.dip;
    h.dip = data.sip;
    h.sport = data.dport;
    h.dport = data.sport;
    h.qpn = data.qpn;
    h.seq = seq;
    h.ts = data.ts;
    h.wireBytes = uint16_t(std::max<uint32_t>(RdmaHeader::FIXED,
                                              cfg.ackBytes - PPP_BYTES + ExtraAckBytes()));
    Ptr<Packet> p = Create<Packet>();
    p->AddHeader(h);
    if (Telemetry())
    {
        telemetry[p->GetUid()] = telemetry[dataPacket->GetUid()];
    }
    // ACKs leave on the port the data came in on (one NIC port per host in the reference).
    Enqueue(port, cfg.ackHighPrio ? 0 : cfg.dataClass, p, port);
}

void
RdmaFabric::ReceiveAck(Ptr<Packet> p, const RdmaHeader& h)
{
    RdmaQp* qp = qps.at(h.qpn).get();
    Acknowledge(qp, h.seq);
    if (h.type == NACK)
    {
        qp->sndNxt = qp->sndUna; // go-back-N
    }
    if (qp->sndUna == qp->size)
    {
        ResetCc(qp); // idle: the next flow starts like a new QP, as the reference's one QP per flow
    }
    else if (cfg.ccMode == CC_DCQCN && (h.flags & FLAG_CNP))
    {
        CnpReceived(qp);
    }
    else if (cfg.ccMode == CC_HPCC)
    {
        HpccAck(qp, p, h);
    }
    else if (cfg.ccMode == CC_HPCC_PINT)
    {
        PintAck(qp, p, h);
    }
    else if (cfg.ccMode == CC_TIMELY)
    {
        TimelyAck(qp, h);
    }
    else if (cfg.ccMode == CC_DCTCP)
    {
        DctcpAck(qp, h);
    }
    Kick(qp->port);
}

void
RdmaFabric::Acknowledge(RdmaQp* qp, uint64_t seq)
{
    if (seq <= qp->sndUna)
    {
        return;
    }
    uint64_t from = qp->sndUna;
    qp->sndUna = seq;
    qp->sndNxt = std::max(qp->sndNxt, qp->sndUna);
    qp->lastProgressNs = Simulator::Now().GetNanoSeconds();
    // Attribute the newly acknowledged bytes to the QP's flows in order; finish those covered,
    // including a flow the engine left with no bytes (all skipped) right at the boundary.
    uint64_t start = qp->flowsStart;
    for (auto it = qp->flows.begin(); it != qp->flows.end();)
    {
        uint64_t end = it->second;
        if (from < end && from < seq)
        {
            uint64_t upto = std::min(end, seq);
            table->OnDelivered(it->first, upto - from);
            from = upto;
        }
        if (end > seq)
        {
            break;
        }
        table->OnComplete(it->first);
        start = end;
        it = qp->flows.erase(it);
    }
    qp->flowsStart = start;
}

void
RdmaFabric::ArmRto(RdmaQp* qp)
{
    if (cfg.rtoNs <= 0 || qp->rtoTimer.IsPending())
    {
        return;
    }
    qp->lastProgressNs = Simulator::Now().GetNanoSeconds();
    qp->rtoTimer = Simulator::Schedule(NanoSeconds(cfg.rtoNs), &RdmaFabric::CheckRto, this, qp);
}

void
RdmaFabric::CheckRto(RdmaQp* qp)
{
    if (qp->sndUna >= qp->highestSent)
    {
        return; // nothing outstanding: the next send re-arms
    }
    int64_t now = Simulator::Now().GetNanoSeconds();
    int64_t due = qp->lastProgressNs + cfg.rtoNs;
    if (now >= due)
    {
        qp->sndNxt = qp->sndUna; // timeout: go back to the first unacknowledged byte
        qp->lastProgressNs = now;
        qp->timeouts++;
        due = now + cfg.rtoNs;
        Kick(qp->port);
    }
    qp->rtoTimer = Simulator::Schedule(NanoSeconds(due - now), &RdmaFabric::CheckRto, this, qp);
}

// ---- DCQCN (Mellanox-style timers, as the reference) --------------------------------------------

void
RdmaFabric::CnpReceived(RdmaQp* qp)
{
    qp->alphaCnpArrived = true;
    qp->decreaseCnpArrived = true;
    if (qp->firstCnp)
    {
        qp->alpha = 1;
        qp->alphaCnpArrived = false;
        qp->alphaTimer = Simulator::Schedule(NanoSeconds(cfg.alphaResumeIntervalNs), &RdmaFabric::UpdateAlpha, this, qp);
        // +1 ns: the first decrease runs after the alpha update of the same instant.
        qp->decreaseTimer =
            Simulator::Schedule(NanoSeconds(cfg.rateDecreaseIntervalNs + 1), &RdmaFabric::CheckRateDecrease, this, qp);
        qp->rate *= cfg.rateOnFirstCnp;
        qp->targetRate = qp->rate;
        qp->firstCnp = false;
    }
}

void
RdmaFabric::UpdateAlpha(RdmaQp* qp)
{
    qp->alpha = (1 - cfg.ewmaGain) * qp->alpha + (qp->alphaCnpArrived ? cfg.ewmaGain : 0);
    qp->alphaCnpArrived = false;
    qp->alphaTimer = Simulator::Schedule(NanoSeconds(cfg.alphaResumeIntervalNs), &RdmaFabric::UpdateAlpha, this, qp);
}

void
RdmaFabric::CheckRateDecrease(RdmaQp* qp)
{
    qp->decreaseTimer =
        Simulator::Schedule(NanoSeconds(cfg.rateDecreaseIntervalNs), &RdmaFabric::CheckRateDecrease, this, qp);
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
    qp->increaseTimer = Simulator::Schedule(NanoSeconds(cfg.rpTimerNs), &RdmaFabric::RateIncreaseTimer, this, qp);
}

void
RdmaFabric::RateIncreaseTimer(RdmaQp* qp)
{
    qp->increaseTimer = Simulator::Schedule(NanoSeconds(cfg.rpTimerNs), &RdmaFabric::RateIncreaseTimer, this, qp);
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

// ---- RdmaQp -------------------------------------------------------------------------------------

uint32_t
RdmaQp::GetCongestionState(double* out, uint32_t cap) const
{
    if (cap < 3)
    {
        return 0;
    }
    uint32_t mode = fabric->cfg.ccMode;
    out[0] = rate;
    bool hpcc = mode == CC_HPCC || mode == CC_HPCC_PINT;
    out[1] = hpcc || mode == CC_TIMELY ? refRate : mode == CC_DCTCP ? rate : targetRate;
    out[2] = hpcc ? u : mode == CC_TIMELY ? double(lastRttNs) : alpha;
    return 3;
}

void
RdmaQp::SetCongestionState(double newRate, double target, double newAlpha)
{
    uint32_t mode = fabric->cfg.ccMode;
    rate = std::clamp(newRate, double(fabric->cfg.minRateBps), maxRate);
    bool hpcc = mode == CC_HPCC || mode == CC_HPCC_PINT;
    double& reference = hpcc || mode == CC_TIMELY ? refRate : targetRate; // (DCTCP: unused)
    reference = std::clamp(target, double(fabric->cfg.minRateBps), maxRate);
    if (fabric->cfg.multiRate)
    {
        std::fill(std::begin(hopRate), std::end(hopRate), reference); // every hop at the QP's rate
    }
    if (newAlpha < 0)
    {
        return;
    }
    if (mode == CC_TIMELY)
    {
        lastRttNs = int64_t(newAlpha);
    }
    else
    {
        (hpcc ? u : alpha) = newAlpha;
        if (fabric->cfg.multiRate)
        {
            std::fill(std::begin(hopU), std::end(hopU), newAlpha);
        }
    }
}

uint64_t
RdmaQp::GetUntransmittedOf(uint32_t flow) const
{
    uint64_t start = flowsStart;
    for (const auto& [f, end] : flows)
    {
        if (f == flow)
        {
            uint64_t from = std::max(start, highestSent);
            return end > from ? end - from : 0;
        }
        start = end;
    }
    return 0;
}

void
RdmaQp::ShiftTimes(int64_t shiftNs)
{
    int64_t now = Simulator::Now().GetNanoSeconds();
    nextAvailPs += shiftNs * 1000;
    lastProgressNs += shiftNs;
    for (uint32_t i = 0; i < nHops; i++)
    {
        hops[i].timeNs += shiftNs;
    }
    if (shiftNs > 0) // a thaw at the freeze's own instant must not hide an earlier freeze from telemetry
    {
        frozenFromNs = now - shiftNs;
        frozenShiftNs = shiftNs;
    }
    frozenTotalNs += shiftNs;
    fabric->rx.at(id).nackTimerNs += shiftNs;
    fabric->ports[port].wakeAtPs = std::numeric_limits<int64_t>::max();
}

double
RdmaQp::GetRateBps() const
{
    return rate;
}

uint64_t
RdmaQp::GetSndNxt() const
{
    return sndNxt;
}

uint64_t
RdmaQp::GetSndUna() const
{
    return sndUna;
}

uint64_t
RdmaQp::GetRetransmittedBytes() const
{
    return retransmitted;
}

uint64_t
RdmaQp::GetTimeouts() const
{
    return timeouts;
}

// ---- RdmaNetwork --------------------------------------------------------------------------------

RdmaNetwork::RdmaNetwork()
    : m_fabric(std::make_unique<RdmaFabric>())
{
}

RdmaNetwork::~RdmaNetwork() = default;

void
RdmaNetwork::Build(uint32_t nNodes,
                   const uint8_t* isHost,
                   uint32_t nLinks,
                   const uint32_t* a,
                   const uint32_t* b,
                   const uint64_t* rateBps,
                   const int64_t* delayNs,
                   const RdmaConfig& config)
{
    m_fabric->cfg = config;
    m_fabric->Build(nNodes, isHost, nLinks, a, b, rateBps, delayNs);
}

uint32_t
RdmaNetwork::GetNNodes() const
{
    return m_fabric->nodes.GetN();
}

uint32_t
RdmaNetwork::GetNPorts() const
{
    return uint32_t(m_fabric->ports.size());
}

Ptr<Node>
RdmaNetwork::GetNode(uint32_t node) const
{
    return m_fabric->nodes.Get(node);
}

Ptr<PointToPointNetDevice>
RdmaNetwork::GetPortDevice(uint32_t port) const
{
    return m_fabric->ports.at(port).dev;
}

void
RdmaNetwork::ReadQueueBytes(uint32_t* out) const
{
    for (size_t p = 0; p < m_fabric->ports.size(); p++)
    {
        out[p] = uint32_t(std::min<uint64_t>(m_fabric->ports[p].queue->bytes, UINT32_MAX));
    }
}

void
RdmaNetwork::ReadPortTxPackets(uint64_t* out) const
{
    for (size_t p = 0; p < m_fabric->ports.size(); p++)
    {
        out[p] = m_fabric->ports[p].txPackets;
    }
}

uint32_t
RdmaNetwork::TracePath(uint32_t src, uint32_t dst, uint16_t srcPort, uint16_t dstPort, uint32_t* out, uint32_t cap)
    const
{
    uint32_t n = 0;
    uint32_t node = src;
    while (node != dst && n < cap)
    {
        uint32_t p = m_fabric->NextPort(node, dst, src, srcPort, dstPort);
        if (p == NO_PORT)
        {
            break; // cut off by a link gone down: the path so far
        }
        out[n++] = p;
        node = m_fabric->ports[p ^ 1].node;
    }
    return n;
}

int64_t
RdmaNetwork::GetBaseRttNs(uint32_t src, uint32_t dst) const
{
    if (m_fabric->cfg.globalT)
    {
        return m_fabric->maxRttNs;
    }
    int64_t delay = 0;
    int64_t tx = 0;
    m_fabric->PathDelay(src, dst, delay, tx);
    return 2 * delay + tx;
}

uint64_t
RdmaNetwork::GetBdpBytes(uint32_t src, uint32_t dst) const
{
    return uint64_t(double(GetBaseRttNs(src, dst)) * double(m_fabric->nicRateBps) / 8e9);
}

uint32_t
RdmaNetwork::GetNQps() const
{
    return uint32_t(m_fabric->qps.size());
}

uint64_t
RdmaNetwork::GetSharedUsed(uint32_t node) const
{
    return m_fabric->switches.at(node).sharedUsed;
}

uint64_t
RdmaNetwork::GetPfcThreshold(uint32_t port) const
{
    return m_fabric->PfcThreshold(port);
}

uint64_t
RdmaNetwork::GetPfcFrames() const
{
    return m_fabric->pfcFrames;
}

uint64_t
RdmaNetwork::GetDrops() const
{
    return m_fabric->drops;
}

uint64_t
RdmaNetwork::GetLost() const
{
    return m_fabric->lost;
}

uint64_t
RdmaNetwork::GetEcnMarks() const
{
    return m_fabric->ecnMarks;
}

uint64_t
RdmaNetwork::GetPfcLogSize() const
{
    return m_fabric->pfcLog.size();
}

uint32_t
RdmaNetwork::ReadPfcLog(int64_t* timeNs,
                        uint32_t* node,
                        uint32_t* nodeType,
                        uint32_t* ifIndex,
                        uint32_t* type,
                        uint32_t cap) const
{
    uint32_t n = uint32_t(std::min<size_t>(cap, m_fabric->pfcLog.size()));
    for (uint32_t i = 0; i < n; i++)
    {
        const RdmaFabric::PfcEvent& e = m_fabric->pfcLog[i];
        timeNs[i] = e.timeNs;
        node[i] = e.node;
        nodeType[i] = e.nodeType;
        ifIndex[i] = e.ifIndex;
        type[i] = e.type;
    }
    return n;
}

void
RdmaNetwork::ScheduleLinkDown(int64_t atNs, uint32_t a, uint32_t b)
{
    int64_t now = Simulator::Now().GetNanoSeconds();
    Simulator::Schedule(NanoSeconds(std::max<int64_t>(0, atNs - now)), &RdmaFabric::TakeDownLink, m_fabric.get(), a,
                        b);
}

uint64_t
RdmaNetwork::GetLinksDown() const
{
    return m_fabric->linksDown;
}

uint64_t
RdmaNetwork::GetDownDrops() const
{
    return m_fabric->downDrops;
}

void
RdmaNetwork::MonitorQueues(int64_t startNs, int64_t endNs, int64_t intervalNs)
{
    int64_t now = Simulator::Now().GetNanoSeconds();
    if (endNs <= std::max(startNs, now) || intervalNs <= 0)
    {
        return;
    }
    Simulator::Schedule(NanoSeconds(std::max(startNs, now) - now), &RdmaFabric::SampleQueues, m_fabric.get(), endNs,
                        intervalNs);
}

uint64_t
RdmaNetwork::GetQueueSampleCount() const
{
    return m_fabric->queueSamples.size();
}

uint32_t
RdmaNetwork::ReadQueueSamples(int64_t* timeNs, uint32_t* node, uint32_t* ifIndex, uint64_t* bytes, uint32_t cap)
    const
{
    uint32_t n = uint32_t(std::min<size_t>(cap, m_fabric->queueSamples.size()));
    for (uint32_t i = 0; i < n; i++)
    {
        const RdmaFabric::QueueSample& q = m_fabric->queueSamples[i];
        timeNs[i] = q.timeNs;
        node[i] = q.node;
        ifIndex[i] = q.ifIndex;
        bytes[i] = q.bytes;
    }
    return n;
}

RdmaFabric*
RdmaNetwork::GetFabric() const
{
    return m_fabric.get();
}

// ---- RdmaFlowManager ----------------------------------------------------------------------------

RdmaFlowManager::RdmaFlowManager(RdmaNetwork* network, uint32_t nFlows)
    : m_network(network),
      m_table(nFlows)
{
    m_network->GetFabric()->table = &m_table;
}

uint32_t
RdmaFlowManager::OpenConnection(uint32_t src, uint32_t dst)
{
    return m_network->GetFabric()->OpenQp(src, dst)->id;
}

uint32_t
RdmaFlowManager::GetConnectionPath(uint32_t conn, uint32_t* out, uint32_t cap) const
{
    RdmaQp* qp = GetSender(conn);
    uint32_t n = m_network->TracePath(qp->src, qp->dst, qp->sport, qp->dport, out, cap);
    return n + m_network->TracePath(qp->dst, qp->src, qp->dport, qp->sport, out + n, cap - n);
}

void
RdmaFlowManager::StartFlow(uint32_t flow, uint32_t conn, uint64_t bytes, bool kick)
{
    RdmaQp* qp = GetSender(conn);
    m_table.OnStart(flow);
    bool idle = qp->sndNxt >= qp->size; // else its own ACKs and timers keep it sending
    qp->size += bytes;
    qp->flows.emplace_back(flow, qp->size);
    if (idle && kick)
    {
        Resume(conn);
    }
}

void
RdmaFlowManager::Resume(uint32_t conn)
{
    RdmaQp* qp = GetSender(conn);
    if (qp->sndNxt < qp->size)
    {
        // Kick in an event in the sender's context (the control plane runs between events). Not
        // for a flow queued behind unsent bytes: that event would land in a frozen partition.
        Simulator::ScheduleWithContext(qp->src, Seconds(0), &RdmaFabric::Kick, m_network->GetFabric(),
                                       qp->port);
    }
}

uint64_t
RdmaFlowManager::SkipFlow(uint32_t flow, uint32_t conn, uint64_t bytes)
{
    RdmaQp* qp = GetSender(conn);
    uint64_t removed = std::min(bytes, qp->GetUntransmittedOf(flow));
    if (removed == 0)
    {
        return 0;
    }
    // Never-sent bytes vanish from the QP's byte stream: this flow's end and every later one move.
    bool after = false;
    for (auto& [f, end] : qp->flows)
    {
        after = after || f == flow;
        if (after)
        {
            end -= removed;
        }
    }
    qp->size -= removed;
    m_table.OnSkipped(flow, removed);
    return removed;
}

FlowTable&
RdmaFlowManager::GetTable()
{
    return m_table;
}

RdmaQp*
RdmaFlowManager::GetSender(uint32_t conn) const
{
    return m_network->GetFabric()->qps.at(conn).get();
}

} // namespace wormhole
