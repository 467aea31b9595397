// Decode mode's work items (src/backends/cuda/low_latency_items.h) checked on the CPU, at every
// dispatch dtype and many shapes: the expand's items copy every 16-byte payload vector and every
// scale unit of every received row once (column-major scales each into its place), write -1 sources into exactly the slab rows past each
// expert's count and store each count once; the combine's items send every (source, token,
// slice) once (but this rank's own tokens in the one-launch combine, which sums them in place)
// and reduce every element of every token once, within its slice, in whole warp steps, and that
// the launches that take their items by warp, without tickets, have no send item. A gap or
// an overlap here would lose or double rows on the GPU at that shape only.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/low_latency_items.h"
#include "formats/row_format.h"

namespace moe_ep::cuda_backend {
namespace {

// Each unit of [0, units) exactly once across the parts [0, parts) of a row (ll_copy_unit, the
// expand's lanes and unrolled steps).
void expect_parts_cover_units(int64_t parts, int64_t units, const std::string& where) {
  std::vector<int> seen(static_cast<size_t>(units), 0);
  for (int64_t part = 0; part < parts; ++part) {
    bool any = false;
    for (int lane = 0; lane < 32; ++lane) {
      for (int u = 0; u < kLlCopyUnroll; ++u) {
        const int64_t i = ll_copy_unit(part, lane, u);
        if (i < units) {
          ASSERT_GE(i, 0) << where;
          ++seen[static_cast<size_t>(i)];
          any = true;
        }
      }
    }
    ASSERT_TRUE(any) << where << ": part " << part << " copies nothing";
  }
  for (int64_t i = 0; i < units; ++i) {
    ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << where << ": unit " << i;
  }
}

TEST(LowLatencyItems, ExpandCopiesEveryUnitOfEveryReceivedRowOnce) {
  for (DispatchDtype dtype : {DispatchDtype::bf16, DispatchDtype::fp8, DispatchDtype::fp4}) {
    // 2080: mxfp4 scale rows of 65 bytes, not whole words (fp8 blockwise needs a multiple of 128).
    for (int hidden : {128, 1024, 2048, 2080, 7168, 7296, 16384}) {
      if (dtype == DispatchDtype::fp8 && hidden % kFp8BlockSize != 0) continue;
      const formats::RowFormat f = formats::row_format(dtype, hidden);
      for (int world : {1, 3, 8}) {
        for (int max_tokens : {1, 100, 256}) {
          const LlExpandItems s =
              LlExpandItems::of(world, max_tokens, 32, f.payload_bytes, f.scale_bytes);
          const std::string where = std::string(to_string(dtype)) + " hidden " +
                                    std::to_string(hidden) + " W " + std::to_string(world) +
                                    " Tmax " + std::to_string(max_tokens);
          // Rows are whole 16-byte vectors; scales whole words where they can be, else bytes.
          ASSERT_EQ(s.vectors * 16, f.payload_bytes) << where;
          ASSERT_EQ(s.scale_units * (s.scale_words ? 4 : 1), f.scale_bytes) << where;
          ASSERT_EQ(s.scale_words, f.scale_bytes % 4 == 0) << where;
          if (dtype == DispatchDtype::fp4 && hidden == 2080) ASSERT_FALSE(s.scale_words) << where;
          expect_parts_cover_units(s.parts, s.vectors, where + " payload");
          expect_parts_cover_units(s.scale_parts, s.scale_units, where + " scales");
          ASSERT_EQ(s.per_token, s.parts + s.scale_parts) << where;
          ASSERT_EQ(s.slab_rows, static_cast<int64_t>(world) * max_tokens) << where;
          // Copy items: every (received token, part) once, for every number received.
          for (int64_t received : {int64_t{0}, int64_t{1}, s.slab_rows / 2, s.slab_rows}) {
            ASSERT_LE(s.items(received), s.most_items()) << where;
            std::vector<int> seen(static_cast<size_t>(received * s.per_token), 0);
            for (int64_t item = s.fills; item < s.items(received); ++item) {
              const LlExpandItems::Copy c = s.copy(item);
              ASSERT_GE(c.token, 0) << where;
              ASSERT_LT(c.token, received) << where << " item " << item;
              ASSERT_GE(c.part, 0) << where;
              ASSERT_LT(c.part, s.per_token) << where << " item " << item;
              ++seen[static_cast<size_t>(c.token * s.per_token + c.part)];
            }
            for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << where << " " << i;
          }
        }
      }
    }
  }
}

// Column-major scales (OpConfig::column_major_scales): a unit is one scale (a word for fp32, a
// byte for e8m0, whatever the row's length), and the expand's stores (ll_slab_column_first)
// put scale i of expert e's row r at (e * scale_dim + i) * W*Tmax + r, every element of the
// array once.
TEST(LowLatencyItems, ExpandPutsEachColumnMajorScaleInItsPlaceOnce) {
  for (DispatchDtype dtype : {DispatchDtype::fp8, DispatchDtype::fp4}) {
    for (int hidden : {128, 2080, 7168}) {
      if (dtype == DispatchDtype::fp8 && hidden % kFp8BlockSize != 0) continue;
      const formats::RowFormat f = formats::row_format(dtype, hidden);
      const int64_t elem = f.scale_bytes / f.scale_cols;
      for (int world : {1, 3}) {
        for (int max_tokens : {1, 100}) {
          const int experts = 3;
          const LlExpandItems s =
              LlExpandItems::of(world, max_tokens, experts, f.payload_bytes, f.scale_bytes, elem);
          const std::string where = std::string(to_string(dtype)) + " hidden " +
                                    std::to_string(hidden) + " W " + std::to_string(world) +
                                    " Tmax " + std::to_string(max_tokens);
          ASSERT_EQ(s.scale_units, f.scale_cols) << where;
          ASSERT_EQ(s.scale_words, elem == 4) << where;
          expect_parts_cover_units(s.scale_parts, s.scale_units, where + " scales");
          const int64_t rows = s.slab_rows;
          std::vector<int> seen(static_cast<size_t>(experts * rows * s.scale_units), 0);
          for (int e = 0; e < experts; ++e) {
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t first = ll_slab_column_first(s.scale_units, rows, e, e * rows + r);
              for (int64_t i = 0; i < s.scale_units; ++i) {
                const int64_t at = first + i * rows;
                ASSERT_EQ(at, (e * s.scale_units + i) * rows + r) << where;
                ++seen[static_cast<size_t>(at)];
              }
            }
          }
          for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << where << " " << i;
        }
      }
    }
  }
}

TEST(LowLatencyItems, ExpandFillsEveryRowPastEachCountOnce) {
  for (int world : {1, 2, 5}) {
    for (int max_tokens : {1, 255, 256, 257, 1000}) {
      for (int experts : {1, 3, 32}) {
        const LlExpandItems s = LlExpandItems::of(world, max_tokens, experts, 7168, 224);
        ASSERT_EQ(s.fills, experts * s.fill_chunks);
        const int64_t rows = s.slab_rows;
        for (int64_t n : {int64_t{0}, int64_t{1}, LlExpandItems::kFillRows - 1,
                          LlExpandItems::kFillRows, rows / 2, rows - 1, rows}) {
          if (n < 0 || n > rows) continue;
          const std::string where = "W " + std::to_string(world) + " Tmax " +
                                    std::to_string(max_tokens) + " experts " +
                                    std::to_string(experts) + " count " + std::to_string(n);
          std::vector<int> filled(static_cast<size_t>(experts * rows), 0);
          std::vector<int> counts_stored(static_cast<size_t>(experts), 0);
          for (int64_t item = 0; item < s.fills; ++item) {
            const int e = s.fill_expert(item);
            ASSERT_GE(e, 0) << where;
            ASSERT_LT(e, experts) << where;
            const LlExpandItems::Fill f = s.fill(item, e, n);
            if (f.chunk == 0) ++counts_stored[static_cast<size_t>(e)];
            for (int64_t row = f.begin; row < f.end; ++row) {
              ASSERT_GE(row, n) << where;
              ASSERT_LT(row, rows) << where;
              ++filled[static_cast<size_t>(e * rows + row)];
            }
          }
          for (int e = 0; e < experts; ++e) {
            ASSERT_EQ(counts_stored[static_cast<size_t>(e)], 1) << where << " expert " << e;
            for (int64_t row = n; row < rows; ++row) {
              ASSERT_EQ(filled[static_cast<size_t>(e * rows + row)], 1)
                  << where << " expert " << e << " row " << row;
            }
          }
        }
      }
    }
  }
}

// The combine's items for one launch, replayed as the kernel takes them (LlCombineItems::at).
void check_combine_items(int64_t hidden, int world, int rank, int max_tokens, int tokens,
                         int32_t phase) {
  const int64_t slice_elems = Policy::kDispatchSliceElems;
  const int64_t slices = (hidden + slice_elems - 1) / slice_elems;
  const LlCombineItems c = ll_combine_items(slices, world, max_tokens, tokens, phase);
  const bool in_place = phase == kLlCombineAll;
  const std::string where = "hidden " + std::to_string(hidden) + " W " + std::to_string(world) +
                            " rank " + std::to_string(rank) + " Tmax " +
                            std::to_string(max_tokens) + " T " + std::to_string(tokens) +
                            " phase " + std::to_string(phase);
  ASSERT_TRUE(c.parts == 1 || c.parts == 2 || c.parts == 4) << where;
  if (c.parts > 1) ASSERT_LE(tokens * slices * c.parts, kLlMaxReduceItems) << where;
  ASSERT_EQ(c.count(), c.end - c.first) << where;
  // By warp (no ticket) exactly for the whole combine at world size 1, where no item is a send.
  ASSERT_EQ(c.by_warp(phase), phase == kLlCombineAll && world == 1) << where;
  const size_t candidates = static_cast<size_t>(world) * max_tokens * slices;
  std::vector<int> sent(candidates, 0);
  std::vector<int> reduced(static_cast<size_t>(tokens * hidden), 0);
  for (int64_t item = c.first; item < c.end; ++item) {
    const LlCombineItem w = c.at(item, rank, max_tokens, static_cast<int>(hidden), in_place);
    ASSERT_GE(w.slice, 0) << where;
    ASSERT_LT(w.slice, slices) << where << " item " << item;
    const int64_t slice_begin = w.slice * slice_elems;
    const int64_t slice_end =
        slice_begin + slice_elems < hidden ? slice_begin + slice_elems : hidden;
    if (w.send) {
      ASSERT_NE(phase, kLlCombineReceive) << where << " item " << item;
      ASSERT_FALSE(c.by_warp(phase)) << where << " item " << item;
      ASSERT_GE(w.row_item, 0) << where;
      ASSERT_LT(w.row_item, static_cast<int64_t>(world) * max_tokens) << where;
      if (in_place) ASSERT_NE(w.row_item / max_tokens, rank) << where << " item " << item;
      ASSERT_EQ(w.begin, slice_begin) << where << " item " << item;  // a whole slice
      ASSERT_EQ(w.stop, slice_end) << where << " item " << item;
      ++sent[static_cast<size_t>(w.row_item * slices + w.slice)];
      continue;
    }
    ASSERT_NE(phase, kLlCombineSend) << where << " item " << item;
    ASSERT_GE(w.row_item, 0) << where;
    ASSERT_LT(w.row_item, tokens) << where << " item " << item;
    ASSERT_GE(w.begin, slice_begin) << where << " item " << item;
    ASSERT_EQ(w.begin % Policy::kElemsPerWarpStep, 0) << where << " item " << item;
    if (w.begin >= w.stop) continue;  // a part past a short last slice's end
    ASSERT_LE(w.stop, slice_end) << where << " item " << item;
    for (int64_t i = w.begin; i < w.stop; ++i) {
      ++reduced[static_cast<size_t>(w.row_item * hidden + i)];
    }
  }
  for (size_t i = 0; i < candidates; ++i) {
    const bool own = static_cast<int64_t>(i) / slices / max_tokens == rank;
    const int want = phase == kLlCombineReceive || (in_place && own) ? 0 : 1;
    ASSERT_EQ(sent[i], want) << where << " candidate " << i;
  }
  const int want_reduced = phase == kLlCombineSend ? 0 : 1;
  for (size_t i = 0; i < reduced.size(); ++i) {
    ASSERT_EQ(reduced[i], want_reduced)
        << where << " token " << i / hidden << " element " << i % hidden;
  }
}

TEST(LowLatencyItems, CombineSendsEverySliceAndReducesEveryElementOnce) {
  // hidden: one slice and less, whole slices, a short last slice (by 8 elements and by 7168's
  // 1024); T: none, one, and up to and past where a slice's reduce splits in 4, 2 and 1 parts.
  for (int64_t hidden : {int64_t{256}, int64_t{1024}, int64_t{1032}, int64_t{7168}}) {
    for (int world : {1, 2, 3, 8}) {
      for (int max_tokens : {1, 40, 150}) {
        for (int tokens : {0, 1, max_tokens / 3, max_tokens}) {
          for (int rank : {0, world - 1}) {
            for (int32_t phase : {kLlCombineAll, kLlCombineSend, kLlCombineReceive}) {
              check_combine_items(hidden, world, rank, max_tokens, tokens, phase);
              if (::testing::Test::HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(LowLatencyItems, CombineSplitsFewTokenSlicesIntoParts) {
  // 7 slices a row (hidden 7168): 36 tokens' 252 slices in 4 parts (1008 items), 73 in 2, 147
  // in 1; one token's 7 slices in 4.
  EXPECT_EQ(ll_combine_items(7, 1, 256, 1, kLlCombineAll).parts, 4);
  EXPECT_EQ(ll_combine_items(7, 1, 256, 36, kLlCombineAll).parts, 4);
  EXPECT_EQ(ll_combine_items(7, 1, 256, 37, kLlCombineAll).parts, 2);
  EXPECT_EQ(ll_combine_items(7, 1, 256, 73, kLlCombineAll).parts, 2);
  EXPECT_EQ(ll_combine_items(7, 1, 256, 74, kLlCombineAll).parts, 1);
  // At world size 1 the one-launch combine has no send item at all, its receive part none either.
  EXPECT_EQ(ll_combine_items(7, 1, 256, 128, kLlCombineAll).sends, 0);
  EXPECT_EQ(ll_combine_items(7, 1, 256, 128, kLlCombineAll).count(), 128 * 7);
  EXPECT_EQ(ll_combine_items(7, 2, 256, 128, kLlCombineSend).count(), 2 * 256 * 7);
  EXPECT_EQ(ll_combine_items(7, 2, 256, 128, kLlCombineReceive).count(), 128 * 7);
}

}  // namespace
}  // namespace moe_ep::cuda_backend
