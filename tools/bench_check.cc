// Download and bit-exact comparison for `moe-ep bench --check`.
#include "bench_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

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

}  // namespace

DispatchOutputs download_outputs(BenchBackend& backend, int rank, const DispatchResult& result) {
  DispatchResult rows = result;
  for (TensorView* view : {&rows.recv_x, &rows.recv_x_scales, &rows.recv_topk_idx,
                           &rows.recv_topk_weights, &rows.recv_src_rank, &rows.recv_src_token}) {
    *view = first_rows(*view, result.num_recv);
  }
  // The backend downloads views: n bytes of the rank's device are a 1-D uint8 view there.
  const TensorView& where = result.recv_count_per_local_expert;
  const reference::CopyBytes copy = [&backend, rank, &where](void* dst, const void* src, size_t n) {
    backend.download(rank,
                     TensorView::vector(src, ScalarType::kUInt8, static_cast<int64_t>(n),
                                        where.device, where.device_index),
                     dst);
  };
  return reference::copy_outputs(rows, copy);
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

void compare_out(int rank, const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                 CheckResult& result) {
  count_wrong("out", rank, got, want, 2, result);
}

}  // namespace moe_ep::cli
