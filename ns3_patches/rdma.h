// RDMA (RoCEv2-style) transport on stock PointToPointNetDevice/Channel: queue pairs with DCQCN,
// HPCC, HPCC-PINT, TIMELY or DCTCP rate control at the hosts, switches with a shared-buffer MMU, PFC, ECN at
// dequeue and HPCC in-band telemetry (or PINT's one encoded utilization). Written to the behaviour of the HPCC paper's simulator (the field's reference,
// see shared/reference/rdma-notes.md) so its configs and FCTs carry over.
//
// How it sits on stock ns-3: every port gets an RdmaPortQueue (a Queue<Packet> with 8 pausable
// classes). The device dequeues from it exactly when the wire frees up, so ECN marking, INT
// stamping, MMU release and PFC resume happen at the true dequeue instant; a host's queue builds
// data packets on demand from its queue pairs at that instant. Nothing wakes an idle stock device
// but Send, so the models "kick" it with a 0-byte marker the queue swallows, and only when the
// queue has a packet to give. No Internet stack: frames travel as PPP "IPv4" with our header.
// The partition-tag simulator keeps working because the device's PhyTxBegin -> TransmitComplete
// -> channel Receive chain is the stock one.
#ifndef WORMHOLE_RDMA_H
#define WORMHOLE_RDMA_H

#include "flow-transport.h"
#include "network-builder.h"

#include "ns3/event-id.h"

#include <deque>
#include <memory>
#include <vector>

namespace wormhole
{

/// Settings named after the reference simulator's config keys (units: ns, bps, bytes).
struct RdmaConfig
{
    uint32_t ccMode = 1;                //!< CC_MODE: 1 DCQCN, 3 HPCC, 7 TIMELY, 8 DCTCP (rate-based), 10 HPCC-PINT
    uint32_t payloadBytes = 1000;       //!< PACKET_PAYLOAD_SIZE
    uint64_t bufferBytes = 32u << 20;   //!< BUFFER_SIZE (MiB in the config) per switch
    bool enableEcn = true;              //!< ENABLE_QCN: switches mark CE
    bool ackHighPrio = false;           //!< ACK_HIGH_PRIO: ACKs in class 0 (strict priority, no MMU)
    uint32_t dataClass = 3;             //!< priority group of data (flow.txt's pg; 3 in every reference case)
    // DCQCN (Mellanox style)
    int64_t alphaResumeIntervalNs = 1000;   //!< ALPHA_RESUME_INTERVAL
    int64_t rateDecreaseIntervalNs = 4000;  //!< RATE_DECREASE_INTERVAL
    int64_t rpTimerNs = 900000;             //!< RP_TIMER
    double ewmaGain = 1.0 / 256;            //!< EWMA_GAIN
    uint32_t fastRecoveryTimes = 1;         //!< FAST_RECOVERY_TIMES
    uint64_t rateAiBps = 50000000;          //!< RATE_AI (also HPCC's additive increase)
    uint64_t rateHaiBps = 100000000;        //!< RATE_HAI
    uint64_t minRateBps = 100000000;        //!< MIN_RATE
    bool clampTargetRate = false;           //!< CLAMP_TARGET_RATE
    double rateOnFirstCnp = 1.0;            //!< the reference's RateOnFirstCnp (1: no cut)
    // HPCC
    double uTarget = 0.95;                  //!< U_TARGET
    uint32_t miThresh = 0;                  //!< MI_THRESH
    bool fastReact = true;                  //!< FAST_REACT
    bool multiRate = false;                 //!< MULTI_RATE: a rate per hop; the QP sends at the smallest
    bool sampleFeedback = false;            //!< SAMPLE_FEEDBACK: between full updates, only hops with a queue count
    // HPCC-PINT (U_TARGET, MI_THRESH, RATE_AI, FAST_REACT as HPCC)
    double pintLogBase = 1.05;              //!< PINT_LOG_BASE: utilization travels as a power of this base
    double pintProb = 1.0;                  //!< PINT_PROB: the fraction of ACKs the sender reacts to
    uint32_t pintBytes = 2;                 //!< PINT's field on data frames and ACKs (the reference's 2 bytes)
    // TIMELY (RATE_AI, RATE_HAI after 5 increases in a row, MIN_RATE; the reference's attribute
    // defaults, which its config cannot set)
    double timelyAlpha = 0.875;             //!< EWMA weight of the newest RTT difference
    double timelyBeta = 0.8;                //!< multiplicative decrease factor
    int64_t timelyTLowNs = 50000;           //!< below: increase whatever the gradient
    int64_t timelyTHighNs = 500000;         //!< above: decrease by the RTT's excess
    int64_t timelyMinRttNs = 20000;         //!< normalizes the RTT gradient
    uint32_t timestampBytes = 8;            //!< TIMELY: a data frame carries its send time
    // DCTCP (rate-based; EWMA_GAIN, MIN_RATE)
    uint64_t dctcpRateAiBps = 1000000000;   //!< DCTCP_RATE_AI: additive increase per window
    // Window (both modes)
    bool hasWin = true;                     //!< HAS_WIN: window = BDP
    bool globalT = true;                    //!< GLOBAL_T: the largest BDP/RTT over host pairs
    bool varWin = true;                     //!< VAR_WIN: window scales with the QP's rate
    bool rateBound = true;                  //!< RATE_BOUND: pace at the QP rate
    // Receiver and loss
    uint32_t ackIntervalBytes = 1;          //!< L2_ACK_INTERVAL: ACK once this many bytes arrived in order
                                            //!< (and at chunk ends and the last byte); 1: every packet
    uint32_t chunkBytes = 4000;             //!< L2_CHUNK_SIZE: ACK at least at these boundaries
    int64_t nackIntervalNs = 500000;        //!< NACK generation interval
    int64_t rtoNs = 0;                      //!< retransmission timeout (0: none, like the reference)
    double errorRatePerLink = 0;            //!< ERROR_RATE_PER_LINK: packet loss on receive
    // Frame sizes on the wire: data = payload + dataOverhead (+ intBytes with HPCC), ACK/NACK =
    // ackBytes (+ intBytes), PFC = pfcBytes. 38 and 46 reproduce the reference's measured FCTs to
    // the ns (incast2: 20,000 frames back to back; ring8: data plus the reverse flow's ACKs on one
    // link); its fct.txt's ideal column counts 48 header bytes per packet.
    uint32_t dataOverheadBytes = 38;
    uint32_t ackBytes = 46;
    uint32_t intBytes = 42;
    uint32_t pfcBytes = 64;
    // Shared buffer (per switch) and PFC
    uint32_t reserveBytes = 4 * 1024;       //!< per ingress port and class
    uint32_t resumeOffsetBytes = 3 * 1024;
    double headroomBdps = 3;                //!< per port, in one-way link BDPs
    uint32_t pauseTimeUs = 5;               //!< PAUSE_TIME, written into frames only
    uint32_t ecmpSeed = 1;                  //!< salts every node's ECMP hash (the run's seed)

