// Routing and layout math; see routing.h.
#include "core/routing.h"

#include <cmath>

#include "core/check.h"
#include "formats/scalar.h"

namespace moe_ep {

bool token_goes_to(const RoutingShape& shape, const int32_t* slots, int dest) {
  for (int k = 0; k < shape.topk; ++k) {
    if (slots[k] >= 0 && shape.owner(slots[k]) == dest) return true;
  }
  return false;
}

void local_slots(const RoutingShape& shape, const int32_t* slots, int dest, int32_t* out) {
  const int first = dest * shape.experts_per_rank();
  for (int k = 0; k < shape.topk; ++k) {
    out[k] = (slots[k] >= 0 && shape.owner(slots[k]) == dest) ? slots[k] - first : -1;
  }
}

SendPlan plan_sends(const RoutingShape& shape, const int32_t* topk_idx, int64_t num_tokens) {
  SendPlan plan;
  plan.tokens_per_dest.resize(shape.world_size);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int32_t* slots = topk_idx + t * shape.topk;
    for (int dest = 0; dest < shape.world_size; ++dest) {
      if (token_goes_to(shape, slots, dest)) {
        plan.tokens_per_dest[dest].push_back(static_cast<int32_t>(t));
      }
    }
  }
  return plan;
}

void count_rows_per_local_expert(const RoutingShape& shape, const int32_t* local_topk_idx,
                                 int64_t num_rows, int32_t* counts) {
  const int local_experts = shape.experts_per_rank();
  for (int e = 0; e < local_experts; ++e) counts[e] = 0;
  for (int64_t row = 0; row < num_rows; ++row) {
    const int32_t* slots = local_topk_idx + row * shape.topk;
    for (int k = 0; k < shape.topk; ++k) {
      if (slots[k] < 0) continue;
      bool first = true;  // count a row once per expert even if a slot repeats it
      for (int j = 0; j < k; ++j) first = first && slots[j] != slots[k];
      if (first) ++counts[slots[k]];
    }
  }
}

int64_t recv_offset(const std::vector<std::vector<int64_t>>& counts, int src, int dest) {
  int64_t offset = 0;
  for (int s = 0; s < src; ++s) offset += counts[s][dest];
  return offset;
}

std::string find_bad_topk(const RoutingShape& shape, const int32_t* topk_idx, int64_t num_tokens,
                          bool check_duplicates) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int32_t* slots = topk_idx + t * shape.topk;
    for (int k = 0; k < shape.topk; ++k) {
      if (slots[k] < -1 || slots[k] >= shape.num_experts) {
        return detail::concat("topk_idx[", t, "][", k, "]=", slots[k],
                              " is out of range: expert ids must be in [-1, ", shape.num_experts,
                              ")");
      }
      for (int j = 0; check_duplicates && j < k; ++j) {
        if (slots[k] >= 0 && slots[j] == slots[k]) {
          return detail::concat("topk_idx[", t, "] names expert ", slots[k], " twice (slots ", j,
                                " and ", k, "): each expert may appear once per token");
        }
      }
    }
  }
  return {};
}

std::string find_nonfinite_bf16(const char* name, const uint16_t* x, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float v = formats::bf16_to_float(x[i]);
    if (!formats::is_finite(v)) {
      return detail::concat(name, "[", i / cols, "][", i % cols, "]=", v,
                            " is not finite (validation mode, MOE_EP_VALIDATE=1)");
    }
  }
  return {};
}

std::string find_nonfinite_f32(const char* name, const float* w, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (!std::isfinite(w[i])) {
      return detail::concat(name, "[", i / cols, "][", i % cols, "]=", w[i],
                            " is not finite (validation mode, MOE_EP_VALIDATE=1)");
    }
  }
  return {};
}

}  // namespace moe_ep
