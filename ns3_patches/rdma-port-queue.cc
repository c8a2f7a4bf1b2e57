// The port queue every RDMA port sends from: it hands the device the next frame at the instant
// the wire frees up (a switch's from its classes, a host's built from its queue pairs).
#include "rdma-fabric.h"

namespace wormhole
{

NS_OBJECT_ENSURE_REGISTERED(RdmaPortQueue);

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

} // namespace wormhole