    /// KMIN_MAP / KMAX_MAP / PMAX_MAP entry for links of this rate (K in bytes).
    void AddEcnThreshold(uint64_t rateBps, uint64_t kminBytes, uint64_t kmaxBytes, double pmax);
    struct Ecn
    {
        uint64_t rateBps;
        uint64_t kmin;
        uint64_t kmax;
        double pmax;
    };
    std::vector<Ecn> ecn;
};

class RdmaFabric; // the models (switches, NICs, queues): rdma-fabric.h, private to the rdma*.cc files

/// Sender side of one queue pair; it carries flows in FIFO order (like one TCP connection).
class RdmaQp
{
  public:
    bool IsConnected() const { return true; } //!< no handshake (matches FlowSender's interface)
    /// {rate bps, DCQCN target rate bps (HPCC, HPCC-PINT and TIMELY: reference rate, DCTCP: the rate),
    /// DCQCN and DCTCP alpha (HPCC: U, HPCC-PINT: the last U received, TIMELY: the last RTT sample, ns)};
    /// returns 3.
    uint32_t GetCongestionState(double* out, uint32_t cap) const;
    /// Set a memoized congestion state (values as GetCongestionState; alpha < 0 leaves it). On
    /// DCQCN, below line rate, it arms the rate-increase timer as a cut would.
    void SetCongestionState(double rate, double target, double alpha);
    uint64_t GetUntransmittedOf(uint32_t flow) const; //!< bytes of `flow` not yet sent once
    double GetRateBps() const;
    uint64_t GetSndNxt() const;
    uint64_t GetSndUna() const;
    uint64_t GetRetransmittedBytes() const;
    uint64_t GetTimeouts() const;
    /// Whether its bytes in flight fill its window (HAS_WIN): it sends only as ACKs come back.
    bool IsWindowBound() const;
    /// Its window now (bytes; 0: none).
    uint64_t GetWindow() const;
    /// The QP's partition was frozen for `shiftNs` and thawed now: move the absolute times it
    /// holds (pacing, timeout, HPCC telemetry) onto the shifted clock, so the freeze is invisible.
    void ShiftTimes(int64_t shiftNs);
    /// When its rate next steps up on its own (ns; -1: not below its line rate, or no step
    /// pending, or a cut within the last `quietNs`): DCQCN's rate-increase timer, which a cut
    /// restarts. A freeze that holds its rate must end by then.
    int64_t GetRateStepNs(int64_t quietNs) const;
    /// After ShiftTimes: its pending rate step runs `shiftNs` earlier (not before now), at the
    /// time it had before a freeze that ended by it (rateStepNs until it runs).
    void KeepRateStep(int64_t shiftNs);

