// Umbrella header of the C++ extensions, included by the Python loader (cppyy) for bindings.
#include "flow-ecmp-routing.h"
#include "fair-shares.h"
#include "flow-transport.h"
#include "network-builder.h"
#include "rate-probe.h"
#include "rdma.h"
#include "tag-simulator-impl.h"
