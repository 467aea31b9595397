// How decode mode's expand and combine kernels split a call into warp-sized work items
// (low_latency_expand.cuh, low_latency_combine.cuh): plain C++ shared by the kernels, their
// launchers (which size the grids from the item counts) and the CPU tests
// (tests/test_low_latency_items.cc), which check at every dispatch dtype and many shapes that the
// items cover each row, slice and element once. The kernels take items by warp (expand) or by
// ticket (combine); none of an item's work depends on another item of its launch.
#pragma once

#include <cstdint>

#include "backends/cuda/policy.h"
#include "core/host_device.h"
#include "core/slab_scales.h"

namespace moe_ep::cuda_backend {

MOE_EP_HD int64_t ll_min(int64_t a, int64_t b) { return a < b ? a : b; }
MOE_EP_HD int64_t ll_max(int64_t a, int64_t b) { return a < b ? b : a; }

// The expand's row copy: units (16-byte vectors of payload, or scale words) a lane loads before
// it stores any, and the units of one work item (a part of a row) for a warp.
inline constexpr int kLlCopyUnroll = 4;
inline constexpr int kLlCopyPart = 32 * kLlCopyUnroll;
// The unit that lane `lane` loads (and stores) as its u-th of part `part` of a row; units at or
// past the row's end are skipped.
MOE_EP_HD int64_t ll_copy_unit(int64_t part, int lane, int u) {
  return part * kLlCopyPart + lane + u * 32;
}

// The expand's work items (ll_expand_kernel): fills, (local expert, chunk of kFillRows slab rows)
// pairs, then per_token items for each token received: `parts` parts of kLlCopyPart 16-byte
// payload vectors (rows are whole 16-byte units), then `scale_parts` parts of 4-byte scale words
// (of bytes when a scale row is not whole words, as mxfp4's e8m0 rows can be). With column-major
// scales (OpConfig::column_major_scales, core/slab_scales.h) a scale unit is one scale, since
// each goes to its own column: 4-byte words for fp32, bytes for e8m0. The launcher sizes the
// grid for the most items a call can have (every source sends Tmax tokens).
struct LlExpandItems {
  static constexpr int64_t kFillRows = 256;
  int64_t slab_rows;  // W * Tmax: rows of an expert's slab, and the most tokens a call receives
  int64_t fill_chunks, fills, vectors, scale_units, parts, scale_parts, per_token;
  bool scale_words;

  // column_scale_bytes: 0 for scale rows, else the bytes of one scale (column-major scales).
  MOE_EP_HD static LlExpandItems of(int world_size, int max_tokens, int experts_per_rank,
                                    int64_t payload_bytes, int64_t scale_bytes,
                                    int64_t column_scale_bytes = 0) {
    LlExpandItems s{};
    s.slab_rows = static_cast<int64_t>(world_size) * max_tokens;
    s.fill_chunks = (s.slab_rows + kFillRows - 1) / kFillRows;
    s.fills = experts_per_rank * s.fill_chunks;
    s.vectors = payload_bytes / 16;
    s.scale_words = column_scale_bytes > 0 ? column_scale_bytes == 4 : scale_bytes % 4 == 0;
    s.scale_units = s.scale_words ? scale_bytes / 4 : scale_bytes;
    s.parts = (s.vectors + kLlCopyPart - 1) / kLlCopyPart;
    s.scale_parts = (s.scale_units + kLlCopyPart - 1) / kLlCopyPart;
    s.per_token = s.parts + s.scale_parts;
    return s;
  }
  // A call's items when `received` tokens came from all sources together.
  MOE_EP_HD int64_t items(int64_t received) const { return fills + received * per_token; }
  MOE_EP_HD int64_t most_items() const { return items(slab_rows); }

