// Helpers of the several-nodes tests (docs/design.md#several-nodes), normal and decode mode: a
// world split into nodes, the inputs' shape and the tokens per rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "testing/harness.h"

namespace moe_ep::testing {

struct Nodes {
  int world_size;
  int ranks_per_node;
};

inline std::string nodes_name(const Nodes& n) {
  return "W" + std::to_string(n.world_size) + "_L" + std::to_string(n.ranks_per_node);
}

// Four experts per rank, top-4 (so most tokens reach several nodes), two fp8 blocks per row.
inline InputSpec nodes_spec(Nodes nodes, DtypePair pair, bool low_latency) {
  InputSpec spec;
  spec.world_size = nodes.world_size;
  spec.config.num_experts = 4 * nodes.world_size;
  spec.config.topk = 4;
  spec.config.hidden = 256;
  spec.config.max_tokens_per_rank = 16;
  spec.config.dispatch_dtype = pair.dispatch;
  spec.config.combine_dtype = pair.combine;
  spec.config.low_latency = low_latency;
  spec.config.ranks_per_node = nodes.ranks_per_node;
  return spec;
}

// Token counts that differ per rank (and per round), rank 1 with none, one rank at
// max_tokens_per_rank.
inline std::vector<int64_t> node_token_counts(int world_size, int round = 0) {
  std::vector<int64_t> tokens;
  for (int r = 0; r < world_size; ++r) tokens.push_back(r == 1 ? 0 : (5 + 7 * r + 3 * round) % 17);
  return tokens;
}

}  // namespace moe_ep::testing
