// Decode mode on the CUDA backend where test_gpu_low_latency.cu does not reach (label gpu, skipped
// without a GPU), at W = 2 on one GPU, every dtype pair, every output compared bit for bit with
// the reference: a token naming one expert in several slots, which only validation rejects (this
// binary turns validation off for its process, as test_low_latency_duplicates.cc does on the
// CPU): one slab row per expert, attributed to the first slot, with the send's slot ranks
// marking the later slots; and topk above 32, where each lane of a warp holds two slots (the
// send's slot ranks, the expand's slab rows and the combine's weighted sum).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "moe_ep/config.h"
#include "testing/gpu_low_latency.h"
#include "testing/gpu_world.h"
#include "testing/low_latency.h"

namespace moe_ep {
namespace {

using testing::DtypePair;
using testing::InputSpec;
using testing::LowLatencyRound;
using testing::RankInput;

const bool kNoValidateEnv = (setenv("MOE_EP_VALIDATE", "0", /*overwrite=*/1), true);

OpConfig shape_config(DtypePair pair, int num_experts, int topk, int hidden, int max_tokens) {
  OpConfig c;
  c.num_experts = num_experts;
  c.topk = topk;
  c.hidden = hidden;
  c.max_tokens_per_rank = max_tokens;
  c.dispatch_dtype = pair.dispatch;
  c.combine_dtype = pair.combine;
  c.low_latency = true;
  return c;
}

std::vector<RankInput> shape_inputs(const OpConfig& c, int world_size, double mask_prob,
                                    uint64_t salt, const std::vector<int64_t>& tokens) {
  InputSpec spec;
  spec.world_size = world_size;
  spec.config = c;
  spec.mask_prob = mask_prob;
  return testing::make_inputs(spec, testing::test_seed() + salt, tokens);
}

// One eager round of `inputs` on one op per rank of a one-GPU world, checked bit for bit.
void run_and_check(const OpConfig& c, int world_size, const std::vector<RankInput>& inputs) {
  LowLatencyRound round(world_size, inputs);
  auto comms = make_single_gpu_world(world_size);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = testing::kept_op(comm, c);
    testing::TestStream stream;
    testing::gpu_low_latency_round(*op, rank, round, stream.s);
  });
  testing::check_low_latency_round(c, world_size, round, 1);
}

TEST(GpuLowLatencyShapes, ValidationIsOff) {
  ASSERT_FALSE(Knobs::get().validate) << "this binary sets MOE_EP_VALIDATE=0";
}

TEST(GpuLowLatencyShapes, DuplicateSlotsGetOneRowAtTheFirstSlot) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world_size = 2;
  for (const DtypePair& pair : testing::all_pairs()) {
    SCOPED_TRACE(testing::pair_name(pair));
    const OpConfig c = shape_config(pair, 16, 4, 256, 8);
    std::vector<RankInput> inputs = shape_inputs(c, world_size, 0.0, 0, {8, 5});
    const auto set = [](RankInput& r, int64_t t, std::vector<int32_t> slots) {
      for (int k = 0; k < r.topk; ++k) r.topk_idx[t * r.topk + k] = slots[k];
    };
    // Experts 0-7 are rank 0's, 8-15 rank 1's. Rank 0: token 1 names expert 3 twice, token 4
    // expert 6 three times, token 6 expert 12 (of rank 1) twice; rank 1: token 0 names expert 1
    // twice after a masked slot, token 2 expert 12 in every slot.
    set(inputs[0], 1, {3, 5, 3, 0});
    set(inputs[0], 4, {2, 6, 6, 6});
    set(inputs[0], 6, {12, 4, 12, 9});
    set(inputs[1], 0, {-1, 7, 1, 1});
    set(inputs[1], 2, {12, 12, 12, 12});
    run_and_check(c, world_size, inputs);
  }
}

TEST(GpuLowLatencyShapes, TopkAbove32) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world_size = 2;
  for (const DtypePair& pair : testing::all_pairs()) {
    SCOPED_TRACE(testing::pair_name(pair));
    const OpConfig c = shape_config(pair, 128, 40, 512, 16);
    run_and_check(c, world_size, shape_inputs(c, world_size, 0.2, 7, {16, 11}));
  }
}

// The step kernel finds that a token names an expert twice when its bit is already set, then
// marks the later slots by reading the earlier ones (ll_rank_slots), whatever the slots' lanes:
// top-k 6 (tokens straddle warps) and 32 (a token is a whole warp). Every third token names
// slot 0's expert again in slot 1 and in its last slot.
TEST(GpuLowLatencyShapes, RepeatedExpertsWithTopkThatDividesThirtyTwoAndNot) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world_size = 2;
  for (const int topk : {6, 32}) {
    for (const DtypePair& pair : {DtypePair{DispatchDtype::bf16, CombineDtype::bf16},
                                  DtypePair{DispatchDtype::fp8, CombineDtype::fp8}}) {
      SCOPED_TRACE(testing::pair_name(pair) + " topk " + std::to_string(topk));
      const OpConfig c = shape_config(pair, 64, topk, 256, 40);
      std::vector<RankInput> inputs = shape_inputs(c, world_size, 0.1, 13, {40, 23});
      for (RankInput& r : inputs) {
        for (int64_t t = 0; t < r.num_tokens; t += 3) {
          int32_t* slots = r.topk_idx.data() + t * r.topk;
          if (slots[0] < 0) slots[0] = static_cast<int32_t>(t % 64);
          slots[1] = slots[0];
          slots[r.topk - 1] = slots[0];
        }
      }
      run_and_check(c, world_size, inputs);
    }
  }
}

// The step kernel ranks a dispatch's slots in windows of tokens sized by its shared memory
// (ll_rank_slots: at E = 4096, 32 tokens): 100 and 67 tokens are 4 and 3 windows, and slots
// 0 and 1 of every token name one of a few experts (rank 0's 0-4, rank 1's 2048-2050), so the
// ranks and counts carry over every window; slot 2 names slot 0's expert again in every fourth
// token (one bitmask bit, one row).
TEST(GpuLowLatencyShapes, ManyExpertsRankSlotsAcrossTokenWindows) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world_size = 2;
  for (const DtypePair& pair : {DtypePair{DispatchDtype::bf16, CombineDtype::bf16},
                                DtypePair{DispatchDtype::fp8, CombineDtype::fp8},
                                DtypePair{DispatchDtype::fp4, CombineDtype::bf16}}) {
    SCOPED_TRACE(testing::pair_name(pair));
    const OpConfig c = shape_config(pair, 4096, 8, 128, 100);
    std::vector<RankInput> inputs = shape_inputs(c, world_size, 0.1, 11, {100, 67});
    for (RankInput& r : inputs) {
      for (int64_t t = 0; t < r.num_tokens; ++t) {
        int32_t* slots = r.topk_idx.data() + t * r.topk;
        slots[0] = static_cast<int32_t>(t % 5);
        slots[1] = static_cast<int32_t>(2048 + t % 3);
        if (t % 4 == 0) slots[2] = slots[0];
      }
    }
    run_and_check(c, world_size, inputs);
  }
}

}  // namespace
}  // namespace moe_ep
