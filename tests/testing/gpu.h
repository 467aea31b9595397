// Helpers of the GPU tests: device copies of a rank's inputs, a download of everything a CUDA
// dispatch returned, and a runner that drives one op per GPU on its own thread. CUDA calls are
// checked with the library's MOE_EP_CUDA_CHECK (a failure throws moe_ep::CudaError). Compiled
// only with the CUDA backend (MOE_EP_WITH_CUDA).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "moe_ep/cuda.h"
#include "reference/reference.h"
#include "testing/inputs.h"

namespace moe_ep::testing {

// Streams of the tests. A device has CUDA_DEVICE_MAX_CONNECTIONS hardware queues (the tests set
// 32, gpu_world.h), and streams are dealt onto them round-robin in creation order; two streams on
// one queue run in order. In the single-GPU world that is a hazard whenever a rank waits on a
// stream that shares a queue with another rank's kernel: that kernel waits for this rank, this
// rank's copy waits behind that kernel, and both give up at the timeout. Streams made on demand
// land on arbitrary queues (the library makes one per communicator, so the count drifts), and the
// tests once shared a single upload stream between all ranks: the cause of the intermittent
// W = 8 decode timeouts, where a rank's step kernel launched only after its peers had waited 30 s
// for it. So every stream the tests use comes from a pool of kStreamPool streams per device, made
// one after another (so on distinct queues) and kept for the life of the process:
// - rank r of the single-GPU world (r < 8) computes on streams r, 8 + r and 16 + r (its first,
//   second and third TestStream) and allocates and copies on stream 16 + r (its third compute
//   stream: a queue shared within a rank only orders that rank's own work);
// - rank r of a world of one rank per GPU (run_gpu_ranks) takes the same indices on its device;
// - a thread outside the world (a test's main thread) computes on streams 23, 22 and 21 and
//   allocates on stream 16, which the ranks leave alone while it runs.
// The pool takes 24 of the 32 queues, not all of them: a stream made later, such as those the
// driver makes to run a CUDA graph launched on a pool stream, lands on one of the 8 queues left
// (until it wraps around) instead of on another rank's. With all 32 queues in the pool, the
// captured two-micro-batch round (GpuLowLatencyHooksGraph) stalled in its first replay in 2 of
// 3 runs on an H200, one rank's graph starting only after the other's had timed out; with 24 it
// passed 5 of 5 (docs/perf-history.md, v15). That is evidence for the cause, not proof.
// The library's own streams (one per communicator) only zero memory and run the creation
// rendezvous, never while another rank's data kernels wait.
inline constexpr int kStreamPool = 24;
inline constexpr int kPooledRanks = 8;
inline thread_local int test_rank = -1;  // set by the runners (run_world, run_gpu_ranks)

// Where a rank's host thread has been, for the single-GPU world's stall (docs/perf-notes.md, open
// leads): a rank's first launch of a call has come 30 s late from its host, so the world's runner
// prints every rank's trace when a rank fails, naming the test call each host thread sat in. The
// times are the system clock's, in ns, as in the library's timeout lines ("launched at").
struct HostTrace {
  std::vector<std::pair<const char*, int64_t>> marks;
};
inline thread_local HostTrace* host_trace = nullptr;  // set by the runner for its rank threads

inline void trace(const char* what) {
  if (host_trace == nullptr) return;
  host_trace->marks.emplace_back(what, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::system_clock::now().time_since_epoch())
                                           .count());
}

// Every rank's last `last` marks, times in ms after the earliest mark of any rank.
inline void print_host_traces(const std::vector<HostTrace>& traces, size_t last = 40) {
  int64_t t0 = INT64_MAX;
  for (const HostTrace& t : traces) {
    for (const auto& m : t.marks) t0 = std::min(t0, m.second);
  }
  for (size_t r = 0; r < traces.size(); ++r) {
    const auto& marks = traces[r].marks;
    std::string line = "[moe-ep tests] rank " + std::to_string(r) + " host trace (ms):";
    for (size_t i = marks.size() > last ? marks.size() - last : 0; i < marks.size(); ++i) {
      char item[96];
      std::snprintf(item, sizeof(item), " %s@%.3f", marks[i].first,
                    static_cast<double>(marks[i].second - t0) / 1e6);
      line += item;
    }
    std::printf("%s (t0 = %lld ns)\n", line.c_str(), static_cast<long long>(t0));
  }
}

