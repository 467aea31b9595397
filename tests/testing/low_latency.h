// Decode-mode test helpers: the scaled expert o_e(v) = bf16(v * (e + 1) / 8), applied to decode
// mode's slabs (y for low_latency_combine) and to normal mode's received rows (y for combine,
// formed as docs/decode-mode.md states so that both modes give the same out); the reference's
// expectation of one low-latency round; a driver that runs low-latency rounds on one op per rank;
// and the bit-exact check of one round (rows of recv_x below the counts, counts and sources
// exactly, out).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "formats/codecs.h"
#include "moe_ep/op.h"
#include "reference/reference.h"
#include "testing/harness.h"
#include "testing/inputs.h"
#include "testing/ranks.h"

namespace moe_ep::testing {

using reference::LowLatencyOutputs;

// Expert `expert` (global id) on one decoded element: bf16(v * (e + 1) / 8).
inline uint16_t expert_value(float v, int expert) {
  const float scaled = v * static_cast<float>(expert + 1);
  return formats::float_to_bf16(scaled * 0.125f);
}

// Decodes row `row` of dispatch-format rows (payload and scale bytes per row) into [H] floats.
inline std::vector<float> decode_dispatch_row(DispatchDtype dtype, int64_t hidden,
                                              const uint8_t* payload_rows,
                                              const uint8_t* scale_rows, int64_t row) {
  std::vector<float> values(hidden);  // [H]
  formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    const int64_t payload = formats::payload_bytes_of<F>(hidden);
    const int64_t num_scales = formats::scales_of<F>(hidden);
    std::vector<typename F::Scale> scales(std::max<int64_t>(num_scales, 1));  // aligned copy
    if (num_scales > 0) {
      std::memcpy(scales.data(), scale_rows + row * num_scales * sizeof(typename F::Scale),
                  num_scales * sizeof(typename F::Scale));
    }
    formats::decode_row<F>(payload_rows + row * payload, scales.data(), hidden, values.data());
  });
  return values;
}

// Decode mode's y on rank `rank`: [E/W, W*Tmax, H] bf16, o_e of each slab row below the count;
// rows past the count hold NaN (0xffff), so reading one shows in out.
inline std::vector<uint16_t> low_latency_expert(const LowLatencyOutputs& recv, const OpConfig& c,
                                                int world_size, int rank) {
  const int64_t h = c.hidden;
  const int local_experts = c.num_experts / world_size;
  std::vector<uint16_t> y(local_experts * recv.slab_rows * h, 0xffff);
  for (int e = 0; e < local_experts; ++e) {
    for (int64_t i = 0; i < recv.recv_count[e]; ++i) {
      const int64_t row = e * recv.slab_rows + i;
      const std::vector<float> v = decode_dispatch_row(c.dispatch_dtype, h, recv.recv_x.data(),
                                                       recv.recv_x_scales.data(), row);
      for (int64_t j = 0; j < h; ++j) y[row * h + j] = expert_value(v[j], rank * local_experts + e);
    }
  }
  return y;
}

// Normal mode's y on rank `rank` with the same experts: [R, H] bf16, y[i] = bf16(sum over the
// row's local slots k ascending of w_k * float(o_{e_k}(row i))), product then add, from 0.0f.
inline std::vector<uint16_t> normal_expert(const reference::DispatchOutputs& recv,
                                           const OpConfig& c, int world_size, int rank) {
  const int64_t h = c.hidden;
  const int k = c.topk;
  const int local_experts = c.num_experts / world_size;
  std::vector<uint16_t> y(recv.num_recv * h);
  for (int64_t i = 0; i < recv.num_recv; ++i) {
    const std::vector<float> v =
        decode_dispatch_row(c.dispatch_dtype, h, recv.recv_x.data(), recv.recv_x_scales.data(), i);
    for (int64_t j = 0; j < h; ++j) {
      float acc = 0.0f;
      for (int slot = 0; slot < k; ++slot) {
        const int32_t local = recv.recv_topk_idx[i * k + slot];
        if (local < 0) continue;
        const uint16_t o = expert_value(v[j], rank * local_experts + local);
        const float term = recv.recv_topk_weights[i * k + slot] * formats::bf16_to_float(o);
        acc = acc + term;
      }
      y[i * h + j] = formats::float_to_bf16(acc);
    }
  }
  return y;
}

// What one low-latency round must give on every rank, from the reference.
struct LowLatencyExpected {
  std::vector<LowLatencyOutputs> received;  // [W]
  std::vector<std::vector<uint16_t>> y;     // [W][E/W, W*Tmax, H] bf16 expert outputs
  std::vector<std::vector<uint16_t>> out;   // [W][T_s, H] bf16
};

inline LowLatencyExpected expect_low_latency_round(const OpConfig& c, int world_size,
                                                   const std::vector<RankInput>& inputs) {
  const reference::Shape shape = reference_shape(c, world_size);
  const std::vector<reference::RankInput> ref_inputs = reference_inputs(inputs);
  LowLatencyExpected e;
  for (int r = 0; r < world_size; ++r) {
    e.received.push_back(reference::low_latency_dispatch(shape, c.dispatch_dtype,
                                                         c.max_tokens_per_rank, ref_inputs, r));
    e.y.push_back(low_latency_expert(e.received[r], c, world_size, r));
  }
  for (int s = 0; s < world_size; ++s) {
    e.out.push_back(
        reference::low_latency_combine(shape, c.combine_dtype, ref_inputs, e.received, e.y, s));
  }
  return e;
}

