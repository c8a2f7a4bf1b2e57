// A C interface to what the engine's run loop calls (and the run's ns-3 settings), for Python's
// ctypes (bridge/ns3/engine_api.py).
// cppyy JIT-compiles a call wrapper the first time each C++ method is called from Python, 2-7 ms
// each (ns3-wheel notes); the loop calls about forty, which was a third of a short accelerated
// run's loop (gpt-bench-dcqcn: 0.13 of 0.33 s). These functions are compiled with the rest of the
// patches, so a call costs nothing to set up. Objects are passed as the addresses cppyy created
// them at (or these functions return); each function only forwards to the method it is named for.
#include "fair-shares.h"
#include "flow-ecmp-routing.h"
#include "flow-transport.h"
#include "network-builder.h"
#include "rate-probe.h"
#include "rdma.h"
#include "tag-simulator-impl.h"

#include "ns3/boolean.h"
#include "ns3/config.h"
#include "ns3/global-value.h"
#include "ns3/nstime.h"
#include "ns3/rng-seed-manager.h"
#include "ns3/simulator.h"
#include "ns3/string.h"
#include "ns3/uinteger.h"

#include <algorithm>

using namespace wormhole;

extern "C"
{

    // -- before any node exists: the simulator, the seed, TCP's defaults ----------------------
    // (Set up here rather than through cppyy: a wrapper for each value type and call, 0.1 s.)

    void
    wh_use_tag_simulator()
    {
        ns3::GlobalValue::Bind("SimulatorImplementationType", ns3::StringValue("wormhole::TagSimulatorImpl"));
    }

    void
    wh_seed(uint32_t seed)
    {
        ns3::RngSeedManager::SetSeed(std::max<uint32_t>(1, seed));
        ns3::RngSeedManager::SetRun(1);
        ns3::RngSeedManager::ResetNextStreamIndex();
    }

    void
    wh_configure_tcp(const char* socketType,
                     uint32_t segmentSize,
                     uint32_t sendBuffer,
                     uint32_t recvBuffer,
                     uint32_t initialCwnd,
                     uint32_t delayedAckCount,
                     int64_t delayedAckTimeoutNs,
                     int64_t minRtoNs,
                     int timestamps,
                     uint64_t hashSeed)
    {
        using namespace ns3;
        FlowEcmpRouting::SetHashSeed(hashSeed);
        Config::SetDefault("ns3::TcpL4Protocol::SocketType", StringValue(socketType));
        Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(segmentSize));
        Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(sendBuffer));
        Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(recvBuffer));
        Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(initialCwnd));
        Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(delayedAckCount));
        // (ns-3's 200 ms delayed-ACK default against a 1 ms MinRto leaves flows at cwnd 1 MSS)
        Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(NanoSeconds(delayedAckTimeoutNs)));
        Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(NanoSeconds(minRtoNs)));
        Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MicroSeconds(1)));
        Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(timestamps != 0));
    }

    // -- the objects the network is built from (deleted by the caller: wh_*_delete) -----------
    // (cppyy compiles each one's constructor the first time, members and all: NetworkBuilder's
    // took 130 ms, RdmaConfig's 45 ms.) Each kind gets wh_<kind>_new(PARAMS) and wh_<kind>_delete.

#define WH_NEW_AND_DELETE(kind, Type, PARAMS, ARGS)                                                \
    Type* wh_##kind##_new PARAMS                                                                   \
    {                                                                                              \
        return new Type ARGS;                                                                      \
    }                                                                                              \
    void wh_##kind##_delete(Type* object)                                                          \
    {                                                                                              \
        delete object;                                                                             \
    }

    WH_NEW_AND_DELETE(queue_config, QueueConfig, (), ())
    WH_NEW_AND_DELETE(tcp_network, NetworkBuilder, (), ())
    WH_NEW_AND_DELETE(tcp_flow_manager,
                      FlowManager,
                      (NetworkBuilder * network, uint32_t nFlows),
                      (network, nFlows))
    WH_NEW_AND_DELETE(rdma_config, RdmaConfig, (), ())
    WH_NEW_AND_DELETE(rdma_network, RdmaNetwork, (), ())
    WH_NEW_AND_DELETE(rdma_flow_manager,
                      RdmaFlowManager,
                      (RdmaNetwork * network, uint32_t nFlows),
                      (network, nFlows))
