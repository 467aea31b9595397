// Launch policy of the CUDA backend for Hopper (sm_90), CUB style: every number a launcher uses
// (threads per block, blocks per SM, unroll depth, slice size, default SM budget), worked out in
// comments, in one struct per architecture. Launchers take them from `Policy`; the op logs them
// at info level (describe_policy).
#pragma once

#include <cstdint>
#include <string>

namespace moe_ep::cuda_backend {

struct Sm90Policy {
  // Data kernels (dispatch, combine, decode mode's): 256 threads = 8 warps per block, a warp per
  // row (or per slice of a row) at a time.
  static constexpr int kDataThreads = 256;
  // Blocks per SM of budget: a data block is compiled for 4 per SM (__launch_bounds__(256, 4): at
  // most 64 registers, 4 x 256 x 64 = the 64K-register file), so a budget of N SMs is 4N blocks
  // and never more than N SMs' worth of registers and threads. Measured on 2 x H200
  // (docs/perf-history.md, v4 and v9) with 512-thread blocks: 2 a SM beat 1 for mxfp4 dispatch
  // (143 -> 116 us) and fp8 combine (194 -> 168 us). v56 (one H100, docs/perf-history.md): the
  // same threads in blocks of 256, twice as many, so that on an idle GPU a grid reaches twice the
  // SMs: the decode round 0.7-2.2 us faster at 1-256 tokens, normal mode's fp8 dispatch and bf16
  // combine at 4096 tokens and 32 SMs 1.3 us faster each. v57 (one H100, docs/perf-history.md):
  // blocks of 128, 8 a SM, made the 128- and 256-token decode dispatches 0.9-1.5 us slower.
  static constexpr int kDataBlocksPerSm = 4;
  // Chunks of 256 elements a warp loads before it encodes (4 x 16 bytes in flight per lane).
  static constexpr int kUnroll = 4;
  // Elements a warp moves per step: 32 lanes x 8 (one 16-byte bf16 vector each).
  static constexpr int kElemsPerWarpStep = 32 * 8;
  // A dispatch work item when tokens are few: one unrolled step of a row (1024 elements, whole
  // fp8 and mxfp4 blocks). v10: slices took 128-token fp4 dispatch from 69 to 38 us.
  static constexpr int kDispatchSliceElems = kElemsPerWarpStep * kUnroll;
  // Notify (count_kernel, notify_kernel): 1024 threads scan the tokens for one destination; at
  // 64 registers (ptxas) such a block takes a whole SM's register file, so a budget of N SMs is
  // N blocks (v34: 2 a SM let these kernels hold twice the budget).
  static constexpr int kNotifyThreads = 1024;
  static constexpr int kNotifyBlocksPerSm = 1;
  // Validation scan: 256-thread blocks at 40 registers (ptxas): 6 fit an SM's 64K registers
  // (61,440), not the 8 that its 2048 threads would allow.
  static constexpr int kValidateThreads = 256;
  static constexpr int kValidateBlocksPerSm = 6;
  // Default SM budget of normal mode: DeepEP reserves 20-24 SMs for this work and Hybrid-EP
  // 8-32; 32 of the H200's 132 leave 100 to the GEMMs and attention running beside it.
  static constexpr int kDefaultNumSms = 32;
  // Largest world the backend accepts: kernels keep a token's destinations in a 64-bit mask and
  // every peer's base address in the parameter block (PeerTable).
  static constexpr int kMaxPeers = 64;
};

using Policy = Sm90Policy;

// The SM budget one op of a rank may take in the one-GPU test world (make_single_gpu_world) of
// `world_size` ranks on a GPU of `sms` SMs. Ranks there wait on each other, so a rank that
// starts a call late must still find room for its kernels beside the blocks the others hold
// while they wait for it. The largest block it needs is a whole SM (decode's step kernel that
// ranks the slots and normal mode's count_kernel: 1024 threads at 64 registers), so at least one
// SM must hold nothing of the other ranks. A waiting rank holds at most, per call in flight,
// db + 1 blocks (d = kDataBlocksPerSm): a decode step block with the next kernel's db data
// blocks scheduled behind it (programmatic dependent launch; a count kernel's whole-SM blocks are
// b since v35); with two calls in flight on two streams (two micro-batches) twice that, each
// block on an SM of its own at worst.
// So (W - 1) * 2 * (db + 1) <= sms - 1 (single_gpu_world_leaves_an_sm). v34 (docs/perf-history.md,
// 512-thread blocks, 2 a SM): with one rank 300 ms late, decode at W = 8 with 32 data blocks a
// rank and at W = 4 with 64 (b = floor(sms / W), the rule before) timed out every time; 16 and 8
// blocks (W = 8), 32 and 16 (W = 4) completed. Since v56's 4 blocks a SM the rule gives the same
// blocks a rank (8 at W = 8, 20 at W = 4, 64 at W = 2 on 132 SMs) in half the SMs. One rank takes
// the whole GPU; at least 1 SM, even where the rule gives less (W >= 23 on 132 SMs; the world
// warns).
inline bool single_gpu_world_leaves_an_sm(int sms, int world_size, int per_rank) {
  return (world_size - 1) * 2 * (Policy::kDataBlocksPerSm * per_rank + 1) <= sms - 1;
}
inline int single_gpu_world_sms_per_rank(int sms, int world_size) {
  if (world_size <= 1) return sms;
  const int per_rank = ((sms - 1) / (2 * (world_size - 1)) - 1) / Policy::kDataBlocksPerSm;
  return per_rank >= 1 ? per_rank : 1;
}

// The bytes of each own-only whole row that the combine asks L2 for before its first step
// (prefetch_l2, combine.cuh): the row after its first unrolled step, bf16, or 0 (no prefetch)
// where the rows in flight, one a warp of the grid (or one a token when tokens are fewer), would
// take more of L2 than the limit, for then prefetched lines are evicted before their loads come.
// v37 run R (one H200, 60 MiB of L2, 4096 tokens of hidden 7168): at 132 SMs the bf16 combine
// read 78.0 MB from HBM for 58.8 MB of y, against 58.8 MB at 32 SMs. Where the sides cross (runs
// R and T, median of 20, two rounds; the share of L2 the rows take in brackets):
//   bf16: the prefetch 3.6-4.7 us faster at 32 and 40 SMs (23%, 29%), 0-0.4 slower at 44 (32%),
//     0.7-0.8 at 48 (35%), 1.3-1.6 at 56 (41%), 3.3-3.5 at 64 (47%), 4.9-6.0 at 132: a third;
//   a combine that encodes (fp8, int8_e3m4; fp8 direct cast not measured), issue-bound at these
//     budgets: the prefetch 2.1-9.0 us faster from 32 to 56 SMs, 0.4-2.4 slower at 64 and 5.9-7.2
//     at 132: 7/16 of L2, between 41% and 47%.
inline int32_t combine_prefetch_bytes(int data_blocks, int64_t num_tokens, int hidden,
                                      int64_t l2_bytes, bool encodes) {
  const int64_t warps = static_cast<int64_t>(data_blocks) * (Policy::kDataThreads / 32);
  const int64_t rows = num_tokens < warps ? num_tokens : warps;
  const int64_t bytes = rows * hidden * 2;
  const bool fits = encodes ? 16 * bytes <= 7 * l2_bytes : 3 * bytes <= l2_bytes;
  const int rest = hidden - Policy::kElemsPerWarpStep * Policy::kUnroll;
  return fits && rest > 0 ? 2 * rest : 0;
}

inline std::string describe_policy() {
  return "sm_90 policy: data kernels " + std::to_string(Policy::kDataThreads) + " threads x " +
         std::to_string(Policy::kDataBlocksPerSm) + " blocks per SM, unroll " +
         std::to_string(Policy::kUnroll) + ", dispatch slice " +
         std::to_string(Policy::kDispatchSliceElems) + " elements, notify " +
         std::to_string(Policy::kNotifyThreads) + " threads, default budget " +
         std::to_string(Policy::kDefaultNumSms) + " SMs";
}

}  // namespace moe_ep::cuda_backend
