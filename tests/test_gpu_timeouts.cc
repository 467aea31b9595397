// GPU timeouts that must say where they stopped (label gpu; skipped without a GPU): in the one-GPU
// world, a rank that never joins a decode-mode dispatch leaves its peer a Timeout naming the step
// agreement, not a hang; the op is unusable after it; and the warning logged at the timeout
// (CudaOp::describe_step_words) shows decode mode's step words: the waiting rank's own word in
// its own buffer and in the absent peer's, the absent rank's word missing. Its own binary: the
// log capture (testing/log_capture.h) sets MOE_EP_LOG=info for the whole process.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "moe_ep/cuda.h"
#include "testing/harness.h"
#include "testing/log_capture.h"

#ifdef MOE_EP_WITH_CUDA
#include "testing/gpu_world.h"
#endif

namespace moe_ep {
namespace {

#ifndef MOE_EP_WITH_CUDA
TEST(GpuTimeoutLog, NeedsTheCudaBackend) { GTEST_SKIP() << "moe-ep was built without CUDA"; }
#else

// Before anything reads the knobs: every bounded wait of this binary is 3 s.
const bool kShortTimeout = (setenv("MOE_EP_TIMEOUT_S", "3", 1), true);

class GpuTimeoutLog : public testing::LogTest {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kShortTimeout);
    if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
    testing::LogTest::SetUp();
  }
};

TEST_F(GpuTimeoutLog, DecodeDispatchThatARankNeverJoinsTimesOutAndLogsDecodeStepTags) {
  const int world_size = 2;
  OpConfig c;
  c.num_experts = 4 * world_size;
  c.hidden = 256;
  c.topk = 2;
  c.max_tokens_per_rank = 16;
  c.dispatch_dtype = DispatchDtype::fp8;
  c.combine_dtype = CombineDtype::bf16;
  c.low_latency = true;
  testing::InputSpec spec;
  spec.world_size = world_size;
  spec.config = c;
  const auto inputs = testing::make_inputs(spec, testing::test_seed(), {11, 11});
  testing::RankOutcome first, second;
  double seconds = 0;
  auto comms = make_single_gpu_world(world_size);
  std::vector<std::shared_ptr<Op>> ops(world_size);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    ops[rank] = create_op(comm, c);
  });
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>&) {
    if (rank == 1) return;  // never dispatches
    testing::TestStream stream;
    testing::DeviceInput input(inputs[rank], 0);
    LowLatencyDispatchArgs args(input.view, /*hook=*/false);
    args.stream = stream.s;
    const auto start = std::chrono::steady_clock::now();
    first = testing::outcome_of([&] {
      ops[rank]->low_latency_dispatch(args);
      ops[rank]->synchronize(stream.s);
    });
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    second = testing::outcome_of([&] { ops[rank]->low_latency_dispatch(args); });
  });
  testing::expect_error(
      first, ErrorCode::kTimeout,
      {"timed out after 3 s in step agreement: rank 0 waited for rank 1", "(expected 1, saw 0)"});
  EXPECT_LT(seconds, 10.0);
  testing::expect_error(second, ErrorCode::kInvalidUsage, {"op unusable after: timed out"});

  // The warning rank 0 logged at its timeout. Step 1 has parity 1: rank 0's word (tag 1) is in
  // its own buffer (p1/0=1) and in rank 1's (1:0/1, the tags of parities 0 and 1), rank 1's
  // word never came (p1/1=0).
  std::string table;
  for (const testing::LogRecord& r : logged_since_start()) {
    if (r.level == LogLevel::kWarn && r.message.find("at the timeout of") != std::string::npos) {
      table = r.message;
    }
  }
  ASSERT_FALSE(table.empty()) << "no warning with the step tables at the timeout";
  const size_t decode = table.find("decode step tags here [");
  ASSERT_NE(decode, std::string::npos) << table;
  const std::string tail = table.substr(decode);
  for (const char* part :
       {"p1/0=1", "p1/1=0", "this rank's decode step tags in peers [0:0/1 1:0/1]"}) {
    EXPECT_NE(tail.find(part), std::string::npos) << part << " not in: " << tail;
  }
}

#endif  // MOE_EP_WITH_CUDA

}  // namespace
}  // namespace moe_ep
