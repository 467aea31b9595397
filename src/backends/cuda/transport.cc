// The NCCL transport and the checks every transport shares (transport.h).
#include "backends/cuda/transport.h"

#include <nccl.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/nccl_check.h"
#include "backends/cuda/resources.h"

namespace moe_ep::cuda_backend {

namespace {

// The parts of one exchange as one grouped ncclSend / ncclRecv (zero-byte parts skipped: both
// ends know the count). One group, so that every send and receive progress together (a send to
// a peer that is itself sending to us cannot wait for our receive). Graph capture records it.
void group_send_recv(ncclComm_t comm, const std::vector<TransferPart>& sends,
                     const std::vector<TransferPart>& recvs, cudaStream_t stream) {
  MOE_EP_NCCL_CHECK(ncclGroupStart());
  try {
    for (const TransferPart& s : sends) {
      if (s.bytes == 0) continue;
      MOE_EP_NCCL_CHECK(ncclSend(s.data, s.bytes, ncclUint8, s.peer, comm, stream));
    }
    for (const TransferPart& r : recvs) {
      if (r.bytes == 0) continue;
      MOE_EP_NCCL_CHECK(ncclRecv(r.data, r.bytes, ncclUint8, r.peer, comm, stream));
    }
  } catch (...) {
    ncclGroupEnd();  // close the group before raising; its own status adds nothing
    throw;
  }
  MOE_EP_NCCL_CHECK(ncclGroupEnd());
}

class NcclPersistent : public PersistentExchange {
 public:
  NcclPersistent(ncclComm_t comm, std::vector<TransferPart> sends, std::vector<TransferPart> recvs)
      : comm_(comm), sends_(std::move(sends)), recvs_(std::move(recvs)) {}
  void launch(cudaStream_t stream, const ErrorSink&, uint64_t) override {
    group_send_recv(comm_, sends_, recvs_, stream);
  }

 private:
  ncclComm_t comm_;
  std::vector<TransferPart> sends_, recvs_;
};

class NcclTransport : public Transport {
 public:
  NcclTransport(ncclComm_t comm, int world_size) : comm_(comm), world_size_(world_size) {}
  const char* name() const override { return "nccl"; }

  void exchange(const std::vector<TransferPart>& sends, const std::vector<TransferPart>& recvs,
                cudaStream_t stream) override {
    check_transfer_parts(sends, world_size_, "sends");
    check_transfer_parts(recvs, world_size_, "receives");
    group_send_recv(comm_, sends, recvs, stream);
  }

  std::unique_ptr<PersistentExchange> persistent(const std::vector<TransferPart>& sends,
                                                 const std::vector<TransferPart>& recvs,
                                                 cudaStream_t stream) override {
    check_transfer_parts(sends, world_size_, "sends");
    check_transfer_parts(recvs, world_size_, "receives");
    // Every rank's declared ends go to every other rank in parts of one fixed size (so that this
    // check cannot itself mismatch): [W] bytes it sends to each rank, then [W] it receives from
    // each (-1: no part). Every rank then checks every pair and all raise alike.
    const int w = world_size_;
    int rank = -1, device = 0;
    MOE_EP_NCCL_CHECK(ncclCommUserRank(comm_, &rank));
    MOE_EP_CUDA_CHECK(cudaGetDevice(&device));
    std::vector<int64_t> mine(static_cast<size_t>(2 * w), -1);
    for (const TransferPart& s : sends) mine[s.peer] = static_cast<int64_t>(s.bytes);
    for (const TransferPart& r : recvs) mine[w + r.peer] = static_cast<int64_t>(r.bytes);
    const size_t row = sizeof(int64_t) * 2 * w;
    DeviceArray<int64_t> out(device, 2 * w), in(device, static_cast<size_t>(2 * w) * w);
    MOE_EP_CUDA_CHECK(cudaMemcpyAsync(out.get(), mine.data(), row, cudaMemcpyHostToDevice, stream));
    std::vector<TransferPart> tell, hear;
    for (int q = 0; q < w; ++q) {
      if (q == rank) continue;
      tell.push_back({q, out.get(), row});
      hear.push_back({q, in.get() + static_cast<size_t>(2 * w) * q, row});
    }
    group_send_recv(comm_, tell, hear, stream);
    std::vector<int64_t> table(static_cast<size_t>(2 * w) * w);  // [src][2W]
    MOE_EP_CUDA_CHECK(
        cudaMemcpyAsync(table.data(), in.get(), row * w, cudaMemcpyDeviceToHost, stream));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::copy(mine.begin(), mine.end(), table.begin() + static_cast<std::ptrdiff_t>(2 * w) * rank);
    std::vector<TransferEnds> ends(static_cast<size_t>(w) * w);
    for (int src = 0; src < w; ++src) {
      for (int dst = 0; dst < w; ++dst) {
        ends[static_cast<size_t>(src) * w + dst] = {
            table[static_cast<size_t>(2 * w) * src + dst],
            table[static_cast<size_t>(2 * w) * dst + w + src]};
      }
    }
    const std::string mismatch = transfer_mismatch(ends, w);
    if (!mismatch.empty()) throw Internal("nccl transport (persistent exchange): " + mismatch);
    return std::make_unique<NcclPersistent>(comm_, sends, recvs);
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
