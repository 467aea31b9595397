// The NCCL transport and the checks every transport shares (transport.h).
#include "backends/cuda/transport.h"

#include <nccl.h>

#include <vector>

#include "backends/cuda/nccl_check.h"

namespace moe_ep::cuda_backend {

namespace {

class NcclTransport : public Transport {
 public:
  NcclTransport(ncclComm_t comm, int world_size) : comm_(comm), world_size_(world_size) {}
  const char* name() const override { return "nccl"; }

  void exchange(const std::vector<TransferPart>& sends, const std::vector<TransferPart>& recvs,
                cudaStream_t stream) override {
    check_transfer_parts(sends, world_size_, "sends");
    check_transfer_parts(recvs, world_size_, "receives");
    // One group, so that every send and receive of the step progress together (a send to a
    // peer that is itself sending to us cannot wait for our receive).
    MOE_EP_NCCL_CHECK(ncclGroupStart());
    try {
      for (const TransferPart& s : sends) {
        if (s.bytes == 0) continue;  // both ends know the count: the receiver skips it too
        MOE_EP_NCCL_CHECK(ncclSend(s.data, s.bytes, ncclUint8, s.peer, comm_, stream));
      }
      for (const TransferPart& r : recvs) {
        if (r.bytes == 0) continue;
        MOE_EP_NCCL_CHECK(ncclRecv(r.data, r.bytes, ncclUint8, r.peer, comm_, stream));
      }
    } catch (...) {
      ncclGroupEnd();  // close the group before raising; its own status adds nothing
      throw;
    }
    MOE_EP_NCCL_CHECK(ncclGroupEnd());
  }

 private:
  ncclComm_t comm_;
  int world_size_;
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(ncclComm_t comm, int world_size) {
  return std::make_unique<NcclTransport>(comm, world_size);
}

}  // namespace moe_ep::cuda_backend
