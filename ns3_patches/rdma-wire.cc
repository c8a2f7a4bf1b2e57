// The wire format: serialization of RdmaHeader, the RoCE-like header of every RDMA frame.
#include "rdma-fabric.h"

namespace wormhole
{

TypeId
RdmaHeader::GetTypeId()
{
    static TypeId tid = TypeId("wormhole::RdmaHeader").SetParent<Header>().AddConstructor<RdmaHeader>();
    return tid;
}

void
RdmaHeader::Serialize(Buffer::Iterator it) const
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

uint32_t
RdmaHeader::Deserialize(Buffer::Iterator it)
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

void
RdmaHeader::Print(std::ostream& os) const
{
    os << "rdma type=" << int(type) << " flags=" << int(flags) << " cls=" << int(cls) << " " << sip << ":"
       << sport << "->" << dip << ":" << dport << " qpn=" << qpn << " seq=" << seq << " len=" << len;
}

} // namespace wormhole
