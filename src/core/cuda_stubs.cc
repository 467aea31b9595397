// moe_ep/cuda.h for a library built without the CUDA backend: every entry point reports that
// the backend is missing instead of failing to link.
#include "core/check.h"
#include "moe_ep/cuda.h"

#ifndef MOE_EP_WITH_CUDA

namespace moe_ep {

bool cuda_backend_built() { return false; }
int cuda_device_count() { return 0; }

std::shared_ptr<Communicator> make_nccl_communicator(ncclComm_t, int) {
  throw InvalidArgument("backend=cuda: this moe-ep was built without the CUDA backend");
}

std::string nccl_unique_id() {
  throw InvalidArgument("backend=cuda: this moe-ep was built without the CUDA backend");
}

std::shared_ptr<Communicator> make_nccl_communicator(const std::string&, int, int, int) {
  throw InvalidArgument("backend=cuda: this moe-ep was built without the CUDA backend");
}

std::vector<std::shared_ptr<Communicator>> make_local_nccl_communicators(const std::vector<int>&) {
  throw InvalidArgument("backend=cuda: this moe-ep was built without the CUDA backend");
}

std::vector<std::shared_ptr<Communicator>> make_single_gpu_world(int, int, double, int) {
  throw InvalidArgument("backend=cuda: this moe-ep was built without the CUDA backend");
}

}  // namespace moe_ep

#endif  // MOE_EP_WITH_CUDA