inline cudaStream_t pooled_stream(int device, int index) {
  static std::mutex mu;
  static std::map<int, std::vector<cudaStream_t>> pools;
  std::lock_guard<std::mutex> lock(mu);
  std::vector<cudaStream_t>& pool = pools[device];
  if (pool.empty()) {
    int previous = 0;
    MOE_EP_CUDA_CHECK(cudaGetDevice(&previous));
    MOE_EP_CUDA_CHECK(cudaSetDevice(device));
    // MOE_EP_TEST_STREAM_SKIP=N makes N streams first and never uses them, which moves the pool
    // to other hardware queues: an experiment on the one-GPU world's stall (docs/perf-notes.md,
    // open leads), whose held rank would move with it if two streams sharing a queue cause it.
    const char* skip = std::getenv("MOE_EP_TEST_STREAM_SKIP");
    for (int i = skip != nullptr ? std::atoi(skip) : 0; i > 0; --i) {
      cudaStream_t unused = nullptr;
      MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&unused, cudaStreamNonBlocking));
    }
    pool.resize(kStreamPool);
    for (cudaStream_t& s : pool) {
      MOE_EP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    }
    // cudaFree would wait for the whole device, so the tests allocate stream-ordered
    // (cudaMallocAsync / cudaFreeAsync); with the default release threshold (0) every
    // synchronisation hands the pool's unused memory back to the driver, and unmapping it may
    // wait for the device too. So the pool keeps its memory, and takes 1 GiB at once before any
    // rank exists, so that the tests' allocations seldom have to grow it.
    cudaMemPool_t mem = nullptr;
    MOE_EP_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&mem, device));
    uint64_t keep_everything = UINT64_MAX;
    MOE_EP_CUDA_CHECK(
        cudaMemPoolSetAttribute(mem, cudaMemPoolAttrReleaseThreshold, &keep_everything));
    void* reserve = nullptr;
    MOE_EP_CUDA_CHECK(cudaMallocAsync(&reserve, size_t{1} << 30, pool[16]));
    MOE_EP_CUDA_CHECK(cudaFreeAsync(reserve, pool[16]));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(pool[16]));
    MOE_EP_CUDA_CHECK(cudaSetDevice(previous));
  }
  return pool[index];
}

// Pinned host staging for the tests' copies, one buffer per thread slot of the pool (the slot of
// test_stream_of below), made with the pool, before any rank exists. A copy from or to pageable
// memory is not a plain stream operation: the driver stages it, and the copy of a rank whose
// staging needs page-locked memory can wait for the whole device (an implicit synchronisation
// point), i.e. for a peer's kernel that waits for this rank: in v19's run 1 a W = 4 rank's
// 60 KB upload returned only when its peers' step agreement had timed out, 30 s later
// (docs/perf-history.md, v20). So every test copy goes through these buffers, in chunks.
inline constexpr size_t kStagingBytes = size_t{4} << 20;

inline char* staging_of(int device, int slot) {
  static std::mutex mu;
  static std::map<int, std::vector<char*>> staging;
  std::lock_guard<std::mutex> lock(mu);
  std::vector<char*>& s = staging[device];
  if (s.empty()) {
    s.resize(kPooledRanks);
    for (char*& b : s) {
      void* p = nullptr;
      MOE_EP_CUDA_CHECK(cudaHostAlloc(&p, kStagingBytes, cudaHostAllocPortable));
      b = static_cast<char*>(p);
    }
  }
  return s[slot];
}

inline int staging_slot() { return test_rank >= 0 ? test_rank % kPooledRanks : 0; }

// The stream this thread allocates, copies and frees on (see above).
inline cudaStream_t test_stream_of(int device) {
  staging_of(device, 0);  // made with the pool, before any rank runs
  return pooled_stream(device, 2 * kPooledRanks + staging_slot());
}

inline int current_device() {
  int device = 0;
  MOE_EP_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

inline cudaStream_t test_alloc_stream() { return test_stream_of(current_device()); }

// Host to device and back through this thread's pinned staging (see staging_of), on `stream`,
// which is synchronised: the copy is done when these return.
inline void upload_bytes(void* dst, const void* src, size_t n, cudaStream_t stream) {
  char* staging = staging_of(current_device(), staging_slot());
  for (size_t done = 0; done < n; done += kStagingBytes) {
    const size_t part = std::min(kStagingBytes, n - done);
    std::memcpy(staging, static_cast<const char*>(src) + done, part);
    MOE_EP_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + done, staging, part,
                                      cudaMemcpyHostToDevice, stream));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
}

inline void download_bytes(void* dst, const void* src, size_t n, cudaStream_t stream) {
  char* staging = staging_of(current_device(), staging_slot());
  for (size_t done = 0; done < n; done += kStagingBytes) {
    const size_t part = std::min(kStagingBytes, n - done);
    MOE_EP_CUDA_CHECK(cudaMemcpyAsync(staging, static_cast<const char*>(src) + done, part,
                                      cudaMemcpyDeviceToHost, stream));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::memcpy(static_cast<char*>(dst) + done, staging, part);
  }
}

