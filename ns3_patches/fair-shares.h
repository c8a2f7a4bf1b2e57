// Max-min fair payload rates of queue pairs whose ACK frames take time on the ports they cross
// (bridge/engine/fairshare.py documents the model). The engine asks it once or twice per flow end
// in a frozen partition, tens of flows each: in Python the filling was most of the control plane.
#ifndef WORMHOLE_FAIR_SHARES_H
#define WORMHOLE_FAIR_SHARES_H

#include <cstdint>
#include <vector>

namespace wormhole
{

class FairShares
{
  public:
    /// Flow dataFlows[i] sends data through port dataPorts[i], its ACKs cross ackPorts[i] for
    /// ackFlows[i]; caps[f] is the most flow f can send (payload bytes per ns). Per port,
    /// frameNs[p] is the ns a data frame of `payload` bytes takes and ackFrameNs[p] an ACK frame's,
    /// which acknowledges `ackedPerAck` payload bytes.
    FairShares(const int64_t* dataFlows, const int64_t* dataPorts, uint32_t nData,
               const int64_t* ackFlows, const int64_t* ackPorts, uint32_t nAcks, const double* caps,
               uint32_t nFlows, const double* frameNs, const double* ackFrameNs, uint32_t nPorts,
               double payload, double ackedPerAck);

    /// Shares from `rates` (the ACK load at them, then at the shares: three rounds) into `out`;
    /// flow `without` (-1: none) sends nothing, neither data nor ACKs.
    void Shares(const double* rates, int64_t without, double* out) const;

    /// Max-min fair rates by progressive filling over the data edges, at per-port `capacity`, of
    /// the flows `active` (others get 0), into `rates`.
    void Fill(const double* capacity, const std::vector<char>& active, double* rates) const;

  private:
    std::vector<int64_t> m_dataFlows, m_dataPorts, m_ackFlows, m_ackPorts;
    std::vector<double> m_caps, m_frameNs, m_edgeAckNs;
    double m_payload, m_ackedPerAck;
};

} // namespace wormhole

#endif
