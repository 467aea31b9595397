// How notify splits its scan of the tokens for a destination (notify.cuh): plain C++ shared by
// the kernel, its launcher and the CPU tests (tests/test_notify_parts.cc).
#pragma once

#include <cstdint>

#include "backends/cuda/policy.h"
#include "core/host_device.h"

namespace moe_ep::cuda_backend {

// notify's scan of the tokens for a destination: chunks of kNotifyChunkTokens (4 tokens a
// thread). Up to kNotifyMaxParts chunks' worth of tokens (32768), the scan is split into
// ceil(T / kNotifyPartTokens) parts of equal size (at most kNotifyMaxParts, none empty, each
// within one chunk), one ticket each, that find the rows before them from the lower parts'
// words (notify.cuh); more tokens take one part of several chunks. v22: one block scanned 4096
// tokens per destination in 22.7 us under ncu.
inline constexpr int kNotifyTokensPerThread = 4;
inline constexpr int kNotifyChunkTokens = Policy::kNotifyThreads * kNotifyTokensPerThread;
inline constexpr int kNotifyPartTokens = 512;
inline constexpr int kNotifyMaxParts = 8;
// A part's word (notify_part_prefix): step (high 32 bits), the part's rows (low 32 bits).

MOE_EP_HD int notify_parts(int num_tokens) {
  if (num_tokens > kNotifyMaxParts * kNotifyChunkTokens) return 1;
  const int parts = (num_tokens + kNotifyPartTokens - 1) / kNotifyPartTokens;
  return parts < 1 ? 1 : parts > kNotifyMaxParts ? kNotifyMaxParts : parts;
}

struct NotifyPartRange {
  int begin, end;  // tokens [begin, end)
};
MOE_EP_HD NotifyPartRange notify_part_range(int num_tokens, int parts, int part) {
  const int per_part = (num_tokens + parts - 1) / parts;
  const int begin = part * per_part < num_tokens ? part * per_part : num_tokens;
  const int end = begin + per_part < num_tokens ? begin + per_part : num_tokens;
  return {begin, end};
}

// The blocks count_kernel's scan of the inputs may take (its shares, notify.cu), of max_blocks,
// beside notify's `tickets` (W * parts senders and a receiver). All of them once (v28 run T: 8
// shares of 4 ids a thread at 4096 tokens cost the dispatch 4-6 us against 32), except where the
// tickets fit in half the budget outside validation mode: then the shares leave the tickets
// blocks of their own (v36 run N: world size 1, 32 SMs, 4096 tokens, 9 tickets and 23 shares,
// the dispatch 0.8-2.9 us faster in 5 of 6 comparisons and level in the sixth, its tickets no
// longer waiting for a share to end). More tickets keep the rule before (not measured against
// it); validation's shares, which read x as well, keep every block (23 of them cost 280 us
// against 224). At least 1.
MOE_EP_HD int count_scan_blocks(int tickets, int max_blocks, bool validate) {
  if (max_blocks < 1) return 1;
  return !validate && tickets <= max_blocks / 2 ? max_blocks - tickets : max_blocks;
}

}  // namespace moe_ep::cuda_backend