template <typename T>
void upload(void* dst, const std::vector<T>& host, cudaStream_t stream) {
  upload_bytes(dst, host.data(), host.size() * sizeof(T), stream);
}

// Device memory of the current device that frees itself; whoever used it on another stream
// has synchronised that stream before it goes.
struct DeviceBuffer {
  std::shared_ptr<void> ptr;
  static DeviceBuffer of_bytes(size_t bytes) {
    void* p = nullptr;
    cudaStream_t stream = test_alloc_stream();
    trace("alloc");
    MOE_EP_CUDA_CHECK(cudaMallocAsync(&p, bytes == 0 ? 16 : bytes, stream));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
    trace("allocated");
    // Freed on the stream it was made on (pooled: it outlives every buffer).
    return {std::shared_ptr<void>(p, [stream](void* q) { cudaFreeAsync(q, stream); })};
  }
  // Every byte set to `byte`, so that an output the code under test fails to write reads as
  // garbage, not as the zeros or the earlier results a pooled allocation may hold.
  static DeviceBuffer poisoned(size_t bytes, unsigned char byte = 0xa5) {
    DeviceBuffer b = of_bytes(bytes);
    cudaStream_t stream = test_alloc_stream();
    MOE_EP_CUDA_CHECK(cudaMemsetAsync(b.ptr.get(), byte, bytes == 0 ? 16 : bytes, stream));
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
    return b;
  }
  template <typename T>
  static DeviceBuffer copy_of(const std::vector<T>& host) {
    DeviceBuffer b = of_bytes(host.size() * sizeof(T));
    if (!host.empty()) {
      upload(b.ptr.get(), host, test_alloc_stream());
      trace("uploaded");
    }
    return b;
  }
};

// A rank's inputs on its GPU; args() views them like RankInput::args() does on the host.
struct DeviceInput {
  DeviceBuffer x, x_scales, topk_idx, topk_weights;
  DispatchArgs view;

  // New inputs of the same shape (bf16 x) into these buffers, e.g. a captured graph's, on
  // `stream` (synchronised when this returns).
  void upload(const RankInput& in, cudaStream_t stream) const {
    testing::upload(topk_idx.ptr.get(), in.topk_idx, stream);
    testing::upload(topk_weights.ptr.get(), in.topk_weights, stream);
    testing::upload(x.ptr.get(), in.x, stream);
  }

  DeviceInput(const RankInput& in, int device) {
    DispatchArgs host = in.args();
    x = in.prequantized() ? DeviceBuffer::copy_of(in.x_payload) : DeviceBuffer::copy_of(in.x);
    topk_idx = DeviceBuffer::copy_of(in.topk_idx);
    topk_weights = DeviceBuffer::copy_of(in.topk_weights);
    view = host;
    auto on_device = [device](TensorView v, void* data) {
      v.data = data;
      v.device = DeviceType::kCuda;
      v.device_index = device;
      return v;
    };
    view.x = on_device(host.x, x.ptr.get());
    if (in.prequantized()) {
      x_scales = DeviceBuffer::copy_of(in.x_scales);
      view.x_scales = on_device(host.x_scales, x_scales.ptr.get());
    }
    view.topk_idx = on_device(host.topk_idx, topk_idx.ptr.get());
    view.topk_weights = on_device(host.topk_weights, topk_weights.ptr.get());
  }
};

inline void device_to_host(void* dst, const void* src, size_t n) {
  download_bytes(dst, src, n, test_alloc_stream());
  trace("downloaded");
}

template <typename T>
std::vector<T> download_view(const TensorView& v) {
  return reference::copy_view<T>(v, device_to_host);
}

inline reference::DispatchOutputs download_outputs(const DispatchResult& r) {
  return reference::copy_outputs(r, device_to_host);
}

// Runs fn(rank, comm) on one thread per device (device r for rank r) and returns each rank's
// exception message ("" when it returned normally).
inline std::vector<std::string> run_gpu_ranks(
    const std::vector<std::shared_ptr<Communicator>>& comms,
    const std::function<void(int, const std::shared_ptr<Communicator>&)>& fn) {
  std::vector<std::string> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      // Rank r's streams of its device's pool, as in the single-GPU world: not the streams of
      // the main thread, which may be running work of its own there (TwoGpuBusy's holding
      // kernel, which rank 0's rounds queued behind until v46 set this).
      test_rank = static_cast<int>(r);
      try {
        MOE_EP_CUDA_CHECK(cudaSetDevice(static_cast<int>(r)));
        fn(static_cast<int>(r), comms[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace moe_ep::testing