  // Fill item `item` (< fills): its local expert (fill_expert), and the rows [begin, end) of its
  // chunk at or past the expert's count n, whose sources it sets to -1 (none when the chunk ends
  // at or before n). Chunk 0 of each expert also stores the count.
  struct Fill {
    int64_t chunk, begin, end;
  };
  MOE_EP_HD int fill_expert(int64_t item) const { return static_cast<int>(item / fill_chunks); }
  MOE_EP_HD Fill fill(int64_t item, int expert, int64_t n) const {
    Fill f;
    f.chunk = item - expert * fill_chunks;
    f.end = ll_min((f.chunk + 1) * kFillRows, slab_rows);
    f.begin = ll_max(f.chunk * kFillRows, n);
    return f;
  }
  // Copy item `item` (>= fills): the received token (sources one after another, in rank order)
  // and its part: payload parts [0, parts), then scale parts [parts, per_token).
  struct Copy {
    int64_t token, part;
  };
  MOE_EP_HD Copy copy(int64_t item) const {
    Copy c;
    c.token = (item - fills) / per_token;
    c.part = (item - fills) - c.token * per_token;
    return c;
  }
};

// Where the expand stores column-major scales (LlSlabStore): scale i of local expert e's slab
// row `row` (e * slab_rows + its row r), one of `units` scales a row, goes to element
// first + i * slab_rows of the array, SlabScales's (e, r, i). (Rows, payload and scale rows,
// go to row * units + i.)
MOE_EP_HD int64_t ll_slab_column_first(int64_t units, int64_t slab_rows, int e, int64_t row) {
  const SlabScales at{slab_rows, units, true};
  return at.at(e, row - e * slab_rows, 0);
}

// The decode combine's largest number of reduce items when its slices are split into parts
// (LlCombineItems::parts): the warps of the default budget (32 SMs, 4 blocks of 8 warps).
inline constexpr int64_t kLlMaxReduceItems = 1024;
// A part of a slice is whole warp steps (the reduces step through it a warp step at a time).
static_assert(Policy::kDispatchSliceElems % (4 * Policy::kElemsPerWarpStep) == 0,
              "a quarter slice is whole warp steps");

// What one launch of the decode combine kernel does: all of it, or, with overlap hooks, the
// sends of the expert side (the send part) or the token-side sum (the receive part).
enum LlCombinePhase : int32_t {
  kLlCombineAll = 0,
  kLlCombineSend = 1,
  kLlCombineReceive = 2,
};

// One decode combine work item (LlCombineItems::at): a send of slice `slice` of row_item =
// source * Tmax + token (the source's token that came here), or a reduce of elements
// [begin, stop) of slice `slice` of this rank's token row_item (begin >= stop: a part past the
// end of a short last slice, which has nothing to do).
struct LlCombineItem {
  bool send;
  int64_t row_item, slice, begin, stop;
};

// A decode combine launch's work items, slices of rows (Policy::kDispatchSliceElems elements):
// sends, (source, token, slice) candidates for every source and token below Tmax, but this
// rank's own tokens when they are summed in place (the whole combine in one launch); then
// reduces, (token, slice) for this rank's T tokens. A launch runs the sends and the reduces
// (kLlCombineAll), or one of the two (the hooks' parts).
// A reduce item is a part of a slice (1, 2 or 4 parts of 256-element warp steps) when the
// token-slices are few: at one token the 7 slices' reduces ran 4 warp steps each, one after
// the other, on 7 warps (v23: 16.9 us under ncu, 36% of it waiting for y). The parts share
// their slice's ready flags. kLlMaxReduceItems bounds the parts' items.
struct LlCombineItems {
  int64_t slices, parts, own_sends, sends, first, end;
  MOE_EP_HD int64_t count() const { return end - first; }
  // Whether a launch of `phase` takes its items by warp, no ticket (ll_combine_kernel's kByWarp):
  // the whole combine in one launch with no send item, which is world size 1 (no reduce waits
  // for anything then), warp w taking items first + w, first + w + n, ... of a grid of n warps.
  MOE_EP_HD bool by_warp(int32_t phase) const { return phase == kLlCombineAll && sends == 0; }

  // Item `item` (first <= item < end) of a launch whose own candidates (those of source `rank`,
  // [own_first, own_first + own_sends) of all candidates) are skipped when own_in_place: the
  // whole combine in one launch, which sums them in the reduces.
  MOE_EP_HD LlCombineItem at(int64_t item, int rank, int max_tokens, int hidden,
                             bool own_in_place) const {
    const int64_t slice_elems = Policy::kDispatchSliceElems;
    const int64_t own_first = static_cast<int64_t>(rank) * max_tokens * slices;
    LlCombineItem w;
    w.send = item < sends;
    // A reduce item is part `part` of its slice (`parts` of them); a send item a whole slice.
    const int64_t item_parts = w.send ? 1 : parts;
    const int64_t index =
        w.send ? (own_in_place && item >= own_first ? item + own_sends : item) : item - sends;
    w.row_item = index / (slices * item_parts);
    const int64_t in_row = index - w.row_item * slices * item_parts;
    w.slice = in_row / item_parts;
    const int64_t part = in_row - w.slice * item_parts;
    const int64_t slice_stop = ll_min(w.slice * slice_elems + slice_elems, hidden);
    w.begin = w.slice * slice_elems + part * (slice_elems / item_parts);
    w.stop = ll_min(w.begin + slice_elems / item_parts, slice_stop);
    return w;
  }
};

// The items of a launch of `phase` for this rank's T = num_tokens tokens, of W = world_size
// ranks with Tmax = max_tokens, rows of `slices` slices.
MOE_EP_HD LlCombineItems ll_combine_items(int64_t slices, int world_size, int max_tokens,
                                          int64_t num_tokens, int32_t phase) {
  LlCombineItems c{};
  c.slices = slices;
  // kLlCombineAll sums this rank's part of its own tokens in place: no send items for them.
  c.own_sends = phase == kLlCombineAll ? max_tokens * c.slices : 0;
  c.sends = static_cast<int64_t>(world_size) * max_tokens * c.slices - c.own_sends;
  c.first = phase == kLlCombineReceive ? c.sends : 0;
  const int64_t token_slices = num_tokens * c.slices;
  c.parts = token_slices * 4 <= kLlMaxReduceItems   ? 4
            : token_slices * 2 <= kLlMaxReduceItems ? 2
                                                    : 1;
  c.end = phase == kLlCombineSend ? c.sends : c.sends + token_slices * c.parts;
  return c;
}

}  // namespace moe_ep::cuda_backend
