#include "tag-simulator-impl.h"

#include "network-builder.h"

#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"

#include <algorithm>
#include <iterator>

namespace wormhole
{
using namespace ns3;

NS_OBJECT_ENSURE_REGISTERED(TagSimulatorImpl);

namespace
{

/// "a runs after b" in the stock (ts, uid) order: the comparison of a min-heap.
template <class T>
bool
Later(const T& a, const T& b)
{
    return a.ts > b.ts || (a.ts == b.ts && a.uid > b.uid);
}

const char* const kErrorNames[] = {"tx_overlap",
                                   "tx_delay",
                                   "rx_mismatch",
                                   "schedule_now",
                                   "rx_before_tx",
                                   "second_schedule",
                                   "unconsumed",
                                   "late",
                                   "thaw_past",
                                   "bad_call"};
static_assert(std::size(kErrorNames) == TagSimulatorImpl::N_ERRORS);

} // namespace

TypeId
TagSimulatorImpl::GetTypeId()
{
    static TypeId tid = TypeId("wormhole::TagSimulatorImpl")
                            .SetParent<SimulatorImpl>()
                            .SetGroupName("Wormhole")
                            .AddConstructor<TagSimulatorImpl>();
    return tid;
}

TagSimulatorImpl::TagSimulatorImpl()
    : m_queues(1),
      m_context(Simulator::NO_CONTEXT),
      m_uid(EventId::UID::VALID)
{
}

TagSimulatorImpl::~TagSimulatorImpl() = default;

TagSimulatorImpl*
TagSimulatorImpl::Get()
{
    return PeekPointer(DynamicCast<TagSimulatorImpl>(Simulator::GetImplementation()));
}

// ---- Port tagging -------------------------------------------------------------------------

void
TagSimulatorImpl::AttachPorts(PortNetwork* net)
{
    NS_ABORT_MSG_IF(m_nNodes > 0 || !m_groups.empty(), "AttachPorts: once, before any Freeze");
    uint32_t nPorts = net->GetNPorts();
    m_nNodes = net->GetNNodes();
    // Node tags given so far were numbered without ports (node n -> tag n): make room for ports.
    m_queues.insert(m_queues.begin() + 1, nPorts, TagQueue());
    for (Head& h : m_heads)
    {
        h.slot += h.slot > 0 ? nPorts : 0;
    }
    m_slot += m_slot > 0 ? nPorts : 0;
    for (uint32_t& tag : m_logTag)
    {
        tag += tag != NO_TAG ? nPorts : 0;
    }
    EnsureSlot(nPorts + m_nNodes);

    m_ports.reserve(nPorts);
    for (uint32_t p = 0; p < nPorts; p++)
    {
        Ptr<PointToPointNetDevice> device = net->GetPortDevice(p);
        DataRateValue rate;
        device->GetAttribute("DataRate", rate);
        TimeValue gap;
        device->GetAttribute("InterframeGap", gap);
        TimeValue delay;
        device->GetChannel()->GetAttribute("Delay", delay);
        uint32_t rxNode = net->GetPortDevice(p ^ 1)->GetNode()->GetId();
        m_ports.push_back(Port{rxNode, rate.Get(), gap.Get(), delay.Get(), {}});
        device->TraceConnectWithoutContext(
            "PhyTxBegin",
            MakeCallback(&TagSimulatorImpl::OnPhyTxBegin, this).Bind(p));
    }
}

void
TagSimulatorImpl::OnPhyTxBegin(uint32_t port, Ptr<const Packet> packet)
{
    // TransmitStart continues with Schedule(txTime + gap, TransmitComplete), then the channel's
    // ScheduleWithContext(peer node, txTime + delay, Receive).
    if (m_expect != EXPECT_NOTHING)
    {
        m_errors[TX_OVERLAP]++;
    }
    // The device has just timed this frame itself: timing it again (an int64x64 division) made a
    // tagged event cost 8.1 % more instructions than a stock one, 0.7 % without it
    // (benchmarks/tagging_cost.py). A port sends frames of a few sizes: those of its last two are kept.
    Port& p = m_ports[port];
    uint32_t size = packet->GetSize();
    if (p.recent[0].size != size)
    {
        if (p.recent[1].size == size)
        {
            std::swap(p.recent[0], p.recent[1]);
        }
        else
        {
            Time txTime = p.rate.CalculateBytesTxTime(size);
            p.recent[1] = p.recent[0];
            p.recent[0] = FrameDelays{size,
                                      (txTime + p.interframeGap).GetTimeStep(),
                                      (txTime + p.delay).GetTimeStep()};
        }
    }
    m_expect = EXPECT_TX_COMPLETE;
    m_txPort = port;
    m_txDelay = p.recent[0].tx;
    m_rxDelay = p.recent[0].rx;
}

uint32_t
TagSimulatorImpl::GetNPorts() const
{
    return m_ports.size();
}

uint32_t
TagSimulatorImpl::GetNTags() const
{
    return m_ports.size() + m_nNodes;
}

// ---- Scheduling ---------------------------------------------------------------------------

EventId
TagSimulatorImpl::Schedule(const Time& delay, EventImpl* event)
{
    NS_ASSERT_MSG(!delay.IsStrictlyNegative(), "negative delay " << delay);
    uint32_t slot = m_slot;
    if (m_expect == EXPECT_TX_COMPLETE)
    {
        if (delay.GetTimeStep() != m_txDelay)
        {
            m_errors[TX_DELAY]++;
        }
        slot = m_txPort + 1;
        m_expect = EXPECT_RECEIVE;
    }
    else if (m_expect == EXPECT_RECEIVE)
    {
        m_errors[SECOND_SCHEDULE]++;
    }
    uint64_t ts = m_now + delay.GetTimeStep();
    return EventId(event, ts, m_context, Insert(ts, m_context, slot, event));
}

void
TagSimulatorImpl::ScheduleWithContext(uint32_t context, const Time& delay, EventImpl* event)
{
    NS_ASSERT_MSG(!delay.IsStrictlyNegative(), "negative delay " << delay);
    uint32_t slot;
    if (m_expect == EXPECT_RECEIVE)
    {
        if (context != m_ports[m_txPort].rxNode || delay.GetTimeStep() != m_rxDelay)
        {
            m_errors[RX_MISMATCH]++;
        }
        slot = (m_txPort ^ 1) + 1;
        m_expect = EXPECT_NOTHING;
    }
    else
    {
        if (m_expect == EXPECT_TX_COMPLETE)
        {
            m_errors[RX_BEFORE_TX]++;
        }
        slot = NodeSlot(context);
    }
    Insert(m_now + delay.GetTimeStep(), context, slot, event);
}

EventId
TagSimulatorImpl::ScheduleNow(EventImpl* event)
{
    if (m_expect != EXPECT_NOTHING)
    {
        m_errors[SCHEDULE_NOW]++;
    }
    return EventId(event, m_now, m_context, Insert(m_now, m_context, m_slot, event));
}

EventId
TagSimulatorImpl::ScheduleDestroy(EventImpl* event)
{
    EventId id(Ptr<EventImpl>(event, false), m_now, Simulator::NO_CONTEXT, EventId::UID::DESTROY);
    m_destroyEvents.push_back(id);
    m_uid++;
    return id;
}

EventId
TagSimulatorImpl::Stop(const Time& delay)
{
    return Simulator::Schedule(delay, static_cast<void (*)()>(&Simulator::Stop));
}

uint32_t
TagSimulatorImpl::NodeSlot(uint32_t context)
{
    if (context == Simulator::NO_CONTEXT)
    {
        return 0;
    }
    uint32_t slot = m_ports.size() + context + 1;
    EnsureSlot(slot);
    return slot;
}

void
TagSimulatorImpl::EnsureSlot(uint32_t slot)
{
    if (slot >= m_queues.size())
    {
        m_queues.resize(slot + 1);
    }
}

uint32_t
TagSimulatorImpl::Insert(uint64_t ts, uint32_t context, uint32_t slot, EventImpl* event)
{
    Entry e{ts, m_uid++, context, event};
    uint32_t group = m_queues[slot].group;
    if (group == NONE)
    {
        Push(slot, e);
        return e.uid;
    }
    // Scheduled into a frozen partition in the present: hold it at its absolute time and stop the
    // run (or the next one, if scheduled by the control plane) so that the group is thawed first.
    Group& g = m_groups[group];
    g.scheduledWhileFrozen.emplace_back(slot, e);
    m_held[e.uid] = Held{group, ts, true};
    m_intoFrozen++;
    if (!g.interrupted)
    {
        g.interrupted = true;
        m_interrupted.push_back(group);
    }
    if (m_running)
    {
        m_stop = true;
    }
    else
    {
        m_stopNextRun = true;
    }
    return e.uid;
}

// ---- Event queue: one heap per tag under a heap of the tags' earliest events ---------------

void
TagSimulatorImpl::Push(uint32_t slot, const Entry& e)
{
    TagQueue& q = m_queues[slot];
    q.heap.push_back(e);
    std::push_heap(q.heap.begin(), q.heap.end(), Later<Entry>);
    m_nPending++;
    if (q.pos == NONE)
    {
        HeadsInsert(slot);
    }
    else if (q.heap.front().uid == e.uid)
    {
        HeadsUpdate(q.pos);
    }
}

TagSimulatorImpl::Entry
TagSimulatorImpl::PopNext(uint32_t& slot)
{
    slot = m_heads.front().slot;
    TagQueue& q = m_queues[slot];
    std::pop_heap(q.heap.begin(), q.heap.end(), Later<Entry>);
    Entry e = q.heap.back();
    q.heap.pop_back();
    m_nPending--;
    if (q.heap.empty())
    {
        HeadsRemove(0);
    }
    else
    {
        HeadsUpdate(0);
    }
    return e;
}

void
TagSimulatorImpl::HeadsPlace(uint32_t pos, const Head& h)
{
    m_heads[pos] = h;
    m_queues[h.slot].pos = pos;
}

void
TagSimulatorImpl::HeadsInsert(uint32_t slot)
{
    const Entry& first = m_queues[slot].heap.front();
    m_heads.push_back(Head{first.ts, first.uid, slot});
    m_queues[slot].pos = m_heads.size() - 1;
    HeadsSiftUp(m_heads.size() - 1);
}

void
TagSimulatorImpl::HeadsRemove(uint32_t pos)
{
    m_queues[m_heads[pos].slot].pos = NONE;
    Head last = m_heads.back();
    m_heads.pop_back();
    if (pos < m_heads.size())
    {
        HeadsPlace(pos, last);
        HeadsUpdate(pos);
    }
}

void
TagSimulatorImpl::HeadsUpdate(uint32_t pos)
{
    uint32_t slot = m_heads[pos].slot;
    const Entry& first = m_queues[slot].heap.front();
    m_heads[pos].ts = first.ts;
    m_heads[pos].uid = first.uid;
    HeadsSiftUp(pos);
    HeadsSiftDown(m_queues[slot].pos);
}

void
TagSimulatorImpl::HeadsSiftUp(uint32_t pos)
{
    Head h = m_heads[pos];
    while (pos > 0)
    {
        uint32_t parent = (pos - 1) / 2;
        if (!Later(m_heads[parent], h))
        {
            break;
        }
        HeadsPlace(pos, m_heads[parent]);
        pos = parent;
    }
    HeadsPlace(pos, h);
}

void
TagSimulatorImpl::HeadsSiftDown(uint32_t pos)
{
    Head h = m_heads[pos];
    size_t n = m_heads.size();
    while (true)
    {
        size_t child = 2 * size_t(pos) + 1;
        if (child >= n)
        {
            break;
        }
        if (child + 1 < n && Later(m_heads[child], m_heads[child + 1]))
        {
            child++;
        }
        if (!Later(h, m_heads[child]))
        {
            break;
        }
        HeadsPlace(pos, m_heads[child]);
        pos = child;
    }
    HeadsPlace(pos, h);
}

// ---- Running ------------------------------------------------------------------------------

void
TagSimulatorImpl::Run()
{
    m_stop = m_stopNextRun;
    m_stopNextRun = false;
    m_running = true;
    while (!m_stop && !m_heads.empty())
    {
        ProcessOneEvent();
    }
    m_running = false;
    // Stock keeps the last event's context: control-plane calls would inherit it and its tag.
    m_context = Simulator::NO_CONTEXT;
    m_slot = 0;
}

void
TagSimulatorImpl::ProcessOneEvent()
{
    uint32_t slot;
    Entry e = PopNext(slot);
    if (!m_shifted.empty())
    {
        m_shifted.erase(e.uid);
    }
    if (!m_removed.empty() && m_removed.erase(e.uid))
    {
        e.impl->Unref();
        return;
    }
    NS_ASSERT(e.ts >= m_now);
    if (e.ts > m_maxTs || (e.ts == m_maxTs && e.uid > m_maxUid))
    {
        m_maxTs = e.ts;
        m_maxUid = e.uid;
    }
    m_now = e.ts;
    m_context = e.context;
    m_slot = slot;
    m_eventCount++;
    m_queues[slot].executed++;
    if (m_log)
    {
        m_logTs.push_back(e.ts);
        m_logContext.push_back(e.context);
        m_logTag.push_back(slot - 1);
    }
    e.impl->Invoke();
    e.impl->Unref();
    if (m_expect != EXPECT_NOTHING)
    {
        m_errors[UNCONSUMED]++;
        m_expect = EXPECT_NOTHING;
    }
}

void
TagSimulatorImpl::Stop()
{
    m_stop = true;
}

bool
TagSimulatorImpl::IsFinished() const
{
    return m_heads.empty() || m_stop;
}

void
TagSimulatorImpl::Destroy()
{
    while (!m_destroyEvents.empty())
    {
        Ptr<EventImpl> event = m_destroyEvents.front().PeekEventImpl();
        m_destroyEvents.pop_front();
        if (!event->IsCancelled())
        {
            event->Invoke();
        }
    }
}

void
TagSimulatorImpl::DoDispose()
{
    for (TagQueue& q : m_queues)
    {
        for (Entry& e : q.heap)
        {
            e.impl->Unref();
        }
    }
    for (Group& g : m_groups)
    {
        for (auto& [slot, e] : g.scheduledWhileFrozen)
        {
            e.impl->Unref();
        }
    }
    m_queues.clear();
    m_heads.clear();
    m_groups.clear();
    m_held.clear();
    m_shifted.clear();
    m_removed.clear();
    SimulatorImpl::DoDispose();
}

// ---- EventIds -----------------------------------------------------------------------------

void
TagSimulatorImpl::Remove(const EventId& id)
{
    if (id.GetUid() == EventId::UID::DESTROY)
    {
        auto it = std::find(m_destroyEvents.begin(), m_destroyEvents.end(), id);
        if (it != m_destroyEvents.end())
        {
            m_destroyEvents.erase(it);
        }
        return;
    }
    if (IsExpired(id))
    {
        return;
    }
    // The EventId does not name the tag's heap: the entry is dropped when it is dequeued.
    id.PeekEventImpl()->Cancel();
    m_removed.insert(id.GetUid());
}

void
TagSimulatorImpl::Cancel(const EventId& id)
{
    if (!IsExpired(id))
    {
        id.PeekEventImpl()->Cancel();
    }
}

bool
TagSimulatorImpl::IsExpired(const EventId& id) const
{
    EventImpl* event = id.PeekEventImpl();
    if (event == nullptr || event->IsCancelled())
    {
        return true;
    }
    uint32_t uid = id.GetUid();
    if (uid == EventId::UID::DESTROY)
    {
        return std::find(m_destroyEvents.begin(), m_destroyEvents.end(), id) ==
               m_destroyEvents.end();
    }
    if ((!m_held.empty() && m_held.count(uid)) || (!m_shifted.empty() && m_shifted.count(uid)))
    {
        return false;
    }
    // Every other queued event has a key above all executed keys. A thawed event may run with a
    // key below one executed before, so compare with the highest, not the current, key.
    uint64_t ts = id.GetTs();
    return ts < m_maxTs || (ts == m_maxTs && uid <= m_maxUid);
}

uint64_t
TagSimulatorImpl::CurrentTs(const EventId& id) const
{
    if (!m_shifted.empty())
    {
        auto it = m_shifted.find(id.GetUid());
        if (it != m_shifted.end())
        {
            return it->second;
        }
    }
    return id.GetTs();
}

Time
TagSimulatorImpl::GetDelayLeft(const EventId& id) const
{
    if (IsExpired(id))
    {
        return TimeStep(0);
    }
    if (!m_held.empty())
    {
        auto it = m_held.find(id.GetUid());
        if (it != m_held.end())
        {
            const Held& h = it->second;
            if (h.absolute)
            {
                return TimeStep(h.ts > m_now ? h.ts - m_now : 0);
            }
            // Partition-local time stands still while frozen.
            return TimeStep(h.ts - m_groups[h.group].freezeTs);
        }
    }
    return TimeStep(CurrentTs(id) - m_now);
}

// ---- Freeze and thaw ----------------------------------------------------------------------

uint32_t
TagSimulatorImpl::Freeze(const uint32_t* tags, uint32_t n)
{
    uint32_t group = m_groups.size();
    m_groups.push_back(Group{m_now, {}, {}});
    for (uint32_t i = 0; i < n; i++)
    {
        if (tags[i] == NO_TAG || (m_nNodes > 0 && tags[i] >= GetNTags()))
        {
            m_errors[BAD_CALL]++;
            continue;
        }
        uint32_t slot = tags[i] + 1;
        EnsureSlot(slot);
        TagQueue& q = m_queues[slot];
        if (q.group != NONE)
        {
            m_errors[BAD_CALL] += q.group != group; // listed twice in this call: harmless
            continue;
        }
        q.group = group;
        m_groups[group].slots.push_back(slot);
        if (q.pos != NONE)
        {
            HeadsRemove(q.pos);
        }
        m_nPending -= q.heap.size();
        m_held.reserve(m_held.size() + q.heap.size());
        for (const Entry& e : q.heap)
        {
            m_held[e.uid] = Held{group, e.ts, false};
            if (!m_shifted.empty())
            {
                m_shifted.erase(e.uid);
            }
        }
    }
    return group;
}

void
TagSimulatorImpl::Thaw(uint32_t group, int64_t shiftNs)
{
    if (group >= m_groups.size() || !m_groups[group].frozen)
    {
        m_errors[BAD_CALL]++;
        return;
    }
    Group& g = m_groups[group];
    int64_t shift = NanoSeconds(shiftNs).GetTimeStep();
    m_shifted.reserve(m_shifted.size() + GetNHeld(group));
    if (shift < int64_t(m_now - g.freezeTs))
    {
        m_errors[THAW_PAST]++;
    }
    for (uint32_t slot : g.slots)
    {
        TagQueue& q = m_queues[slot];
        bool clamped = false;
        for (Entry& e : q.heap) // a uniform shift keeps the heap order
        {
            m_held.erase(e.uid);
            int64_t ts = int64_t(e.ts) + shift;
            if (ts < int64_t(m_now))
            {
                ts = m_now;
                clamped = true;
            }
            e.ts = ts;
            m_shifted[e.uid] = e.ts;
        }
        if (clamped) // events clamped to now may now tie on ts: reorder by uid
        {
            std::make_heap(q.heap.begin(), q.heap.end(), Later<Entry>);
        }
        q.group = NONE;
    }
    for (auto& [slot, e] : g.scheduledWhileFrozen) // scheduled in the present: not shifted
    {
        m_held.erase(e.uid);
        if (e.ts < m_now)
        {
            m_errors[LATE] += !e.impl->IsCancelled(); // a cancelled event has no effect
            e.ts = m_now;
        }
        m_shifted[e.uid] = e.ts;
        std::vector<Entry>& heap = m_queues[slot].heap;
        heap.push_back(e);
        std::push_heap(heap.begin(), heap.end(), Later<Entry>);
    }
    for (uint32_t slot : g.slots)
    {
        m_nPending += m_queues[slot].heap.size();
        if (!m_queues[slot].heap.empty())
        {
            HeadsInsert(slot);
        }
    }
    if (g.interrupted) // the event that interrupted the run is released now
    {
        m_interrupted.erase(std::find(m_interrupted.begin(), m_interrupted.end(), group));
        g.interrupted = false;
    }
    m_stopNextRun &= !m_interrupted.empty();
    g.frozen = false;
    g.slots = {};
    g.scheduledWhileFrozen = {};
}

uint64_t
TagSimulatorImpl::GetNHeld(uint32_t group) const
{
    if (group >= m_groups.size() || !m_groups[group].frozen)
    {
        return 0;
    }
    const Group& g = m_groups[group];
    uint64_t n = g.scheduledWhileFrozen.size();
    for (uint32_t slot : g.slots)
    {
        n += m_queues[slot].heap.size();
    }
    return n;
}

uint64_t
TagSimulatorImpl::GetNPending() const
{
    return m_nPending;
}

uint32_t
TagSimulatorImpl::PopInterrupted(uint32_t* out, uint32_t cap)
{
    uint32_t n = std::min<size_t>(cap, m_interrupted.size());
    for (uint32_t i = 0; i < n; i++)
    {
        out[i] = m_interrupted[i];
        m_groups[out[i]].interrupted = false;
    }
    m_interrupted.erase(m_interrupted.begin(), m_interrupted.begin() + n);
    return n;
}

// ---- Queries ------------------------------------------------------------------------------

uint32_t
TagSimulatorImpl::GetCurrentTag() const
{
    return m_slot - 1;
}

uint64_t
TagSimulatorImpl::GetEventCountOfTag(uint32_t tag) const
{
    uint32_t slot = tag + 1;
    return slot < m_queues.size() ? m_queues[slot].executed : 0;
}

void
TagSimulatorImpl::ReadTagEventCounts(uint64_t* out, uint32_t n) const
{
    for (uint32_t tag = 0; tag < n; tag++)
    {
        out[tag] = GetEventCountOfTag(tag);
    }
}

uint64_t
TagSimulatorImpl::GetNIntoFrozen() const
{
    return m_intoFrozen;
}

uint64_t
TagSimulatorImpl::GetErrorCount(uint32_t kind) const
{
    return kind < N_ERRORS ? m_errors[kind] : 0;
}

uint64_t
TagSimulatorImpl::GetErrorTotal() const
{
    uint64_t total = 0;
    for (uint64_t n : m_errors)
    {
        total += n;
    }
    return total;
}

const char*
TagSimulatorImpl::GetErrorName(uint32_t kind)
{
    return kind < N_ERRORS ? kErrorNames[kind] : "";
}

void
TagSimulatorImpl::EnableLog(bool on)
{
    m_log = on;
}

uint64_t
TagSimulatorImpl::GetLogSize() const
{
    return m_logTs.size();
}

uint64_t
TagSimulatorImpl::ReadLog(int64_t* ts, uint32_t* ctx, uint32_t* tag, uint64_t max)
{
    uint64_t n = std::min<uint64_t>(max, m_logTs.size());
    for (uint64_t i = 0; i < n; i++)
    {
        ts[i] = TimeStep(m_logTs[i]).GetNanoSeconds();
        ctx[i] = m_logContext[i];
        tag[i] = m_logTag[i];
    }
    m_logTs.erase(m_logTs.begin(), m_logTs.begin() + n);
    m_logContext.erase(m_logContext.begin(), m_logContext.begin() + n);
    m_logTag.erase(m_logTag.begin(), m_logTag.begin() + n);
    return n;
}

// ---- The rest of SimulatorImpl ------------------------------------------------------------

Time
TagSimulatorImpl::Now() const
{
    return TimeStep(m_now);
}

Time
TagSimulatorImpl::GetMaximumSimulationTime() const
{
    return TimeStep(0x7fffffffffffffffLL);
}

void
TagSimulatorImpl::SetScheduler(ObjectFactory)
{
    // Events live in the per-tag heaps; the SchedulerType global value has no effect.
}

uint32_t
TagSimulatorImpl::GetSystemId() const
{
    return 0;
}

uint32_t
TagSimulatorImpl::GetContext() const
{
    return m_context;
}

uint64_t
TagSimulatorImpl::GetEventCount() const
{
    return m_eventCount;
}

} // namespace wormhole
