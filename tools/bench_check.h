// The harness side of one rank's checked run: fetch every dispatch output to the host and count
// the elements that differ, bit for bit, from the reference (src/reference/reference.h, which
// also holds the identity expert applied to what arrived). Mismatches are described (field,
// rank, first index, both values) so a failing row says where to look. Decode mode has its own
// download and comparison of the slabs, and its identity expert (the reference has none: in
// decode mode the op applies the weights, so the expert is the decoded row alone).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_backend.h"
#include "moe_ep/op.h"
#include "reference/reference.h"

namespace moe_ep::cli {

using reference::DispatchOutputs;
using reference::LowLatencyOutputs;

// Copies every output of `result` to the host (num_recv rows of each per-row output).
DispatchOutputs download_outputs(BenchBackend& backend, int rank, const DispatchResult& result);

struct CheckResult {
  int64_t wrong = 0;               // differing elements over all fields
  std::vector<std::string> notes;  // one line per field that differs
};

// got vs want for one rank's dispatch outputs; fields missing on one side count as wrong.
void compare_dispatch(int rank, DispatchDtype dtype, const DispatchOutputs& got,
                      const DispatchOutputs& want, CheckResult& result);
// Decode mode: copies every output of a low-latency dispatch to the host, whole, with the
// unspecified slab rows (at or past each count) zeroed (reference::copy_low_latency_outputs).
LowLatencyOutputs download_low_latency_outputs(BenchBackend& backend, int rank,
                                               const LowLatencyDispatchResult& result);
// got vs want for one rank's low-latency dispatch outputs: slab size, counts, the rows and their
// scales, sources; fields missing on one side count as wrong.
void compare_low_latency(int rank, DispatchDtype dtype, const LowLatencyOutputs& got,
                         const LowLatencyOutputs& want, CheckResult& result);
// Decode mode's identity expert on one rank's slabs: y[e][i] = bf16(decode(recv_x[e][i])) for the
// rows below recv_count[e], zeros after them (the op never reads those). Returns
// [E/W, W*Tmax, H] bf16 bits, the y of low_latency_combine, which then forms
// bf16(sum over the token's local slots k ascending of w_k * y), product then add in fp32.
// Throws Internal when the slabs hold fewer rows than E/W * W*Tmax.
std::vector<uint16_t> decode_identity_expert(const reference::Shape& shape, DispatchDtype dtype,
                                             const LowLatencyOutputs& recv);

// got vs want for one rank's combine output ([T, H] bf16 bits each).
void compare_out(int rank, const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                 CheckResult& result);

}  // namespace moe_ep::cli
