// The independent reference of `moe-ep bench --check` (STYLE: a readable pure-C++ reference,
// plain loops over ranks, tokens and experts, the same format traits). It shares nothing with the
// library but the wire codecs of src/formats: routing, ordering, the identity expert and the
// combine sum are written out again here from DESIGN 2-3, so a bug in src/core or a backend
// cannot hide by being repeated in the expectation.
#pragma once

#include <cstdint>
#include <vector>

#include "moe_ep/dtypes.h"

namespace moe_ep::cli {

struct RefShape {
  int ranks = 1;    // W
  int hidden = 0;   // H
  int experts = 1;  // E, E % W == 0
  int topk = 1;     // K
};

// One source rank's inputs, as plain host arrays.
struct RefInput {
  int64_t num_tokens = 0;               // T
  const uint16_t* x = nullptr;          // [T, H] bf16 bits
  const int32_t* topk_idx = nullptr;    // [T, K]
  const float* topk_weights = nullptr;  // [T, K]
};

// Everything dispatch returns on one rank, as host arrays. The harness downloads the op's
// outputs into the same struct, so that both sides are compared field by field.
struct DispatchOutputs {
  int64_t num_recv = 0;                              // R
  std::vector<uint8_t> recv_x;                       // [R, payload bytes per row]
  std::vector<uint8_t> recv_x_scales;                // [R, scale bytes per row] raw bytes
  std::vector<int32_t> recv_topk_idx;                // [R, K] local expert id or -1
  std::vector<float> recv_topk_weights;              // [R, K]
  std::vector<int32_t> recv_src_rank;                // [R]
  std::vector<int32_t> recv_src_token;               // [R]
  std::vector<int32_t> recv_count_per_local_expert;  // [E / W]
};

// What rank `dest` must receive from the inputs of all ranks.
DispatchOutputs reference_dispatch(const RefShape& shape, DispatchDtype dtype,
                                   const std::vector<RefInput>& inputs, int dest);

// The identity expert on one rank's received rows: y[i] = bf16(sum over slots k ascending with
// recv_topk_idx[i][k] >= 0 of w_k * decode(recv_x[i])), in fp32 from 0. Returns [R, H] bf16.
std::vector<uint16_t> reference_expert(const RefShape& shape, DispatchDtype dtype,
                                       const DispatchOutputs& recv);

// What combine must return on rank `src` ([T, H] bf16 bits), given every rank's received rows
// and expert output y ([R_r, H] each).
std::vector<uint16_t> reference_combine(const RefShape& shape, CombineDtype dtype,
                                        const std::vector<DispatchOutputs>& recv,
                                        const std::vector<std::vector<uint16_t>>& y, int src,
                                        int64_t num_tokens);

}  // namespace moe_ep::cli
