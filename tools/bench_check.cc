// Download, identity expert and bit-exact comparison for `moe-ep bench --check`.
#include "bench_check.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "formats/codecs.h"
#include "moe_ep/errors.h"

namespace moe_ep::cli {
namespace {

// Downloads the first `rows` rows of `view` into `host` (resized to whole elements of T).
template <typename T>
void fetch(BenchBackend& backend, int rank, const TensorView& view, int64_t rows,
           std::vector<T>& host) {
  host.clear();
  if (!view.defined()) return;
  TensorView part = view;
  part.shape[0] = std::min<int64_t>(view.rows(), rows);
  host.resize((part.nbytes() + sizeof(T) - 1) / sizeof(T));
  backend.download(rank, part, host.data());
}

std::string hex(const uint8_t* bytes, int elem_bytes) {
  // Little-endian element, printed most significant byte first.
  std::string out = "0x";
  char digits[3];
  for (int b = elem_bytes - 1; b >= 0; --b) {
    std::snprintf(digits, sizeof(digits), "%02x", bytes[b]);
    out += digits;
  }
  return out;
}

// Counts elements of `elem_bytes` bytes that differ bit for bit; elements present on one side
// only count as wrong too.
void count_wrong(const char* field, int rank, const void* got_data, size_t got_bytes,
                 const void* want_data, size_t want_bytes, int elem_bytes, CheckResult& result) {
  const auto* got = static_cast<const uint8_t*>(got_data);
  const auto* want = static_cast<const uint8_t*>(want_data);
  const int64_t n_got = got_bytes / elem_bytes, n_want = want_bytes / elem_bytes;
  const int64_t common = std::min(n_got, n_want);
  int64_t wrong = std::max(n_got, n_want) - common;
  int64_t first = wrong > 0 ? common : -1;
  for (int64_t i = 0; i < common; ++i) {
    if (std::memcmp(got + i * elem_bytes, want + i * elem_bytes, elem_bytes) != 0) {
      if (first < 0 || i < first) first = i;
      ++wrong;
    }
  }
  if (wrong == 0) return;
  result.wrong += wrong;
  std::string note = "rank " + std::to_string(rank) + " " + field + ": " + std::to_string(wrong) +
                     " of " + std::to_string(std::max(n_got, n_want)) +
                     " elements differ, first at " + std::to_string(first);
  if (first < common) {
    note += ": got " + hex(got + first * elem_bytes, elem_bytes) + ", want " +
            hex(want + first * elem_bytes, elem_bytes);
  } else {
    note += ": got " + std::to_string(n_got) + " elements, want " + std::to_string(n_want);
  }
  result.notes.push_back(note);
}

template <typename T>
void count_wrong(const char* field, int rank, const std::vector<T>& got, const std::vector<T>& want,
                 int elem_bytes, CheckResult& result) {
  count_wrong(field, rank, got.data(), got.size() * sizeof(T), want.data(), want.size() * sizeof(T),
              elem_bytes, result);
}

}  // namespace

DispatchOutputs download_outputs(BenchBackend& backend, int rank, const DispatchResult& result) {
  DispatchOutputs out;
  const int64_t r = result.num_recv;
  out.num_recv = r;
  fetch(backend, rank, result.recv_x, r, out.recv_x);
  fetch(backend, rank, result.recv_x_scales, r, out.recv_x_scales);
  fetch(backend, rank, result.recv_topk_idx, r, out.recv_topk_idx);
  fetch(backend, rank, result.recv_topk_weights, r, out.recv_topk_weights);
  fetch(backend, rank, result.recv_src_rank, r, out.recv_src_rank);
  fetch(backend, rank, result.recv_src_token, r, out.recv_src_token);
  const TensorView& counts = result.recv_count_per_local_expert;
  fetch(backend, rank, counts, counts.rows(), out.recv_count_per_local_expert);
  return out;
}

std::vector<uint16_t> identity_expert(DispatchDtype dtype, const DispatchOutputs& recv,
                                      int64_t hidden, int topk) {
  const int64_t row_bytes = payload_bytes(dtype, hidden);
  const int64_t row_scale_bytes = scale_bytes(dtype, hidden);
  // Outputs shorter than num_recv rows would make the loops below read past them.
  if (static_cast<int64_t>(recv.recv_x.size()) < recv.num_recv * row_bytes ||
      static_cast<int64_t>(recv.recv_x_scales.size()) < recv.num_recv * row_scale_bytes ||
      static_cast<int64_t>(recv.recv_topk_idx.size()) < recv.num_recv * topk ||
      static_cast<int64_t>(recv.recv_topk_weights.size()) < recv.num_recv * topk) {
    throw Internal("bench: dispatch returned fewer than num_recv=" + std::to_string(recv.num_recv) +
                   " rows in recv_x, its scales or the top-k");
  }
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    using Scale = typename F::Scale;
    const int64_t num_scales = row_scale_bytes / static_cast<int64_t>(sizeof(Scale));
    std::vector<Scale> scales(std::max<int64_t>(num_scales, 1));  // [H / block] one row
    std::vector<float> v(hidden);                                 // [H] decoded row
    std::vector<uint16_t> y(recv.num_recv * hidden);              // [R, H] bf16 bits
    for (int64_t i = 0; i < recv.num_recv; ++i) {
      if (row_scale_bytes > 0) {
        std::memcpy(scales.data(), recv.recv_x_scales.data() + i * row_scale_bytes,
                    row_scale_bytes);
      }
      formats::decode_row<F>(recv.recv_x.data() + i * row_bytes, scales.data(), hidden, v.data());
      const int32_t* idx = recv.recv_topk_idx.data() + i * topk;  // [K]
      const float* w = recv.recv_topk_weights.data() + i * topk;  // [K]
      for (int64_t c = 0; c < hidden; ++c) {
        float acc = 0.0f;
        for (int k = 0; k < topk; ++k) {
          if (idx[k] < 0) continue;
          const float p = w[k] * v[c];
          acc = acc + p;
        }
        y[i * hidden + c] = formats::float_to_bf16(acc);
      }
    }
    return y;
  });
}

