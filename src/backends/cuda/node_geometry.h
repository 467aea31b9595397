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

// Decode mode across nodes (docs/multi-node.md, "Decode mode across nodes: the plan"):
// the one message a rank sends each rail peer per leg, of a fixed size (the worst case, `Tmax`
// rows whatever T is), so that a CUDA graph can hold the exchange. Every offset is a multiple of
// 16 and so is the size.
//
// Dispatch, source s -> its rail peer f on node m: s's step word (a StepWire of `step_bytes`), T_s
// (int32) and at `sent` the step whose rows the message holds (uint64, written after the rows: a
// message whose `sent` is not the receiver's step holds no rows of this call), s's token counts of
// node m's experts ([L][E/W] int32, m's ranks in order, their local experts in order: the counts
// rows f stores for s), then row t of s for t < Tmax: payload and scales (only when token t names
// an expert of node m), then, for every t < T_s, the token's K global expert ids (int32, -1
// masked), K weights (fp32) and K slot ranks (int32, bit 31: an earlier slot names the same
// expert), from which f derives each of its node's ranks' flags and metadata exactly as the
// one-node send would have stored them.
//
// Combine, forwarder f on node n -> source s (f's rail peer): f's step word, then row t of s for
// t < Tmax: node n's partial of s's token t, encoded in the combine wire format (only for the
// tokens that went to node n, which s knows from its own routing).
struct DecodeMessageLayout {
  int64_t step = 0;        // the sender's StepWire
  int64_t num_tokens = 0;  // dispatch: int32 T of the source
  int64_t sent = 0;        // uint64, the step whose rows (dispatch) or partials (combine) it holds
  int64_t counts = 0;      // dispatch: [L * E/W] int32
  int64_t rows = 0;        // [Tmax] rows of `row_stride`
  int64_t row_stride = 0;
  int64_t row_ids = 0;      // dispatch, within a row: [K] int32
  int64_t row_weights = 0;  // dispatch, within a row: [K] fp32
  int64_t row_ranks = 0;    // dispatch, within a row: [K] int32
  int64_t bytes = 0;        // the whole message

  MOE_EP_HD static int64_t align16(int64_t v) { return (v + 15) / 16 * 16; }

  static DecodeMessageLayout dispatch(int64_t step_bytes, int64_t payload_bytes,
                                      int64_t scale_bytes, int topk, int node_size,
                                      int local_experts, int max_tokens) {
    DecodeMessageLayout m;
    m.step = 0;
    m.num_tokens = align16(step_bytes);
    m.sent = m.num_tokens + 8;
    m.counts = m.num_tokens + 16;
    m.rows = align16(m.counts + 4 * static_cast<int64_t>(node_size) * local_experts);
    m.row_ids = align16(payload_bytes + scale_bytes);
    m.row_weights = m.row_ids + 4 * static_cast<int64_t>(topk);
    m.row_ranks = m.row_weights + 4 * static_cast<int64_t>(topk);
    m.row_stride = align16(m.row_ranks + 4 * static_cast<int64_t>(topk));
    m.bytes = m.rows + m.row_stride * max_tokens;
    return m;
  }

  static DecodeMessageLayout combine(int64_t step_bytes, int64_t combine_row_bytes,
                                     int max_tokens) {
    DecodeMessageLayout m;
    m.step = 0;
    m.sent = align16(step_bytes);
    m.rows = align16(m.sent + 8);
    m.row_stride = align16(combine_row_bytes);
    m.bytes = m.rows + m.row_stride * max_tokens;
    return m;
  }

  MOE_EP_HD int64_t row(int64_t t) const { return rows + t * row_stride; }
};

}  // namespace moe_ep::cuda_backend
