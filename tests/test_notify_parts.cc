// notify's split of a destination's scan into parts (src/backends/cuda/notify_parts.h), checked
// on the CPU for every token count up to past the single-part limit: the parts cover the tokens
// once, in order, none is empty (an empty part would still have to store the word a later part
// waits for, notify.cuh), and with several parts each fits in one chunk (the kernel scans a part
// in one block scan and takes its rows from that scan's total).
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/cuda/notify_parts.h"

namespace moe_ep::cuda_backend {
namespace {

TEST(NotifyParts, PartsCoverEveryTokenOnceInOrderAndFitOneChunk) {
  const int limit = kNotifyMaxParts * kNotifyChunkTokens;
  for (int tokens = 0; tokens <= limit + 2 * kNotifyChunkTokens; ++tokens) {
    const int parts = notify_parts(tokens);
    ASSERT_GE(parts, 1) << "tokens " << tokens;
    ASSERT_LE(parts, kNotifyMaxParts) << "tokens " << tokens;
    if (tokens > limit) ASSERT_EQ(parts, 1) << "tokens " << tokens;
    int next = 0;
    for (int part = 0; part < parts; ++part) {
      const NotifyPartRange r = notify_part_range(tokens, parts, part);
      ASSERT_EQ(r.begin, next) << "tokens " << tokens << " part " << part;
      ASSERT_LE(r.begin, r.end) << "tokens " << tokens << " part " << part;
      if (parts > 1) {
        ASSERT_LT(r.begin, r.end) << "empty part: tokens " << tokens << " part " << part;
        ASSERT_LE(r.end - r.begin, kNotifyChunkTokens) << "tokens " << tokens << " part " << part;
      }
      next = r.end;
    }
    ASSERT_EQ(next, tokens) << "tokens " << tokens;
  }
}

TEST(NotifyParts, SmallCallsKeepOnePartAndLargeOnesSplit) {
  EXPECT_EQ(notify_parts(0), 1);
  EXPECT_EQ(notify_parts(1), 1);
  EXPECT_EQ(notify_parts(kNotifyPartTokens), 1);
  EXPECT_EQ(notify_parts(kNotifyPartTokens + 1), 2);
  EXPECT_EQ(notify_parts(4096), kNotifyMaxParts);
  EXPECT_EQ(notify_parts(kNotifyMaxParts * kNotifyChunkTokens), kNotifyMaxParts);
  EXPECT_EQ(notify_parts(kNotifyMaxParts * kNotifyChunkTokens + 1), 1);
}

// count_kernel's scan blocks (count_scan_blocks): at world size 1 and 32 SMs with 4096 tokens
// (8 sender parts and the receiver) the scan leaves notify its 9 blocks; with more tickets than
// half the budget, or in validation mode, it takes every block, as before v36; always at least
// one block, and never so many that a ticket fitting in half the budget waits for a share.
TEST(NotifyParts, CountScanLeavesNotifyItsBlocksWhereTheyFitInHalfTheBudget) {
  const int tickets_4096 = 1 * notify_parts(4096) + 1;
  EXPECT_EQ(tickets_4096, 9);
  EXPECT_EQ(count_scan_blocks(tickets_4096, 32, false), 23);
  EXPECT_EQ(count_scan_blocks(tickets_4096, 32, true), 32);
  EXPECT_EQ(count_scan_blocks(2 * notify_parts(4096) + 1, 32, false), 32);  // 17 > 16
  EXPECT_EQ(count_scan_blocks(16, 32, false), 16);
  EXPECT_EQ(count_scan_blocks(2, 1, false), 1);
  for (int max_blocks = 0; max_blocks <= 132; ++max_blocks) {
    for (int tickets = 1; tickets <= 64 * kNotifyMaxParts + 1; ++tickets) {
      for (const bool validate : {false, true}) {
        const int b = count_scan_blocks(tickets, max_blocks, validate);
        ASSERT_GE(b, 1) << "max_blocks " << max_blocks << " tickets " << tickets;
        ASSERT_LE(b, std::max(max_blocks, 1)) << "max_blocks " << max_blocks;
        if (!validate && 2 * tickets <= max_blocks) {
          ASSERT_EQ(b + tickets, max_blocks)
              << "max_blocks " << max_blocks << " tickets " << tickets;
        } else {
          ASSERT_EQ(b, std::max(max_blocks, 1))
              << "max_blocks " << max_blocks << " tickets " << tickets << " validate " << validate;
        }
      }
    }
  }
}

}  // namespace
}  // namespace moe_ep::cuda_backend
