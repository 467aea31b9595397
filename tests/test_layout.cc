// The buffer layout of the CUDA backend (src/core/layout.h) checked on the host, for shapes from
// one rank to the backend's largest: regions start aligned, follow each other without overlap
// and each holds exactly what its getters address (first and last element of every array lie
// inside it); the total covers the last region; the control regions come first.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/layout.h"

namespace moe_ep {
namespace {

struct Shape {
  int world, local_experts, topk, max_tokens;
  int64_t payload, scales, combine;  // bytes per row
  bool low_latency = false;
  int ll_slices = 1;  // decode mode: combine slices per row (ready flags)
};

// [begin, end) of every region, from the getters only.
struct Span {
  const char* name;
  int64_t begin, end;
};

std::vector<Span> spans_of(const BufferLayout& l, bool low_latency) {
  const int w = l.world_size;
  const int64_t rows = l.max_recv_rows();
  std::vector<Span> spans = {
      {"steps", l.step_offset(0, 0), l.step_offset(1, w - 1) + 16},
      {"reasons", l.reason_offset(0, 0), l.reason_offset(1, w - 1) + kStepReasonBytes},
      {"counts", l.counts_offset(0, 0, 0), l.counts_offset(1, w - 1, w - 1) + 8},
      {"experts", l.experts_offset(0, 0, 0), l.experts_offset(1, w - 1, l.local_experts - 1) + 8},
      {"done", l.done_offset(0), l.done_offset(w - 1) + 8},
      {"done counts", l.done_count_offset(0, 0), l.done_count_offset(1, w - 1) + 8},
      {"payload", l.recv_payload_offset(0), l.recv_payload_offset(rows)},
      {"scales", l.recv_scales_offset(0), l.recv_scales_offset(rows)},
      {"topk_idx", l.recv_topk_idx_offset(0), l.recv_topk_idx_offset(rows)},
      {"topk_weights", l.recv_topk_weights_offset(0), l.recv_topk_weights_offset(rows)},
      {"src_rank", l.recv_src_rank_offset(0), l.recv_src_rank_offset(rows)},
      {"src_token", l.recv_src_token_offset(0), l.recv_src_token_offset(rows)},
      {"combine rows", l.combine_row_offset(0, 0), l.combine_row_offset(w, 0)},
      {"combine flags", l.combine_flag_offset(0, 0), l.combine_flag_offset(w, 0)},
  };
  if (low_latency) {
    spans.push_back({"ll steps", l.ll_step_offset(0, 0), l.ll_step_offset(1, w - 1) + 16});
    spans.push_back({"ll done", l.ll_done_offset(0), l.ll_done_offset(w - 1) + 8});
    spans.push_back(
        {"ll done counts", l.ll_done_count_offset(0, 0), l.ll_done_count_offset(1, w - 1) + 8});
    spans.push_back({"ll counts", l.ll_counts_offset(0, 0),
                     l.ll_counts_offset(w - 1, l.local_experts - 1) + 4});
    spans.push_back({"ll flags", l.ll_flag_offset(0, 0), l.ll_flag_offset(w, 0)});
    spans.push_back({"ll stage", l.ll_stage_offset(0, 0, 0), l.ll_stage_offset(1, w, 0)});
    spans.push_back({"ll meta", l.ll_meta_offset(0, 0), l.ll_meta_offset(w, 0)});
    spans.push_back({"ll ready", l.ll_ready_offset(0, 0, 0), l.ll_ready_offset(w, 0, 0)});
    // The last slice's flag of the last (source, token) ends the region.
    EXPECT_EQ(l.ll_ready_offset(w - 1, l.max_tokens - 1, l.ll_slices - 1) + 8,
              l.ll_ready_offset(w, 0, 0));
  }
  return spans;
}

TEST(Layout, RegionsAreAlignedDisjointAndInside) {
  const std::vector<Shape> shapes = {
      {1, 256, 8, 4096, 7168, 224, 7168 + 224},  // DeepSeek-V3, fp8 both legs, one rank
      {2, 128, 8, 4096, 14336, 0, 14336},        // bf16 both legs, two ranks
      {8, 32, 8, 128, 3584, 224, 7168},          // mxfp4 dispatch, decode-size batches
      {64, 4, 4, 1, 16, 1, 16},                  // the backend's largest world, one token
      {3, 5, 5, 7, 256, 8, 264},                 // odd sizes (combine rows round up to 16)
      // Decode mode's regions too: DeepSeek-V3 at 128 tokens (7 slices of 1024 of hidden 7168),
      // mxfp4 at eight ranks, odd sizes, and the largest world.
      {2, 128, 8, 128, 7168, 224, 14336, true, 7},
      {8, 32, 8, 256, 3584, 224, 14336, true, 7},
      {3, 5, 5, 7, 256, 8, 264, true, 1},
      {64, 4, 4, 1, 16, 1, 16, true, 1},
  };
  for (const Shape& s : shapes) {
    SCOPED_TRACE("world " + std::to_string(s.world) + ", max_tokens " +
                 std::to_string(s.max_tokens) + (s.low_latency ? ", decode" : ""));
    const BufferLayout l =
        BufferLayout::make(s.world, s.local_experts, s.topk, s.max_tokens, s.payload, s.scales,
                           s.combine, s.low_latency, s.ll_slices);
    if (s.low_latency) {
      EXPECT_GE(l.stage_row_bytes, s.payload + s.scales);
      EXPECT_GE(l.meta_bytes, 12 * s.topk);
    } else {
      EXPECT_EQ(l.offset[BufferLayout::kLlSteps], l.offset[BufferLayout::kEnd])
          << "decode regions take no memory without low_latency";
    }
    EXPECT_EQ(l.combine_row_bytes % 16, 0) << "combine rows are whole 16-byte units";
    EXPECT_GE(l.combine_row_bytes, s.combine);
    const std::vector<Span> spans = spans_of(l, s.low_latency);
    int64_t previous_end = 0;
    for (const Span& span : spans) {
      SCOPED_TRACE(span.name);
      EXPECT_EQ(span.begin % BufferLayout::kAlign, 0) << "starts aligned";
      EXPECT_GE(span.begin, previous_end) << "overlaps the region before it";
      EXPECT_GE(span.end, span.begin);
      previous_end = span.end;
    }
    EXPECT_GE(l.total_bytes(), previous_end) << "the total covers every region";
    EXPECT_EQ(l.total_bytes() % BufferLayout::kAlign, 0);
    EXPECT_LT(l.total_bytes() - previous_end, BufferLayout::kAlign) << "no slack at the end";
    // The control regions (zeroed at creation) come before the rows.
    EXPECT_EQ(l.control_bytes(), l.recv_payload_offset(0));
    EXPECT_LE(spans[5].end, l.control_bytes());  // up to the done counts
  }
}

TEST(Layout, SameOffsetsOnEveryRank) {
  // Offsets depend on the dimensions only, so an offset computed locally addresses the same field
  // of a peer's buffer.
  const BufferLayout a = BufferLayout::make(4, 16, 8, 512, 7168, 224, 7168 + 224);
  const BufferLayout b = BufferLayout::make(4, 16, 8, 512, 7168, 224, 7168 + 224);
  for (int r = 0; r < BufferLayout::kNumRegions; ++r) EXPECT_EQ(a.offset[r], b.offset[r]);
  EXPECT_EQ(a.step_offset(1, 3) - a.step_offset(0, 0), 16 * (4 + 3));
  EXPECT_EQ(a.combine_row_offset(2, 5) - a.combine_row_offset(0, 0),
            (2 * 512 + 5) * a.combine_row_bytes);
}

TEST(Layout, DoneCountIsCompleteExactlyWhenEveryBlockAdded) {
  // Each of a source's G blocks adds 1 | G << 32 (common.cuh, count_block_done), so after c adds
  // the word is c | c * G << 32. The wait must see it complete at c == G and at no other c, for
  // every G a budget can give (up to the blocks of 132 SMs and beyond), also past G (a count
  // that was never cleared) and at zero.
  EXPECT_FALSE(BufferLayout::done_count_complete(0));
  for (uint64_t g = 1; g <= 1100; ++g) {
    for (uint64_t c = 1; c <= 2 * g + 3; ++c) {
      const uint64_t word = c * (1u | (g << 32));
      ASSERT_EQ(BufferLayout::done_count_complete(word), c == g) << "G=" << g << " c=" << c;
    }
  }
  // The largest grid it allows (the high half holds G * G < 2^32).
  const uint64_t g = BufferLayout::kMaxDoneCountBlocks;
  EXPECT_LT(g * g, uint64_t{1} << 32);
  EXPECT_TRUE(BufferLayout::done_count_complete(g * (1u | (g << 32))));
  EXPECT_FALSE(BufferLayout::done_count_complete((g - 1) * (1u | (g << 32))));
}

}  // namespace
}  // namespace moe_ep
