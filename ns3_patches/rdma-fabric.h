// Private declarations of the RDMA model, shared by the rdma*.cc files and kept out of what cppyy
// parses (neither rdma.h nor wormhole-patches.h includes it): the wire format, the port queue and
// the RdmaFabric class (switches, NICs, queue pairs and their congestion controls).
#ifndef WORMHOLE_RDMA_FABRIC_H
#define WORMHOLE_RDMA_FABRIC_H

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

namespace wormhole
{
using namespace ns3;

// ---- Wire format ------------------------------------------------------------------------------

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

inline constexpr double PINT_MAX_FLOWS = 512; // PINT encodes u * this (the reference's max_concurrent)

inline constexpr uint16_t PPP_IPV4 = 0x0021; // the stock PPP header only carries IPv4/IPv6
inline constexpr uint16_t ETHER_IPV4 = 0x0800;
inline constexpr uint32_t PPP_BYTES = 2;
inline constexpr uint32_t MAX_INT_HOPS = 5; // as the reference's INT header
inline constexpr uint32_t NCLASS = 8;
inline constexpr uint32_t NO_PORT = 0xFFFFFFFF;

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

    static TypeId GetTypeId();

    TypeId GetInstanceTypeId() const override { return GetTypeId(); }

    uint32_t GetSerializedSize() const override { return wireBytes; }

    // (rdma-wire.cc)
    void Serialize(Buffer::Iterator it) const override;
    uint32_t Deserialize(Buffer::Iterator it) override;
    void Print(std::ostream& os) const override;
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

// ---- The models ---------------------------------------------------------------------------------

class RdmaCc;

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
    std::unique_ptr<RdmaCc> cc; //!< the congestion control of cfg.ccMode (made by Build)

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
    /// Set `qp`'s rate now: its pending send is paced anew (HPCC, HPCC-PINT).
    void ChangeRate(RdmaQp* qp, double rate);

    uint32_t ClassOf(uint8_t type, uint8_t cls) const
    {
        return (type == PFC || (cfg.ackHighPrio && (type == ACK || type == NACK))) ? 0 : cls;
    }
};

// ---- Congestion control -------------------------------------------------------------------------

/// A congestion control (CC_MODE) as the NICs, the switches and the engine see it: one object per
/// fabric, its state per QP in RdmaQp. The defaults are those of no congestion control at all.
/// Implementations: rdma-cc-dcqcn.cc, rdma-cc-hpcc.cc (HPCC, HPCC-PINT), rdma-cc-timely-dctcp.cc.
class RdmaCc
{
  public:
    /// What the CC adds to every frame, fixed for a run: data members, not virtual calls, since
    /// the NICs and switches ask per packet.
    struct Wire
    {
        uint32_t extraDataBytes = 0; //!< data-frame bytes beyond the fixed overhead: HPCC's telemetry, PINT's field, TIMELY's send time
        uint32_t extraAckBytes = 0;  //!< ACK/NACK bytes beyond ackBytes: the telemetry or PINT field the ACK echoes
        bool telemetry = false;      //!< data frames carry telemetry (OnEgress), kept by the fabric per packet uid and copied onto their ACKs
    };

    RdmaCc(RdmaFabric& f, Wire w)
        : wire(w),
          fabric(f),
          cfg(f.cfg)
    {
    }

    explicit RdmaCc(RdmaFabric& f)
        : RdmaCc(f, Wire{})
    {
    }

    virtual ~RdmaCc() = default;

    /// The congestion control of `f.cfg.ccMode` (rdma-fabric.cc).
    static std::unique_ptr<RdmaCc> Create(RdmaFabric& f);

    /// An ACK or NACK `p` for `qp`, which still has bytes unacknowledged.
    virtual void OnAck(RdmaQp* qp, Ptr<Packet> p, const RdmaHeader& h) {}

    /// `qp` builds data frame `h`, which the device sends now.
    virtual void OnSend(const RdmaQp* qp, RdmaHeader& h) {}

    /// Data frame `p` leaves switch port `out` (ECN already marked), `qlen` bytes queued there after
    /// it; asked only with wire.telemetry.
    virtual void OnEgress(RdmaFabric::Port& out, Ptr<Packet> p, uint64_t qlen) {}

    /// RdmaQp::SetCongestionState set `qp`'s state.
    virtual void OnStateSet(RdmaQp* qp) {}

    /// RdmaQp::KeepRateStep: `qp`'s rate-increase timer, cancelled, runs after `delay` instead
    /// (sets qp->rateStepNs), unless a cut restarts it first.
    virtual void MoveRateIncrease(RdmaQp* qp, Time delay) {}

    /// RdmaQp::GetCongestionState's three values (the rate, the reference rate, the third value).
    virtual void GetState(const RdmaQp& qp, double* out) const
    {
        out[0] = qp.rate;
        out[1] = qp.targetRate;
        out[2] = qp.alpha;
    }

    /// The reference rate RdmaQp::SetCongestionState sets.
    virtual double& ReferenceRate(RdmaQp& qp) const { return qp.targetRate; }

    /// RdmaQp::SetCongestionState's third value (alpha, HPCC's U, TIMELY's last RTT).
    virtual void SetThird(RdmaQp& qp, double value) const
    {
        qp.alpha = value;
        if (cfg.multiRate)
        {
            std::fill(std::begin(qp.hopU), std::end(qp.hopU), value);
        }
    }

    const Wire wire;

  protected:
    RdmaFabric& fabric;
    const RdmaConfig& cfg;
};

/// The implementations, each in its file.
std::unique_ptr<RdmaCc> MakeDcqcn(RdmaFabric& f);
std::unique_ptr<RdmaCc> MakeHpcc(RdmaFabric& f);
std::unique_ptr<RdmaCc> MakeHpccPint(RdmaFabric& f);
std::unique_ptr<RdmaCc> MakeTimely(RdmaFabric& f);
std::unique_ptr<RdmaCc> MakeDctcp(RdmaFabric& f);

} // namespace wormhole

#endif
