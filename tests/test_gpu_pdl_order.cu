// The stream order that one node's dispatch relies on (label gpu, skipped without a GPU): its
// wait kernel and decode's expand are launched by launch_following (programmatic dependent
// launch) and never run wait_previous_kernel, so they may end before the kernel before them (the
// data kernel, the send). The caller may then overwrite what that kernel reads, and the next call
// resets what it uses, so work queued after them must still wait for that kernel's end. Here a
// kernel D lets the next one launch at once and then spins for kSpinNs before it stores a flag
// in mapped host memory; W (launch_following, no wait) ends at once. Every later piece of work
// must see D's flag set: the host after an event recorded after W, a plain launch after W, a
// launch_following kernel that waits, and the same after two W in a row. W itself must see the
// flag clear, or the premise (W running beside D) did not arise and the test says so (skips).
// v64 in docs/perf-notes.md: this held on one H100 (driver 580.159.04).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "backends/cuda/common.cuh"
#include "moe_ep/cuda.h"

namespace moe_ep::cuda_backend {
namespace {

constexpr uint64_t kSpinNs = 20'000'000;  // D's 20 ms: far longer than any launch gap
constexpr int kRounds = 3;

// What each kernel saw: [0] W's flag, [1..] the later kernels'.
struct Seen {
  int32_t flag;    // D's: 1 once it has ended its spin
  int32_t saw[8];  // -1 until the kernel ran
};

__global__ void spin_then_flag(Seen* s) {
  let_next_kernel_launch();
  const uint64_t t0 = global_timer_ns();
  while (global_timer_ns() - t0 < kSpinNs) {
  }
  __threadfence_system();
  *reinterpret_cast<volatile int32_t*>(&s->flag) = 1;
  __threadfence_system();
}

// Never waits for the kernel before it (as dispatch_wait_kernel on one node's SM path).
__global__ void read_without_waiting(Seen* s, int slot) {
  s->saw[slot] = *reinterpret_cast<volatile int32_t*>(&s->flag);
  let_next_kernel_launch();
}

__global__ void read_after_waiting(Seen* s, int slot) {
  wait_previous_kernel();
  s->saw[slot] = *reinterpret_cast<volatile int32_t*>(&s->flag);
}

class PdlOrder : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
    ASSERT_EQ(cudaHostAlloc(&seen_, sizeof(Seen), cudaHostAllocMapped), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), cudaSuccess);
  }
  void TearDown() override {
    if (event_ != nullptr) cudaEventDestroy(event_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (seen_ != nullptr) cudaFreeHost(seen_);
  }
  void reset() {
    seen_->flag = 0;
    for (int32_t& s : seen_->saw) s = -1;
  }
  // A fresh record, then D and W (W's flag in saw[0]) on the stream.
  void start_d_then_w() {
    reset();
    ASSERT_EQ(launch_following(spin_then_flag, dim3(1), dim3(1), 0, stream_, seen_), cudaSuccess);
    launch_w(0);
  }
  void launch_w(int slot) {
    ASSERT_EQ(launch_following(read_without_waiting, dim3(1), dim3(1), 0, stream_, seen_, slot),
              cudaSuccess);
  }
  void launch_waiting(int slot) {
    ASSERT_EQ(launch_following(read_after_waiting, dim3(1), dim3(1), 0, stream_, seen_, slot),
              cudaSuccess);
  }
  int32_t host_flag() const { return *reinterpret_cast<volatile int32_t*>(&seen_->flag); }

  Seen* seen_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t event_ = nullptr;
};

TEST_F(PdlOrder, WorkAfterAKernelThatNeverWaitsWaitsForTheKernelBeforeIt) {
  int overlapped = 0;
  for (int round = 0; round < kRounds; ++round) {
    // The host, after an event recorded after W; then a plain launch after W, a waiting one.
    ASSERT_NO_FATAL_FAILURE(start_d_then_w());
    ASSERT_EQ(cudaEventRecord(event_, stream_), cudaSuccess);
    ASSERT_EQ(cudaEventSynchronize(event_), cudaSuccess);
    const int32_t host_saw = host_flag();
    const int32_t w_saw = seen_->saw[0];
    ASSERT_NO_FATAL_FAILURE(start_d_then_w());
    read_after_waiting<<<1, 1, 0, stream_>>>(seen_, 1);  // a plain launch (its wait is a no-op)
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const int32_t plain_saw = seen_->saw[1];
    ASSERT_NO_FATAL_FAILURE(start_d_then_w());
    ASSERT_NO_FATAL_FAILURE(launch_waiting(2));
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const int32_t waiting_saw = seen_->saw[2];
    // Two kernels that never wait in a row, then one that waits.
    ASSERT_NO_FATAL_FAILURE(start_d_then_w());
    ASSERT_NO_FATAL_FAILURE(launch_w(3));
    ASSERT_NO_FATAL_FAILURE(launch_waiting(4));
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    const int32_t chain_saw = seen_->saw[4];
    std::printf(
        "round %d: W saw %d; after W: host (event) %d, plain launch %d, waiting launch %d;"
        " after two W: waiting launch %d\n",
        round, w_saw, host_saw, plain_saw, waiting_saw, chain_saw);
    if (w_saw != 0) continue;  // W ran after D: this round shows nothing
    ++overlapped;
    EXPECT_EQ(host_saw, 1) << "round " << round << ": the event after W completed before D ended";
    EXPECT_EQ(plain_saw, 1) << "round " << round << ": a plain launch after W ran before D ended";
    EXPECT_EQ(waiting_saw, 1) << "round " << round << ": a waiting launch ran before D ended";
    EXPECT_EQ(chain_saw, 1) << "round " << round << ": after two W, a waiting launch overtook D";
  }
  if (overlapped == 0) GTEST_SKIP() << "W never ran beside D: the order was not put to the test";
}

}  // namespace
}  // namespace moe_ep::cuda_backend
