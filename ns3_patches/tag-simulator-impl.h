// A SimulatorImpl that tags every event with the partition it belongs to, and can freeze a
// partition (hold its pending events aside) and thaw it later, shifted in time.
//
// Why: the engine fast-forwards a steady part of the network by stopping its clock while the rest
// keeps running. The ns-3 context must stay the node id (Node::ReceiveFromDevice asserts it), so
// the partition travels as a separate 32-bit TAG beside it:
//   port p (PortNetwork port index) -> tag p, node n -> tag nPorts + n, no tag -> NO_TAG.
// Schedule/ScheduleNow inherit the running event's tag; ScheduleWithContext(node) gets the node
// tag; a PhyTxBegin on port p makes the device's next Schedule (TransmitComplete) carry tag p and
// the channel's next ScheduleWithContext (Receive) carry tag p^1, the receiving port. That order is
// stock PointToPointNetDevice::TransmitStart in ns-3.44 and is checked at run time (error counts).
//
// Events live in one min-heap per tag under a heap of the tags' earliest events, so events run in
// the stock (ts, uid) order and freezing a partition detaches its heaps: Freeze and Thaw cost is
// proportional to the partition's pending events, not to all pending events. EventIds stay valid
// for held and shifted events (looked up by uid); Remove() cancels at once and releases the event
// when it is dequeued. Single-threaded: no ScheduleWithContext from other threads. The
// SchedulerType global value is ignored.
#ifndef WORMHOLE_TAG_SIMULATOR_IMPL_H
#define WORMHOLE_TAG_SIMULATOR_IMPL_H

// Headers stay narrow: cppyy parses them at every import.
#include "ns3/data-rate.h"
#include "ns3/packet.h"
#include "ns3/simulator-impl.h"

