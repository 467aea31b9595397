// What kernels report instead of trapping, and what a step's agreement leaves for the host. The
// error word lives in mapped, pinned host memory: the first reporter wins, and the host turns it
// into an exception naming phase, rank and peer. A step's outcome (calls out of step, a peer's
// rejection with its reason) is a separate record, so the host can rank outcomes: calls out of
// step first, then this rank's own rejection, then a peer's (docs/design.md#errors).
#pragma once

#include <cstdint>

#include "core/layout.h"

namespace moe_ep::cuda_backend {

// Codes the kernels report; the host turns them into exceptions (device_errors.cc).
enum DeviceErrorCode : int32_t {
  kDevOk = 0,
  kDevTimeout = 1,     // a bounded wait expired: phase, peer, expected, seen
  kDevBadExpert = 2,   // topk_idx out of [-1, E): token, column, value
  kDevDupExpert = 3,   // same expert twice in a token: token, column, value
  kDevNonfiniteX = 4,  // validation: token, column
  kDevNonfiniteW = 5,  // validation: token, column
  kDevStepFailed = 6,  // the step's agreement failed (see StepOutcome); no data moved
  // A deferred receive (overlap hooks) whose send part did not run on the device: expected is
  // the send part's decode step, seen the step of the latest call of that kind that ran.
  kDevReceiveWithoutSend = 7,
  // Decode combine across nodes: the message from node `value`'s forwarder (rank `peer`) does
  // not hold this call's partials: expected is the call's step, seen the step it holds (0 when
  // the forwarder did not forward this call: its node's agreement failed there, or an error
  // stopped it). Nothing older is summed.
  kDevPartialMissing = 8,
  // Decode dispatch on one node: the send stored its rows for call number `expected` (one more
  // than what the previous send stored in LowLatencyParams::sent_calls), but the step kernel
  // recorded `seen` as the call that ran. An internal fault: the rows are not expanded, the op
  // is poisoned.
  kDevSendCall = 9,
};

enum DevicePhase : int32_t {
  kPhaseStep = 1,
  kPhaseNotify = 2,
  kPhaseDispatchWait = 3,
  kPhaseCombineWait = 4,
  kPhaseCreate = 5,
  kPhaseTransport = 6,  // a persistent exchange's wait for a sender (loopback)
};

// Lives in mapped, pinned host memory; the first reporter wins (atomicCAS on the device flag).
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
  int64_t reserved;
};
static_assert(sizeof(DeviceError) == 64, "DeviceError is copied between ranks as 64 bytes");

// Where kernels report: the first reporter wins the device flag (device memory, cheap to poll),
// then fills the host record (mapped host memory, which the GPU reaches over PCIe: reading it
// from every block cost ~100 us per kernel on the H200 machines, so kernels never poll it).
struct ErrorSink {
  DeviceError* host;  // mapped host memory, written once per error
  int32_t* flag;      // device memory: 0 while no error was reported, else the code
};

// Why a rank rejected its call, as it travels to every peer (BufferLayout's `reasons` slots):
// either the record of a device data scan (has_record) or the host's message.
struct StepReason {
  DeviceError record;
  int32_t has_record;
  int32_t text_bytes;
  char text[kStepReasonBytes - sizeof(DeviceError) - 8];
};
static_assert(sizeof(StepReason) == kStepReasonBytes, "a reason fills its slot exactly");

// A step word's payload: the call's kind and number and whether the rank rejected it.
struct StepInfo {
  static constexpr int kCallBits = 48;
  MOE_EP_HD static uint64_t pack(int kind, bool rejected, uint64_t call) {
    return (static_cast<uint64_t>(kind) << 56) | (static_cast<uint64_t>(rejected) << 55) |
           (call & ((1ull << kCallBits) - 1));
  }
  MOE_EP_HD static int kind(uint64_t info) { return static_cast<int>(info >> 56); }
  MOE_EP_HD static bool rejected(uint64_t info) { return (info >> 55) & 1; }
  MOE_EP_HD static uint64_t call(uint64_t info) { return info & ((1ull << kCallBits) - 1); }
  // Equal calls: kind and number (the rejected bit is the verdict, not the identity; the step
  // bits below are equal in words of one step).
  MOE_EP_HD static bool same_call(uint64_t a, uint64_t b) { return ((a ^ b) & ~(1ull << 55)) == 0; }
  // The low 7 bits of the step a word belongs to, in bits 48-54 (calls below 2^48): a slot's
  // previous word is two steps older, so a word stored without a fence is told apart from it by
  // these bits alone (step_exchange.cuh, step_info_of).
  static constexpr int kStepShift = 48;
  static constexpr uint64_t kStepMask = 0x7f;
  MOE_EP_HD static uint64_t with_step(uint64_t info, uint64_t step) {
    return (info & ~(kStepMask << kStepShift)) | ((step & kStepMask) << kStepShift);
  }
  MOE_EP_HD static bool of_step(uint64_t info, uint64_t step) {
    return ((info >> kStepShift) & kStepMask) == (step & kStepMask);
  }
};
static_assert(StepInfo::kCallBits <= StepInfo::kStepShift, "the step bits sit above the call");

enum StepStatus : int32_t {
  kStepOk = 0,
  kStepOutOfStep = 1,     // a peer is in another call: peer, peer_info
  kStepPeerRejected = 2,  // a peer rejected (lowest such rank): peer, reason
};

// Mapped host memory, written by the step kernel of the call in flight.
struct StepOutcome {
  uint64_t step;  // the step this outcome is about (0: none yet)
  int32_t status;
  int32_t peer;
  uint64_t peer_info;
  StepReason reason;
};

}  // namespace moe_ep::cuda_backend
