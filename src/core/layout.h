// Layout of one rank's communication buffer (CUDA backend), as one __host__ __device__ struct
// with named getters so no offset arithmetic is repeated in kernels or launchers. Every rank has
// the same layout, so an offset computed locally addresses the same field in a peer. Regions, in
// order (each starts on a 256-byte boundary; rows are whole 16-byte units):
//
//   steps      [2 parities][W src] {info, tag}      who is in which call, and its verdict
//   reasons    [2 parities][W src] StepReason       why src rejected its call of that step
//   counts     [2 parities][W src][W dst] uint64    {step << 32 | rows s -> d}
//   experts    [2 parities][W src][E/W] uint64      {step << 32 | rows naming local e}
//   done       [W src] uint64                       step: src's dispatch rows have landed (with
//                                                   the copy-engine path also its combine rows;
//                                                   several nodes)
//   done counts [2 parities][W src] uint64          one node's SM path: c | c * G << 32 after c
//                                                   of the G blocks of src's dispatch have landed
//                                                   their rows (done_count_complete)
//   dispatch   payload [W*Tmax][payload bytes], scales [W*Tmax][scale bytes],
//              topk_idx [W*Tmax][K] int32, topk_weights [W*Tmax][K] fp32,
//              src_rank [W*Tmax] int32, src_token [W*Tmax] int32,
//              fwd_row [W*Tmax] int32 (several nodes: the row's index among what its source
//              staged for this node, written by the forwarder; where combine sends the row)
//   combine    rows [W src][Tmax][payload + scale bytes], ready flags [W src][Tmax] uint64
//   decode mode only (OpConfig::low_latency; sized 0 otherwise):
//   ll steps   [2 parities][W src] {info, tag}      the decode calls' own step words
//   ll done    [W src] uint64                       {step << 32 | T_src}: src's rows landed
//                                                   (one node: stored by every block of src's
//                                                   send, complete once its done count is)
//   ll done counts [2 parities][W src] uint64       one node: c | c * G << 32 after c of the G
//                                                   blocks of src's send of a dispatch call of
//                                                   that parity have landed (done_count_complete)
//   ll counts  [W src][E/W] int32                   tokens of src naming local expert e
//   ll flags   [W src][Tmax] uint64                 step << 1 | (token t of src comes here)
//   ll stage   [2 parities][W src][Tmax][payload + scale bytes]
//                                                   token t of src, once per destination rank;
//                                                   one node: by the parity of the dispatch
//                                                   call (its rows go out before the step's
//                                                   verdict), several nodes: parity 0
//   ll meta    [W src][Tmax] {K local ids, K weights, K ranks} of that token; the rank of
//              slot k is the number of src's earlier tokens naming its expert (bit 31 set
//              when an earlier slot of the token names the same expert)
//   ll ready   [W src][Tmax][slices] uint64         combine: src's partial for token t, slice j
//              has landed (decode tag | step); a slice is 1024 elements of the row (the CUDA
//              backend's Policy::kDispatchSliceElems)
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace moe_ep {

// What a rank that rejects a call leaves in every peer's `reasons` slot: the device error record
// of a data scan (binary, formatted by the receiving host) or the host's message.
inline constexpr int kStepReasonBytes = 384;

struct BufferLayout {
  enum Region {
    kSteps,
    kReasons,
    kCounts,
    kExperts,
    kDone,
    kDoneCounts,
    kPayload,
    kScales,
    kTopkIdx,
    kTopkWeights,
    kSrcRank,
    kSrcToken,
    kFwdRow,
    kCombineRows,
    kCombineFlags,
    kLlSteps,
    kLlDone,
    kLlDoneCounts,
    kLlCounts,
    kLlFlags,
    kLlStage,
    kLlMeta,
    kLlReady,
    kEnd,
    kNumRegions
  };
  static constexpr int64_t kAlign = 256;

  int32_t world_size = 1;
  int32_t local_experts = 1;  // E / W
  int32_t topk = 1;
  int32_t max_tokens = 1;              // per rank
  int64_t dispatch_payload_bytes = 0;  // per row
  int64_t dispatch_scale_bytes = 0;    // per row
  int64_t combine_row_bytes = 0;       // payload + scales, per row, a multiple of 16
  int64_t stage_row_bytes = 0;         // decode mode: dispatch payload + scales, multiple of 16
  int64_t meta_bytes = 0;              // decode mode: K ids, weights, ranks; multiple of 16
  int32_t ll_slices = 1;               // decode mode: combine slices per row
  int64_t offset[kNumRegions] = {};    // start of each region

  // Sizes every region for these dimensions; the only place offsets are computed.
  static BufferLayout make(int world_size, int local_experts, int topk, int max_tokens,
                           int64_t dispatch_payload_bytes, int64_t dispatch_scale_bytes,
                           int64_t combine_payload_and_scale_bytes, bool low_latency = false,
                           int ll_slices = 1) {
    BufferLayout l;
    l.world_size = world_size;
    l.local_experts = local_experts;
    l.topk = topk;
    l.max_tokens = max_tokens;
    l.dispatch_payload_bytes = dispatch_payload_bytes;
    l.dispatch_scale_bytes = dispatch_scale_bytes;
    l.combine_row_bytes = (combine_payload_and_scale_bytes + 15) / 16 * 16;
    l.stage_row_bytes = (dispatch_payload_bytes + dispatch_scale_bytes + 15) / 16 * 16;
    l.meta_bytes = (12 * static_cast<int64_t>(topk) + 15) / 16 * 16;
    l.ll_slices = ll_slices;
    const int64_t ll = low_latency ? 1 : 0;
    const int64_t w = world_size;
    const int64_t rows = w * max_tokens;
    const int64_t sizes[kNumRegions] = {16 * 2 * w,                         // steps
                                        kStepReasonBytes * 2 * w,           // reasons
                                        8 * 2 * w * w,                      // counts
                                        8 * 2 * w * local_experts,          // experts
                                        8 * w,                              // done
                                        8 * 2 * w,                          // done counts
                                        rows * dispatch_payload_bytes,      // payload
                                        rows * dispatch_scale_bytes,        // scales
                                        rows * topk * 4,                    // topk_idx
                                        rows * topk * 4,                    // topk_weights
                                        rows * 4,                           // src_rank
                                        rows * 4,                           // src_token
                                        rows * 4,                           // fwd_row
                                        rows * l.combine_row_bytes,         // combine rows
                                        8 * rows,                           // combine flags
                                        ll * 16 * 2 * w,                    // ll steps
                                        ll * 8 * w,                         // ll done
                                        ll * 8 * 2 * w,                     // ll done counts
                                        ll * 4 * w * local_experts,         // ll counts
                                        ll * 8 * rows,                      // ll flags
                                        ll * 2 * rows * l.stage_row_bytes,  // ll stage
                                        ll * rows * l.meta_bytes,           // ll meta
                                        ll * 8 * rows * ll_slices,          // ll ready
                                        0};                                 // end
    int64_t at = 0;
    for (int r = 0; r < kNumRegions; ++r) {
      l.offset[r] = at;
      at = align_up(at + sizes[r]);
    }
    return l;
  }

  MOE_EP_HD static int64_t align_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }
  MOE_EP_HD int64_t max_recv_rows() const { return static_cast<int64_t>(world_size) * max_tokens; }
  MOE_EP_HD int64_t total_bytes() const { return offset[kEnd]; }
  // The control regions (steps .. done), which are zeroed at creation.
  MOE_EP_HD int64_t control_bytes() const { return offset[kPayload]; }

  // control
  MOE_EP_HD int64_t step_offset(int parity, int src) const {
    return offset[kSteps] + 16 * (static_cast<int64_t>(parity) * world_size + src);
  }
  MOE_EP_HD int64_t reason_offset(int parity, int src) const {
    return offset[kReasons] + static_cast<int64_t>(kStepReasonBytes) *
                                  (static_cast<int64_t>(parity) * world_size + src);
  }
  MOE_EP_HD int64_t counts_offset(int parity, int src, int dst) const {
    return offset[kCounts] +
           8 * ((static_cast<int64_t>(parity) * world_size + src) * world_size + dst);
  }
  MOE_EP_HD int64_t experts_offset(int parity, int src, int local_expert) const {
    return offset[kExperts] +
           8 * ((static_cast<int64_t>(parity) * world_size + src) * local_experts + local_expert);
  }
  MOE_EP_HD int64_t done_offset(int src) const { return offset[kDone] + 8 * src; }
  MOE_EP_HD int64_t done_count_offset(int parity, int src) const {
    return offset[kDoneCounts] + 8 * (static_cast<int64_t>(parity) * world_size + src);
  }
  // Whether a done-count word says every block of its source's grid has added itself: each block
  // adds 1 | G << 32 (G its grid's blocks), so after c blocks the word is c | c * G << 32, and
  // the high half equals c * c exactly when c == G (G <= kMaxDoneCountBlocks: no wrap).
  static constexpr int64_t kMaxDoneCountBlocks = 65535;
  MOE_EP_HD static bool done_count_complete(uint64_t word) {
    const uint64_t c = word & 0xffffffffu;
    return c != 0 && (word >> 32) == c * c;
  }

  // dispatch receive rows
  MOE_EP_HD int64_t recv_payload_offset(int64_t row) const {
    return offset[kPayload] + row * dispatch_payload_bytes;
  }
  MOE_EP_HD int64_t recv_scales_offset(int64_t row) const {
    return offset[kScales] + row * dispatch_scale_bytes;
  }
  MOE_EP_HD int64_t recv_topk_idx_offset(int64_t row) const {
    return offset[kTopkIdx] + row * topk * 4;
  }
  MOE_EP_HD int64_t recv_topk_weights_offset(int64_t row) const {
    return offset[kTopkWeights] + row * topk * 4;
  }
  MOE_EP_HD int64_t recv_src_rank_offset(int64_t row) const { return offset[kSrcRank] + row * 4; }
  MOE_EP_HD int64_t recv_src_token_offset(int64_t row) const { return offset[kSrcToken] + row * 4; }
  MOE_EP_HD int64_t recv_fwd_row_offset(int64_t row) const { return offset[kFwdRow] + row * 4; }

  // combine: source rank r's row for token t, and its ready flag (equal to the step of the
  // combine once the row has landed). Several nodes: a forwarder of node f receives only its own
  // node's rows as a source, so the slots of the other nodes' ranks hold what it forwards back:
  // slot (m * L + q, j) is rank q of node f's row for staged row j from node m.
  MOE_EP_HD int64_t combine_row_offset(int src, int64_t token) const {
    return offset[kCombineRows] +
           (static_cast<int64_t>(src) * max_tokens + token) * combine_row_bytes;
  }
  MOE_EP_HD int64_t combine_flag_offset(int src, int64_t token) const {
    return offset[kCombineFlags] + 8 * (static_cast<int64_t>(src) * max_tokens + token);
  }

  // decode mode
  MOE_EP_HD int64_t ll_step_offset(int parity, int src) const {
    return offset[kLlSteps] + 16 * (static_cast<int64_t>(parity) * world_size + src);
  }
  MOE_EP_HD int64_t ll_done_offset(int src) const { return offset[kLlDone] + 8 * src; }
  // By the parity of the dispatch call's number (LowLatencyState::dispatch_calls), not the step's.
  MOE_EP_HD int64_t ll_done_count_offset(int parity, int src) const {
    return offset[kLlDoneCounts] + 8 * (static_cast<int64_t>(parity) * world_size + src);
  }
  MOE_EP_HD int64_t ll_counts_offset(int src, int local_expert) const {
    return offset[kLlCounts] + 4 * (static_cast<int64_t>(src) * local_experts + local_expert);
  }
  MOE_EP_HD int64_t ll_flag_offset(int src, int64_t token) const {
    return offset[kLlFlags] + 8 * (static_cast<int64_t>(src) * max_tokens + token);
  }
  MOE_EP_HD int64_t ll_stage_offset(int parity, int src, int64_t token) const {
    return offset[kLlStage] +
           ((static_cast<int64_t>(parity) * world_size + src) * max_tokens + token) *
               stage_row_bytes;
  }
  MOE_EP_HD int64_t ll_meta_offset(int src, int64_t token) const {
    return offset[kLlMeta] + (static_cast<int64_t>(src) * max_tokens + token) * meta_bytes;
  }
  MOE_EP_HD int64_t ll_ready_offset(int src, int64_t token, int64_t slice) const {
    return offset[kLlReady] +
           8 * ((static_cast<int64_t>(src) * max_tokens + token) * ll_slices + slice);
  }
};

}  // namespace moe_ep
