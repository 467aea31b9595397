// The expectation the CPU backend is tested against, written independently of it with plain
// loops over ranks, tokens and slots (STYLE.md: a readable reference for every kernel). It shares
// only the wire-format traits (formats/codecs.h) with the library, since those define the bits.
// Also: the "identity expert" of DESIGN 9 that turns received rows into y, and helpers that copy
// an op's outputs out of its buffers so they can be compared after the ranks have finished.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/codecs.h"
#include "moe_ep/op.h"
#include "testing/inputs.h"

namespace moe_ep::testing {

// Everything one rank's dispatch returns, copied into owned memory.
struct DispatchOutputs {
  int64_t num_recv = 0;
  std::vector<uint8_t> x_payload;               // [R, payload bytes]
  std::vector<uint8_t> x_scales;                // [R, scale bytes]
  std::vector<int32_t> topk_idx;                // [R, K]
  std::vector<float> topk_weights;              // [R, K]
  std::vector<int32_t> src_rank;                // [R]
  std::vector<int32_t> src_token;               // [R]
  std::vector<int32_t> count_per_local_expert;  // [E / W]
};

// Copies `n` bytes of a view into host memory (memcpy here; testing/gpu.h passes a device copy).
using CopyBytes = void (*)(void* dst, const void* src, size_t n);
inline void host_copy(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }

template <typename T>
std::vector<T> copy_view(const TensorView& v, CopyBytes copy = host_copy) {
  std::vector<T> out(v.defined() ? v.nbytes() / sizeof(T) : 0);
  if (!out.empty()) copy(out.data(), v.data, v.nbytes());
  return out;
}

inline DispatchOutputs copy_outputs(const DispatchResult& r, CopyBytes copy = host_copy) {
  DispatchOutputs o;
  o.num_recv = r.num_recv;
  o.x_payload = copy_view<uint8_t>(r.recv_x, copy);
  o.x_scales = copy_view<uint8_t>(r.recv_x_scales, copy);
  o.topk_idx = copy_view<int32_t>(r.recv_topk_idx, copy);
  o.topk_weights = copy_view<float>(r.recv_topk_weights, copy);
  o.src_rank = copy_view<int32_t>(r.recv_src_rank, copy);
  o.src_token = copy_view<int32_t>(r.recv_src_token, copy);
  o.count_per_local_expert = copy_view<int32_t>(r.recv_count_per_local_expert, copy);
  return o;
}

// What rank `dest` must receive: rows by source rank, then source token; a token once if any
// unmasked slot names one of dest's experts.
inline DispatchOutputs expect_dispatch(const std::vector<RankInput>& inputs, const OpConfig& c,
                                       int world_size, int dest) {
  const int per_rank = c.num_experts / world_size;
  const int first_expert = dest * per_rank;
  const int64_t payload = payload_bytes(c.dispatch_dtype, c.hidden);
  const int64_t scales = scale_bytes(c.dispatch_dtype, c.hidden);
  DispatchOutputs o;
  o.count_per_local_expert.assign(per_rank, 0);
  for (int src = 0; src < world_size; ++src) {
    const RankInput& in = inputs[src];
    for (int64_t t = 0; t < in.num_tokens; ++t) {
      const int32_t* slots = &in.topk_idx[t * c.topk];
      bool goes_here = false;
      for (int k = 0; k < c.topk; ++k) {
        goes_here = goes_here || (slots[k] >= first_expert && slots[k] < first_expert + per_rank);
      }
      if (!goes_here) continue;
      const int64_t row = o.num_recv++;
      o.x_payload.resize((row + 1) * payload);
      o.x_scales.resize((row + 1) * scales);
      if (in.prequantized()) {
        std::memcpy(&o.x_payload[row * payload], &in.x_payload[t * payload], payload);
        std::memcpy(o.x_scales.data() + row * scales, in.x_scales.data() + t * scales, scales);
      } else {
        formats::visit_format(c.dispatch_dtype, [&](auto format) {
          using F = decltype(format);
          formats::encode_row<F>(
              &in.x[t * c.hidden], c.hidden, o.x_payload.data() + row * payload,
              reinterpret_cast<typename F::Scale*>(o.x_scales.data() + row * scales));
        });
      }
      for (int k = 0; k < c.topk; ++k) {
        const bool mine = slots[k] >= first_expert && slots[k] < first_expert + per_rank;
        o.topk_idx.push_back(mine ? slots[k] - first_expert : -1);
        o.topk_weights.push_back(in.topk_weights[t * c.topk + k]);
      }
      for (int e = 0; e < per_rank; ++e) {
        bool named = false;
        for (int k = 0; k < c.topk; ++k) named = named || slots[k] == first_expert + e;
        o.count_per_local_expert[e] += named ? 1 : 0;
      }
      o.src_rank.push_back(src);
      o.src_token.push_back(static_cast<int32_t>(t));
    }
  }
  return o;
}

// DESIGN 9's identity expert: y[i] = bf16(sum over local slots k, ascending, of w_k * decode(x_i))
// in fp32 from 0.0f. Returns [R, H] bf16.
inline std::vector<uint16_t> identity_expert(const DispatchOutputs& d, const OpConfig& c) {
  const int64_t payload = payload_bytes(c.dispatch_dtype, c.hidden);
  const int64_t scales = scale_bytes(c.dispatch_dtype, c.hidden);
  std::vector<uint16_t> y(d.num_recv * c.hidden);
  std::vector<float> x(c.hidden);
  for (int64_t i = 0; i < d.num_recv; ++i) {
    formats::visit_format(c.dispatch_dtype, [&](auto format) {
      using F = decltype(format);
      formats::decode_row<F>(
          d.x_payload.data() + i * payload,
          reinterpret_cast<const typename F::Scale*>(d.x_scales.data() + i * scales), c.hidden,
          x.data());
    });
    for (int64_t h = 0; h < c.hidden; ++h) {
      float sum = 0.0f;
      for (int k = 0; k < c.topk; ++k) {
        if (d.topk_idx[i * c.topk + k] >= 0) sum += d.topk_weights[i * c.topk + k] * x[h];
      }
      y[i * c.hidden + h] = formats::float_to_bf16(sum);
    }
  }
  return y;
}

// What source rank `src` must get from combine, given each rank's received rows and its y:
// out[t] = bf16(sum over ranks r ascending that hold a row from (src, t) of
// decode(encode(y_r[row]))), in fp32 from 0.0f; zeros for a token no rank holds.
inline std::vector<uint16_t> expect_combine(const std::vector<DispatchOutputs>& received,
                                            const std::vector<std::vector<uint16_t>>& y,
                                            const OpConfig& c, int src, int64_t num_tokens) {
  const int64_t h = c.hidden;
  const int64_t payload = payload_bytes(c.combine_dtype, h);
  const int64_t scales = scale_bytes(c.combine_dtype, h);
  std::vector<uint8_t> wire_payload(payload);
  std::vector<float> wire_scales(scales / 4 + 1);
  std::vector<float> decoded(h);
  std::vector<uint16_t> out(num_tokens * h);
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::vector<float> sum(h, 0.0f);
    for (size_t r = 0; r < received.size(); ++r) {
      for (int64_t i = 0; i < received[r].num_recv; ++i) {
        if (received[r].src_rank[i] != src || received[r].src_token[i] != t) continue;
        formats::visit_format(c.combine_dtype, [&](auto format) {
          using F = decltype(format);
          auto* s = reinterpret_cast<typename F::Scale*>(wire_scales.data());
          formats::encode_row<F>(&y[r][i * h], h, wire_payload.data(), s);
          formats::decode_row<F>(wire_payload.data(), s, h, decoded.data());
        });
        for (int64_t j = 0; j < h; ++j) sum[j] += decoded[j];
      }
    }
    for (int64_t j = 0; j < h; ++j) out[t * h + j] = formats::float_to_bf16(sum[j]);
  }
  return out;
}

}  // namespace moe_ep::testing