    // Internal state (the models': rdma-nic.cc, rdma-cc-*.cc).
    RdmaFabric* fabric = nullptr;
    uint32_t id = 0;
    uint32_t src = 0;
    uint32_t dst = 0;
    uint16_t sport = 0;
    uint16_t dport = 0;
    uint32_t port = 0;                //!< the NIC port it sends on
    uint64_t size = 0;                //!< bytes of all flows enqueued so far (minus skipped)
    uint64_t sndNxt = 0;
    uint64_t sndUna = 0;
    uint64_t highestSent = 0;         //!< first byte never sent
    uint64_t retransmitted = 0;
    uint64_t timeouts = 0;
    std::deque<std::pair<uint32_t, uint64_t>> flows; //!< (flow, end offset in the QP's stream)
    uint64_t flowsStart = 0;          //!< where the first flow in `flows` starts
    double rate = 0;                  //!< current sending rate, bps
    double maxRate = 0;
    uint64_t window = 0;              //!< bytes (0: none)
    int64_t baseRttNs = 0;
    int64_t nextAvailPs = 0;          //!< pacing: earliest next send (ps)
    uint32_t lastPacketBytes = 0;
    int64_t lastProgressNs = 0;
    // DCQCN
    double alpha = 1;
    double targetRate = 0;
    bool alphaCnpArrived = false;
    bool decreaseCnpArrived = false;
    bool firstCnp = true;
    uint32_t stage = 0;
    ns3::EventId alphaTimer;
    ns3::EventId decreaseTimer;
    ns3::EventId increaseTimer;
    int64_t rateStepNs = -1; //!< KeepRateStep: when the step it moved runs (-1: none pending)
    uint32_t rateStepGen = 0; //!< drops a moved step that a later move or a reset replaced
    ns3::EventId rtoTimer;
    // HPCC
    struct Hop
    {
        int64_t timeNs = 0;
        uint64_t txBytes = 0;
        uint64_t qlen = 0;
        uint64_t rateBps = 0;
    };
    double u = 1;
    double refRate = 0;
    uint32_t incStage = 0;
    uint64_t lastUpdateSeq = 0;
    uint32_t nHops = 0;
    Hop hops[8];
    double hopU[8] = {};              //!< MULTI_RATE: per hop, as u, refRate and incStage
    double hopRate[8] = {};
    uint32_t hopStage[8] = {};
    int64_t frozenFromNs = 0; //!< last freeze: telemetry stamped before it is read shifted
    int64_t frozenShiftNs = 0;
    int64_t frozenTotalNs = 0; //!< time frozen over all freezes: TIMELY's send times are on a clock without it
    // TIMELY (refRate, incStage and lastUpdateSeq as HPCC)
    int64_t lastRttNs = 0;
    double rttDiffNs = 0;
    // DCTCP (alpha as DCQCN; lastUpdateSeq as HPCC)
    uint64_t ecnAcks = 0;             //!< ACKs echoing a mark since the window began
    uint64_t windowPackets = 0;       //!< packets the window's ACKs cover
    bool cwr = false;                 //!< cut once in this window: no other cut until highSeq is acked
    uint64_t highSeq = 0;
    uint64_t ccStartSeq = 0;          //!< stream offset where its congestion control last started afresh
};

/// Builds an RDMA network and exposes the port view the engine and the tag simulator use.
/// Port 2i is a[i]'s side of link i, 2i+1 is b's (as NetworkBuilder).
class RdmaNetwork : public PortNetwork
{
  public:
    RdmaNetwork();
    ~RdmaNetwork() override;

