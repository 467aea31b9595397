// Routing and layout math shared by the backends (docs/design.md#dispatch): which rank owns an
// expert, which destination ranks a token goes to (once per rank, never once per expert), the per-
// destination token lists in canonical order, and the scans of validation mode. Plain host code,
// tested on hand-written tables (tests/test_routing.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe_ep {

struct RoutingShape {
  int world_size = 1;      // W
  int num_experts = 1;     // E
  int topk = 1;            // K
  int ranks_per_node = 0;  // L, dividing W; 0 means W (one node)
  int experts_per_rank() const { return num_experts / world_size; }
  int owner(int expert) const { return expert / experts_per_rank(); }
  // Nodes (docs/design.md#several-nodes): ranks [n*L, (n+1)*L) form node n.
  int node_size() const { return ranks_per_node > 0 ? ranks_per_node : world_size; }
  int num_nodes() const { return world_size / node_size(); }
  int node_of(int rank) const { return rank / node_size(); }
  int first_rank_of(int node) const { return node * node_size(); }
  // The rank of `node` through which source `src` (on another node) reaches it: the one at src's
  // position in its own node, so that each rank of a node talks to one rank of every other node.
  int forwarder(int src, int node) const { return first_rank_of(node) + src % node_size(); }
};

// What one source rank sends: for every destination, its token indices in ascending order.
struct SendPlan {
  std::vector<std::vector<int32_t>> tokens_per_dest;  // [W][n_d]
  int64_t count(int dest) const { return static_cast<int64_t>(tokens_per_dest[dest].size()); }
};

// Builds the send plan of one rank. topk_idx: [num_tokens, K] with values already validated to
// [-1, E). A token goes to rank r once if any unmasked slot names an expert of r.
SendPlan plan_sends(const RoutingShape& shape, const int32_t* topk_idx, int64_t num_tokens);

// True when token row `slots` ([K]) sends to rank `dest`.
bool token_goes_to(const RoutingShape& shape, const int32_t* slots, int dest);

// The receive-side slot view: local expert id for slots owned by `dest`, else -1.
void local_slots(const RoutingShape& shape, const int32_t* slots, int dest, int32_t* out);

// Rows per local expert on the receiving side: counts[e] = number of rows of `local_topk_idx`
// ([num_rows, K], local ids or -1) with some slot naming local expert e (once per row even if a
// row names e twice). counts: [E/W].
void count_rows_per_local_expert(const RoutingShape& shape, const int32_t* local_topk_idx,
                                 int64_t num_rows, int32_t* counts);

// Offset of source `src`'s rows in `dest`'s receive buffer, given counts[s][dest] for all s:
// rows are ordered by source rank, then by source token index.
int64_t recv_offset(const std::vector<std::vector<int64_t>>& counts, int src, int dest);

// Validation scans (docs/design.md#errors). Each returns an empty string when the data is fine,
// else a message naming the argument, the (token, column) and the rule. find_bad_topk always checks
// the range [-1, E); the duplicate check (an expert named twice in one token) is the
// validation-mode part and can be turned off, since the range check alone is cheap enough to run on
// every call.
std::string find_bad_topk(const RoutingShape& shape, const int32_t* topk_idx, int64_t num_tokens,
                          bool check_duplicates = true);
std::string find_nonfinite_bf16(const char* name, const uint16_t* x, int64_t rows, int64_t cols);
std::string find_nonfinite_f32(const char* name, const float* w, int64_t rows, int64_t cols);

}  // namespace moe_ep
