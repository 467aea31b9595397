// The harness side of one rank's checked run: fetch every dispatch output to the host and count
// the elements that differ, bit for bit, from the reference (src/reference/reference.h, which
// also holds the identity expert applied to what arrived). Mismatches are described (field,
// rank, first index, both values) so a failing row says where to look.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_backend.h"
#include "moe_ep/op.h"
#include "reference/reference.h"

namespace moe_ep::cli {

using reference::DispatchOutputs;

// Copies every output of `result` to the host (num_recv rows of each per-row output).
DispatchOutputs download_outputs(BenchBackend& backend, int rank, const DispatchResult& result);

struct CheckResult {
  int64_t wrong = 0;               // differing elements over all fields
  std::vector<std::string> notes;  // one line per field that differs
};

// got vs want for one rank's dispatch outputs; fields missing on one side count as wrong.
void compare_dispatch(int rank, DispatchDtype dtype, const DispatchOutputs& got,
                      const DispatchOutputs& want, CheckResult& result);
// got vs want for one rank's combine output ([T, H] bf16 bits each).
void compare_out(int rank, const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                 CheckResult& result);

}  // namespace moe_ep::cli