#include <list>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace wormhole
{

class PortNetwork;

class TagSimulatorImpl : public ns3::SimulatorImpl
{
  public:
    static constexpr uint32_t NO_TAG = 0xFFFFFFFF;

    /// Run-time check failures and misuse, counted per kind (GetErrorCount).
    enum Error : uint32_t
    {
        TX_OVERLAP = 0,  //!< PhyTxBegin while the previous transmission's events were pending
        TX_DELAY,        //!< the Schedule after PhyTxBegin had not the TransmitComplete delay
        RX_MISMATCH,     //!< the ScheduleWithContext after it had not the Receive node/delay
        SCHEDULE_NOW,    //!< ScheduleNow between PhyTxBegin and the Receive
        RX_BEFORE_TX,    //!< ScheduleWithContext before the TransmitComplete Schedule
        SECOND_SCHEDULE, //!< a second Schedule before the Receive
        UNCONSUMED,      //!< an event ended with the transmission's events still expected
        LATE,            //!< an event held into a frozen tag was thawed after its time (ran late)
        THAW_PAST,       //!< Thaw shift shorter than the time frozen (events clamped to now)
        BAD_CALL,        //!< Freeze of NO_TAG or of a frozen tag, Thaw of a group not frozen
        N_ERRORS
    };

    static ns3::TypeId GetTypeId();
    TagSimulatorImpl();
    ~TagSimulatorImpl() override;

    /// The active implementation, or nullptr if another SimulatorImpl is in use.
    static TagSimulatorImpl* Get();

    /// Tag the transmissions of every port of `net` (call once, after Build, before Freeze).
    /// Until then there are no port tags and node n has tag n; pending events are renumbered.
    void AttachPorts(PortNetwork* net);
    uint32_t GetNPorts() const;
    /// nPorts + nNodes of the attached network: tags are 0 .. GetNTags()-1.
    uint32_t GetNTags() const;

    /// Hold the pending events of `tags` (cancelled ones too) aside; returns the group id.
    uint32_t Freeze(const uint32_t* tags, uint32_t n);
    /// Put the group's events back at ts + shiftNs (shiftNs >= time frozen); events scheduled
    /// into the group while frozen keep their absolute time (now if it passed: LATE error).
    void Thaw(uint32_t group, int64_t shiftNs);
    /// Events a frozen group holds (0 once thawed).
    uint64_t GetNHeld(uint32_t group) const;
    /// Events in the runnable queue (not held).
    uint64_t GetNPending() const;
    /// Groups that received an event while frozen, since the last call (at most cap into out).
    /// Each such event stops the run in progress, or the next Run() if it came from the control
    /// plane; a group thawed before it is read is dropped from the list.
    uint32_t PopInterrupted(uint32_t* out, uint32_t cap);

    uint32_t GetCurrentTag() const;
    /// Executed events of one tag (NO_TAG included).
    uint64_t GetEventCountOfTag(uint32_t tag) const;
    /// Executed events of tags 0..n-1 into out.
    void ReadTagEventCounts(uint64_t* out, uint32_t n) const;
    /// Events scheduled into a frozen tag (held, group interrupted): not an error by itself.
    uint64_t GetNIntoFrozen() const;

    uint64_t GetErrorCount(uint32_t kind) const;
    uint64_t GetErrorTotal() const;
    static const char* GetErrorName(uint32_t kind);

    /// Record (ts ns, context, tag) of every executed event.
    void EnableLog(bool on);
    uint64_t GetLogSize() const;
    /// Move the oldest min(max, GetLogSize()) records into the arrays; returns their number.
    uint64_t ReadLog(int64_t* ts, uint32_t* ctx, uint32_t* tag, uint64_t max);

    // SimulatorImpl
    void Destroy() override;
    bool IsFinished() const override;
    void Stop() override;
    ns3::EventId Stop(const ns3::Time& delay) override;
    ns3::EventId Schedule(const ns3::Time& delay, ns3::EventImpl* event) override;
    void ScheduleWithContext(uint32_t context, const ns3::Time& delay, ns3::EventImpl* event) override;
    ns3::EventId ScheduleNow(ns3::EventImpl* event) override;
    ns3::EventId ScheduleDestroy(ns3::EventImpl* event) override;
    void Remove(const ns3::EventId& id) override;
    void Cancel(const ns3::EventId& id) override;
    bool IsExpired(const ns3::EventId& id) const override;
    void Run() override;
    ns3::Time Now() const override;
    ns3::Time GetDelayLeft(const ns3::EventId& id) const override;
    ns3::Time GetMaximumSimulationTime() const override;
    void SetScheduler(ns3::ObjectFactory schedulerFactory) override;
    uint32_t GetSystemId() const override;
    uint32_t GetContext() const override;
    uint64_t GetEventCount() const override;

  private:
    static constexpr uint32_t NONE = 0xFFFFFFFF;

    /// A queued event; ts is absolute (time steps).
    struct Entry
    {
        uint64_t ts;
        uint32_t uid;
        uint32_t context;
        ns3::EventImpl* impl;
    };

    /// The earliest event of a tag, in the heap of tags.
    struct Head
    {
        uint64_t ts;
        uint32_t uid;
        uint32_t slot;
    };

    /// The events of one tag. Slot = tag + 1 (slot 0 is NO_TAG).
    struct TagQueue
    {
        std::vector<Entry> heap; //!< min-heap on (ts, uid)
        uint32_t pos = NONE;     //!< index in m_heads, NONE if empty or frozen
        uint32_t group = NONE;   //!< frozen group, or NONE
        uint64_t executed = 0;
    };

    struct Group
    {
        uint64_t freezeTs;
        std::vector<uint32_t> slots;
        std::vector<std::pair<uint32_t, Entry>> scheduledWhileFrozen; //!< (slot, absolute entry)
        bool frozen = true;
        bool interrupted = false;
    };

    /// Where a held event is: its group, and its ts when held (absolute: scheduled while frozen).
    struct Held
    {
        uint32_t group;
        uint64_t ts;
        bool absolute;
    };

    /// A frame's TransmitComplete and Receive delays by its size (timesteps).
    struct FrameDelays
    {
        uint32_t size = 0xFFFFFFFF;
        int64_t tx = 0;
        int64_t rx = 0;
    };

    /// A port's transmission parameters, to check the events its PhyTxBegin announces.
    struct Port
    {
        uint32_t rxNode;
        ns3::DataRate rate;
        ns3::Time interframeGap;
        ns3::Time delay;
        FrameDelays recent[2]; //!< the two sizes sent last (data frames and ACKs), newest first
    };

    void DoDispose() override;
    void ProcessOneEvent();
    void OnPhyTxBegin(uint32_t port, ns3::Ptr<const ns3::Packet> packet);
    /// Queue an event of `slot`, or hold it if the slot is frozen; returns its uid.
    uint32_t Insert(uint64_t ts, uint32_t context, uint32_t slot, ns3::EventImpl* event);
    void Push(uint32_t slot, const Entry& e);
    Entry PopNext(uint32_t& slot);
    uint32_t NodeSlot(uint32_t context);
    void EnsureSlot(uint32_t slot);
    /// The ts the event will run at (shifted events), else the one its EventId holds.
    uint64_t CurrentTs(const ns3::EventId& id) const;

    // Heap of tags keyed by their earliest event.
    void HeadsInsert(uint32_t slot);
    void HeadsRemove(uint32_t pos);
    void HeadsUpdate(uint32_t pos);
    void HeadsSiftUp(uint32_t pos);
    void HeadsSiftDown(uint32_t pos);
    void HeadsPlace(uint32_t pos, const Head& h);

    std::vector<TagQueue> m_queues;
    std::vector<Head> m_heads;
    uint64_t m_nPending = 0;
    std::list<ns3::EventId> m_destroyEvents;
    bool m_stop = false;
    bool m_running = false;
    bool m_stopNextRun = false; //!< an interrupt outside Run(): the next Run() returns at once
    uint64_t m_now = 0;
    uint32_t m_context;
    uint32_t m_slot = 0;
    uint32_t m_uid;
    uint64_t m_eventCount = 0;
    uint64_t m_maxTs = 0; //!< (m_maxTs, m_maxUid): highest key executed, for IsExpired
    uint32_t m_maxUid = 0;

    // Partition freezing.
    std::vector<Group> m_groups;
    std::unordered_map<uint32_t, Held> m_held;        //!< uid -> held event
    std::unordered_map<uint32_t, uint64_t> m_shifted; //!< uid -> ts, thawed events still queued
    std::unordered_set<uint32_t> m_removed;           //!< uids removed, dropped when dequeued
    std::vector<uint32_t> m_interrupted;
    uint64_t m_intoFrozen = 0;

    // Port tagging: the transmission whose two events are expected next.
    std::vector<Port> m_ports;
    uint32_t m_nNodes = 0;
    enum Expect : uint8_t
    {
        EXPECT_NOTHING,
        EXPECT_TX_COMPLETE,
        EXPECT_RECEIVE
    };
    Expect m_expect = EXPECT_NOTHING;
    uint32_t m_txPort = 0;
    int64_t m_txDelay = 0; //!< expected TransmitComplete delay (time steps)
    int64_t m_rxDelay = 0; //!< expected Receive delay (time steps)
    uint64_t m_errors[N_ERRORS] = {};

    bool m_log = false;
    std::vector<int64_t> m_logTs;
    std::vector<uint32_t> m_logContext;
    std::vector<uint32_t> m_logTag;
};

} // namespace wormhole

#endif
