// The error word that kernels fill instead of trapping: it lives in mapped, pinned host memory,
// the first reporter wins, and the host turns it into an exception naming phase, rank and peer.
#pragma once

#include <cstdint>

namespace moe_ep::cuda_backend {

// Codes the kernels report; the host turns them into exceptions (cuda_op.cc).
enum DeviceErrorCode : int32_t {
  kDevOk = 0,
  kDevTimeout = 1,       // a bounded wait expired: phase, peer, expected, seen
  kDevBadExpert = 2,     // topk_idx out of [-1, E): token, column, value
  kDevDupExpert = 3,     // same expert twice in a token: token, column, value
  kDevNonfiniteX = 4,    // validation: token, column
  kDevNonfiniteW = 5,    // validation: token, column
  kDevPeerRejected = 6,  // a peer rejected its input: peer
};

enum DevicePhase : int32_t {
  kPhaseNotify = 1,
  kPhaseDispatchWait = 2,
  kPhaseCombineWait = 3,
};

// Lives in mapped, pinned host memory; the first reporter wins (atomicCAS on code).
struct DeviceError {
  int32_t code;
  int32_t phase;
  int32_t rank;
  int32_t peer;
  int64_t expected;
  int64_t seen;
  int64_t token;
  int64_t column;
  int64_t value;
};

// Where kernels report: the first reporter wins the device flag (device memory, cheap to poll),
// then fills the host record (mapped host memory, which the GPU reaches over PCIe: reading it
// from every block cost ~100 us per kernel on the H200 machines, so kernels never poll it).
struct ErrorSink {
  DeviceError* host;  // mapped host memory, written once per error
  int32_t* flag;      // device memory: 0 while no error was reported, else the code
};

}  // namespace moe_ep::cuda_backend