    void Build(uint32_t nNodes,
               const uint8_t* isHost,
               uint32_t nLinks,
               const uint32_t* a,
               const uint32_t* b,
               const uint64_t* rateBps,
               const int64_t* delayNs,
               const RdmaConfig& config);

    uint32_t GetNNodes() const override;
    uint32_t GetNPorts() const override;
    ns3::Ptr<ns3::Node> GetNode(uint32_t node) const override;
    ns3::Ptr<ns3::PointToPointNetDevice> GetPortDevice(uint32_t port) const override;
    void ReadQueueBytes(uint32_t* out) const override;
    void ReadPortTxPackets(uint64_t* out) const override;
    uint32_t TracePath(uint32_t src, uint32_t dst, uint16_t srcPort, uint16_t dstPort, uint32_t* out, uint32_t cap)
        const override;

    /// Base RTT (ns) and BDP (bytes) the QPs use: of the pair, or the largest with GLOBAL_T.
    int64_t GetBaseRttNs(uint32_t src, uint32_t dst) const;
    uint64_t GetBdpBytes(uint32_t src, uint32_t dst) const;
    uint32_t GetNQps() const;
    uint64_t GetSharedUsed(uint32_t node) const;   //!< a switch's shared-buffer bytes in use
    uint64_t GetPfcThreshold(uint32_t port) const; //!< the dynamic PFC threshold of a switch port
    uint64_t GetPfcFrames() const;  //!< pause + resume frames sent
    uint64_t GetDrops() const;      //!< packets dropped by switch admission
    uint64_t GetLost() const;       //!< packets lost to the link error model
    uint64_t GetEcnMarks() const;
    /// LINK_DOWN: at `atNs`, the link between nodes a and b goes down (see RdmaFabric::TakeDownLink).
    void ScheduleLinkDown(int64_t atNs, uint32_t a, uint32_t b);
    uint64_t GetLinksDown() const;
    uint64_t GetDownDrops() const; //!< packets lost to links going down (queued there, or no route left)
    /// Oldest min(cap, logged) PFC events (the reference's pfc.txt: time, node, node type 1 for
    /// a switch and 0 for a host, the receiving port's index on its node, 1 pause / 0 resume);
    /// returns their number.
    uint32_t ReadPfcLog(int64_t* timeNs, uint32_t* node, uint32_t* nodeType, uint32_t* ifIndex, uint32_t* type,
                        uint32_t cap) const;
    uint64_t GetPfcLogSize() const;

    /// Sample every switch port's queued bytes every `intervalNs` from `startNs` until `endNs`
    /// (the reference's QLEN_MON_START/END); samples of empty queues are not kept.
    void MonitorQueues(int64_t startNs, int64_t endNs, int64_t intervalNs);
    uint64_t GetQueueSampleCount() const;
    /// The oldest min(cap, count) samples (time, switch node, port's index on it, bytes); returns
    /// their number.
    uint32_t ReadQueueSamples(int64_t* timeNs, uint32_t* node, uint32_t* ifIndex, uint64_t* bytes,
                              uint32_t cap) const;

    RdmaFabric* GetFabric() const;

  private:
    std::unique_ptr<RdmaFabric> m_fabric;
};

/// The control plane's handle, with FlowManager's interface: one QP per "connection".
class RdmaFlowManager
{
  public:
    RdmaFlowManager(RdmaNetwork* network, uint32_t nFlows);

    uint32_t OpenConnection(uint32_t src, uint32_t dst);
    uint32_t GetConnectionPath(uint32_t conn, uint32_t* out, uint32_t cap) const;
    /// Start `flow` of `bytes` on QP `conn` now (sent behind the QP's earlier flows). With
    /// `kick` false an idle QP is not kicked into sending: the flow starts inside a frozen
    /// partition (an expected join of a replayed episode), and Resume kicks it at the thaw.
    void StartFlow(uint32_t flow, uint32_t conn, uint64_t bytes, bool kick = true);
    /// Kick QP `conn` into sending if it has unsent bytes (after a StartFlow without kick).
    void Resume(uint32_t conn);
    /// Remove up to `bytes` never-sent bytes of `flow`; returns bytes removed.
    uint64_t SkipFlow(uint32_t flow, uint32_t conn, uint64_t bytes);
    FlowTable& GetTable();
    RdmaQp* GetSender(uint32_t conn) const;

  private:
    RdmaNetwork* m_network;
    FlowTable m_table;
};

} // namespace wormhole

#endif
