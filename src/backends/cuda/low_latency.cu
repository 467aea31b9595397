// Instantiations and launchers of the decode-mode kernels, one per wire format: low_latency.cuh
// (step), low_latency_send.cuh, low_latency_expand.cuh and low_latency_combine.cuh; and of
// decode mode's kernels across nodes (low_latency_nodes.cuh; in this translation unit because
// ll_step_kernel, which these headers share, is not a template).

#include "backends/cuda/low_latency.cuh"
#include "backends/cuda/low_latency_combine.cuh"
#include "backends/cuda/low_latency_expand.cuh"
#include "backends/cuda/low_latency_nodes.cuh"
#include "backends/cuda/low_latency_send.cuh"

namespace moe_ep::cuda_backend {
namespace {

// A decode kernel with programmatic dependent launch (common.cuh, launch_following): scheduled
// while the kernel before it runs, waiting for it on the device (ll_follow_previous_kernel).
// Captured into a graph, the dependency becomes a programmatic edge.
template <typename Kernel>
cudaError_t launch_following(Kernel kernel, int blocks, int threads, cudaStream_t stream,
                             const LowLatencyParams& p) {
  return cuda_backend::launch_following(kernel, dim3(static_cast<unsigned int>(blocks)),
                                        dim3(static_cast<unsigned int>(threads)), 0, stream, p);
}

// Blocks of Policy::kDataThreads for `items` warp-sized work items, at least 1 and at most
// `num_blocks` (the op's budget).
int blocks_for_warp_items(int64_t items, int num_blocks) {
  const int64_t warps_per_block = Policy::kDataThreads / 32;
  const int64_t blocks = (items + warps_per_block - 1) / warps_per_block;
  return static_cast<int>(blocks < 1 ? 1 : blocks > num_blocks ? num_blocks : blocks);
}

}  // namespace

cudaError_t launch_ll_step(const LowLatencyParams& p, cudaStream_t stream) {
  static_assert(Policy::kNotifyThreads >= Policy::kMaxPeers, "the step block: a thread a peer");
  // A thread a peer; a step kernel that ranks the slots takes a whole block (128 tokens, top-8,
  // are a slot a thread in each of ll_rank_slots's passes; v30 run B: 256 threads, 4 slots a
  // thread, took 5 us).
  return p.step_ranks ? launch_following(ll_step_kernel<true>, 1, Policy::kNotifyThreads, stream, p)
                      : launch_following(ll_step_kernel<false>, 1, Policy::kMaxPeers, stream, p);
}

cudaError_t launch_ll_send(DispatchDtype dtype, bool prequantized, const LowLatencyParams& p,
                           int num_blocks, cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    const auto kernel =
        p.nodes.several()
            ? (prequantized ? ll_send_kernel<F, true, true> : ll_send_kernel<F, false, true>)
            : (prequantized ? ll_send_kernel<F, true, false> : ll_send_kernel<F, false, false>);
    // No more blocks than the call's work items (a token's metadata, then its slices): every
    // block takes part in the grid-wide end (a system fence and a count each), which a one-token
    // send paid for the whole budget's blocks (v16: 9.5 us). T is the call's shape, so calls with
    // the same shapes (a captured graph's replays among them) get the same grid.
    const int64_t slices = prequantized ? 1
                                        : (p.info.hidden + Policy::kDispatchSliceElems - 1) /
                                              Policy::kDispatchSliceElems;
    const int64_t items = static_cast<int64_t>(p.num_tokens) * (1 + slices);
    const int blocks = blocks_for_warp_items(items, num_blocks);
    // One node counts the send's blocks in a done count (BufferLayout::done_count_complete)
    // and keeps one slot of sent_calls a block.
    if (!p.nodes.several() &&
        (blocks > BufferLayout::kMaxDoneCountBlocks || blocks > p.send_blocks)) {
      return cudaErrorInvalidConfiguration;
    }
    return launch_following(kernel, blocks, Policy::kDataThreads, stream, p);
  });
}

cudaError_t launch_ll_expand(DispatchDtype dtype, const LowLatencyParams& p, int num_blocks,
                             cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    // No more blocks than the most work items a call can have: the blocks wait for the peers'
    // rows, and idle waiting blocks would only hold SMs (other ranks' sends among them, when
    // ranks share a GPU).
    const int blocks =
        blocks_for_warp_items(ll_expand_items(p, p.column_scale_bytes).most_items(), num_blocks);
    if constexpr (F::kBlock != 0) {  // formats with scales: the column-major kernel too
      if (p.column_scale_bytes > 0) {
        return launch_following(ll_expand_kernel<F, true>, blocks, Policy::kDataThreads, stream, p);
      }
    }
    return launch_following(ll_expand_kernel<F, false>, blocks, Policy::kDataThreads, stream, p);
  });
}

cudaError_t launch_ll_dispatch(DispatchDtype dtype, bool prequantized, const LowLatencyParams& p,
                               int num_blocks, cudaStream_t stream) {
  const cudaError_t status = launch_ll_send(dtype, prequantized, p, num_blocks, stream);
  if (status != cudaSuccess) return status;
  return launch_ll_expand(dtype, p, num_blocks, stream);
}

