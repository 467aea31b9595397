// The one plain-loop reference of dispatch -> identity expert -> combine, and of decode mode's
// low_latency_dispatch and low_latency_combine, that the gtests and `moe-ep bench --check` compare
// the library with, bit for bit. It shares only the wire codecs (formats/codecs.h: encode_row,
// decode_elem and the facts of each format) with the library; routing, the canonical row order, the
// identity expert and the combine sums are written out here again in plain loops over ranks, tokens
// and slots (docs/design.md: Dispatch, Combine, Several nodes, Decode mode, Determinism and
// bit-exactness), so a bug in src/core or a backend cannot hide by being repeated in the
// expectation. Its functions take plain host arrays and structs. The header also holds copy_outputs
// and copy_low_latency_outputs, which copy what an op's dispatch returned into the same owned
// structs, so that both sides are compared field by field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "moe_ep/dtypes.h"
#include "moe_ep/op.h"
#include "moe_ep/tensor.h"

namespace moe_ep::reference {

struct Shape {
  int ranks = 1;    // W
  int hidden = 0;   // H
  int experts = 1;  // E, a multiple of W; rank r owns experts [r * E / W, (r + 1) * E / W)
  int topk = 1;     // K
  // L: ranks [n*L, (n+1)*L) form node n (docs/design.md#several-nodes); 0 means W, one node.
  // Only the combines read it: neither dispatch's outputs depend on it.
  int ranks_per_node = 0;
};

// One source rank's inputs as host arrays. x holds bf16 rows; pre-quantized input instead sets
// x_payload (and x_scales when the dispatch dtype has scales), rows of the dispatch dtype's wire
// format that dispatch forwards unchanged.
struct RankInput {
  int64_t num_tokens = 0;               // T
  const uint16_t* x = nullptr;          // [T, H] bf16 bits; unused when x_payload is set
  const uint8_t* x_payload = nullptr;   // [T, payload bytes per row] pre-quantized, or null
  const uint8_t* x_scales = nullptr;    // [T, scale bytes per row] their scales (raw bytes)
  const int32_t* topk_idx = nullptr;    // [T, K] global expert id, -1 = masked slot
  const float* topk_weights = nullptr;  // [T, K]
};

// Everything dispatch returns on one rank, as owned host arrays (R = num_recv rows).
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

// What rank `dest` must receive from the inputs of all ranks (inputs[s] is rank s's): a token
// once if any unmasked slot names one of dest's experts, rows by source rank ascending, then
// source token ascending; its slots as local expert ids (-1 for other ranks' experts and masked
// slots) with all K weights; per local expert the number of rows that name it.
DispatchOutputs dispatch(const Shape& shape, DispatchDtype dtype,
                         const std::vector<RankInput>& inputs, int dest);

// The identity expert on one rank's received rows: y[i] = bf16(sum over slots k ascending with
// recv_topk_idx[i][k] >= 0 of w_k * decode(recv_x[i])), in fp32 from 0.0f, product then add (no
// FMA). Returns [R, H] bf16 bits. Throws moe_ep::Internal when `recv` holds fewer than num_recv
// rows in recv_x, recv_x_scales or the top-k arrays.
std::vector<uint16_t> identity_expert(const Shape& shape, DispatchDtype dtype,
                                      const DispatchOutputs& recv);

// What combine must return on source rank `src` ([T, H] bf16 bits, T = num_tokens), given every
// rank's received rows recv[r] and expert output y[r] ([R_r, H] bf16 bits). One node: out[t] =
// bf16(sum over ranks r ascending that hold a row from (src, t) of decode(encode(y_r[row])))
// in fp32 from 0.0f, rounded once; zeros for a token no rank holds. Several nodes
// (shape.ranks_per_node < W): out[t] = bf16(sum over nodes n ascending that hold t of v_n) in
// fp32 from 0.0f, where p_n = the fp32 sum from 0.0f over n's ranks r ascending that hold t of
// decode(encode(y_r[row])); v_n = p_n on src's own node, else decode(encode(bf16(p_n))).
std::vector<uint16_t> combine(const Shape& shape, CombineDtype dtype,
                              const std::vector<DispatchOutputs>& recv,
                              const std::vector<std::vector<uint16_t>>& y, int src,
                              int64_t num_tokens);

// The one-node combine whatever shape.ranks_per_node says: the rank-ascending sum above. Tests
// use it to show that the node order changes bits.
std::vector<uint16_t> flat_combine(const Shape& shape, CombineDtype dtype,
                                   const std::vector<DispatchOutputs>& recv,
                                   const std::vector<std::vector<uint16_t>>& y, int src,
                                   int64_t num_tokens);

// Decode mode (docs/decode-mode.md): everything low_latency_dispatch returns on one rank, as
// owned host arrays of the fixed shapes. Rows at or past a slab's count are zero bytes in recv_x
// and recv_x_scales (the op leaves them unspecified; copy_low_latency_outputs zeroes them) and -1
// in the source arrays (the op writes -1 there).
struct LowLatencyOutputs {
  int64_t slab_rows = 0;            // W * Tmax, rows per slab
  std::vector<int32_t> recv_count;  // [E/W]
  std::vector<uint8_t> recv_x;      // [E/W, W*Tmax, payload bytes per row]
  // [E/W, W*Tmax, scale bytes per row] raw bytes, rows whatever the op's scale layout
  // (copy_low_latency_outputs turns column-major scales into rows)
  std::vector<uint8_t> recv_x_scales;
  std::vector<int32_t> recv_src_rank;   // [E/W, W*Tmax]
  std::vector<int32_t> recv_src_token;  // [E/W, W*Tmax]
  std::vector<int32_t> recv_src_slot;   // [E/W, W*Tmax]
};

// What rank `dest` must hold after a low-latency dispatch of the inputs of all ranks, with
// max_tokens (Tmax) rows per source in every slab: for each local expert e, one row per (source
// rank s, token t) that names e in an unmasked slot, s ascending then t ascending from row 0,
// with its dispatch-format row, s, t and the first slot naming e.
LowLatencyOutputs low_latency_dispatch(const Shape& shape, DispatchDtype dtype, int64_t max_tokens,
                                       const std::vector<RankInput>& inputs, int dest);

// What low_latency_combine must return on source rank `src`, given every rank's slabs recv[r]
// and expert output y[r] ([E/W, W*Tmax, H] bf16 bits): on each rank r that holds token t,
// p_r = bf16(sum over t's unmasked slots k ascending whose expert e_k is r's, of
// w_k * float(y_r[e_k][row of (src, t)])) in fp32 from 0.0f, product then add; then out is
// combine (above) applied to those partials as the rows of y, so it follows shape.ranks_per_node:
// one node, out[t] = bf16(sum over those r ascending of decode(encode(p_r))) in fp32 from 0.0f;
// several nodes, the node-by-node sum. Zeros for a token no rank holds. Throws moe_ep::Internal
// when a slab lacks the row of a token that names it.
std::vector<uint16_t> low_latency_combine(const Shape& shape, CombineDtype dtype,
                                          const std::vector<RankInput>& inputs,
                                          const std::vector<LowLatencyOutputs>& recv,
                                          const std::vector<std::vector<uint16_t>>& y, int src);

// Copies `n` bytes from a view's memory to the host: memcpy for host memory (host_copy); the
// GPU tests and the bench pass a device-to-host copy.
using CopyBytes = std::function<void(void* dst, const void* src, size_t n)>;
inline void host_copy(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }

// The whole of a view (empty when undefined) as host elements of T.
template <typename T>
std::vector<T> copy_view(const TensorView& v, const CopyBytes& copy = host_copy) {
  std::vector<T> out(v.defined() ? (v.nbytes() + sizeof(T) - 1) / sizeof(T) : 0);
  if (!out.empty()) copy(out.data(), v.data, static_cast<size_t>(v.nbytes()));
  return out;
}

// Every output of one rank's dispatch, copied into owned memory (each view whole).
DispatchOutputs copy_outputs(const DispatchResult& result, const CopyBytes& copy = host_copy);

// Every output of one rank's low-latency dispatch, copied whole, with the unspecified payload and
// scale rows (at or past each slab's count) zeroed so that whole arrays compare. Column-major
// scales (result.scales_column_major) come back as rows, so a misplaced scale shows.
LowLatencyOutputs copy_low_latency_outputs(const LowLatencyDispatchResult& result,
                                           const CopyBytes& copy = host_copy);

}  // namespace moe_ep::reference
