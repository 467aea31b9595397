// The copy-engine path (OpConfig::copy_engine; docs/copy-engine.md): rows
// move between GPUs by the copy engines (cudaMemcpyAsync queued by the host, cuda_op.cc) instead
// of SM stores into the peer. The kernels here are the pieces around those copies:
//   ce_signal_kernel        after the copies of a call, the done word of this rank in every
//                           receiver (the copies before it on the stream have completed);
//   ce_combine_pack_kernel  combine's encode of each row of y bound for another rank into the
//                           staging area at its received row index, in the exact bytes the SM
//                           path stores into the source rank (not used for bf16: y's rows are
//                           those bytes already);
//   ce_reduce_kernel        combine's token side: the SM path's reduce (reduce_combine_range,
//                           own rows summed in place from y) with one done word per source
//                           instead of a ready flag per row, and rank r's rows for this rank
//                           read from r's slot at the token's position among those sent to r.
// Dispatch's pack is the SM path's dispatch kernel itself, given a peer table that names the
// staging area (DispatchParams::copy_engine; dispatch.cuh).
#pragma once

#include "backends/cuda/combine.cuh"

namespace moe_ep::cuda_backend {

__global__ void ce_signal_kernel(CopyEngineSignalParams p) {
  // A failed step or notify: the host queued no copies, and no rank may see this call's word.
  if (block_sees_error(p.err)) return;
  for (int q = threadIdx.x; q < p.world_size; q += blockDim.x) {
    if (((p.mask >> q) & 1) == 0) continue;
    st_release_sys(reinterpret_cast<uint64_t*>(p.peers.base[q] + p.offset), p.value);
  }
}

template <typename F>
__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    ce_combine_pack_kernel(CombineParams p) {
  if (block_sees_error(p.err)) return;
  const WarpCoord c = warp_coord();
  const char* self = p.peers.base[p.info.rank];
  const int hidden = p.info.hidden;
  for (int64_t i = c.warp; i < p.num_recv; i += c.num_warps) {
    const int src =
        __ldcg(reinterpret_cast<const int32_t*>(self + p.layout.recv_src_rank_offset(i)));
    if (src == p.info.rank) continue;  // summed in place by this rank's reduce (warp-uniform)
    const uint16_t* y = p.y + i * hidden;
    send_combine_range<F>([&](int64_t elem) { return load_lane(y, elem, hidden); }, 0, hidden,
                          hidden, p.ce_stage + i * p.layout.combine_row_bytes, nullptr, 0, c.lane);
  }
}

template <typename F>
__global__ void __launch_bounds__(Policy::kDataThreads, Policy::kDataBlocksPerSm)
    ce_reduce_kernel(CombineParams p) {
  // The step agreement failed or this rank rejected: nothing moves, on every rank.
  if (block_sees_error(p.err)) return;
  const WarpCoord c = warp_coord();
  const RankInfo& info = p.info;
  const ReduceArgs reduce{p.peers.base[info.rank],
                          p.layout,
                          info.hidden,
                          info.rank,
                          p.out,
                          p.step,
                          p.timeout_ns,
                          p.err};
  // Rank r's rows for this rank arrive as one block in r's slot, ordered as this rank's tokens
  // sent to r: the token's row there is its position among them, pos[r][t]. Every source's rows
  // are ready once its done word holds the step.
  const auto flag_offset = [&](int r) { return p.layout.done_offset(r); };
  // No warp waits for another warp of this grid (only for peers' done words, which their hosts'
  // copies and signal kernels provide), so a grid-stride loop is safe with any resident subset.
  for (int64_t t = c.warp; t < p.num_tokens; t += c.num_warps) {
    const TokenRoutes routes =
        token_routes(p.pos, nullptr, info.max_tokens, info.world_size, t, c.lane);
    const int64_t own_pos = routes.row(info.rank);  // every lane: it shuffles
    // y's row of the token: this rank's rows from itself start at send_offset[rank].
    const int64_t own_row = own_pos >= 0 ? __ldcg(p.send_offset + info.rank) + own_pos : 0;
    const OwnRowOfY own{p.y + own_row * info.hidden, info.hidden};
    if (routes.mask == uint64_t{1} << info.rank) {  // no other rank's row to wait for
      reduce_own_row_only<F>(own, p.out + t * info.hidden, 0, info.hidden, c.lane);
      continue;
    }
    // pos[r][t] read per source and step rather than shuffled from the routes, which would keep
    // them live across the sums (nvcc: fewer spills; the kernel still spills more than
    // combine_kernel, docs/copy-engine.md).
    const int32_t* pos = p.pos;
    const int64_t max_tokens = info.max_tokens;
    const auto row_of = [pos, max_tokens](int r, int64_t token) {
      return static_cast<int64_t>(__ldcg(pos + r * max_tokens + token));
    };
    if (!reduce_combine_range<F>(reduce, t, routes.mask, 0, info.hidden, flag_offset, c.lane, own,
                                 row_of)) {
      break;  // reported; the other warps see the flag and stop too
    }
  }
}

}  // namespace moe_ep::cuda_backend
