// A dispatch's scan of its inputs (validate_kernel and count_kernel in notify.cuh): the range of
// expert ids always; in validation mode (MOE_EP_VALIDATE) also repeated expert ids in a token
// and non-finite weights and x. A failure sets the error flag, which the step agreement turns
// into this rank's rejection of the call. Split into `parts` strided shares (one per block of
// validate_kernel's grid, one per scan ticket of count_kernel); share `part` of them here.
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/launch.h"
#include "formats/packed.cuh"
#include "formats/scalar.h"

namespace moe_ep::cuda_backend {

// Whether expert id e of slot k of token t is outside [-1, E); reported when so (the scan's one
// check outside validation mode, decode mode's ll_rank_slots makes it too).
__device__ __forceinline__ bool report_bad_expert(const ErrorSink& err, const RankInfo& info,
                                                  int32_t e, int64_t t, int64_t k) {
  if (e >= -1 && e < info.num_experts) return false;
  report_error(err, kDevBadExpert, 0, info.rank, -1, info.num_experts, e, t, k, e);
  return true;
}

// Reports each non-finite element of x in [first, first + n) (flat indices, bf16 bits). Out of
// line, its arguments by value (a reference to the kernel's parameters would copy them to local
// memory).
__device__ __noinline__ inline void report_nonfinite_x(const uint16_t* x, ErrorSink err,
                                                       int32_t rank, int32_t hidden, int64_t first,
                                                       int n) {
  for (int j = 0; j < n; ++j) {
    const int64_t i = first + j;
    if (!formats::is_finite(formats::bf16_to_float(x[i]))) {
      report_error(err, kDevNonfiniteX, 0, rank, -1, 0, 0, i / hidden, i % hidden, 0);
    }
  }
}

// Validation mode's scan of x for non-finite values, share `part` of `parts`: 8 elements a
// 16-byte load (x starts on a 16-byte boundary and its rows are whole 16-byte units: the API's
// check_alignment and hidden % 8), kXLoads independent loads a thread in flight; an element is
// located only where a load holds a non-finite value. v35: with one 2-byte load a thread and
// step this scan was most of a validated 4096-token dispatch (249 us, 423 with count_kernel's
// blocks one an SM); one 16-byte load took it to 340, still waiting on its loads (run L: 75% of
// the samples on them, DRAM 15% busy).
inline constexpr int kXLoads = 4;
__device__ inline void validate_x(const ValidateParams& p, int part, int parts) {
  const int64_t stride = static_cast<int64_t>(parts) * blockDim.x;
  const auto* x8 = reinterpret_cast<const uint4*>(p.x_bf16);
  const int64_t total8 = static_cast<int64_t>(p.num_tokens) * p.info.hidden / 8;
  for (int64_t i = part * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total8;
       i += kXLoads * stride) {
    uint4 v[kXLoads];
#pragma unroll
    for (int u = 0; u < kXLoads; ++u) {
      const int64_t at = i + u * stride;
      v[u] = at < total8 ? __ldg(x8 + at) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kXLoads; ++u) {
      if (formats::lane_has_inf_or_nan(v[u])) {
        report_nonfinite_x(p.x_bf16, p.err, p.info.rank, p.info.hidden, (i + u * stride) * 8, 8);
      }
    }
  }
}

// kWithX: whether this instantiation has the scan of x (validation mode's count_kernel and
// validate_kernel). count_kernel outside validation mode leaves it out: its loads in flight
// raised count_kernel's spills from 12 to 48 bytes at its 64 registers.
template <bool kWithX>
__device__ inline void validate_scan(const ValidateParams& p, int part, int parts) {
  const RankInfo& info = p.info;
  if (p.started_ns != nullptr && part == 0 && threadIdx.x == 0) {
    *p.started_ns = global_timer_ns();
  }
  const int64_t total_slots = static_cast<int64_t>(p.num_tokens) * info.topk;
  for (int64_t i = part * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total_slots;
       i += static_cast<int64_t>(parts) * blockDim.x) {
    const int64_t t = i / info.topk;
    const int k = static_cast<int>(i % info.topk);
    const int32_t e = p.topk_idx[i];
    const bool bad = report_bad_expert(p.err, info, e, t, k);
    if (!bad && p.validate && e >= 0) {
      for (int j = 0; j < k; ++j) {
        if (p.topk_idx[t * info.topk + j] == e) {
          report_error(p.err, kDevDupExpert, 0, info.rank, -1, j, k, t, k, e);
        }
      }
    }
    if (p.validate && !formats::is_finite(p.topk_weights[i])) {
      report_error(p.err, kDevNonfiniteW, 0, info.rank, -1, 0, 0, t, k, 0);
    }
  }
  if constexpr (kWithX) {
    if (p.validate && p.x_bf16 != nullptr) validate_x(p, part, parts);
  }
}

}  // namespace moe_ep::cuda_backend
