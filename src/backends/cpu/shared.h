// State shared by the W rank-objects (CpuOp) of one CPU op: the bounded barrier, what each rank
// publishes before a barrier (its configuration at creation; per call its input status and send
// counts) and every rank's receive buffers. Ranks are threads, so a "send" is a store into the
// destination rank's buffers, the CPU analogue of a kernel storing into a peer over NVLink.
//
// Ownership rules: rank r writes only slots[r].* and the rows of peers' buffers that the routing
// assigns to it; it reads peers' slots only between the barrier they were published for and the
// next one. Per-call posts are double-buffered by barrier parity (post[g % 2] is published for
// barrier g), so a rank that has passed barrier g and publishes for g+1 never overwrites what a
// slower rank is still reading after g.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/barrier.h"
#include "core/agreement.h"
#include "moe_ep/errors.h"
#include "moe_ep/op.h"

namespace moe_ep::cpu_backend {

// One rank's receive buffers, allocated by that rank at creation for the worst case: every rank
// sends it every token (W * Tmax rows; in decode mode W * Tmax rows per local expert as well).
// Peers write into them during dispatch and combine; normal-mode and decode-mode outputs live in
// separate buffers, so the calls of the two modes can interleave.
struct RankBuffers {
  // Dispatch receive side, rows in canonical order (source rank, then source token).
  std::vector<uint8_t> recv_payload;                 // [W * Tmax, dispatch payload bytes]
  std::vector<uint8_t> recv_scales;                  // [W * Tmax, dispatch scale bytes]
  std::vector<int32_t> recv_topk_idx;                // [W * Tmax, K] local expert id or -1
  std::vector<float> recv_topk_weights;              // [W * Tmax, K]
  std::vector<int32_t> recv_src_rank;                // [W * Tmax]
  std::vector<int32_t> recv_src_token;               // [W * Tmax]
  std::vector<int32_t> recv_count_per_local_expert;  // [E / W]
  // Combine receive side: row (r, t) is rank r's partial result for this rank's token t, in the
  // combine wire format. A token sent to rank r has exactly one row there. Both modes' combines
  // use it: it is written and read within one call.
  std::vector<uint8_t> combine_payload;  // [W, Tmax, combine payload bytes]
  std::vector<uint8_t> combine_scales;   // [W, Tmax, combine scale bytes]

  // Decode mode, staging: row (s, i) is the i-th token (ascending) that source s sends this rank
  // in a low-latency dispatch, stored once however many of this rank's experts it names.
  std::vector<uint8_t> stage_payload;     // [W, Tmax, dispatch payload bytes]
  std::vector<uint8_t> stage_scales;      // [W, Tmax, dispatch scale bytes]
  std::vector<int32_t> stage_topk_idx;    // [W, Tmax, K] local expert id or -1
  std::vector<float> stage_topk_weights;  // [W, Tmax, K]
  std::vector<int32_t> stage_src_token;   // [W, Tmax]
  std::vector<int32_t> stage_count;       // [W] rows source s staged, written by s
  // Decode mode, slabs: the receiver's expansion of the staging rows, one slab per local expert.
  std::vector<uint8_t> slab_payload;    // [E/W, W*Tmax, dispatch payload bytes]
  std::vector<uint8_t> slab_scales;     // [E/W, W*Tmax, dispatch scale bytes]
  std::vector<int32_t> slab_count;      // [E/W]
  std::vector<int32_t> slab_src_rank;   // [E/W, W*Tmax], -1 past the count
  std::vector<int32_t> slab_src_token;  // [E/W, W*Tmax], -1 past the count
  std::vector<int32_t> slab_src_slot;   // [E/W, W*Tmax], -1 past the count

  // Several nodes (docs/design.md#several-nodes), only when ranks_per_node L < W. This rank as
  // the forwarder of its node for the sources s of other nodes at its own position (s mod L).
  // Dispatch: row (s, i) is the i-th token (ascending) that s sends to this node, stored once
  // however many of this node's ranks take it, with its global expert ids.
  std::vector<uint8_t> fwd_payload;     // [W, Tmax, dispatch payload bytes]
  std::vector<uint8_t> fwd_scales;      // [W, Tmax, dispatch scale bytes]
  std::vector<int32_t> fwd_topk_idx;    // [W, Tmax, K] global expert id or -1
  std::vector<float> fwd_topk_weights;  // [W, Tmax, K]
  std::vector<int32_t> fwd_src_token;   // [W, Tmax]
  std::vector<int32_t> fwd_count;       // [W] rows source s staged, written by s
  // Combine: row (j, m, t) is what rank j of this node returns for token t of the source this
  // rank forwards for on node m, in the combine wire format (fwd_combine_row).
  std::vector<uint8_t> fwd_combine_payload;  // [L, W/L, Tmax, combine payload bytes]
  std::vector<uint8_t> fwd_combine_scales;   // [L, W/L, Tmax, combine scale bytes]
};

// Row of fwd_combine_* for what rank `j` of the forwarder's node (0 <= j < L) returns for token
// `token` of the source the forwarder serves on node `src_node`.
inline int64_t fwd_combine_row(int j, int src_node, int num_nodes, int64_t max_tokens,
                               int64_t token) {
  return (static_cast<int64_t>(j) * num_nodes + src_node) * max_tokens + token;
}

// What a rank publishes before a barrier: at creation, whether it could allocate its buffers;
// per call, the identity of its call and its verdict (core/agreement.h) and, for dispatch, its
// send counts.
struct RankPost {
  StepVerdict verdict;               // error empty: this rank accepted its input
  int64_t num_tokens = 0;            // T of this rank (dispatch)
  std::vector<int64_t> send_counts;  // [W] rows this rank sends to each destination (dispatch)
};

struct RankSlot {
  RankPost post[2];  // indexed by barrier parity
};

struct OpShared {
  OpShared(int world_size, double timeout_s)
      : barrier(world_size, timeout_s), slots(world_size), buffers(world_size) {}
  BoundedBarrier barrier;
  std::vector<RankSlot> slots;       // [W]
  std::vector<RankBuffers> buffers;  // [W]
};

}  // namespace moe_ep::cpu_backend