#undef WH_NEW_AND_DELETE

    // -- the simulator ------------------------------------------------------------------------

    int64_t
    wh_run_until(int64_t ns)
    {
        return RunUntil(ns);
    }

    int64_t
    wh_now_ns()
    {
        return ns3::Simulator::Now().GetNanoSeconds();
    }

    uint64_t
    wh_event_count()
    {
        return ns3::Simulator::GetEventCount();
    }

    // -- a network's ports (builder: NetworkBuilder*, or RdmaNetwork* when rdma) -------------

    PortNetwork*
    wh_ports_of(void* builder, int rdma)
    {
        if (rdma)
        {
            return static_cast<PortNetwork*>(static_cast<RdmaNetwork*>(builder));
        }
        return static_cast<PortNetwork*>(static_cast<NetworkBuilder*>(builder));
    }

    void
    wh_ports_read_queue_bytes(const PortNetwork* ports, uint32_t* out)
    {
        ports->ReadQueueBytes(out);
    }

    // -- the flow table -----------------------------------------------------------------------

    uint32_t
    wh_table_n_flows(const FlowTable* table)
    {
        return table->GetNFlows();
    }

    const uint64_t*
    wh_table_delivered_array(const FlowTable* table)
    {
        return table->GetDeliveredArray();
    }

    const uint64_t*
    wh_table_skipped_array(const FlowTable* table)
    {
        return table->GetSkippedArray();
    }

    int64_t
    wh_table_start_ns(const FlowTable* table, uint32_t flow)
    {
        return table->GetStartNs(flow);
    }

    int64_t
    wh_table_end_ns(const FlowTable* table, uint32_t flow)
    {
        return table->GetEndNs(flow);
    }

    uint32_t
    wh_table_pop_completed(FlowTable* table, uint32_t* out, uint32_t cap)
    {
        return table->PopCompleted(out, cap);
    }

    // -- the flow managers and their senders: TCP's FlowManager and FlowSender, RDMA's
    // RdmaFlowManager and RdmaQp, behind the same entry points (wh_tcp_*, wh_rdma_*) ----------

#define WH_FLOW_MANAGER(kind, Manager)                                                             \
    FlowTable* wh_##kind##_table(Manager* manager)                                                 \
    {                                                                                              \
        return &manager->GetTable();                                                               \
    }                                                                                              \
    uint32_t wh_##kind##_open_connection(Manager* manager, uint32_t src, uint32_t dst)             \
    {                                                                                              \
        return manager->OpenConnection(src, dst);                                                  \
    }                                                                                              \
    uint32_t wh_##kind##_connection_path(const Manager* manager,                                   \
                                         uint32_t conn,                                            \
                                         uint32_t* out,                                            \
                                         uint32_t cap)                                             \
    {                                                                                              \
        return manager->GetConnectionPath(conn, out, cap);                                         \
    }                                                                                              \
    uint64_t wh_##kind##_skip_flow(Manager* manager, uint32_t flow, uint32_t conn, uint64_t bytes) \
    {                                                                                              \
        return manager->SkipFlow(flow, conn, bytes);                                               \
    }

#define WH_SENDER(kind, Sender)                                                                    \
    int wh_##kind##_sender_is_connected(const Sender* sender)                                      \
    {                                                                                              \
        return sender->IsConnected();                                                              \
    }                                                                                              \
    uint32_t wh_##kind##_sender_get_congestion_state(const Sender* sender,                         \
                                                     double* out,                                  \
                                                     uint32_t cap)                                 \
    {                                                                                              \
        return sender->GetCongestionState(out, cap);                                               \
    }                                                                                              \
    /* TCP: cwnd, ssthresh, DCTCP's alpha; RDMA: rate, target rate, DCQCN's alpha */               \
    void wh_##kind##_sender_set_congestion_state(Sender* sender, double a, double b, double c)     \
    {                                                                                              \
        sender->SetCongestionState(a, b, c);                                                       \
    }                                                                                              \
    uint64_t wh_##kind##_sender_untransmitted_of(const Sender* sender, uint32_t flow)              \
    {                                                                                              \
        return sender->GetUntransmittedOf(flow);                                                   \
    }

    WH_FLOW_MANAGER(tcp, FlowManager)
    WH_SENDER(tcp, FlowSender)
    WH_FLOW_MANAGER(rdma, RdmaFlowManager)
    WH_SENDER(rdma, RdmaQp)
