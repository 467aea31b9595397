// Where decode mode's recv_x_scales keeps each scale (docs/decode-mode.md#scale-layout): row by
// row, [E/W, W*Tmax, scale_dim] as normal mode's scale rows, or with
// OpConfig::column_major_scales column by column, [E/W, scale_dim, W*Tmax], so that the scales
// of one block column of an expert's rows are contiguous (DeepEP's low-latency layout, which
// grouped GEMMs load with TMA). One getter for the CPU backend, the CUDA expand kernel and the
// host copies that turn either layout into rows (reference::copy_low_latency_outputs).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace moe_ep {

struct SlabScales {
  int64_t slab_rows = 0;  // W * Tmax: rows of an expert's slab
  int64_t cols = 0;       // scale_dim: scales of a row
  bool column_major = false;

  // The element index of scale j of row `row` of local expert e's slab.
  MOE_EP_HD int64_t at(int64_t e, int64_t row, int64_t j) const {
    return column_major ? (e * cols + j) * slab_rows + row : (e * slab_rows + row) * cols + j;
  }
};

}  // namespace moe_ep
