// Drives a CPU op through dispatch -> identity expert -> combine on W threads and checks every
// output bit for bit against the plain-loop reference of src/reference/reference.h (the one the
// bench's --check uses too). A case can run several rounds on the same op (the op is reused, as
// in a training loop). Also the adapters from the tests' inputs to the reference's host arrays.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "moe_ep/op.h"
#include "reference/reference.h"
#include "testing/inputs.h"
#include "testing/ranks.h"

namespace moe_ep::testing {

using reference::copy_outputs;
using reference::DispatchOutputs;

// The reference's shape of an op of `world_size` ranks.
inline reference::Shape reference_shape(const OpConfig& c, int world_size) {
  return reference::Shape{world_size, c.hidden, c.num_experts, c.topk, c.ranks_per_node};
}

// Every rank's inputs as the reference's host arrays; they point into `inputs`, which must
// outlive them. Pre-quantized inputs pass their payload and scales as given.
inline std::vector<reference::RankInput> reference_inputs(const std::vector<RankInput>& inputs) {
  std::vector<reference::RankInput> out(inputs.size());
  for (size_t s = 0; s < inputs.size(); ++s) {
    const RankInput& in = inputs[s];
    out[s].num_tokens = in.num_tokens;
    out[s].x = in.x.data();
    if (in.prequantized()) {
      out[s].x_payload = in.x_payload.data();
      out[s].x_scales = in.x_scales.data();
    }
    out[s].topk_idx = in.topk_idx.data();
    out[s].topk_weights = in.topk_weights.data();
  }
  return out;
}

// The identity expert of the reference on one rank's received rows. Returns [R, H] bf16. It
// reads only hidden and topk, so the result does not depend on world_size.
inline std::vector<uint16_t> identity_expert(const DispatchOutputs& recv, const OpConfig& c,
                                             int world_size = 1) {
  return reference::identity_expert(reference_shape(c, world_size), c.dispatch_dtype, recv);
}

// What one round must give on every rank, from the reference.
struct Expected {
  std::vector<DispatchOutputs> received;   // [W] dispatch outputs
  std::vector<std::vector<uint16_t>> y;    // [W][R_r, H] bf16 identity expert outputs
  std::vector<std::vector<uint16_t>> out;  // [W][T_s, H] bf16 combine outputs
};

inline Expected expect_round(const OpConfig& c, int world_size,
                             const std::vector<RankInput>& inputs) {
  const reference::Shape shape = reference_shape(c, world_size);
  const std::vector<reference::RankInput> ref_inputs = reference_inputs(inputs);
  Expected e;
  for (int r = 0; r < world_size; ++r) {
    e.received.push_back(reference::dispatch(shape, c.dispatch_dtype, ref_inputs, r));
    e.y.push_back(reference::identity_expert(shape, c.dispatch_dtype, e.received[r]));
  }
  for (int s = 0; s < world_size; ++s) {
    e.out.push_back(
        reference::combine(shape, c.combine_dtype, e.received, e.y, s, inputs[s].num_tokens));
  }
  return e;
}

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

// Every output of one rank's dispatch, bit for bit.
inline void expect_same_dispatch(const DispatchOutputs& got, const DispatchOutputs& want) {
  EXPECT_EQ(got.num_recv, want.num_recv);
  expect_same("recv_x", got.recv_x, want.recv_x);
  expect_same("recv_x_scales", got.recv_x_scales, want.recv_x_scales);
  expect_same("recv_topk_idx", got.recv_topk_idx, want.recv_topk_idx);
  expect_same("recv_topk_weights", got.recv_topk_weights, want.recv_topk_weights);
  expect_same("recv_src_rank", got.recv_src_rank, want.recv_src_rank);
  expect_same("recv_src_token", got.recv_src_token, want.recv_src_token);
  expect_same("recv_count_per_local_expert", got.recv_count_per_local_expert,
              want.recv_count_per_local_expert);
}

// Checks one round: every rank's dispatch outputs and combine output against the reference
// (with config.ranks_per_node: dispatch as one node, combine node by node).
inline void check_round(const OpConfig& config, int world_size, const RoundResult& res,
                        uint64_t expected_call_seq = 1) {
  const Expected expected = expect_round(config, world_size, res.inputs);
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("dispatch on rank " + std::to_string(r));
    const DispatchOutputs& want = expected.received[r];
    expect_same_dispatch(res.received[r], want);
    const Handle& h = res.handles[r];
    EXPECT_EQ(h.op_uid, res.op_uids[r]);
    EXPECT_EQ(h.call_seq, expected_call_seq);
    EXPECT_EQ(h.num_tokens, res.inputs[r].num_tokens);
    EXPECT_EQ(h.num_recv, want.num_recv);
  }
  for (int s = 0; s < world_size; ++s) {
    SCOPED_TRACE("combine on rank " + std::to_string(s));
    expect_same("out", res.out[s], expected.out[s]);
  }
}

// Every (dispatch, combine) dtype pair (3 x 4).
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