void compare_dispatch(int rank, DispatchDtype dtype, const DispatchOutputs& got,
                      const DispatchOutputs& want, CheckResult& result) {
  if (got.num_recv != want.num_recv) {
    result.wrong += 1;
    result.notes.push_back("rank " + std::to_string(rank) + " num_recv: got " +
                           std::to_string(got.num_recv) + ", want " +
                           std::to_string(want.num_recv));
  }
  // Element sizes on the wire: bf16 2 bytes; e4m3 1; e2m1 pairs 1; fp32 scales 4; e8m0 1.
  const int payload_elem = dtype == DispatchDtype::bf16 ? 2 : 1;
  const int scale_elem = dtype == DispatchDtype::fp8 ? 4 : 1;
  count_wrong("recv_x", rank, got.recv_x, want.recv_x, payload_elem, result);
  count_wrong("recv_x_scales", rank, got.recv_x_scales, want.recv_x_scales, scale_elem, result);
  count_wrong("recv_topk_idx", rank, got.recv_topk_idx, want.recv_topk_idx, 4, result);
  count_wrong("recv_topk_weights", rank, got.recv_topk_weights, want.recv_topk_weights, 4, result);
  count_wrong("recv_src_rank", rank, got.recv_src_rank, want.recv_src_rank, 4, result);
  count_wrong("recv_src_token", rank, got.recv_src_token, want.recv_src_token, 4, result);
  count_wrong("recv_count_per_local_expert", rank, got.recv_count_per_local_expert,
              want.recv_count_per_local_expert, 4, result);
}

void compare_out(int rank, const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                 CheckResult& result) {
  count_wrong("out", rank, got, want, 2, result);
}

}  // namespace moe_ep::cli
