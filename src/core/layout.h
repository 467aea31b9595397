// Layout of one rank's symmetric communication buffer (CUDA backend), as one __host__ __device__
// struct with named getters so no offset arithmetic is repeated in kernels or launchers. Every
// rank has the same layout, so an offset computed locally addresses the same field in a peer.
//
//   control:  counts    [2 parities][W src][W dst]   uint64 {seq << 32 | rows s -> d}
//             experts   [2 parities][W src][E/W]     uint64 {seq << 32 | rows naming local e}
//             done      [W src]                      uint64 seq: src's dispatch rows landed
//   dispatch: payload [W*Tmax][payload_bytes], scales [W*Tmax][scale_bytes],
//             topk_idx [W*Tmax][K] int32, topk_weights [W*Tmax][K] fp32,
//             src_rank [W*Tmax] int32, src_token [W*Tmax] int32
//   combine:  rows [W src][Tmax][payload_bytes + scale_bytes]  (source rank r's row for token t)
//             row-ready flags [W src][Tmax] uint64
// Every region starts on a 256-byte boundary; rows are whole 16-byte units (H % 8 == 0).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace moe_ep {

struct BufferLayout {
  int32_t world_size = 1;
  int32_t local_experts = 1;  // E / W
  int32_t topk = 1;
  int32_t max_tokens = 1;              // per rank
  int64_t dispatch_payload_bytes = 0;  // per row
  int64_t dispatch_scale_bytes = 0;    // per row
  int64_t combine_row_bytes = 0;       // payload + scales, per row

  static constexpr int64_t kAlign = 256;
  MOE_EP_HD static int64_t align_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

  MOE_EP_HD int64_t max_recv_rows() const { return static_cast<int64_t>(world_size) * max_tokens; }

  // control region
  MOE_EP_HD int64_t counts_offset(int parity, int src, int dst) const {
    return 8 * ((static_cast<int64_t>(parity) * world_size + src) * world_size + dst);
  }
  MOE_EP_HD int64_t experts_offset(int parity, int src, int local_expert) const {
    const int64_t base = align_up(8LL * 2 * world_size * world_size);
    return base +
           8 * ((static_cast<int64_t>(parity) * world_size + src) * local_experts + local_expert);
  }
  MOE_EP_HD int64_t done_offset(int leg, int src) const {
    const int64_t base = experts_offset(0, 0, 0) + align_up(8LL * 2 * world_size * local_experts);
    return base + 8 * (static_cast<int64_t>(leg) * world_size + src);
  }
  MOE_EP_HD int64_t control_bytes() const { return align_up(done_offset(1, 0)); }

  // dispatch region
  MOE_EP_HD int64_t recv_payload_offset(int64_t row) const {
    return control_bytes() + row * dispatch_payload_bytes;
  }
  MOE_EP_HD int64_t recv_scales_offset(int64_t row) const {
    return recv_payload_offset(max_recv_rows()) + row * dispatch_scale_bytes;
  }
  MOE_EP_HD int64_t recv_topk_idx_offset(int64_t row) const {
    return align_up(recv_scales_offset(max_recv_rows())) + row * topk * 4;
  }
  MOE_EP_HD int64_t recv_topk_weights_offset(int64_t row) const {
    return align_up(recv_topk_idx_offset(max_recv_rows())) + row * topk * 4;
  }
  MOE_EP_HD int64_t recv_src_rank_offset(int64_t row) const {
    return align_up(recv_topk_weights_offset(max_recv_rows())) + row * 4;
  }
  MOE_EP_HD int64_t recv_src_token_offset(int64_t row) const {
    return align_up(recv_src_rank_offset(max_recv_rows())) + row * 4;
  }

  // combine region
  MOE_EP_HD int64_t combine_row_offset(int src, int64_t token) const {
    const int64_t base = align_up(recv_src_token_offset(max_recv_rows()));
    return base + (static_cast<int64_t>(src) * max_tokens + token) * combine_row_bytes;
  }
  // Row-ready flags of combine: source rank r's row for token t has landed once the word at
  // combine_flag_offset(r, t) equals the combine's sequence number ([W src][Tmax] x 8 bytes).
  MOE_EP_HD int64_t combine_flag_offset(int src, int64_t token) const {
    const int64_t base = align_up(combine_row_offset(world_size, 0));
    return base + 8 * (static_cast<int64_t>(src) * max_tokens + token);
  }
  MOE_EP_HD int64_t total_bytes() const { return align_up(combine_flag_offset(world_size, 0)); }
};

}  // namespace moe_ep
