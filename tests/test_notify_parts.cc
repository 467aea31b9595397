// notify's split of a destination's scan into parts (src/backends/cuda/notify_parts.h), checked
// on the CPU for every token count up to past the single-part limit: the parts cover the tokens
// once, in order, none is empty (a later part's look-back would wait for an empty one's words
// only if it stored them, notify.cuh), and with several parts each fits in one chunk (the
// kernel scans a part in one block scan and takes its rows from that scan's total).
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace moe_ep::cuda_backend
