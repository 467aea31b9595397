// Loads every kernel of the library once per device, before any of them can be waiting for a
// peer (launch.h, preload_kernels). Called where a communicator is made and again at op
// creation, always before the first kernel that waits.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/launch.h"
#include "core/log.h"

namespace moe_ep::cuda_backend {
namespace {
std::atomic<size_t> largest_local_bytes{0};
std::mutex overruns_mutex;
std::vector<std::string>& overruns() {
  static std::vector<std::string> list;
  return list;
}
}  // namespace

void note_budget_overrun(const std::string& what) {
  const std::lock_guard<std::mutex> lock(overruns_mutex);
  overruns().push_back(what);
}

std::vector<std::string> budget_overruns() {
  const std::lock_guard<std::mutex> lock(overruns_mutex);
  return overruns();
}

void note_local_bytes(size_t bytes) {
  size_t seen = largest_local_bytes.load();
  while (bytes > seen && !largest_local_bytes.compare_exchange_weak(seen, bytes)) {
  }
}

void preload_kernels(int device) {
  static std::mutex mutex;
  static std::set<int> loaded;  // devices whose kernels are loaded in this process
  // Held while loading: a second rank's thread waits here instead of launching a kernel of
  // its own that could be the one to wait for the device's running work.
  const std::lock_guard<std::mutex> lock(mutex);
  if (loaded.count(device) != 0) return;
  DeviceGuard guard(device);
  const size_t overruns_before = budget_overruns().size();  // those of earlier devices
  MOE_EP_CUDA_CHECK(preload_agreement_kernels());
  MOE_EP_CUDA_CHECK(preload_notify_kernels());
  MOE_EP_CUDA_CHECK(preload_dispatch_kernels());
  MOE_EP_CUDA_CHECK(preload_combine_kernels());
  MOE_EP_CUDA_CHECK(preload_copy_engine_kernels());
  MOE_EP_CUDA_CHECK(preload_node_kernels());
  MOE_EP_CUDA_CHECK(preload_ll_kernels());
  MOE_EP_CUDA_CHECK(preload_ll_node_kernels());
  MOE_EP_CUDA_CHECK(preload_symmetric_kernels());
  MOE_EP_CUDA_CHECK(preload_loopback_kernels());
  const std::vector<std::string> overruns = budget_overruns();
  for (size_t i = overruns_before; i < overruns.size(); ++i) {
    MOE_EP_LOG(LogLevel::kWarn,
               "a kernel of the library does not fit its SM budget's blocks per SM"
               " (Policy, policy.h) on device ",
               device, ": ", overruns[i]);
  }
  const size_t local_bytes = largest_local_bytes.load();
  if (!reserve_local_memory(local_bytes)) {
    MOE_EP_LOG(LogLevel::kWarn, "a kernel of the library needs ", local_bytes,
               " bytes of local memory per thread, more than reserve_local_memory reserves "
               "(4096): its first launch may wait for the whole device");
  }
  loaded.insert(device);
  MOE_EP_LOG(LogLevel::kDebug, "loaded the library's kernels on device ", device,
             "; local memory reserved for ", local_bytes, " bytes per thread");
}

}  // namespace moe_ep::cuda_backend
