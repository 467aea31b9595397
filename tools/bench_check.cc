// Download and bit-exact comparison for `moe-ep bench --check`, and decode mode's identity
// expert.
#include "bench_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "formats/codecs.h"
#include "moe_ep/errors.h"

namespace moe_ep::cli {
namespace {

// The first `rows` rows of a view (all of it when it has fewer): the per-row outputs are read
// up to num_recv rows only.
TensorView first_rows(const TensorView& view, int64_t rows) {
  TensorView part = view;
  if (view.defined()) part.shape[0] = std::min<int64_t>(view.rows(), rows);
  return part;
}

std::string hex(const uint8_t* bytes, int elem_bytes) {
  // Little-endian element, printed most significant byte first.
  std::string out = "0x";
  for (int b = elem_bytes - 1; b >= 0; --b) out += fmt::format("{:02x}", bytes[b]);
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
  std::string note = fmt::format("rank {} {}: {} of {} elements differ, first at {}", rank, field,
                                 wrong, std::max(n_got, n_want), first);
  if (first < common) {
    note += fmt::format(": got {}, want {}", hex(got + first * elem_bytes, elem_bytes),
                        hex(want + first * elem_bytes, elem_bytes));
  } else {
    note += fmt::format(": got {} elements, want {}", n_got, n_want);
  }
  result.notes.push_back(note);
}

template <typename T>
void count_wrong(const char* field, int rank, const std::vector<T>& got, const std::vector<T>& want,
                 int elem_bytes, CheckResult& result) {
  count_wrong(field, rank, got.data(), got.size() * sizeof(T), want.data(), want.size() * sizeof(T),
              elem_bytes, result);
}

// A CopyBytes that downloads n bytes of the rank's device (where `like` lives) as a 1-D uint8
// view there.
reference::CopyBytes device_copy(BenchBackend& backend, int rank, const TensorView& like) {
  return [&backend, rank, like](void* dst, const void* src, size_t n) {
    backend.download(rank,
                     TensorView::vector(src, ScalarType::kUInt8, static_cast<int64_t>(n),
                                        like.device, like.device_index),
                     dst);
  };
}

template <typename F>
std::vector<uint16_t> decode_identity_expert_for(const reference::Shape& s,
                                                 const LowLatencyOutputs& recv) {
  const int64_t slabs = s.experts / s.ranks, slab_rows = recv.slab_rows, h = s.hidden;
  const int64_t all_rows = slabs * slab_rows;
  const int64_t row_bytes = formats::payload_bytes_of<F>(h);
  const int64_t scale_count = formats::scales_of<F>(h);
  const int64_t scale_row_bytes = scale_count * static_cast<int64_t>(sizeof(typename F::Scale));
  if (static_cast<int64_t>(recv.recv_count.size()) != slabs ||
      static_cast<int64_t>(recv.recv_x.size()) < all_rows * row_bytes ||
      static_cast<int64_t>(recv.recv_x_scales.size()) < all_rows * scale_row_bytes) {
    throw Internal(fmt::format(
        "bench: decode identity expert: {} counts, {} payload and {} scale bytes for {} slabs of "
        "{} rows of {} and {} bytes",
        recv.recv_count.size(), recv.recv_x.size(), recv.recv_x_scales.size(), slabs, slab_rows,
        row_bytes, scale_row_bytes));
  }
  std::vector<uint16_t> y(all_rows * h, 0);                                  // [E/W, W*Tmax, H]
  std::vector<typename F::Scale> scales(std::max<int64_t>(scale_count, 1));  // one row's, aligned
  for (int64_t e = 0; e < slabs; ++e) {
    const int64_t used = std::clamp<int64_t>(recv.recv_count[e], 0, slab_rows);
    for (int64_t i = 0; i < used; ++i) {
      const int64_t row = e * slab_rows + i;
      if (scale_row_bytes > 0) {
        std::memcpy(scales.data(), recv.recv_x_scales.data() + row * scale_row_bytes,
                    scale_row_bytes);
      }
      const uint8_t* payload = recv.recv_x.data() + row * row_bytes;
      for (int64_t c = 0; c < h; ++c) {
        y[row * h + c] = formats::float_to_bf16(formats::decode_elem<F>(payload, scales.data(), c));
      }
    }
  }
  return y;
}

}  // namespace

DispatchOutputs download_outputs(BenchBackend& backend, int rank, const DispatchResult& result) {
  DispatchResult rows = result;
  for (TensorView* view : {&rows.recv_x, &rows.recv_x_scales, &rows.recv_topk_idx,
                           &rows.recv_topk_weights, &rows.recv_src_rank, &rows.recv_src_token}) {
    *view = first_rows(*view, result.num_recv);
  }
  return reference::copy_outputs(rows,
                                 device_copy(backend, rank, result.recv_count_per_local_expert));
}

LowLatencyOutputs download_low_latency_outputs(BenchBackend& backend, int rank,
                                               const LowLatencyDispatchResult& result) {
  return reference::copy_low_latency_outputs(result, device_copy(backend, rank, result.recv_count));
}

std::vector<uint16_t> decode_identity_expert(const reference::Shape& shape, DispatchDtype dtype,
                                             const LowLatencyOutputs& recv) {
  return formats::visit_format(dtype, [&](auto format) {
    return decode_identity_expert_for<decltype(format)>(shape, recv);
  });
}

void compare_dispatch(int rank, DispatchDtype dtype, const DispatchOutputs& got,
                      const DispatchOutputs& want, CheckResult& result) {
  if (got.num_recv != want.num_recv) {
    result.wrong += 1;
    result.notes.push_back(
        fmt::format("rank {} num_recv: got {}, want {}", rank, got.num_recv, want.num_recv));
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

void compare_low_latency(int rank, DispatchDtype dtype, const LowLatencyOutputs& got,
                         const LowLatencyOutputs& want, CheckResult& result) {
  if (got.slab_rows != want.slab_rows) {
    result.wrong += 1;
    result.notes.push_back(
        fmt::format("rank {} slab rows: got {}, want {}", rank, got.slab_rows, want.slab_rows));
  }
  const int payload_elem = dtype == DispatchDtype::bf16 ? 2 : 1;
  const int scale_elem = dtype == DispatchDtype::fp8 ? 4 : 1;
  count_wrong("recv_count", rank, got.recv_count, want.recv_count, 4, result);
  count_wrong("recv_x", rank, got.recv_x, want.recv_x, payload_elem, result);
  count_wrong("recv_x_scales", rank, got.recv_x_scales, want.recv_x_scales, scale_elem, result);
  count_wrong("recv_src_rank", rank, got.recv_src_rank, want.recv_src_rank, 4, result);
  count_wrong("recv_src_token", rank, got.recv_src_token, want.recv_src_token, 4, result);
  count_wrong("recv_src_slot", rank, got.recv_src_slot, want.recv_src_slot, 4, result);
}

void compare_out(int rank, const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                 CheckResult& result) {
  count_wrong("out", rank, got, want, 2, result);
}

}  // namespace moe_ep::cli
