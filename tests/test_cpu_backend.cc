// The CPU backend against the independent plain-loop reference (src/reference/reference.h), bit for
// bit on every output of dispatch and combine: all 12 dtype pairs, the output tensor metadata,
// odd shapes (3 ranks, 12 experts, top-5, 1 token), world size 1, a rank with zero tokens, a rank
// that receives nothing, tokens with every slot masked, pre-quantized x, several rounds on one op,
// determinism, and a tolerance check of out against unquantized fp32 math.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "testing/harness.h"

namespace moe_ep {
namespace {

using testing::all_pairs;
using testing::check_round;
using testing::DtypePair;
using testing::InputSpec;
using testing::make_inputs;
using testing::pair_name;
using testing::RankInput;
using testing::RoundResult;
using testing::run_once;
using testing::test_seed;

InputSpec spec_for(int world_size, int experts, int topk, int hidden, int max_tokens,
                   DtypePair pair) {
  InputSpec spec;
  spec.world_size = world_size;
  spec.config.num_experts = experts;
  spec.config.topk = topk;
  spec.config.hidden = hidden;
  spec.config.max_tokens_per_rank = max_tokens;
  spec.config.dispatch_dtype = pair.dispatch;
  spec.config.combine_dtype = pair.combine;
  return spec;
}

// Runs the spec once with the given token counts (after `edit`) and checks it.
template <typename Edit>
RoundResult run_and_check(const InputSpec& spec, const std::vector<int64_t>& tokens, Edit edit) {
  std::vector<RankInput> inputs = make_inputs(spec, test_seed(), tokens);
  edit(inputs);
  RoundResult res = run_once(spec.config, spec.world_size, inputs);
  check_round(spec.config, spec.world_size, res);
  return res;
}
RoundResult run_and_check(const InputSpec& spec, const std::vector<int64_t>& tokens) {
  return run_and_check(spec, tokens, [](std::vector<RankInput>&) {});
}

class CpuBackendPairs : public ::testing::TestWithParam<DtypePair> {};

TEST_P(CpuBackendPairs, MatchesReferenceBitExact) {
  // 4 ranks, 16 experts, top-4, two fp8 blocks per row; rank 1 is at max_tokens_per_rank.
  const InputSpec spec = spec_for(4, 16, 4, 256, 24, GetParam());
  const RoundResult res = run_and_check(spec, {7, 24, 13, 1});
  int64_t total = 0;
  for (const auto& r : res.received) total += r.num_recv;
  EXPECT_GT(total, 30);  // the case really moves data
}

TEST_P(CpuBackendPairs, OutputMetadata) {
  const DtypePair pair = GetParam();
  const InputSpec spec = spec_for(2, 4, 2, 128, 8, pair);
  const RoundResult res = run_and_check(spec, {5, 3});
  const int64_t h = spec.config.hidden;
  for (int r = 0; r < 2; ++r) {
    const DispatchResult& d = res.views[r];
    const int64_t n = d.num_recv;
    switch (pair.dispatch) {
      case DispatchDtype::bf16:
        EXPECT_EQ(d.recv_x.dtype, ScalarType::kBFloat16);
        EXPECT_EQ(d.recv_x.cols(), h);
        EXPECT_FALSE(d.recv_x_scales.defined());
        break;
      case DispatchDtype::fp8:
        EXPECT_EQ(d.recv_x.dtype, ScalarType::kFloat8E4M3);
        EXPECT_EQ(d.recv_x.cols(), h);
        EXPECT_EQ(d.recv_x_scales.dtype, ScalarType::kFloat32);
        EXPECT_EQ(d.recv_x_scales.cols(), h / 128);
        EXPECT_EQ(d.recv_x_scales.rows(), n);
        break;
      case DispatchDtype::fp4:
        EXPECT_EQ(d.recv_x.dtype, ScalarType::kFloat4E2M1);
        EXPECT_EQ(d.recv_x.cols(), h / 2);
        EXPECT_EQ(d.recv_x_scales.dtype, ScalarType::kFloat8E8M0);
        EXPECT_EQ(d.recv_x_scales.cols(), h / 32);
        EXPECT_EQ(d.recv_x_scales.rows(), n);
        break;
    }
    EXPECT_EQ(d.recv_x.rows(), n);
    EXPECT_EQ(d.recv_x.device, DeviceType::kCpu);
    EXPECT_EQ(d.recv_topk_idx.dtype, ScalarType::kInt32);
    EXPECT_EQ(d.recv_topk_idx.rows(), n);
    EXPECT_EQ(d.recv_topk_idx.cols(), 2);
    EXPECT_EQ(d.recv_topk_weights.dtype, ScalarType::kFloat32);
    EXPECT_EQ(d.recv_src_rank.ndim, 1);
    EXPECT_EQ(d.recv_src_rank.rows(), n);
    EXPECT_EQ(d.recv_src_token.rows(), n);
    EXPECT_EQ(d.recv_count_per_local_expert.rows(), 2);
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypePairs, CpuBackendPairs, ::testing::ValuesIn(all_pairs()),
                         [](const auto& info) { return pair_name(info.param); });

TEST(CpuBackend, OddShapesThreeRanksTwelveExpertsTopFiveOneToken) {
  for (const DtypePair& pair : all_pairs()) {
    SCOPED_TRACE(pair_name(pair));
    InputSpec spec = spec_for(3, 12, 5, 128, 1, pair);
    spec.mask_prob = 0.3;
    run_and_check(spec, {1, 1, 1});
  }
}

TEST(CpuBackend, WorldSizeOne) {
  for (const DtypePair& pair : all_pairs()) {
    SCOPED_TRACE(pair_name(pair));
    const RoundResult res = run_and_check(spec_for(1, 4, 2, 128, 16, pair), {9});
    EXPECT_GT(res.received[0].num_recv, 0);
  }
}

TEST(CpuBackend, RankWithZeroTokens) {
  for (const DtypePair& pair : all_pairs()) {
    SCOPED_TRACE(pair_name(pair));
    run_and_check(spec_for(4, 8, 3, 128, 8, pair), {5, 0, 7, 3});
  }
}

TEST(CpuBackend, EveryRankZeroTokens) {
  const RoundResult res =
      run_and_check(spec_for(3, 6, 2, 128, 4, {DispatchDtype::fp8, CombineDtype::fp8}), {0, 0, 0});
  for (const auto& r : res.received) EXPECT_EQ(r.num_recv, 0);
}

TEST(CpuBackend, RankThatReceivesNothing) {
  for (const DtypePair& pair : all_pairs()) {
    SCOPED_TRACE(pair_name(pair));
    InputSpec spec = spec_for(4, 8, 3, 128, 8, pair);
    spec.exclude_dest = 2;
    const RoundResult res = run_and_check(spec, {6, 8, 4, 5});
    EXPECT_EQ(res.received[2].num_recv, 0);
    EXPECT_EQ(res.received[2].recv_count_per_local_expert, std::vector<int32_t>({0, 0}));
    EXPECT_GT(res.received[1].num_recv, 0);
  }
}

TEST(CpuBackend, TokenWithEverySlotMaskedCombinesToZeros) {
  for (const DtypePair& pair : all_pairs()) {
    SCOPED_TRACE(pair_name(pair));
    const InputSpec spec = spec_for(2, 8, 3, 128, 6, pair);
    const RoundResult res = run_and_check(spec, {6, 4}, [](std::vector<RankInput>& in) {
      in[0].mask_token(0);
      in[0].mask_token(5);
      in[1].mask_token(2);
    });
    const int64_t h = spec.config.hidden;
    for (const auto& [rank, token] : std::vector<std::pair<int, int>>{{0, 0}, {0, 5}, {1, 2}}) {
      const uint16_t* row = res.out[rank].data() + token * h;
      for (int64_t j = 0; j < h; ++j) ASSERT_EQ(row[j], 0) << "rank " << rank << " token " << token;
    }
  }
}

TEST(CpuBackend, EverySlotMaskedNothingMoves) {
  const InputSpec spec = spec_for(2, 4, 2, 128, 4, {DispatchDtype::fp4, CombineDtype::fp8});
  const RoundResult res = run_and_check(spec, {3, 4}, [](std::vector<RankInput>& in) {
    for (RankInput& r : in) {
      for (int64_t t = 0; t < r.num_tokens; ++t) r.mask_token(t);
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(res.received[r].num_recv, 0);
    for (uint16_t v : res.out[r]) ASSERT_EQ(v, 0);
  }
}

TEST(CpuBackend, PrequantizedFp8) {
  for (CombineDtype combine : kAllCombineDtypes) {
    InputSpec spec = spec_for(3, 6, 2, 256, 8, {DispatchDtype::fp8, combine});
    spec.prequantized = true;
    const RoundResult res = run_and_check(spec, {8, 3, 5});
    // The payload arrived as given: the row of (src 0, token t) equals the input bytes.
    const RankInput& src0 = res.inputs[0];
    for (int r = 0; r < 3; ++r) {
      const auto& got = res.received[r];
      for (int64_t i = 0; i < got.num_recv; ++i) {
        if (got.recv_src_rank[i] != 0) continue;
        EXPECT_EQ(
            std::memcmp(&got.recv_x[i * 256], &src0.x_payload[got.recv_src_token[i] * 256], 256),
            0);
      }
    }
  }
}

TEST(CpuBackend, PrequantizedFp4) {
  for (CombineDtype combine : kAllCombineDtypes) {
    InputSpec spec = spec_for(2, 4, 3, 128, 8, {DispatchDtype::fp4, combine});
    spec.prequantized = true;
    run_and_check(spec, {7, 8});
  }
}

TEST(CpuBackend, SeveralRoundsOnOneOp) {
  // The op is reused with different inputs and token counts; handles count the calls.
  const InputSpec spec = spec_for(3, 12, 4, 128, 10, {DispatchDtype::fp8, CombineDtype::fp8});
  const std::vector<std::vector<int64_t>> tokens = {{10, 2, 7}, {0, 9, 3}, {4, 4, 10}};
  std::vector<std::vector<RankInput>> rounds;
  for (size_t i = 0; i < tokens.size(); ++i) {
    rounds.push_back(make_inputs(spec, test_seed() + 1000 * (i + 1), tokens[i]));
  }
  const auto results = testing::run_rounds(spec.config, 3, rounds);
  for (size_t i = 0; i < results.size(); ++i) {
    SCOPED_TRACE("round " + std::to_string(i));
    check_round(spec.config, 3, results[i], i + 1);
  }
}

TEST(CpuBackend, Deterministic) {
  // Two independent runs (fresh worlds, different thread timing) give identical bits.
  for (const DtypePair& pair : all_pairs()) {
    SCOPED_TRACE(pair_name(pair));
    const InputSpec spec = spec_for(4, 16, 4, 128, 12, pair);
    const std::vector<RankInput> inputs = make_inputs(spec, test_seed(), {12, 5, 9, 11});
    const RoundResult a = run_once(spec.config, 4, inputs);
    const RoundResult b = run_once(spec.config, 4, inputs);
    for (int r = 0; r < 4; ++r) {
      testing::expect_same("recv_x", a.received[r].recv_x, b.received[r].recv_x);
      testing::expect_same("recv_x_scales", a.received[r].recv_x_scales,
                           b.received[r].recv_x_scales);
      testing::expect_same("recv_topk_idx", a.received[r].recv_topk_idx,
                           b.received[r].recv_topk_idx);
      testing::expect_same("recv_src_token", a.received[r].recv_src_token,
                           b.received[r].recv_src_token);
      testing::expect_same("out", a.out[r], b.out[r]);
    }
  }
}

TEST(CpuBackend, CombineCloseToUnquantizedMath) {
  // bf16 on both legs: out[t] should be sum_k w_k * x[t] up to bf16 rounding. Each rank's y
  // is rounded to bf16 once (relative error <= 2^-8, half an ulp of an 8-bit significand) and
  // out once more (another 2^-8); all terms of a column have the sign of x[t][h] (w > 0), so
  // no cancellation: |out - exact| <= (2^-8 + 2^-8 + 2^-16) |exact|; we allow 2^-6 |exact|.
  const InputSpec spec = spec_for(4, 16, 4, 128, 8, {DispatchDtype::bf16, CombineDtype::bf16});
  const RoundResult res = run_and_check(spec, {8, 8, 8, 8});
  for (int s = 0; s < 4; ++s) {
    const RankInput& in = res.inputs[s];
    for (int64_t t = 0; t < in.num_tokens; ++t) {
      double w = 0;
      for (int k = 0; k < spec.config.topk; ++k) {
        if (in.topk_idx[t * spec.config.topk + k] >= 0)
          w += in.topk_weights[t * spec.config.topk + k];
      }
      for (int64_t j = 0; j < spec.config.hidden; ++j) {
        const double exact = w * formats::bf16_to_float(in.x[t * spec.config.hidden + j]);
        const double got = formats::bf16_to_float(res.out[s][t * spec.config.hidden + j]);
        ASSERT_LE(std::fabs(got - exact), std::ldexp(std::fabs(exact), -6) + 1e-30)
            << "rank " << s << " token " << t << " column " << j;
      }
    }
  }
}

}  // namespace
}  // namespace moe_ep
