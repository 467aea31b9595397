// A dispatch's scan of its inputs (validate_kernel and count_kernel in notify.cuh): the range of
// expert ids always; in validation mode (MOE_EP_VALIDATE) also repeated expert ids in a token
// and non-finite weights and x. A failure sets the error flag, which the step agreement turns
// into this rank's rejection of the call. Split into `parts` strided shares (one per block of
// validate_kernel's grid, one per scan ticket of count_kernel); share `part` of them here.
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/launch.h"
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
  if (!p.validate || p.x_bf16 == nullptr) return;
  const int64_t total = static_cast<int64_t>(p.num_tokens) * info.hidden;
  for (int64_t i = part * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(parts) * blockDim.x) {
    if (!formats::is_finite(formats::bf16_to_float(p.x_bf16[i]))) {
      report_error(p.err, kDevNonfiniteX, 0, info.rank, -1, 0, 0, i / info.hidden, i % info.hidden,
                   0);
    }
  }
}

}  // namespace moe_ep::cuda_backend
