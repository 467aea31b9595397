// The combine's rule for prefetching own-only rows into L2 (combine_prefetch_bytes,
// src/backends/cuda/policy.h), checked on the CPU at the H200's figures (60 MiB of L2) and
// hidden 7168 (a row of y is 14,336 bytes): the rows in flight are one a warp of the grid (16 a
// block), or one a token when tokens are fewer; they may take a third of L2 in a bf16 combine and
// 7/16 in one that encodes. The bytes asked for are the row after its first unrolled step, 0 for
// no prefetch.
#include <gtest/gtest.h>

#include <cstdint>

#include "backends/cuda/policy.h"

namespace moe_ep::cuda_backend {
namespace {

constexpr int64_t kH200L2 = 62914560;
constexpr int kHidden = 7168;
constexpr int kWarpsPerBlock = Policy::kDataThreads / 32;
constexpr int kStepElems = Policy::kElemsPerWarpStep * Policy::kUnroll;
constexpr int kBlocksPerSm = Policy::kDataBlocksPerSm;

bool prefetches(bool encodes, int data_blocks, int64_t num_tokens, int64_t l2_bytes,
                int hidden = kHidden) {
  const int32_t bytes = combine_prefetch_bytes(data_blocks, num_tokens, hidden, l2_bytes, encodes);
  EXPECT_TRUE(bytes == 0 || bytes == 2 * (hidden - kStepElems)) << bytes;
  return bytes != 0;
}

TEST(CombinePrefetch, Bf16RowsInFlightMayTakeAThirdOfL2) {
  // 4096 tokens: 32, 40 and 44 SMs prefetch (14.7 to 20.2 MB in flight); 48, 64 and 132 do not,
  // as v37 runs R and T measured.
  for (int sms : {32, 40, 44}) EXPECT_TRUE(prefetches(false, sms * kBlocksPerSm, 4096, kH200L2));
  for (int sms : {48, 64, 132}) EXPECT_FALSE(prefetches(false, sms * kBlocksPerSm, 4096, kH200L2));
  // The edge by warps: 1440 rows take 20.6 MB (61.9 MB three times), 1472 take 21.1 MB (63.3).
  static_assert(1440 % kWarpsPerBlock == 0 && 1472 % kWarpsPerBlock == 0, "whole blocks");
  EXPECT_TRUE(prefetches(false, 1440 / kWarpsPerBlock, 4096, kH200L2));
  EXPECT_FALSE(prefetches(false, 1472 / kWarpsPerBlock, 4096, kH200L2));
  // Fewer tokens than warps: the tokens are the rows in flight, whatever the grid.
  EXPECT_TRUE(prefetches(false, 132 * kBlocksPerSm, 1462, kH200L2));
  EXPECT_FALSE(prefetches(false, 132 * kBlocksPerSm, 1463, kH200L2));
  EXPECT_TRUE(prefetches(false, 132 * kBlocksPerSm, 128, kH200L2));
  // The exact bound, 3 x rows x hidden x 2 <= L2, on both sides.
  for (int64_t rows : {int64_t{1}, int64_t{1000}, int64_t{1463}}) {
    const int64_t l2 = 3 * rows * kHidden * 2;
    EXPECT_TRUE(prefetches(false, 264, rows, l2)) << rows;
    EXPECT_FALSE(prefetches(false, 264, rows, l2 - 1)) << rows;
  }
}

TEST(CombinePrefetch, EncodedRowsInFlightMayTake7SixteenthsOfL2) {
  // 4096 tokens: up to 56 SMs prefetch (25.7 MB in flight, 41% of L2), 64 and 132 do not.
  for (int sms : {32, 40, 44, 48, 56}) {
    EXPECT_TRUE(prefetches(true, sms * kBlocksPerSm, 4096, kH200L2)) << sms;
  }
  for (int sms : {64, 132}) EXPECT_FALSE(prefetches(true, sms * kBlocksPerSm, 4096, kH200L2));
  // The edge: 60 SMs (1920 rows, 27.5 MB, 43.8% of L2) prefetch, 61 (1952 rows, 44.5%) do not.
  EXPECT_TRUE(prefetches(true, 60 * kBlocksPerSm, 4096, kH200L2));
  EXPECT_FALSE(prefetches(true, 61 * kBlocksPerSm, 4096, kH200L2));
  EXPECT_TRUE(prefetches(true, 132 * kBlocksPerSm, 1920, kH200L2));
  EXPECT_FALSE(prefetches(true, 132 * kBlocksPerSm, 1952, kH200L2));
  // The exact bound, 16 x rows x hidden x 2 <= 7 x L2, on both sides (L2 a multiple of 7).
  for (int64_t rows : {int64_t{7}, int64_t{1001}, int64_t{1925}}) {
    const int64_t l2 = 16 * rows * kHidden * 2 / 7;
    EXPECT_TRUE(prefetches(true, 264, rows, l2)) << rows;
    EXPECT_FALSE(prefetches(true, 264, rows, l2 - 1)) << rows;
  }
}

TEST(CombinePrefetch, BytesAreTheRowAfterItsFirstUnrolledStep) {
  EXPECT_EQ(combine_prefetch_bytes(64, 4096, kHidden, kH200L2, false), 2 * (kHidden - kStepElems));
  EXPECT_EQ(combine_prefetch_bytes(64, 4096, kHidden, kH200L2, true), 12288);
  // A row of one unrolled step or less has nothing after it to ask for.
  EXPECT_FALSE(prefetches(false, 64, 4096, kH200L2, kStepElems));
  EXPECT_TRUE(prefetches(false, 64, 4096, kH200L2, kStepElems + Policy::kElemsPerWarpStep));
}

}  // namespace
}  // namespace moe_ep::cuda_backend