#undef WH_FLOW_MANAGER
#undef WH_SENDER

    void
    wh_tcp_start_flow(FlowManager* manager, uint32_t flow, uint32_t conn, uint64_t bytes, int /* kick */)
    {
        manager->StartFlow(flow, conn, bytes); // (TCP holds no flow back: episodes are RDMA's)
    }

    FlowSender*
    wh_tcp_sender(const FlowManager* manager, uint32_t conn)
    {
        return ns3::PeekPointer(manager->GetSender(conn)); // (its node keeps it)
    }

    void
    wh_rdma_start_flow(RdmaFlowManager* manager, uint32_t flow, uint32_t conn, uint64_t bytes, int kick)
    {
        manager->StartFlow(flow, conn, bytes, kick != 0);
    }

    void
    wh_rdma_resume(RdmaFlowManager* manager, uint32_t conn)
    {
        manager->Resume(conn);
    }

    RdmaQp*
    wh_rdma_sender(const RdmaFlowManager* manager, uint32_t conn)
    {
        return manager->GetSender(conn);
    }

    void
    wh_rdma_sender_shift_times(RdmaQp* qp, int64_t shiftNs)
    {
        qp->ShiftTimes(shiftNs);
    }

    double
    wh_rdma_sender_rate_bps(const RdmaQp* qp)
    {
        return qp->GetRateBps();
    }

    int64_t
    wh_rdma_sender_rate_step_ns(const RdmaQp* qp, int64_t quietNs)
    {
        return qp->GetRateStepNs(quietNs);
    }

    void
    wh_rdma_sender_keep_rate_step(RdmaQp* qp, int64_t shiftNs)
    {
        qp->KeepRateStep(shiftNs);
    }

    uint64_t
    wh_rdma_sender_retransmitted_bytes(const RdmaQp* qp)
    {
        return qp->GetRetransmittedBytes();
    }

    uint64_t
    wh_rdma_sender_timeouts(const RdmaQp* qp)
    {
        return qp->GetTimeouts();
    }

    int
    wh_rdma_sender_window_bound(const RdmaQp* qp)
    {
        return qp->IsWindowBound();
    }

    uint64_t
    wh_rdma_sender_window(const RdmaQp* qp)
    {
        return qp->GetWindow();
    }

    // -- the partition-tag simulator ----------------------------------------------------------

    TagSimulatorImpl*
    wh_sim_get()
    {
        return TagSimulatorImpl::Get();
    }

    void
    wh_sim_attach_ports(TagSimulatorImpl* sim, PortNetwork* ports)
    {
        sim->AttachPorts(ports);
    }

    uint32_t
    wh_sim_freeze(TagSimulatorImpl* sim, const uint32_t* tags, uint32_t n)
    {
        return sim->Freeze(tags, n);
    }

    void
    wh_sim_thaw(TagSimulatorImpl* sim, uint32_t group, int64_t shiftNs)
    {
        sim->Thaw(group, shiftNs);
    }

    uint32_t
    wh_sim_pop_interrupted(TagSimulatorImpl* sim, uint32_t* out, uint32_t cap)
    {
        return sim->PopInterrupted(out, cap);
    }

    uint64_t
    wh_sim_error_total(const TagSimulatorImpl* sim)
    {
        return sim->GetErrorTotal();
    }

    uint64_t
    wh_sim_event_count(const TagSimulatorImpl* sim)
    {
        return sim->GetEventCount();
    }

    void
    wh_sim_enable_log(TagSimulatorImpl* sim, int on)
    {
        sim->EnableLog(on != 0);
    }

    uint64_t
    wh_sim_read_log(TagSimulatorImpl* sim, int64_t* ts, uint32_t* ctx, uint32_t* tag, uint64_t max)
    {
        return sim->ReadLog(ts, ctx, tag, max);
    }

    // -- the rate probe (owned by the caller: wh_probe_delete) --------------------------------

    RateProbe*
    wh_probe_new(FlowTable* table, PortNetwork* ports, uint32_t capacity)
    {
        return new RateProbe(table, ports, capacity);
    }

    void
    wh_probe_delete(RateProbe* probe)
    {
        delete probe;
    }

    void
    wh_probe_start(RateProbe* probe, int64_t tauNs)
    {
        probe->Start(tauNs);
    }

    void
    wh_probe_stop(RateProbe* probe)
    {
        probe->Stop();
    }

    uint32_t
    wh_probe_read(RateProbe* probe,
                  int64_t* times,
                  uint64_t* flowBytes,
                  int64_t* flowTimes,
                  uint32_t* portBytes,
                  uint32_t maxSamples)
    {
        return probe->Read(times, flowBytes, flowTimes, portBytes, maxSamples);
    }

    // -- max-min fair shares (owned by the caller: wh_fair_shares_delete) ---------------------

    FairShares*
    wh_fair_shares_new(const int64_t* dataFlows,
                       const int64_t* dataPorts,
                       uint32_t nData,
                       const int64_t* ackFlows,
                       const int64_t* ackPorts,
                       uint32_t nAcks,
                       const double* caps,
                       uint32_t nFlows,
                       const double* frameNs,
                       const double* ackFrameNs,
                       uint32_t nPorts,
                       double payload,
                       double ackedPerAck)
    {
        return new FairShares(dataFlows,
                              dataPorts,
                              nData,
                              ackFlows,
                              ackPorts,
                              nAcks,
                              caps,
                              nFlows,
                              frameNs,
                              ackFrameNs,
                              nPorts,
                              payload,
                              ackedPerAck);
    }

    void
    wh_fair_shares_delete(FairShares* shares)
    {
        delete shares;
    }

    void
    wh_fair_shares_shares(const FairShares* shares, const double* rates, int64_t without, double* out)
    {
        shares->Shares(rates, without, out);
    }

} // extern "C"
