// What a CUDA op allocates (cuda_op.h): the geometry its buffers are sized from, the list of its
// private device arrays, which the constructor allocates from (allocate_arrays) and op_memory
// sums (private_bytes), and Op::memory().
#include <type_traits>
#include <utility>

#include "backends/cuda/cuda_op.h"
#include "formats/row_format.h"

namespace moe_ep::cuda_backend {

CudaOpGeometry CudaOpGeometry::of(const OpConfig& config, int world_size, int rank, int num_sms) {
  const formats::RowFormat dispatch_wire =
      formats::row_format(config.dispatch_dtype, config.hidden);
  const formats::RowFormat combine_wire = formats::row_format(config.combine_dtype, config.hidden);
  CudaOpGeometry g;
  g.layout = BufferLayout::make(
      world_size, config.num_experts / world_size, config.topk, config.max_tokens_per_rank,
      dispatch_wire.payload_bytes, dispatch_wire.scale_bytes,
      combine_wire.payload_bytes + combine_wire.scale_bytes, config.low_latency,
      static_cast<int>((config.hidden + Policy::kDispatchSliceElems - 1) /
                       Policy::kDispatchSliceElems));
  g.nodes = NodeInfo::of(world_size, config.ranks_per_node, rank);
  if (g.nodes.several()) {
    g.stage_layout = StageLayout::make(dispatch_wire.payload_bytes, dispatch_wire.scale_bytes,
                                       config.topk, g.nodes.node_size);
    if (config.low_latency) {
      g.ll_msg_dispatch = DecodeMessageLayout::dispatch(
          sizeof(StepWire), dispatch_wire.payload_bytes, dispatch_wire.scale_bytes, config.topk,
          g.nodes.node_size, g.layout.local_experts, config.max_tokens_per_rank);
      g.ll_msg_combine = DecodeMessageLayout::combine(sizeof(StepWire), g.layout.combine_row_bytes,
                                                      config.max_tokens_per_rank);
    }
  }
  g.ce_combine_from_y = config.copy_engine && config.combine_dtype == CombineDtype::bf16 &&
                        g.layout.combine_row_bytes == 2 * static_cast<int64_t>(config.hidden);
  g.data_blocks = num_sms * Policy::kDataBlocksPerSm;
  return g;
}

template <typename Visit>
void CudaOp::visit_arrays(const OpConfig& config, int world_size, const CudaOpGeometry& g,
                          Visit&& visit) {
  const size_t w = static_cast<size_t>(world_size);
  const size_t tmax = static_cast<size_t>(config.max_tokens_per_rank);
  const formats::RowFormat dispatch_wire =
      formats::row_format(config.dispatch_dtype, config.hidden);
  visit(&CudaOp::pos_, 2 * w * tmax, false);
  visit(&CudaOp::send_offset_, w, false);
  visit(&CudaOp::recv_from_self_, 1, false);
  visit(&CudaOp::recv_expert_count_, static_cast<size_t>(g.layout.local_experts), false);
  visit(&CudaOp::counters_, 4, true);
  // notify's parts (launch.h): part words and the lower parts' expert words, zero to start (no
  // step is 0).
  visit(&CudaOp::notify_part_words_, w * kNotifyMaxParts, true);
  visit(&CudaOp::notify_part_experts_,
        (kNotifyMaxParts - 1) * static_cast<size_t>(config.num_experts), true);
  visit(&CudaOp::block_counter_, 1, true);
  visit(&CudaOp::scan_blocks_done_, 1, true);
  visit(&CudaOp::step_done_, 1, true);
  visit(&CudaOp::error_flag_, 1, true);
  visit(&CudaOp::step_started_, 2, true);
  if (config.low_latency) {
    const size_t local = static_cast<size_t>(g.layout.local_experts);
    const size_t slab_rows = local * w * tmax;
    const size_t k = static_cast<size_t>(config.topk);
    visit(&CudaOp::ll_state_, 1, true);
    visit(&CudaOp::ll_tickets_, 3, true);
    visit(&CudaOp::ll_sent_calls_, static_cast<size_t>(g.data_blocks), true);
    visit(&CudaOp::ll_send_counts_, static_cast<size_t>(config.num_experts), true);
    visit(&CudaOp::ll_slot_ranks_, tmax * k, false);
    visit(&CudaOp::ll_token_mask_, tmax, false);
    visit(&CudaOp::ll_slot_rows_, w * tmax * k, false);
    visit(&CudaOp::ll_slab_payload_, slab_rows * dispatch_wire.payload_bytes, false);
    visit(&CudaOp::ll_slab_scales_, slab_rows * dispatch_wire.scale_bytes, false);
    visit(&CudaOp::ll_count_, local, true);
    visit(&CudaOp::ll_src_rank_, slab_rows, false);
    visit(&CudaOp::ll_src_token_, slab_rows, false);
    visit(&CudaOp::ll_src_slot_, slab_rows, false);
  }
  if (g.nodes.several()) {
    const size_t remote = static_cast<size_t>(g.nodes.num_nodes - 1);
    const size_t rows = remote * tmax;
    visit(&CudaOp::node_pos_, static_cast<size_t>(g.nodes.num_nodes) * tmax, false);
    visit(&CudaOp::node_rows_, static_cast<size_t>(g.nodes.num_nodes), false);
    visit(&CudaOp::forwarded_rows_, remote, false);
    visit(&CudaOp::stage_out_, rows * g.stage_layout.stride, false);
    visit(&CudaOp::stage_in_, rows * g.stage_layout.stride, false);
    visit(&CudaOp::partial_bf16_, rows * config.hidden, false);
    visit(&CudaOp::partial_out_, rows * g.layout.combine_row_bytes, false);
    visit(&CudaOp::partial_in_, rows * g.layout.combine_row_bytes, false);
    visit(&CudaOp::forward_counter_, 1, true);
    visit(&CudaOp::scratch_flag_, 1, false);
    visit(&CudaOp::step_out_, 1, false);
    visit(&CudaOp::steps_in_, w, false);
    visit(&CudaOp::remote_experts_, w * g.layout.local_experts, false);
    if (config.low_latency) {
      // Zero: no message holds a step's rows before its first send (`sent` 0, steps start at 1).
      const size_t bytes = remote * static_cast<size_t>(g.ll_msg_dispatch.bytes);
      visit(&CudaOp::ll_msg_out_, bytes, true);
      visit(&CudaOp::ll_msg_in_, bytes, true);
      visit(&CudaOp::ll_forward_counter_, 1, true);
      const size_t combine_bytes = remote * static_cast<size_t>(g.ll_msg_combine.bytes);
      visit(&CudaOp::ll_cmsg_out_, combine_bytes, true);
      visit(&CudaOp::ll_cmsg_in_, combine_bytes, true);
    }
  }
  if (config.copy_engine) {  // normal mode on one node (check_config)
    visit(&CudaOp::ce_stage_, static_cast<size_t>(g.layout.recv_fwd_row_offset(0)), false);
    visit(&CudaOp::ce_stage_offset_, w, false);
    if (!g.ce_combine_from_y) {
      visit(&CudaOp::ce_combine_stage_,
            static_cast<size_t>(g.layout.max_recv_rows() * g.layout.combine_row_bytes), false);
    }
  }
}

int64_t CudaOp::private_bytes(const OpConfig& config, int world_size, const CudaOpGeometry& g) {
  int64_t bytes = 0;
  visit_arrays(config, world_size, g, [&](auto member, size_t count, bool /*zero*/) {
    using Array = std::decay_t<decltype(std::declval<CudaOp&>().*member)>;
    bytes += static_cast<int64_t>(Array::allocation_bytes(count));
  });
  return bytes;
}

OpMemory CudaOp::memory() const {
  OpMemory m;
  m.peer_bytes = layout_.total_bytes();
  m.private_bytes = allocated_bytes_;
  return m;
}

void CudaOp::allocate_arrays(const CudaOpGeometry& g) {
  visit_arrays(config_, world_size_, g, [&](auto member, size_t count, bool zero) {
    auto& array = this->*member;
    using Array = std::decay_t<decltype(array)>;
    array = Array(device_, count);
    allocated_bytes_ += static_cast<int64_t>(Array::allocation_bytes(count));
    if (zero) array.zero(comm_->internal_stream());
  });
}

}  // namespace moe_ep::cuda_backend