cudaError_t launch_ll_combine(CombineDtype dtype, const LowLatencyParams& p, int num_blocks,
                              cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    // The whole combine in one launch sums this rank's own part in place (low_latency_combine.cuh).
    // No more blocks than this launch's items (ll_combine_items): a warp that finds no item still
    // takes a ticket and counts itself out, two atomics on one word each. At world size 1 the
    // launch takes its items by warp instead, no ticket (LlCombineItems::by_warp; perf-history v54:
    // 0.7-1.2 us off every decode combine on one H100).
    const LlCombineItems items = ll_combine_items(p);
    const int blocks = blocks_for_warp_items(items.count(), num_blocks);
    const auto kernel = items.by_warp(p.combine_phase)     ? ll_combine_kernel<F, true, true>
                        : p.combine_phase == kLlCombineAll ? ll_combine_kernel<F, true>
                                                           : ll_combine_kernel<F, false>;
    return launch_following(kernel, blocks, Policy::kDataThreads, stream, p);
  });
}

cudaError_t preload_ll_kernels() {
  cudaError_t status = load_kernel(ll_step_kernel<true>);
  if (status == cudaSuccess) status = load_kernel(ll_step_kernel<false>);
  for (DispatchDtype dtype : kAllDispatchDtypes) {
    if (status != cudaSuccess) return status;
    status = formats::visit_format(dtype, [](auto format) {
      using F = decltype(format);
      cudaError_t s = load_kernel(ll_send_kernel<F, true, false>);
      if (s == cudaSuccess) s = load_kernel(ll_send_kernel<F, false, false>);
      if (s == cudaSuccess) s = load_kernel(ll_send_kernel<F, true, true>);
      if (s == cudaSuccess) s = load_kernel(ll_send_kernel<F, false, true>);
      if (s == cudaSuccess) s = load_kernel(ll_expand_kernel<F, false>);
      if constexpr (F::kBlock != 0) {
        if (s == cudaSuccess) s = load_kernel(ll_expand_kernel<F, true>);
      }
      return s;
    });
  }
  for (CombineDtype dtype : kAllCombineDtypes) {
    if (status != cudaSuccess) return status;
    status = formats::visit_format(dtype, [](auto format) {
      using F = decltype(format);
      cudaError_t s = load_kernel(ll_combine_kernel<F, true>);
      if (s == cudaSuccess) s = load_kernel(ll_combine_kernel<F, false>);
      return s == cudaSuccess ? load_kernel(ll_combine_kernel<F, true, true>) : s;
    });
  }
  return status;
}

cudaError_t launch_ll_node_step(const LowLatencyParams& p, cudaStream_t stream) {
  return launch_following(ll_node_step_kernel, 1, Policy::kMaxPeers, stream, p);
}

cudaError_t launch_ll_forward(const LowLatencyParams& p, int num_blocks, cudaStream_t stream) {
  // One warp per (remote node, token) at most; the same grid every call (capturable). A
  // combine's forward stores the step words only: one block.
  if (p.kind != static_cast<int>(CallKind::kLowLatencyDispatch)) num_blocks = 1;
  const int64_t items = static_cast<int64_t>(p.nodes.num_nodes - 1) * p.info.max_tokens;
  return launch_following(ll_forward_kernel, blocks_for_warp_items(items, num_blocks),
                          Policy::kDataThreads, stream, p);
}

cudaError_t launch_ll_combine_forward(CombineDtype dtype, const LowLatencyParams& p, int num_blocks,
                                      cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    // One warp per (remote node, token, slice) at most; the same grid every call (capturable).
    const int64_t items =
        static_cast<int64_t>(p.nodes.num_nodes - 1) * p.info.max_tokens * p.layout.ll_slices;
    return launch_following(ll_combine_forward_kernel<F>, blocks_for_warp_items(items, num_blocks),
                            Policy::kDataThreads, stream, p);
  });
}

cudaError_t launch_ll_combine_reduce(CombineDtype dtype, const LowLatencyParams& p, int num_blocks,
                                     cudaStream_t stream) {
  return formats::visit_format(dtype, [&](auto format) {
    using F = decltype(format);
    // Sized by Tmax, not T: the same grid every call with the same shapes.
    const int64_t items = static_cast<int64_t>(p.info.max_tokens) * p.layout.ll_slices;
    return launch_following(ll_combine_reduce_kernel<F>, blocks_for_warp_items(items, num_blocks),
                            Policy::kDataThreads, stream, p);
  });
}

cudaError_t launch_ll_combine_seal(const LowLatencyParams& p, cudaStream_t stream) {
  return launch_following(ll_combine_seal_kernel, 1, Policy::kMaxPeers, stream, p);
}

cudaError_t launch_ll_settle(const LowLatencyParams& p, cudaStream_t stream) {
  return launch_following(ll_settle_kernel, 1, Policy::kMaxPeers, stream, p);
}

cudaError_t preload_ll_node_kernels() {
  cudaError_t s = load_kernel(ll_node_step_kernel);
  if (s == cudaSuccess) s = load_kernel(ll_forward_kernel);
  if (s == cudaSuccess) s = load_kernel(ll_settle_kernel);
  if (s == cudaSuccess) s = load_kernel(ll_combine_seal_kernel);
  for (CombineDtype dtype : kAllCombineDtypes) {
    if (s != cudaSuccess) return s;
    s = formats::visit_format(dtype, [](auto format) {
      using F = decltype(format);
      const cudaError_t e = load_kernel(ll_combine_forward_kernel<F>);
      return e == cudaSuccess ? load_kernel(ll_combine_reduce_kernel<F>) : e;
    });
  }
  return s;
}

}  // namespace moe_ep::cuda_backend
