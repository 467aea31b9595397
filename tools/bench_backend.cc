// The backend factory of `moe-ep bench` and the fallback device count: without the CUDA bench
// backend (bench_backend_cuda.cc) no GPU is usable by the tool, so cuda_device_count() is a weak
// definition returning 0 that the CUDA file's strong definition replaces.
#include "bench_backend.h"

#include "moe_ep/errors.h"

namespace moe_ep::cli {

__attribute__((weak)) int cuda_device_count() { return 0; }

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
