// See recv_views.h.
#include "core/recv_views.h"

#include "formats/row_format.h"

namespace moe_ep {

DispatchResult make_dispatch_result(const OpConfig& config, int world_size, const RecvBuffers& b,
                                    int64_t num_recv, const Handle& handle) {
  const formats::RowFormat wire = formats::row_format(config.dispatch_dtype, config.hidden);
  const int k = config.topk;
  const DeviceType dev = b.device;
  const int idx = b.device_index;
  DispatchResult r;
  r.num_recv = num_recv;
  r.handle = handle;
  r.recv_x =
      TensorView::matrix(b.payload, wire.payload_type, num_recv, wire.payload_cols, dev, idx);
  if (wire.has_scales()) {
    r.recv_x_scales =
        TensorView::matrix(b.scales, wire.scale_type, num_recv, wire.scale_cols, dev, idx);
  }
  r.recv_topk_idx = TensorView::matrix(b.topk_idx, ScalarType::kInt32, num_recv, k, dev, idx);
  r.recv_topk_weights =
      TensorView::matrix(b.topk_weights, ScalarType::kFloat32, num_recv, k, dev, idx);
  r.recv_src_rank = TensorView::vector(b.src_rank, ScalarType::kInt32, num_recv, dev, idx);
  r.recv_src_token = TensorView::vector(b.src_token, ScalarType::kInt32, num_recv, dev, idx);
  r.recv_count_per_local_expert = TensorView::vector(b.count_per_local_expert, ScalarType::kInt32,
                                                     config.num_experts / world_size, dev, idx);
  return r;
}

LowLatencyDispatchResult make_low_latency_result(const OpConfig& config, int world_size,
                                                 const LowLatencyRecvBuffers& b,
                                                 const LowLatencyHandle& handle) {
  const formats::RowFormat wire = formats::row_format(config.dispatch_dtype, config.hidden);
  const int64_t local_experts = config.num_experts / world_size;
  const int64_t slab_rows = static_cast<int64_t>(world_size) * config.max_tokens_per_rank;
  const DeviceType dev = b.device;
  const int idx = b.device_index;
  LowLatencyDispatchResult r;
  r.handle = handle;
  r.recv_x = TensorView::tensor3(b.payload, wire.payload_type, local_experts, slab_rows,
                                 wire.payload_cols, dev, idx);
  r.scales_column_major = config.column_major_scales;
  if (wire.has_scales()) {
    r.recv_x_scales = config.column_major_scales
                          ? TensorView::tensor3(b.scales, wire.scale_type, local_experts,
                                                wire.scale_cols, slab_rows, dev, idx)
                          : TensorView::tensor3(b.scales, wire.scale_type, local_experts, slab_rows,
                                                wire.scale_cols, dev, idx);
  }
  r.recv_count = TensorView::vector(b.count, ScalarType::kInt32, local_experts, dev, idx);
  r.recv_src_rank =
      TensorView::matrix(b.src_rank, ScalarType::kInt32, local_experts, slab_rows, dev, idx);
  r.recv_src_token =
      TensorView::matrix(b.src_token, ScalarType::kInt32, local_experts, slab_rows, dev, idx);
  r.recv_src_slot =
      TensorView::matrix(b.src_slot, ScalarType::kInt32, local_experts, slab_rows, dev, idx);
  return r;
}

}  // namespace moe_ep
