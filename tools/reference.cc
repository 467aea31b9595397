// Plain-loop reference of dispatch, the identity expert and combine (DESIGN 2-3). Per format F
// (a trait of src/formats/codecs.h) rows are encoded with formats::encode_row<F> and decoded with
// formats::decode_elem<F>; everything else is written out here.
#include "reference.h"

#include <cstring>

#include "formats/codecs.h"

namespace moe_ep::cli {
namespace {

template <typename F>
int64_t scales_per_row(int64_t hidden) {
  return F::kBlock == 0 ? 0 : hidden / F::kBlock;
}

template <typename F>
DispatchOutputs dispatch_for(const RefShape& s, const std::vector<RefInput>& inputs, int dest) {
  using Scale = typename F::Scale;
  const int experts_per_rank = s.experts / s.ranks;
  const int first_expert = dest * experts_per_rank;  // dest owns [first, first + E/W)
  const int64_t row_bytes = formats::payload_bytes_of<F>(s.hidden);
  const int64_t num_scales = scales_per_row<F>(s.hidden);
  const int64_t scale_row_bytes = num_scales * static_cast<int64_t>(sizeof(Scale));

  DispatchOutputs out;
  out.recv_count_per_local_expert.assign(experts_per_rank, 0);
  std::vector<uint8_t> payload(row_bytes);                     // [payload bytes] one row
  std::vector<Scale> scales(num_scales > 0 ? num_scales : 1);  // [H / block] one row

  // Canonical order: source rank ascending, then source token ascending.
  for (int src = 0; src < s.ranks; ++src) {
    const RefInput& in = inputs[src];
    for (int64_t t = 0; t < in.num_tokens; ++t) {
      const int32_t* slots = in.topk_idx + t * s.topk;  // [K]
      auto owned = [&](int32_t e) {
        return e >= first_expert && e < first_expert + experts_per_rank;
      };
      bool goes_here = false;
      for (int k = 0; k < s.topk; ++k) goes_here = goes_here || owned(slots[k]);
      if (!goes_here) continue;  // once per destination rank, however many experts it owns

      formats::encode_row<F>(in.x + t * s.hidden, s.hidden, payload.data(), scales.data());
      out.recv_x.insert(out.recv_x.end(), payload.begin(), payload.end());
      const size_t old_size = out.recv_x_scales.size();
      out.recv_x_scales.resize(old_size + scale_row_bytes);
      if (scale_row_bytes > 0) {
        std::memcpy(out.recv_x_scales.data() + old_size, scales.data(), scale_row_bytes);
      }

      for (int k = 0; k < s.topk; ++k) {
        const int32_t local = owned(slots[k]) ? slots[k] - first_expert : -1;
        out.recv_topk_idx.push_back(local);
        out.recv_topk_weights.push_back(in.topk_weights[t * s.topk + k]);
        // Tokens per local expert: a row counts once per distinct local expert it names.
        bool repeated = false;
        for (int j = 0; j < k; ++j) repeated = repeated || slots[j] == slots[k];
        if (local >= 0 && !repeated) ++out.recv_count_per_local_expert[local];
      }
      out.recv_src_rank.push_back(src);
      out.recv_src_token.push_back(static_cast<int32_t>(t));
      ++out.num_recv;
    }
  }
  return out;
}

template <typename F>
std::vector<uint16_t> expert_for(const RefShape& s, const DispatchOutputs& recv) {
  using Scale = typename F::Scale;
  const int64_t row_bytes = formats::payload_bytes_of<F>(s.hidden);
  const int64_t num_scales = scales_per_row<F>(s.hidden);
  std::vector<Scale> scales(num_scales > 0 ? num_scales : 1);  // [H / block] one row, aligned
  std::vector<uint16_t> y(recv.num_recv * s.hidden);           // [R, H] bf16 bits
  for (int64_t i = 0; i < recv.num_recv; ++i) {
    const uint8_t* payload = recv.recv_x.data() + i * row_bytes;
    if (num_scales > 0) {
      std::memcpy(scales.data(), recv.recv_x_scales.data() + i * num_scales * sizeof(Scale),
                  num_scales * sizeof(Scale));
    }
    for (int64_t c = 0; c < s.hidden; ++c) {
      const float v = formats::decode_elem<F>(payload, scales.data(), c);
      float acc = 0.0f;
      for (int k = 0; k < s.topk; ++k) {
        if (recv.recv_topk_idx[i * s.topk + k] < 0) continue;
        const float p = recv.recv_topk_weights[i * s.topk + k] * v;
        acc = acc + p;
      }
      y[i * s.hidden + c] = formats::float_to_bf16(acc);
    }
  }
  return y;
}

template <typename F>
std::vector<uint16_t> combine_for(const RefShape& s, const std::vector<DispatchOutputs>& recv,
                                  const std::vector<std::vector<uint16_t>>& y, int src,
                                  int64_t num_tokens) {
  using Scale = typename F::Scale;
  const int64_t num_scales = scales_per_row<F>(s.hidden);
  std::vector<uint8_t> payload(formats::payload_bytes_of<F>(s.hidden));  // one encoded row
  std::vector<Scale> scales(num_scales > 0 ? num_scales : 1);            // [H / block]
  std::vector<float> acc(num_tokens * s.hidden, 0.0f);                   // [T, H] fp32 sums
  // Destination ranks ascending: each token gets at most one row from each rank, so the sum of
  // a token runs over its destination ranks in ascending order.
  for (int r = 0; r < s.ranks; ++r) {
    for (int64_t i = 0; i < recv[r].num_recv; ++i) {
      if (recv[r].recv_src_rank[i] != src) continue;
      const int64_t t = recv[r].recv_src_token[i];
      formats::encode_row<F>(y[r].data() + i * s.hidden, s.hidden, payload.data(), scales.data());
      for (int64_t c = 0; c < s.hidden; ++c) {
        const float v = formats::decode_elem<F>(payload.data(), scales.data(), c);
        acc[t * s.hidden + c] = acc[t * s.hidden + c] + v;
      }
    }
  }
  std::vector<uint16_t> out(num_tokens * s.hidden);  // [T, H] bf16 bits
  for (size_t i = 0; i < out.size(); ++i) out[i] = formats::float_to_bf16(acc[i]);
  return out;
}

}  // namespace

DispatchOutputs reference_dispatch(const RefShape& shape, DispatchDtype dtype,
                                   const std::vector<RefInput>& inputs, int dest) {
  return formats::visit_format(
      dtype, [&](auto format) { return dispatch_for<decltype(format)>(shape, inputs, dest); });
}

std::vector<uint16_t> reference_expert(const RefShape& shape, DispatchDtype dtype,
                                       const DispatchOutputs& recv) {
  return formats::visit_format(
      dtype, [&](auto format) { return expert_for<decltype(format)>(shape, recv); });
}

std::vector<uint16_t> reference_combine(const RefShape& shape, CombineDtype dtype,
                                        const std::vector<DispatchOutputs>& recv,
                                        const std::vector<std::vector<uint16_t>>& y, int src,
                                        int64_t num_tokens) {
  return formats::visit_format(dtype, [&](auto format) {
    return combine_for<decltype(format)>(shape, recv, y, src, num_tokens);
  });
}

}  // namespace moe_ep::cli
