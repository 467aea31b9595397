// Decode mode on the CPU backend (docs/decode-mode.md) against the plain-loop reference, bit for
// bit: recv_x and its scales below the counts, counts and sources exactly, out exactly. Every
// dtype pair, the views' fixed shapes, world sizes 1 to 4, a rank with zero tokens, a rank that
// receives nothing, tokens with every slot masked, pre-quantized fp8 and mxfp4 x, several rounds
// on one op interleaved with normal-mode calls, and the property that decode mode's out equals
// normal mode's when the normal-mode y is formed from the same expert outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "testing/harness.h"
#include "testing/low_latency.h"

namespace moe_ep {
namespace {

using testing::all_pairs;
using testing::check_low_latency_round;
using testing::DtypePair;
using testing::InputSpec;
using testing::LowLatencyRound;
using testing::make_inputs;
using testing::pair_name;
using testing::RankInput;
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
  spec.config.low_latency = true;
  return spec;
}

// One low-latency round of the spec with the given token counts (after `edit`), checked.
template <typename Edit>
LowLatencyRound run_and_check(const InputSpec& spec, const std::vector<int64_t>& tokens,
                              Edit edit) {
  std::vector<RankInput> inputs = make_inputs(spec, test_seed(), tokens);
  edit(inputs);
  LowLatencyRound res =
      testing::run_low_latency_rounds(spec.config, spec.world_size, {inputs}).front();
  check_low_latency_round(spec.config, spec.world_size, res);
  return res;
}
LowLatencyRound run_and_check(const InputSpec& spec, const std::vector<int64_t>& tokens) {
  return run_and_check(spec, tokens, [](std::vector<RankInput>&) {});
}

int64_t total_rows(const LowLatencyRound& res) {
  int64_t total = 0;
  for (const auto& r : res.received) {
    for (int32_t c : r.recv_count) total += c;
  }
  return total;
}

class LowLatencyPairs : public ::testing::TestWithParam<DtypePair> {};

TEST_P(LowLatencyPairs, MatchesReferenceBitExact) {
  // 4 ranks, 16 experts, top-4, two fp8 blocks per row; rank 1 is at max_tokens_per_rank.
  const InputSpec spec = spec_for(4, 16, 4, 256, 24, GetParam());
  const LowLatencyRound res = run_and_check(spec, {7, 24, 13, 1});
  EXPECT_GT(total_rows(res), 60);  // the case really moves data
}

TEST_P(LowLatencyPairs, ViewsHaveFixedShapes) {
  const DtypePair pair = GetParam();
  const InputSpec spec = spec_for(2, 4, 2, 128, 8, pair);
  const LowLatencyRound res = run_and_check(spec, {5, 3});
  const int64_t h = spec.config.hidden;
  for (int r = 0; r < 2; ++r) {
    const LowLatencyDispatchResult& d = res.views[r];
    EXPECT_EQ(d.recv_x.ndim, 3);
    EXPECT_EQ(d.recv_x.shape[0], 2);   // E/W
    EXPECT_EQ(d.recv_x.shape[1], 16);  // W * Tmax
    switch (pair.dispatch) {
      case DispatchDtype::bf16:
        EXPECT_EQ(d.recv_x.dtype, ScalarType::kBFloat16);
        EXPECT_EQ(d.recv_x.shape[2], h);
        EXPECT_FALSE(d.recv_x_scales.defined());
        break;
      case DispatchDtype::fp8:
        EXPECT_EQ(d.recv_x.dtype, ScalarType::kFloat8E4M3);
        EXPECT_EQ(d.recv_x.shape[2], h);
        EXPECT_EQ(d.recv_x_scales.dtype, ScalarType::kFloat32);
        EXPECT_EQ(d.recv_x_scales.ndim, 3);
        EXPECT_EQ(d.recv_x_scales.shape[1], 16);
        EXPECT_EQ(d.recv_x_scales.shape[2], h / 128);
        break;
      case DispatchDtype::fp4:
        EXPECT_EQ(d.recv_x.dtype, ScalarType::kFloat4E2M1);
        EXPECT_EQ(d.recv_x.shape[2], h / 2);
        EXPECT_EQ(d.recv_x_scales.dtype, ScalarType::kFloat8E8M0);
        EXPECT_EQ(d.recv_x_scales.ndim, 3);
        EXPECT_EQ(d.recv_x_scales.shape[1], 16);
        EXPECT_EQ(d.recv_x_scales.shape[2], h / 32);
        break;
    }
    EXPECT_EQ(d.recv_x.device, DeviceType::kCpu);
    EXPECT_EQ(d.recv_count.dtype, ScalarType::kInt32);
    EXPECT_EQ(d.recv_count.ndim, 1);
    EXPECT_EQ(d.recv_count.rows(), 2);
    for (const TensorView* v : {&d.recv_src_rank, &d.recv_src_token, &d.recv_src_slot}) {
      EXPECT_EQ(v->dtype, ScalarType::kInt32);
      EXPECT_EQ(v->ndim, 2);
      EXPECT_EQ(v->rows(), 2);
      EXPECT_EQ(v->cols(), 16);
    }
  }
}

TEST_P(LowLatencyPairs, DecodeModeEqualsNormalMode) {
  // Random inputs and the scaled experts; the normal-mode y is formed as the contract states.
  const DtypePair pair = GetParam();
  for (int world_size : {2, 4}) {
    for (uint64_t salt : {0, 1, 2}) {
      SCOPED_TRACE("W=" + std::to_string(world_size) + " salt=" + std::to_string(salt));
      InputSpec spec = spec_for(world_size, 8, 3, 128, 12, pair);
      spec.mask_prob = 0.1 * static_cast<double>(salt);
      const uint64_t seed = test_seed() + 7919 * (salt + 1);
      std::vector<int64_t> tokens;
      for (int r = 0; r < world_size; ++r) {
        tokens.push_back(static_cast<int64_t>(testing::hash4(seed, 9, r, salt) % 13));
      }
      testing::check_modes_agree(spec.config, world_size, make_inputs(spec, seed, tokens));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypePairs, LowLatencyPairs, ::testing::ValuesIn(all_pairs()),
                         [](const auto& info) { return pair_name(info.param); });

TEST(LowLatency, WorldSizesOneToFour) {
  for (int world_size = 1; world_size <= 4; ++world_size) {
    for (const DtypePair& pair : all_pairs()) {
      SCOPED_TRACE("W=" + std::to_string(world_size) + " " + pair_name(pair));
      const InputSpec spec = spec_for(world_size, 12, 3, 128, 6, pair);
      const LowLatencyRound res = run_and_check(spec, std::vector<int64_t>(world_size, 6));
      EXPECT_GT(total_rows(res), 0);
    }
  }
}

// topk above 32 (the CUDA kernels hold two slots per lane there; test_gpu_low_latency_shapes.cu).
TEST(LowLatency, TopkAbove32) {
  for (const DtypePair& pair : all_pairs()) {
    SCOPED_TRACE(pair_name(pair));
    const LowLatencyRound res = run_and_check(spec_for(2, 128, 40, 512, 16, pair), {16, 11});
    EXPECT_GT(total_rows(res), 0);
  }
}

TEST(LowLatency, RankWithZeroTokens) {
  for (const DtypePair& pair : all_pairs()) {
    SCOPED_TRACE(pair_name(pair));
    run_and_check(spec_for(4, 8, 3, 128, 8, pair), {5, 0, 7, 3});
  }
}

TEST(LowLatency, EveryRankZeroTokens) {
  const LowLatencyRound res =
      run_and_check(spec_for(3, 6, 2, 128, 4, {DispatchDtype::fp8, CombineDtype::fp8}), {0, 0, 0});
  EXPECT_EQ(total_rows(res), 0);
}

TEST(LowLatency, RankThatReceivesNothing) {
  for (const DtypePair& pair : all_pairs()) {
    SCOPED_TRACE(pair_name(pair));
    InputSpec spec = spec_for(4, 8, 3, 128, 8, pair);
    spec.exclude_dest = 2;
    const LowLatencyRound res = run_and_check(spec, {6, 8, 4, 5});
    const auto& nothing = res.received[2];
    EXPECT_EQ(nothing.recv_count, std::vector<int32_t>({0, 0}));
    for (int32_t v : nothing.recv_src_rank) ASSERT_EQ(v, -1);
    for (int32_t v : nothing.recv_src_slot) ASSERT_EQ(v, -1);
    EXPECT_GT(res.received[1].recv_count[0] + res.received[1].recv_count[1], 0);
  }
}

TEST(LowLatency, TokensWithEverySlotMaskedCombineToZeros) {
  for (const DtypePair& pair : all_pairs()) {
    SCOPED_TRACE(pair_name(pair));
    const InputSpec spec = spec_for(2, 8, 3, 128, 6, pair);
    const LowLatencyRound res = run_and_check(spec, {6, 4}, [](std::vector<RankInput>& in) {
      in[0].mask_token(0);
      in[0].mask_token(5);
      in[1].mask_token(2);
    });
    const int64_t h = spec.config.hidden;
    for (const auto& [rank, token] : std::vector<std::pair<int, int>>{{0, 0}, {0, 5}, {1, 2}}) {
      const uint16_t* row = res.out[rank].data() + token * h;
      for (int64_t j = 0; j < h; ++j) ASSERT_EQ(row[j], 0) << "rank " << rank << " token " << token;
      for (const auto& recv : res.received) {  // no slab holds the token
        for (size_t i = 0; i < recv.recv_src_rank.size(); ++i) {
          ASSERT_FALSE(recv.recv_src_rank[i] == rank && recv.recv_src_token[i] == token);
        }
      }
    }
  }
}

TEST(LowLatency, EverySlotMaskedNothingMoves) {
  const InputSpec spec = spec_for(2, 4, 2, 128, 4, {DispatchDtype::fp4, CombineDtype::fp8});
  const LowLatencyRound res = run_and_check(spec, {3, 4}, [](std::vector<RankInput>& in) {
    for (RankInput& r : in) {
      for (int64_t t = 0; t < r.num_tokens; ++t) r.mask_token(t);
    }
  });
  EXPECT_EQ(total_rows(res), 0);
  for (int r = 0; r < 2; ++r) {
    for (uint16_t v : res.out[r]) ASSERT_EQ(v, 0);
  }
}

TEST(LowLatency, PrequantizedFp8) {
  for (CombineDtype combine : kAllCombineDtypes) {
    InputSpec spec = spec_for(3, 6, 2, 256, 8, {DispatchDtype::fp8, combine});
    spec.prequantized = true;
    const LowLatencyRound res = run_and_check(spec, {8, 3, 5});
    // The payload arrived as given: every slab row of (src 0, token t) equals the input bytes.
    const RankInput& src0 = res.inputs[0];
    int checked = 0;
    for (const auto& got : res.received) {
      for (size_t e = 0; e < got.recv_count.size(); ++e) {
        for (int32_t i = 0; i < got.recv_count[e]; ++i) {
          const int64_t row = static_cast<int64_t>(e) * got.slab_rows + i;
          if (got.recv_src_rank[row] != 0) continue;
          EXPECT_EQ(std::memcmp(&got.recv_x[row * 256],
                                &src0.x_payload[got.recv_src_token[row] * 256], 256),
                    0);
          ++checked;
        }
      }
    }
    EXPECT_GT(checked, 0);
  }
}

TEST(LowLatency, PrequantizedMxfp4) {
  for (CombineDtype combine : kAllCombineDtypes) {
    InputSpec spec = spec_for(2, 4, 3, 128, 8, {DispatchDtype::fp4, combine});
    spec.prequantized = true;
    run_and_check(spec, {7, 8});
  }
}

TEST(LowLatency, PrequantizedEqualsNormalMode) {
  for (DispatchDtype dispatch : {DispatchDtype::fp8, DispatchDtype::fp4}) {
    InputSpec spec = spec_for(3, 6, 3, 256, 8, {dispatch, CombineDtype::fp8});
    spec.prequantized = true;
    testing::check_modes_agree(spec.config, 3, make_inputs(spec, test_seed() + 5, {8, 2, 6}));
  }
}

// One op per rank; the calls interleave as
//   dispatch #1, low_latency_dispatch #1, combine #1, low_latency_combine #1,
//   low_latency_dispatch #2, dispatch #2, low_latency_combine #2, combine #2,
//   low_latency_dispatch #3, low_latency_combine #3.
// Each mode counts its own calls, and each dispatch's outputs survive the other mode's calls
// made before its combine (they are read only at the combine). With ranks_per_node < W both
// modes also share the forwarders' buffers of the CPU backend.
void check_rounds_interleaved_with_normal_mode(int w, int ranks_per_node) {
  InputSpec spec = spec_for(w, 4 * w, 4, 128, 10, {DispatchDtype::fp8, CombineDtype::fp8});
  spec.config.ranks_per_node = ranks_per_node;
  const OpConfig& c = spec.config;
  // Tokens per rank of each round: a few patterns, a rank without tokens among them.
  const auto tokens_of = [w](std::vector<int64_t> pattern) {
    std::vector<int64_t> t(w);
    for (int r = 0; r < w; ++r) t[r] = pattern[r % pattern.size()];
    return t;
  };
  const std::vector<std::vector<int64_t>> ll_tokens = {tokens_of({10, 2, 7}), tokens_of({0, 9, 3}),
                                                       tokens_of({4, 4, 10})};
  const std::vector<std::vector<int64_t>> normal_tokens = {tokens_of({3, 10, 1}),
                                                           tokens_of({6, 0, 8})};
  std::vector<LowLatencyRound> ll;
  for (size_t i = 0; i < ll_tokens.size(); ++i) {
    ll.emplace_back(w, make_inputs(spec, test_seed() + 1000 * (i + 1), ll_tokens[i]));
  }
  std::vector<std::vector<RankInput>> normal_inputs;
  for (size_t i = 0; i < normal_tokens.size(); ++i) {
    normal_inputs.push_back(make_inputs(spec, test_seed() + 77 * (i + 1), normal_tokens[i]));
  }
  std::vector<testing::RoundResult> normal = testing::make_round_results(w, normal_inputs);

  testing::run_ranks(w, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    std::shared_ptr<Op> op = create_op(comm, c);
    // A normal dispatch whose combine comes later.
    const auto normal_dispatch = [&](testing::RoundResult& res) {
      const DispatchResult d = op->dispatch(res.inputs[rank].args());
      res.handles[rank] = d.handle;
      res.op_uids[rank] = op->uid();
      res.views[rank] = d;
    };
    const auto normal_combine = [&](testing::RoundResult& res) {
      const DispatchResult& d = res.views[rank];
      res.received[rank] = testing::copy_outputs(d);  // read after the low-latency calls
      const std::vector<uint16_t> y = testing::identity_expert(res.received[rank], c);
      res.out[rank].assign(res.inputs[rank].num_tokens * c.hidden, 0xffff);
      op->combine(d.handle,
                  TensorView::matrix(y.data(), ScalarType::kBFloat16, d.num_recv, c.hidden),
                  TensorView::matrix(res.out[rank].data(), ScalarType::kBFloat16,
                                     res.inputs[rank].num_tokens, c.hidden));
    };
    // A low-latency round split around other calls; its outputs too are read only at its combine.
    const auto ll_dispatch = [&](LowLatencyRound& res) {
      const LowLatencyDispatchResult d = op->low_latency_dispatch(res.inputs[rank].args());
      res.views[rank] = d;
      res.op_uids[rank] = op->uid();
      return d;
    };
    const auto ll_combine = [&](LowLatencyRound& res, const LowLatencyDispatchResult& d) {
      res.received[rank] = reference::copy_low_latency_outputs(d);
      const std::vector<uint16_t> y = testing::low_latency_expert(res.received[rank], c, w, rank);
      const int64_t t = res.inputs[rank].num_tokens;
      res.out[rank].assign(t * c.hidden, 0xffff);
      op->low_latency_combine(
          TensorView::tensor3(y.data(), ScalarType::kBFloat16, c.num_experts / w,
                              w * c.max_tokens_per_rank, c.hidden),
          d.handle, TensorView::matrix(res.out[rank].data(), ScalarType::kBFloat16, t, c.hidden));
    };

    normal_dispatch(normal[0]);
    const LowLatencyDispatchResult p1 = ll_dispatch(ll[0]);
    normal_combine(normal[0]);
    ll_combine(ll[0], p1);
    const LowLatencyDispatchResult p2 = ll_dispatch(ll[1]);
    normal_dispatch(normal[1]);
    ll_combine(ll[1], p2);
    normal_combine(normal[1]);
    const LowLatencyDispatchResult p3 = ll_dispatch(ll[2]);
    ll_combine(ll[2], p3);
  });
  for (size_t i = 0; i < ll.size(); ++i) {
    SCOPED_TRACE("low-latency round " + std::to_string(i + 1));
    check_low_latency_round(c, w, ll[i], i + 1);
  }
  for (size_t i = 0; i < normal.size(); ++i) {
    SCOPED_TRACE("normal round " + std::to_string(i + 1));
    testing::check_round(c, w, normal[i], i + 1);
  }
}

TEST(LowLatency, SeveralRoundsInterleavedWithNormalMode) {
  check_rounds_interleaved_with_normal_mode(3, 0);
}

TEST(LowLatency, SeveralRoundsInterleavedWithNormalModeOverTwoNodes) {
  check_rounds_interleaved_with_normal_mode(4, 2);
}

TEST(LowLatency, CombineSumsSlotsAscendingWithoutFma) {
  // Hand-made y and weights whose expert-side sum shows both the order of the slots and a fused
  // multiply-add. Rank 0's token 0 names local experts 0 and 1 with w = 1 + 2^-23 and y = -a, +a
  // (a = 1 + 2^-7): each product rounds to -b, +b, so the sum is exactly 0; an FMA would keep
  // the product's dropped 2^-30. Token 1 names experts 0, 1, 2 with w = 1 and y = 1, -1, 2^-30:
  // ascending slots give 2^-30, descending 0.
  for (CombineDtype combine : kAllCombineDtypes) {
    SCOPED_TRACE(to_string(combine));
    const InputSpec spec = spec_for(2, 8, 4, 128, 4, {DispatchDtype::bf16, combine});
    const OpConfig& c = spec.config;
    std::vector<RankInput> inputs = make_inputs(spec, test_seed(), {2, 1});
    const float w_odd = 1.0f + std::ldexp(1.0f, -23);
    const std::vector<std::vector<int32_t>> idx = {{0, 1, -1, -1}, {0, 1, 2, -1}};
    const std::vector<std::vector<float>> w = {{w_odd, w_odd, 0, 0}, {1, 1, 1, 0}};
    for (int t = 0; t < 2; ++t) {
      for (int k = 0; k < 4; ++k) {
        inputs[0].topk_idx[t * 4 + k] = idx[t][k];
        inputs[0].topk_weights[t * 4 + k] = w[t][k];
      }
    }
    inputs[1].mask_token(0);
    const float a = 1.0f + std::ldexp(1.0f, -7);
    // y value of (token of rank 0, local expert of rank 0).
    const float values[2][3] = {{-a, a, 0.0f}, {1.0f, -1.0f, std::ldexp(1.0f, -30)}};
    const auto make_y = [&](const testing::LowLatencyOutputs& recv) {
      std::vector<uint16_t> y(4 * recv.slab_rows * c.hidden, 0xffff);
      for (int e = 0; e < 4; ++e) {
        for (int32_t i = 0; i < recv.recv_count[e]; ++i) {
          const int64_t row = e * recv.slab_rows + i;
          const uint16_t v = formats::float_to_bf16(values[recv.recv_src_token[row]][e]);
          std::fill(y.begin() + row * c.hidden, y.begin() + (row + 1) * c.hidden, v);
        }
      }
      return y;
    };
    testing::LowLatencyOutputs received;
    std::vector<uint16_t> out(2 * c.hidden, 0xffff);
    testing::run_ranks(2, [&](int rank, const std::shared_ptr<Communicator>& comm) {
      std::shared_ptr<Op> op = create_op(comm, c);
      const LowLatencyDispatchResult d = op->low_latency_dispatch(inputs[rank].args());
      const testing::LowLatencyOutputs recv = reference::copy_low_latency_outputs(d);
      const std::vector<uint16_t> y = make_y(recv);
      std::vector<uint16_t> rank_out(inputs[rank].num_tokens * c.hidden, 0xffff);
      op->low_latency_combine(TensorView::tensor3(y.data(), ScalarType::kBFloat16, 4, 8, c.hidden),
                              d.handle,
                              TensorView::matrix(rank_out.data(), ScalarType::kBFloat16,
                                                 inputs[rank].num_tokens, c.hidden));
      if (rank == 0) {
        received = recv;
        out = rank_out;
      }
    });
    // The reference, on its own slabs and the same hand-made y.
    const reference::Shape shape = testing::reference_shape(c, 2);
    const auto ref_inputs = testing::reference_inputs(inputs);
    std::vector<testing::LowLatencyOutputs> recv;
    std::vector<std::vector<uint16_t>> ys;
    for (int r = 0; r < 2; ++r) {
      recv.push_back(reference::low_latency_dispatch(shape, c.dispatch_dtype, 4, ref_inputs, r));
      ys.push_back(make_y(recv[r]));
    }
    testing::expect_same("recv_count", received.recv_count, recv[0].recv_count);
    testing::expect_same("out", out,
                         reference::low_latency_combine(shape, combine, ref_inputs, recv, ys, 0));
    if (combine == CombineDtype::bf16) {
      for (int64_t j = 0; j < c.hidden; ++j) {
        ASSERT_EQ(out[j], 0) << "token 0, column " << j;
        ASSERT_EQ(out[c.hidden + j], formats::float_to_bf16(std::ldexp(1.0f, -30)))
            << "token 1, column " << j;
      }
    }
  }
}

TEST(LowLatency, Deterministic) {
  // Two independent runs (fresh worlds, different thread timing) give identical bits.
  const InputSpec spec = spec_for(4, 16, 4, 128, 12, {DispatchDtype::fp4, CombineDtype::fp8});
  const std::vector<RankInput> inputs = make_inputs(spec, test_seed(), {12, 5, 9, 11});
  const auto a = testing::run_low_latency_rounds(spec.config, 4, {inputs}).front();
  const auto b = testing::run_low_latency_rounds(spec.config, 4, {inputs}).front();
  for (int r = 0; r < 4; ++r) {
    testing::expect_same("recv_x", a.received[r].recv_x, b.received[r].recv_x);
    testing::expect_same("recv_src_token", a.received[r].recv_src_token,
                         b.received[r].recv_src_token);
    testing::expect_same("out", a.out[r], b.out[r]);
  }
}

}  // namespace
}  // namespace moe_ep
