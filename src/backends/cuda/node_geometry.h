// Where the CUDA backend's path across nodes sends what (docs/multi-node.md, "The CUDA path
// across nodes"), without CUDA, so that the geometry is tested on any machine: which node a rank
// is on, the forwarder of each (rank, node) pair, the order of the buffers kept per remote node,
// and the layout of one staged row.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace moe_ep::cuda_backend {

// Several nodes (docs/multi-node.md, "The CUDA path across nodes"): ranks [n*L, (n+1)*L) form
// node n. With one node (L = W) every hierarchical field below is unused and the kernels take
// their one-node paths.
struct NodeInfo {
  int32_t node_size = 1;  // L
  int32_t num_nodes = 1;  // N = W / L
  int32_t node = 0;       // this rank's node
  // Rank `rank` of `world_size` with OpConfig::ranks_per_node = `ranks_per_node` (0: one node);
  // ranks_per_node divides world_size (check_config).
  static NodeInfo of(int world_size, int ranks_per_node, int rank) {
    NodeInfo n;
    n.node_size = ranks_per_node > 0 ? ranks_per_node : world_size;
    n.num_nodes = world_size / n.node_size;
    n.node = rank / n.node_size;
    return n;
  }
  MOE_EP_HD bool several() const { return num_nodes > 1; }
  MOE_EP_HD int32_t first_rank() const { return node * node_size; }
  MOE_EP_HD bool same_node(int32_t rank) const { return rank / node_size == node; }
  // Remote node n's index in the buffers kept per remote node ([N - 1, ...]), n != node.
  MOE_EP_HD int32_t slot(int32_t n) const { return n < node ? n : n - 1; }
  MOE_EP_HD int32_t node_of_slot(int32_t s) const { return s < node ? s : s + 1; }
  // Rank `rank`'s peer on node n with the same index inside its node: the forwarder of what
  // `rank` sends to node n, and the source whose rows `rank` forwards from node n.
  MOE_EP_HD int32_t rail_peer(int32_t rank, int32_t n) const {
    return n * node_size + rank % node_size;
  }
};

// One staged row: what a source sends the forwarder on another node for one token, in one
// piece. payload [payload bytes], scales [scale bytes], then at `meta` (4-byte aligned): the
// source token (int32), its K global expert ids (int32), its K weights (fp32) and, for each of
// the node's L ranks, the row the token takes in that rank's receive rows (int32, -1: none).
// `stride` is a multiple of 16, so every staged row's payload is 16-byte aligned.
struct StageLayout {
  int64_t payload_bytes = 0;
  int64_t scale_bytes = 0;
  int64_t meta = 0;
  int64_t ids = 0;
  int64_t weights = 0;
  int64_t rows = 0;
  int64_t stride = 0;
  static StageLayout make(int64_t payload_bytes, int64_t scale_bytes, int topk, int node_size) {
    StageLayout s;
    s.payload_bytes = payload_bytes;
    s.scale_bytes = scale_bytes;
    s.meta = (payload_bytes + scale_bytes + 3) / 4 * 4;
    s.ids = s.meta + 4;
    s.weights = s.ids + 4 * static_cast<int64_t>(topk);
    s.rows = s.weights + 4 * static_cast<int64_t>(topk);
    s.stride = (s.rows + 4 * static_cast<int64_t>(node_size) + 15) / 16 * 16;
    return s;
  }
};

}  // namespace moe_ep::cuda_backend
