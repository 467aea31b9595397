// A late rank in the one-GPU test world (label gpu, skipped without a GPU): W ranks of one GPU
// make their op together, upload their inputs, and then the last rank waits 300 ms before its
// first call, while the other ranks' first kernels already wait for it on the device. Its
// kernels must still find room on the GPU: the round completes, bit for bit equal to the
// reference, in decode mode and in normal mode, at DeepSeek-V3's hidden size and 128 tokens a
// rank (grids as large as the budget allows), at world sizes 2, 4 and 8 with the world's budgets,
// and across nodes (W = 8 in nodes of 4, W = 4 in nodes of 2: the world's domains).
// It makes the one-GPU world's intermittent stall (docs/perf-history.md, v34) happen every time
// with the budgets the world gave before (a late rank is what the stall needs).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/gpu_low_latency.h"
#include "testing/gpu_world.h"
#include "testing/low_latency.h"

namespace moe_ep {
namespace {

struct LateCase {
  int world_size;
  int num_sms;  // 0: the op's default (the world's budget)
  bool decode;
  int ranks_per_node = 0;  // 0: one node; else the path across nodes (the world's domains)
};

std::string case_name(const ::testing::TestParamInfo<LateCase>& info) {
  const LateCase& c = info.param;
  return std::string(c.decode ? "Decode" : "Normal") + "W" + std::to_string(c.world_size) +
         (c.ranks_per_node > 0 ? "L" + std::to_string(c.ranks_per_node) : std::string()) + "Sms" +
         (c.num_sms > 0 ? std::to_string(c.num_sms) : std::string("Default"));
}

class GpuLateRank : public ::testing::TestWithParam<LateCase> {
 protected:
  void SetUp() override {
    if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  }
};

constexpr int kDelayMs = 300;

OpConfig late_config(const LateCase& lc) {
  OpConfig c = testing::world_test_config(lc.world_size, {DispatchDtype::fp8, CombineDtype::bf16});
  c.hidden = 7168;
  c.topk = 8;
  c.max_tokens_per_rank = 128;
  c.num_sms = lc.num_sms;
  c.low_latency = lc.decode;
  c.ranks_per_node = lc.ranks_per_node;
  return c;
}

std::vector<testing::RankInput> late_inputs(const OpConfig& c, int world_size) {
  testing::InputSpec spec;
  spec.world_size = world_size;
  spec.config = c;
  spec.mask_prob = 0.1;
  return testing::make_inputs(spec, testing::test_seed() + 77,
                              std::vector<int64_t>(world_size, c.max_tokens_per_rank));
}

TEST_P(GpuLateRank, RoundCompletesAndEqualsTheReference) {
  const LateCase lc = GetParam();
  const int w = lc.world_size;
  const OpConfig c = late_config(lc);
  const std::vector<testing::RankInput> inputs = late_inputs(c, w);
  auto comms = make_single_gpu_world(w, 0, 0, lc.ranks_per_node);
  const auto delay = [w](int rank) { return rank == w - 1 ? kDelayMs : 0; };
  if (lc.decode) {
    testing::LowLatencyRound round(w, inputs);
    testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
      auto op = testing::kept_op(comm, c);
      testing::TestStream stream;
      testing::gpu_low_latency_round(*op, rank, round, stream.s, delay(rank));
    });
    if (lc.ranks_per_node == 0) {
      testing::check_low_latency_round(c, w, round, 1);
    } else {
      // Across nodes the combine sums node by node: the CPU backend's rounds are the reference
      // (as in test_gpu_low_latency_nodes.cu).
      const std::vector<testing::LowLatencyRound> cpu =
          testing::run_low_latency_rounds(c, w, {inputs});
      for (int r = 0; r < w; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        testing::expect_same_low_latency(round.received[r], cpu[0].received[r]);
        testing::expect_same("out", round.out[r], cpu[0].out[r]);
      }
    }
  } else {
    std::vector<testing::RoundResult> rounds = testing::make_round_results(w, {inputs});
    testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
      auto op = testing::kept_op(comm, c);
      testing::TestStream stream;
      testing::gpu_round(*op, rank, w, rounds[0], {stream.s, stream.s}, 0, delay(rank));
    });
    testing::check_round(c, w, rounds[0]);
  }
}

// The world's own budgets (single_gpu_world_sms_per_rank: 2 SMs a rank at W = 8, 5 at W = 4, 16
// at W = 2 on an H200, at 4 data blocks a SM: 8, 20 and 64 data blocks). v34 run G, at 2 blocks
// a SM: decode at W = 8 and 16 SMs, and at W = 4 and 32 SMs (the world's budgets before),
// timed out every time; 8 and 4 SMs (W = 8), 16 and 8 (W = 4), and normal mode at either passed.
INSTANTIATE_TEST_SUITE_P(Worlds, GpuLateRank,
                         ::testing::Values(LateCase{8, 0, true}, LateCase{4, 0, true},
                                           LateCase{2, 0, true}, LateCase{8, 0, false},
                                           LateCase{4, 0, false}, LateCase{2, 0, false},
                                           LateCase{8, 0, true, 4}, LateCase{4, 0, true, 2},
                                           LateCase{8, 0, false, 4}),
                         case_name);

}  // namespace
}  // namespace moe_ep
