// The backend factory of `moe-ep bench` and the fallback device count: without the CUDA bench
// backend (bench_backend_cuda.cc) no GPU is usable by the tool, so cuda_device_count() is a weak
// definition returning 0 that the CUDA file's strong definition replaces. Also the defaults of the
// NCCL baseline methods for backends without it.
#include "bench_backend.h"

#include "moe_ep/errors.h"

namespace moe_ep::cli {

__attribute__((weak)) int cuda_device_count() { return 0; }

std::vector<std::shared_ptr<Communicator>> BenchBackend::process_communicators(
    int rank, int ranks, int device, const std::string& unique_id) {
  (void)device;
  (void)unique_id;
  if (rank != 0 || ranks != 1) {
    throw InvalidArgument(std::string("the ") + to_string(kind()) +
                          " backend runs every rank in one process: under mpirun only -np 1");
  }
  return communicators(1);
}

void BenchBackend::enable_nccl_baseline() {
  throw Internal(std::string("bench: the ") + to_string(kind()) + " backend has no NCCL baseline");
}
void BenchBackend::nccl_reserve(int, int64_t, int64_t) {
  throw Internal("bench: nccl_reserve on a backend without the NCCL baseline");
}
double BenchBackend::nccl_alltoallv_us(int, const std::vector<int64_t>&,
                                       const std::vector<int64_t>&) {
  throw Internal("bench: nccl_alltoallv_us on a backend without the NCCL baseline");
}

std::unique_ptr<BenchBackend> make_bench_backend(Backend kind) {
  switch (kind) {
    case Backend::kCpu: return make_cpu_bench_backend();
    case Backend::kCuda:
#if MOE_EP_BENCH_HAS_CUDA
      return make_cuda_bench_backend();
#else
      throw InvalidArgument(
          "--backend=cuda: this moe-ep was built without CUDA; allowed: auto|cpu");
#endif
  }
  throw Internal("make_bench_backend: backend value " + std::to_string(static_cast<int>(kind)) +
                 " is not cpu or cuda");
}

}  // namespace moe_ep::cli
