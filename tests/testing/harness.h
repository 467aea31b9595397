// Drives a CPU op through dispatch -> identity expert -> combine on W threads and checks every
// output bit for bit against the plain-loop expectation of testing/reference.h. A case can run
// several rounds on the same op (the op is reused, as in a training loop).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "moe_ep/op.h"
#include "testing/inputs.h"
#include "testing/ranks.h"
#include "testing/reference.h"

namespace moe_ep::testing {

// What every rank saw in one round.
struct RoundResult {
  std::vector<RankInput> inputs;           // [W]
  std::vector<DispatchOutputs> received;   // [W]
  std::vector<Handle> handles;             // [W]
  std::vector<uint64_t> op_uids;           // [W]
  std::vector<std::vector<uint16_t>> out;  // [W][T, H] bf16
  std::vector<DispatchResult> views;       // [W] metadata only (the views are stale)
};

// Empty results for every round, sized for `world_size` ranks, holding the round's inputs.
inline std::vector<RoundResult> make_round_results(
    int world_size, const std::vector<std::vector<RankInput>>& rounds) {
  std::vector<RoundResult> results(rounds.size());
  for (size_t i = 0; i < rounds.size(); ++i) {
    results[i].inputs = rounds[i];
    results[i].received.resize(world_size);
    results[i].handles.resize(world_size);
    results[i].op_uids.resize(world_size);
    results[i].out.resize(world_size);
    results[i].views.resize(world_size);
  }
  return results;
}

// Runs every round on one op per rank; rounds[i][r] is rank r's input in round i.
inline std::vector<RoundResult> run_rounds(const OpConfig& config, int world_size,
                                           const std::vector<std::vector<RankInput>>& rounds) {
  std::vector<RoundResult> results = make_round_results(world_size, rounds);
  run_ranks(world_size, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    std::shared_ptr<Op> op = create_op(comm, config);
    for (size_t i = 0; i < rounds.size(); ++i) {
      RoundResult& res = results[i];
      const RankInput& in = rounds[i][rank];
      const DispatchResult d = op->dispatch(in.args());
      res.received[rank] = copy_outputs(d);
      res.handles[rank] = d.handle;
      res.op_uids[rank] = op->uid();
      res.views[rank] = d;
      const std::vector<uint16_t> y = identity_expert(res.received[rank], config);
      // Poison the output with 0xffff (a NaN) so that untouched rows are caught.
      res.out[rank].assign(in.num_tokens * config.hidden, 0xffff);
      op->combine(d.handle,
                  TensorView::matrix(y.data(), ScalarType::kBFloat16, d.num_recv, config.hidden),
                  TensorView::matrix(res.out[rank].data(), ScalarType::kBFloat16, in.num_tokens,
                                     config.hidden));
    }
  });
  return results;
}

inline RoundResult run_once(const OpConfig& config, int world_size,
                            const std::vector<RankInput>& inputs) {
  return run_rounds(config, world_size, {inputs}).front();
}

// Bit-exact comparison that reports the first differing element instead of both vectors.
template <typename T>
void expect_same(const std::string& what, const std::vector<T>& actual,
                 const std::vector<T>& expected) {
  ASSERT_EQ(actual.size(), expected.size()) << what << ": sizes differ";
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::memcmp(&actual[i], &expected[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << " differs first at element " << i << " of " << actual.size()
                    << ": got " << +actual[i] << ", expected " << +expected[i];
      return;
    }
  }
}

// Checks one round: every rank's dispatch outputs and combine output against the reference.
inline void check_round(const OpConfig& config, int world_size, const RoundResult& res,
                        uint64_t expected_call_seq = 1) {
  std::vector<DispatchOutputs> expected(world_size);
  std::vector<std::vector<uint16_t>> y(world_size);
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("dispatch on rank " + std::to_string(r));
    expected[r] = expect_dispatch(res.inputs, config, world_size, r);
    const DispatchOutputs& got = res.received[r];
    EXPECT_EQ(got.num_recv, expected[r].num_recv);
    expect_same("recv_x", got.x_payload, expected[r].x_payload);
    expect_same("recv_x_scales", got.x_scales, expected[r].x_scales);
    expect_same("recv_topk_idx", got.topk_idx, expected[r].topk_idx);
    expect_same("recv_topk_weights", got.topk_weights, expected[r].topk_weights);
    expect_same("recv_src_rank", got.src_rank, expected[r].src_rank);
    expect_same("recv_src_token", got.src_token, expected[r].src_token);
    expect_same("recv_count_per_local_expert", got.count_per_local_expert,
                expected[r].count_per_local_expert);
    const Handle& h = res.handles[r];
    EXPECT_EQ(h.op_uid, res.op_uids[r]);
    EXPECT_EQ(h.call_seq, expected_call_seq);
    EXPECT_EQ(h.num_tokens, res.inputs[r].num_tokens);
    EXPECT_EQ(h.num_recv, expected[r].num_recv);
    y[r] = identity_expert(expected[r], config);
  }
  for (int s = 0; s < world_size; ++s) {
    SCOPED_TRACE("combine on rank " + std::to_string(s));
    expect_same("out", res.out[s],
                expect_combine(expected, y, config, s, res.inputs[s].num_tokens));
  }
}

// Every (dispatch, combine) dtype pair, for loops over the 3x3 matrix.
struct DtypePair {
  DispatchDtype dispatch;
  CombineDtype combine;
};
inline std::vector<DtypePair> all_pairs() {
  std::vector<DtypePair> pairs;
  for (DispatchDtype d : kAllDispatchDtypes) {
    for (CombineDtype c : kAllCombineDtypes) pairs.push_back({d, c});
  }
  return pairs;
}
inline std::string pair_name(const DtypePair& p) {
  return std::string(short_name(p.dispatch)) + "_" + short_name(p.combine);
}

}  // namespace moe_ep::testing
