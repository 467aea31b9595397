// Decode mode with an expert named twice in one token, which only validation mode rejects: this
// binary turns validation off for its whole process (MOE_EP_VALIDATE=0, overriding ctest's 1,
// before Knobs::get() first reads the environment). A token naming a local expert in two slots
// gets one row in that expert's slab, attributed to the first slot; both slots' weights still
// apply in the combine, so decode mode keeps agreeing with normal mode bit for bit.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "moe_ep/config.h"
#include "testing/harness.h"
#include "testing/low_latency.h"

namespace moe_ep {
namespace {

using testing::DtypePair;
using testing::InputSpec;
using testing::make_inputs;
using testing::RankInput;
using testing::test_seed;

const bool kNoValidateEnv = (setenv("MOE_EP_VALIDATE", "0", /*overwrite=*/1), true);

InputSpec spec_for(int world_size, DtypePair pair) {
  InputSpec spec;
  spec.world_size = world_size;
  spec.config.num_experts = 8;
  spec.config.topk = 4;
  spec.config.hidden = 128;
  spec.config.max_tokens_per_rank = 6;
  spec.config.dispatch_dtype = pair.dispatch;
  spec.config.combine_dtype = pair.combine;
  spec.config.low_latency = true;
  spec.mask_prob = 0.0;
  return spec;
}

// Rank 0: token 1 names expert 3 in slots 0 and 2; token 4 names expert 6 in slots 1, 2 and 3.
// Rank 1: token 0 names expert 1 in slots 2 and 3 (slot 0 masked).
void add_duplicates(std::vector<RankInput>& in) {
  const auto set = [](RankInput& r, int64_t t, std::vector<int32_t> slots) {
    for (int k = 0; k < r.topk; ++k) r.topk_idx[t * r.topk + k] = slots[k];
  };
  set(in[0], 1, {3, 5, 3, 0});
  set(in[0], 4, {2, 6, 6, 6});
  set(in[1], 0, {-1, 7, 1, 1});
}

TEST(LowLatencyDuplicates, ValidationIsOff) {
  ASSERT_FALSE(Knobs::get().validate) << "this binary sets MOE_EP_VALIDATE=0";
}

TEST(LowLatencyDuplicates, OneRowPerExpertFirstSlotAndTheReference) {
  for (const DtypePair& pair : testing::all_pairs()) {
    SCOPED_TRACE(testing::pair_name(pair));
    const InputSpec spec = spec_for(2, pair);
    std::vector<RankInput> inputs = make_inputs(spec, test_seed(), {6, 3});
    add_duplicates(inputs);
    const testing::LowLatencyRound res =
        testing::run_low_latency_rounds(spec.config, 2, {inputs}).front();
    testing::check_low_latency_round(spec.config, 2, res);

    // Expert 3 is local expert 3 of rank 0 (E/W = 4): (rank 0, token 1) appears once, slot 0.
    // Expert 6 is local expert 2 of rank 1: (rank 0, token 4) once, slot 1.
    const auto rows_of = [&](int rank, int local, int src, int token, std::vector<int>* slots) {
      const auto& recv = res.received[rank];
      int n = 0;
      for (int32_t i = 0; i < recv.recv_count[local]; ++i) {
        const int64_t row = local * recv.slab_rows + i;
        if (recv.recv_src_rank[row] == src && recv.recv_src_token[row] == token) {
          ++n;
          slots->push_back(recv.recv_src_slot[row]);
        }
      }
      return n;
    };
    std::vector<int> slots;
    EXPECT_EQ(rows_of(0, 3, 0, 1, &slots), 1);
    EXPECT_EQ(rows_of(1, 2, 0, 4, &slots), 1);
    EXPECT_EQ(rows_of(0, 1, 1, 0, &slots), 1);
    EXPECT_EQ(slots, std::vector<int>({0, 1, 2}));
  }
}

TEST(LowLatencyDuplicates, DecodeModeEqualsNormalMode) {
  for (const DtypePair& pair : testing::all_pairs()) {
    SCOPED_TRACE(testing::pair_name(pair));
    for (int world_size : {1, 2, 4}) {
      const InputSpec spec = spec_for(world_size, pair);
      std::vector<int64_t> tokens(world_size, 6);
      tokens[1 % world_size] = 3;
      std::vector<RankInput> inputs = make_inputs(spec, test_seed() + 11, tokens);
      if (world_size >= 2) {
        add_duplicates(inputs);
      } else {
        inputs[0].topk_idx[0] = inputs[0].topk_idx[1];  // token 0: slots 0 and 1 alike
      }
      testing::check_modes_agree(spec.config, world_size, inputs);
    }
  }
}

}  // namespace
}  // namespace moe_ep