// What every rank saw in one low-latency round.
struct LowLatencyRound {
  std::vector<RankInput> inputs;                // [W]
  std::vector<LowLatencyOutputs> received;      // [W]
  std::vector<LowLatencyDispatchResult> views;  // [W] metadata only (the views may be stale)
  std::vector<uint64_t> op_uids;                // [W]
  std::vector<std::vector<uint16_t>> out;       // [W][T, H] bf16

  LowLatencyRound(int world_size, std::vector<RankInput> round_inputs)
      : inputs(std::move(round_inputs)),
        received(world_size),
        views(world_size),
        op_uids(world_size),
        out(world_size) {}

  // Rank `rank`'s low_latency_dispatch, the scaled expert and low_latency_combine on `op`.
  void run(int rank, Op& op) {
    const OpConfig& c = op.config();
    const int w = op.world_size();
    const LowLatencyDispatchResult d = op.low_latency_dispatch(inputs[rank].args());
    views[rank] = d;
    op_uids[rank] = op.uid();
    received[rank] = reference::copy_low_latency_outputs(d);
    const std::vector<uint16_t> y = low_latency_expert(received[rank], c, w, rank);
    const int64_t t = inputs[rank].num_tokens;
    out[rank].assign(t * c.hidden, 0xffff);  // NaN: an untouched row shows
    op.low_latency_combine(
        TensorView::tensor3(y.data(), ScalarType::kBFloat16, c.num_experts / w,
                            static_cast<int64_t>(w) * c.max_tokens_per_rank, c.hidden),
        d.handle, TensorView::matrix(out[rank].data(), ScalarType::kBFloat16, t, c.hidden));
  }
};

// Runs every round on one op per rank; rounds[i][r] is rank r's input in round i.
inline std::vector<LowLatencyRound> run_low_latency_rounds(
    const OpConfig& config, int world_size, const std::vector<std::vector<RankInput>>& rounds) {
  std::vector<LowLatencyRound> results;
  for (const auto& inputs : rounds) results.emplace_back(world_size, inputs);
  run_ranks(world_size, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    std::shared_ptr<Op> op = create_op(comm, config);
    for (LowLatencyRound& round : results) round.run(rank, *op);
  });
  return results;
}

// Every output of one rank's low_latency_dispatch (the slabs as copied to the host), bit for bit.
inline void expect_same_low_latency(const LowLatencyOutputs& got, const LowLatencyOutputs& want) {
  EXPECT_EQ(got.slab_rows, want.slab_rows);
  expect_same("recv_count", got.recv_count, want.recv_count);
  expect_same("recv_x", got.recv_x, want.recv_x);
  expect_same("recv_x_scales", got.recv_x_scales, want.recv_x_scales);
  expect_same("recv_src_rank", got.recv_src_rank, want.recv_src_rank);
  expect_same("recv_src_token", got.recv_src_token, want.recv_src_token);
  expect_same("recv_src_slot", got.recv_src_slot, want.recv_src_slot);
}

// Checks one round on every rank against the reference, bit for bit.
inline void check_low_latency_round(const OpConfig& config, int world_size,
                                    const LowLatencyRound& res, uint64_t expected_call_seq = 1) {
  const LowLatencyExpected expected = expect_low_latency_round(config, world_size, res.inputs);
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("low_latency_dispatch on rank " + std::to_string(r));
    const LowLatencyOutputs& got = res.received[r];
    const LowLatencyOutputs& want = expected.received[r];
    expect_same_low_latency(got, want);
    const LowLatencyHandle& h = res.views[r].handle;
    EXPECT_EQ(h.op_uid, res.op_uids[r]);
    EXPECT_EQ(h.call_seq, expected_call_seq);
    EXPECT_EQ(h.num_tokens, res.inputs[r].num_tokens);
  }
  for (int s = 0; s < world_size; ++s) {
    SCOPED_TRACE("low_latency_combine on rank " + std::to_string(s));
    expect_same("out", res.out[s], expected.out[s]);
  }
}

// Rank `rank`'s normal-mode dispatch of `in`, the scaled expert formed as normal_expert, and
// combine on `op`; returns out ([T, H] bf16).
inline std::vector<uint16_t> run_normal_scaled(int rank, Op& op, const RankInput& in) {
  const OpConfig& c = op.config();
  const DispatchResult d = op.dispatch(in.args());
  const std::vector<uint16_t> y =
      normal_expert(reference::copy_outputs(d), c, op.world_size(), rank);
  std::vector<uint16_t> out(in.num_tokens * c.hidden, 0xffff);
  op.combine(d.handle, TensorView::matrix(y.data(), ScalarType::kBFloat16, d.num_recv, c.hidden),
             TensorView::matrix(out.data(), ScalarType::kBFloat16, in.num_tokens, c.hidden));
  return out;
}

// Runs the same inputs through normal mode and decode mode on one op per rank, with the same
// scaled experts; checks the decode round against the reference and that both modes' out agree
// bit for bit on every rank.
inline void check_modes_agree(const OpConfig& config, int world_size,
                              const std::vector<RankInput>& inputs) {
  LowLatencyRound decode(world_size, inputs);
  std::vector<std::vector<uint16_t>> normal_out(world_size);
  run_ranks(world_size, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    std::shared_ptr<Op> op = create_op(comm, config);
    normal_out[rank] = run_normal_scaled(rank, *op, inputs[rank]);
    decode.run(rank, *op);
  });
  check_low_latency_round(config, world_size, decode);
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": decode mode against normal mode");
    expect_same("out", decode.out[r], normal_out[r]);
  }
}

}  // namespace moe_ep::testing
