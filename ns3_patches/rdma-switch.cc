// RDMA switches: receive and forward by ECMP, the shared-buffer MMU with PFC pause/resume, ECN
// marking and telemetry stamping at dequeue, and links going down.
#include "rdma-fabric.h"

namespace wormhole
{

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
            if (cc->wire.telemetry)
            {
                cc->OnEgress(out, p, q.bytes);
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

} // namespace wormhole
