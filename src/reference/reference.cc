// Plain-loop reference of dispatch, the identity expert, combine (one node, and node by node over
// several nodes) and decode mode's two calls. Per wire format F (a trait of formats/codecs.h,
// chosen with formats::visit_format) rows are encoded with formats::encode_row<F> and decoded
// element by element with formats::decode_elem<F>; routing, ordering and the sums are written
// out here. Built with -ffp-contract=off (moe_ep_exact_math): w * v + acc must stay a rounded
// product and a rounded sum, as in the kernels.
#include "reference/reference.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/slab_scales.h"
#include "formats/codecs.h"
#include "moe_ep/errors.h"

namespace moe_ep::reference {
namespace {

// One row's scales of format F, copied out of raw bytes so that they are aligned for F::Scale.
template <typename F>
class RowScales {
 public:
  explicit RowScales(int64_t hidden)
      : count_(formats::scales_of<F>(hidden)), scales_(std::max<int64_t>(count_, 1)) {}
  int64_t bytes() const { return count_ * static_cast<int64_t>(sizeof(typename F::Scale)); }
  typename F::Scale* data() { return scales_.data(); }
  void load(const uint8_t* raw) {
    if (count_ > 0) std::memcpy(scales_.data(), raw, bytes());
  }

 private:
  int64_t count_;                          // H / block, 0 without scales
  std::vector<typename F::Scale> scales_;  // [max(H / block, 1)]
};

template <typename F>
DispatchOutputs dispatch_for(const Shape& s, const std::vector<RankInput>& inputs, int dest) {
  const int experts_per_rank = s.experts / s.ranks;
  const int first_expert = dest * experts_per_rank;  // dest owns [first, first + E / W)
  const int64_t row_bytes = formats::payload_bytes_of<F>(s.hidden);
  RowScales<F> scales(s.hidden);
  const int64_t scale_row_bytes = scales.bytes();
  std::vector<uint8_t> payload(row_bytes);  // one encoded row
  auto owned = [&](int32_t e) { return e >= first_expert && e < first_expert + experts_per_rank; };

  DispatchOutputs out;
  out.recv_count_per_local_expert.assign(experts_per_rank, 0);
  // Canonical order: source rank ascending, then source token ascending.
  for (int src = 0; src < s.ranks; ++src) {
    const RankInput& in = inputs[src];
    for (int64_t t = 0; t < in.num_tokens; ++t) {
      const int32_t* slots = in.topk_idx + t * s.topk;  // [K]
      bool goes_here = false;
      for (int k = 0; k < s.topk; ++k) goes_here = goes_here || owned(slots[k]);
      if (!goes_here) continue;  // once per destination rank, however many experts it owns

      if (in.x_payload != nullptr) {  // pre-quantized: the bytes travel as given
        const uint8_t* row = in.x_payload + t * row_bytes;
        std::copy(row, row + row_bytes, payload.begin());
        if (scale_row_bytes > 0) scales.load(in.x_scales + t * scale_row_bytes);
      } else {
        formats::encode_row<F>(in.x + t * s.hidden, s.hidden, payload.data(), scales.data());
      }
      out.recv_x.insert(out.recv_x.end(), payload.begin(), payload.end());
      const auto* scale_bytes = reinterpret_cast<const uint8_t*>(scales.data());
      out.recv_x_scales.insert(out.recv_x_scales.end(), scale_bytes, scale_bytes + scale_row_bytes);

      for (int k = 0; k < s.topk; ++k) {
        const int32_t local = owned(slots[k]) ? slots[k] - first_expert : -1;
        out.recv_topk_idx.push_back(local);
        out.recv_topk_weights.push_back(in.topk_weights[t * s.topk + k]);
        // Rows per local expert: a row counts once per distinct local expert it names.
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
std::vector<uint16_t> identity_expert_for(const Shape& s, const DispatchOutputs& recv) {
  const int64_t row_bytes = formats::payload_bytes_of<F>(s.hidden);
  RowScales<F> scales(s.hidden);
  const int64_t scale_row_bytes = scales.bytes();
  const int64_t rows = recv.num_recv;
  // Outputs shorter than num_recv rows would make the loops below read past them.
  if (static_cast<int64_t>(recv.recv_x.size()) < rows * row_bytes ||
      static_cast<int64_t>(recv.recv_x_scales.size()) < rows * scale_row_bytes ||
      static_cast<int64_t>(recv.recv_topk_idx.size()) < rows * s.topk ||
      static_cast<int64_t>(recv.recv_topk_weights.size()) < rows * s.topk) {
    throw Internal("reference::identity_expert: fewer than num_recv=" + std::to_string(rows) +
                   " rows in recv_x, recv_x_scales, recv_topk_idx or recv_topk_weights");
  }
  std::vector<uint16_t> y(rows * s.hidden);  // [R, H] bf16 bits
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* payload = recv.recv_x.data() + i * row_bytes;
    scales.load(recv.recv_x_scales.data() + i * scale_row_bytes);
    const int32_t* idx = recv.recv_topk_idx.data() + i * s.topk;  // [K]
    const float* w = recv.recv_topk_weights.data() + i * s.topk;  // [K]
    for (int64_t c = 0; c < s.hidden; ++c) {
      const float v = formats::decode_elem<F>(payload, scales.data(), c);
      float acc = 0.0f;
      for (int k = 0; k < s.topk; ++k) {
        if (idx[k] < 0) continue;
        const float p = w[k] * v;
        acc = acc + p;
      }
      y[i * s.hidden + c] = formats::float_to_bf16(acc);
    }
  }
  return y;
}

// recv[r]'s row i names token t of src; throws unless 0 <= t < num_tokens.
int64_t checked_token(const std::vector<DispatchOutputs>& recv, int r, int64_t i, int src,
                      int64_t num_tokens) {
  const int64_t t = recv[r].recv_src_token[i];
  if (t < 0 || t >= num_tokens) {
    throw Internal("reference::combine: row " + std::to_string(i) + " of rank " +
                   std::to_string(r) + " names token " + std::to_string(t) + " of rank " +
                   std::to_string(src) + ", which has " + std::to_string(num_tokens));
  }
  return t;
}

template <typename F>
std::vector<uint16_t> combine_for(const Shape& s, const std::vector<DispatchOutputs>& recv,
                                  const std::vector<std::vector<uint16_t>>& y, int src,
                                  int64_t num_tokens) {
  std::vector<uint8_t> payload(formats::payload_bytes_of<F>(s.hidden));  // one encoded row
  RowScales<F> scales(s.hidden);
  std::vector<float> acc(num_tokens * s.hidden, 0.0f);  // [T, H] fp32 sums
  // Ranks ascending: a token has at most one row on each rank, so the sum of a token runs over
  // the ranks that hold it in ascending order.
  for (int r = 0; r < s.ranks; ++r) {
    for (int64_t i = 0; i < recv[r].num_recv; ++i) {
      if (recv[r].recv_src_rank[i] != src) continue;
      const int64_t t = checked_token(recv, r, i, src, num_tokens);
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

// Several nodes, token by token: for each node ascending, the fp32 sum of its ranks' decoded
// rows in ascending rank; a node other than src's sends that partial as bf16, encoded, so the
// source adds decode(encode(bf16(partial))); src's own node's sum is added as it is.
template <typename F>
std::vector<uint16_t> node_combine_for(const Shape& s, const std::vector<DispatchOutputs>& recv,
                                       const std::vector<std::vector<uint16_t>>& y, int src,
                                       int64_t num_tokens) {
  const int per_node = s.ranks_per_node;
  const int own_node = src / per_node;
  // row_of[r][t]: the row of rank r that holds token t of src, or -1.
  std::vector<std::vector<int64_t>> row_of(s.ranks, std::vector<int64_t>(num_tokens, -1));
  for (int r = 0; r < s.ranks; ++r) {
    for (int64_t i = 0; i < recv[r].num_recv; ++i) {
      if (recv[r].recv_src_rank[i] == src)
        row_of[r][checked_token(recv, r, i, src, num_tokens)] = i;
    }
  }
  std::vector<uint8_t> payload(formats::payload_bytes_of<F>(s.hidden));  // one encoded row
  RowScales<F> scales(s.hidden);
  std::vector<float> partial(s.hidden);          // [H] fp32 sum over one node
  std::vector<uint16_t> partial_bf16(s.hidden);  // [H] what a remote node sends, before encoding
  std::vector<float> acc(s.hidden);              // [H] fp32 sum over nodes
  std::vector<uint16_t> out(num_tokens * s.hidden);  // [T, H] bf16 bits
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int node = 0; node < s.ranks / per_node; ++node) {
      std::fill(partial.begin(), partial.end(), 0.0f);
      bool held = false;
      for (int r = node * per_node; r < (node + 1) * per_node; ++r) {
        const int64_t i = row_of[r][t];
        if (i < 0) continue;
        held = true;
        formats::encode_row<F>(y[r].data() + i * s.hidden, s.hidden, payload.data(), scales.data());
        for (int64_t c = 0; c < s.hidden; ++c) {
          partial[c] = partial[c] + formats::decode_elem<F>(payload.data(), scales.data(), c);
        }
      }
      if (!held) continue;
      if (node != own_node) {  // over the network: bf16, then the combine wire format
        for (int64_t c = 0; c < s.hidden; ++c) partial_bf16[c] = formats::float_to_bf16(partial[c]);
        formats::encode_row<F>(partial_bf16.data(), s.hidden, payload.data(), scales.data());
        for (int64_t c = 0; c < s.hidden; ++c) {
          partial[c] = formats::decode_elem<F>(payload.data(), scales.data(), c);
        }
      }
      for (int64_t c = 0; c < s.hidden; ++c) acc[c] = acc[c] + partial[c];
    }
    for (int64_t c = 0; c < s.hidden; ++c) out[t * s.hidden + c] = formats::float_to_bf16(acc[c]);
  }
  return out;
}

// Decode mode. Expert by expert: for each local expert e of dest, scan every source's tokens in
// canonical order and give a row to each token that names e, with the first slot naming it.
template <typename F>
LowLatencyOutputs low_latency_dispatch_for(const Shape& s, int64_t max_tokens,
                                           const std::vector<RankInput>& inputs, int dest) {
  const int experts_per_rank = s.experts / s.ranks;
  const int64_t row_bytes = formats::payload_bytes_of<F>(s.hidden);
  RowScales<F> scales(s.hidden);
  const int64_t scale_row_bytes = scales.bytes();
  LowLatencyOutputs out;
  out.slab_rows = s.ranks * max_tokens;
  const int64_t all_rows = experts_per_rank * out.slab_rows;
  out.recv_count.assign(experts_per_rank, 0);
  out.recv_x.assign(all_rows * row_bytes, 0);
  out.recv_x_scales.assign(all_rows * scale_row_bytes, 0);
  out.recv_src_rank.assign(all_rows, -1);
  out.recv_src_token.assign(all_rows, -1);
  out.recv_src_slot.assign(all_rows, -1);
  for (int local = 0; local < experts_per_rank; ++local) {
    const int32_t expert = dest * experts_per_rank + local;
    for (int src = 0; src < s.ranks; ++src) {
      const RankInput& in = inputs[src];
      for (int64_t t = 0; t < in.num_tokens; ++t) {
        int first_slot = -1;
        for (int k = s.topk - 1; k >= 0; --k) {
          if (in.topk_idx[t * s.topk + k] == expert) first_slot = k;
        }
        if (first_slot < 0) continue;
        const int64_t row = local * out.slab_rows + out.recv_count[local]++;
        uint8_t* payload = out.recv_x.data() + row * row_bytes;
        if (in.x_payload != nullptr) {  // pre-quantized: the bytes travel as given
          std::copy(in.x_payload + t * row_bytes, in.x_payload + (t + 1) * row_bytes, payload);
          if (scale_row_bytes > 0) scales.load(in.x_scales + t * scale_row_bytes);
        } else {
          formats::encode_row<F>(in.x + t * s.hidden, s.hidden, payload, scales.data());
        }
        const auto* scale_bytes = reinterpret_cast<const uint8_t*>(scales.data());
        std::copy(scale_bytes, scale_bytes + scale_row_bytes,
                  out.recv_x_scales.begin() + row * scale_row_bytes);
        out.recv_src_rank[row] = src;
        out.recv_src_token[row] = static_cast<int32_t>(t);
        out.recv_src_slot[row] = first_slot;
      }
    }
  }
  return out;
}

// The row of (src, token) in local expert `local`'s slab of `recv`; throws when it has none.
int64_t slab_row_of(const LowLatencyOutputs& recv, int rank, int local, int src, int64_t token) {
  for (int64_t i = 0; i < recv.recv_count[local]; ++i) {
    const int64_t row = local * recv.slab_rows + i;
    if (recv.recv_src_rank[row] == src && recv.recv_src_token[row] == token) return row;
  }
  throw Internal("reference::low_latency_combine: slab " + std::to_string(local) + " of rank " +
                 std::to_string(rank) + " has no row for token " + std::to_string(token) +
                 " of rank " + std::to_string(src) + ", which names its expert");
}

// Decode mode's expert side, for source src: per rank r, the (src, t) pairs r holds, tokens
// ascending, as DispatchOutputs rows (only num_recv, recv_src_rank and recv_src_token are set),
// and their partials p = bf16(sum over t's unmasked slots k ascending whose expert e_k is r's, of
// w_k * float(y_r[e_k][row of (src, t)])) in fp32 from 0.0f, product then add, as [n_r, H] bf16.
// low_latency_combine is normal mode's combine applied to these rows (docs/decode-mode.md, "Why
// it equals normal mode").
void low_latency_partials(const Shape& s, const std::vector<RankInput>& inputs,
                          const std::vector<LowLatencyOutputs>& recv,
                          const std::vector<std::vector<uint16_t>>& y, int src,
                          std::vector<DispatchOutputs>* rows,
                          std::vector<std::vector<uint16_t>>* partials) {
  const int experts_per_rank = s.experts / s.ranks;
  const RankInput& in = inputs[src];
  std::vector<float> partial(s.hidden);  // [H] fp32 sum on the expert rank
  rows->assign(s.ranks, DispatchOutputs{});
  partials->assign(s.ranks, {});
  for (int r = 0; r < s.ranks; ++r) {
    const int first_expert = r * experts_per_rank;  // r owns [first, first + E / W)
    DispatchOutputs& held_rows = (*rows)[r];
    std::vector<uint16_t>& p = (*partials)[r];
    for (int64_t t = 0; t < in.num_tokens; ++t) {
      const int32_t* slots = in.topk_idx + t * s.topk;      // [K]
      const float* weights = in.topk_weights + t * s.topk;  // [K]
      bool held = false;
      std::fill(partial.begin(), partial.end(), 0.0f);
      for (int k = 0; k < s.topk; ++k) {
        const int local = slots[k] - first_expert;
        if (slots[k] < 0 || local < 0 || local >= experts_per_rank) continue;
        held = true;
        const int64_t row = slab_row_of(recv[r], r, local, src, t);
        const uint16_t* y_row = y[r].data() + row * s.hidden;
        for (int64_t c = 0; c < s.hidden; ++c) {
          const float term = weights[k] * formats::bf16_to_float(y_row[c]);
          partial[c] = partial[c] + term;
        }
      }
      if (!held) continue;  // r never received t
      ++held_rows.num_recv;
      held_rows.recv_src_rank.push_back(src);
      held_rows.recv_src_token.push_back(static_cast<int32_t>(t));
      for (int64_t c = 0; c < s.hidden; ++c) p.push_back(formats::float_to_bf16(partial[c]));
    }
  }
}

}  // namespace

DispatchOutputs dispatch(const Shape& shape, DispatchDtype dtype,
                         const std::vector<RankInput>& inputs, int dest) {
  return formats::visit_format(
      dtype, [&](auto format) { return dispatch_for<decltype(format)>(shape, inputs, dest); });
}

std::vector<uint16_t> identity_expert(const Shape& shape, DispatchDtype dtype,
                                      const DispatchOutputs& recv) {
  return formats::visit_format(
      dtype, [&](auto format) { return identity_expert_for<decltype(format)>(shape, recv); });
}

std::vector<uint16_t> combine(const Shape& shape, CombineDtype dtype,
                              const std::vector<DispatchOutputs>& recv,
                              const std::vector<std::vector<uint16_t>>& y, int src,
                              int64_t num_tokens) {
  if (shape.ranks_per_node == 0 || shape.ranks_per_node == shape.ranks) {
    return flat_combine(shape, dtype, recv, y, src, num_tokens);
  }
  if (shape.ranks_per_node < 0 || shape.ranks % shape.ranks_per_node != 0) {
    throw Internal("reference::combine: ranks_per_node=" + std::to_string(shape.ranks_per_node) +
                   " does not divide ranks=" + std::to_string(shape.ranks));
  }
  return formats::visit_format(dtype, [&](auto format) {
    return node_combine_for<decltype(format)>(shape, recv, y, src, num_tokens);
  });
}

std::vector<uint16_t> flat_combine(const Shape& shape, CombineDtype dtype,
                                   const std::vector<DispatchOutputs>& recv,
                                   const std::vector<std::vector<uint16_t>>& y, int src,
                                   int64_t num_tokens) {
  return formats::visit_format(dtype, [&](auto format) {
    return combine_for<decltype(format)>(shape, recv, y, src, num_tokens);
  });
}

LowLatencyOutputs low_latency_dispatch(const Shape& shape, DispatchDtype dtype, int64_t max_tokens,
                                       const std::vector<RankInput>& inputs, int dest) {
  return formats::visit_format(dtype, [&](auto format) {
    return low_latency_dispatch_for<decltype(format)>(shape, max_tokens, inputs, dest);
  });
}

std::vector<uint16_t> low_latency_combine(const Shape& shape, CombineDtype dtype,
                                          const std::vector<RankInput>& inputs,
                                          const std::vector<LowLatencyOutputs>& recv,
                                          const std::vector<std::vector<uint16_t>>& y, int src) {
  std::vector<DispatchOutputs> rows;
  std::vector<std::vector<uint16_t>> partials;
  low_latency_partials(shape, inputs, recv, y, src, &rows, &partials);
  return combine(shape, dtype, rows, partials, src, inputs[src].num_tokens);
}

LowLatencyOutputs copy_low_latency_outputs(const LowLatencyDispatchResult& result,
                                           const CopyBytes& copy) {
  LowLatencyOutputs out;
  out.slab_rows = result.recv_src_rank.defined() ? result.recv_src_rank.shape[1] : 0;
  out.recv_count = copy_view<int32_t>(result.recv_count, copy);
  out.recv_x = copy_view<uint8_t>(result.recv_x, copy);
  out.recv_x_scales = copy_view<uint8_t>(result.recv_x_scales, copy);
  out.recv_src_rank = copy_view<int32_t>(result.recv_src_rank, copy);
  out.recv_src_token = copy_view<int32_t>(result.recv_src_token, copy);
  out.recv_src_slot = copy_view<int32_t>(result.recv_src_slot, copy);
  if (result.scales_column_major && result.recv_x_scales.defined()) {
    // [E/W, scale_dim, W*Tmax] -> rows, [E/W, W*Tmax, scale_dim], through the op's own getter.
    const TensorView& v = result.recv_x_scales;
    const SlabScales columns{v.shape[2], v.shape[1], true};
    const int64_t elem = element_size(v.dtype);
    std::vector<uint8_t> rows(out.recv_x_scales.size());
    for (int64_t e = 0; e < v.shape[0]; ++e) {
      for (int64_t r = 0; r < columns.slab_rows; ++r) {
        for (int64_t j = 0; j < columns.cols; ++j) {
          std::memcpy(rows.data() + ((e * columns.slab_rows + r) * columns.cols + j) * elem,
                      out.recv_x_scales.data() + columns.at(e, r, j) * elem, elem);
        }
      }
    }
    out.recv_x_scales = std::move(rows);
  }
  // Rows at or past a slab's count are unspecified: zero them.
  const int64_t slabs = static_cast<int64_t>(out.recv_count.size());
  const int64_t all_rows = slabs * out.slab_rows;
  for (std::vector<uint8_t>* bytes : {&out.recv_x, &out.recv_x_scales}) {
    if (all_rows == 0 || bytes->empty()) continue;
    const int64_t row_bytes = static_cast<int64_t>(bytes->size()) / all_rows;
    for (int64_t e = 0; e < slabs; ++e) {
      const int64_t used = std::clamp<int64_t>(out.recv_count[e], 0, out.slab_rows);
      std::fill(bytes->begin() + (e * out.slab_rows + used) * row_bytes,
                bytes->begin() + (e + 1) * out.slab_rows * row_bytes, 0);
    }
  }
  return out;
}

DispatchOutputs copy_outputs(const DispatchResult& result, const CopyBytes& copy) {
  DispatchOutputs out;
  out.num_recv = result.num_recv;
  out.recv_x = copy_view<uint8_t>(result.recv_x, copy);
  out.recv_x_scales = copy_view<uint8_t>(result.recv_x_scales, copy);
  out.recv_topk_idx = copy_view<int32_t>(result.recv_topk_idx, copy);
  out.recv_topk_weights = copy_view<float>(result.recv_topk_weights, copy);
  out.recv_src_rank = copy_view<int32_t>(result.recv_src_rank, copy);
  out.recv_src_token = copy_view<int32_t>(result.recv_src_token, copy);
  out.recv_count_per_local_expert = copy_view<int32_t>(result.recv_count_per_local_expert, copy);
  return out;
}

}  // namespace moe_ep::reference
