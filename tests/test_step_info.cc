// The step word's info (StepInfo, src/backends/cuda/device_error.h), checked on the CPU: the
// call's kind, verdict and number survive the step's low 7 bits packed beside them (bits 48-54),
// a word tells its own step apart from the one its slot held before (two steps older: the step
// words alternate between two parities) and from any step that is not a multiple of 128 away,
// and two words name the same call whatever their verdicts. The device relies on these when a
// rank that does not reject stores its word without a fence (step_exchange.cuh, step_info_of).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/device_error.h"

namespace moe_ep::cuda_backend {
namespace {

constexpr uint64_t kLargestCall = (uint64_t{1} << StepInfo::kCallBits) - 1;

const std::vector<uint64_t>& steps() {
  static const std::vector<uint64_t> list = {
      1,           2, 3, 126, 127, 128, 129, 255, 256, 1000003, uint64_t{1} << 40, ~uint64_t{0} - 1,
      ~uint64_t{0}};
  return list;
}

TEST(StepInfo, KindVerdictAndCallSurviveTheStepBits) {
  for (int kind : {0, 1, 2, 3, 255}) {
    for (bool rejected : {false, true}) {
      for (uint64_t call : {uint64_t{0}, uint64_t{1}, uint64_t{12345}, kLargestCall}) {
        for (uint64_t step : steps()) {
          SCOPED_TRACE("kind " + std::to_string(kind) + " rejected " + std::to_string(rejected) +
                       " call " + std::to_string(call) + " step " + std::to_string(step));
          const uint64_t word = StepInfo::with_step(StepInfo::pack(kind, rejected, call), step);
          EXPECT_EQ(StepInfo::kind(word), kind);
          EXPECT_EQ(StepInfo::rejected(word), rejected);
          EXPECT_EQ(StepInfo::call(word), call);
          EXPECT_TRUE(StepInfo::of_step(word, step));
          // Packing again with another step replaces the bits rather than mixing them.
          EXPECT_TRUE(StepInfo::of_step(StepInfo::with_step(word, step + 5), step + 5));
          EXPECT_FALSE(StepInfo::of_step(StepInfo::with_step(word, step + 5), step));
        }
      }
    }
  }
}

TEST(StepInfo, AWordIsToldApartFromTheStepsItsSlotHeldBefore) {
  const uint64_t info = StepInfo::pack(1, false, 77);
  for (uint64_t step : steps()) {
    const uint64_t word = StepInfo::with_step(info, step);
    for (uint64_t back = 1; back < 128; ++back) {  // the slot's previous word is back = 2
      EXPECT_FALSE(StepInfo::of_step(word, step - back)) << "step " << step << " back " << back;
    }
    EXPECT_TRUE(StepInfo::of_step(word, step - 128)) << "7 bits: steps 128 apart look alike";
  }
}

TEST(StepInfo, SameCallIgnoresTheVerdictOnly) {
  for (uint64_t step : steps()) {
    const uint64_t accepted = StepInfo::with_step(StepInfo::pack(2, false, 9), step);
    const uint64_t rejected = StepInfo::with_step(StepInfo::pack(2, true, 9), step);
    EXPECT_TRUE(StepInfo::same_call(accepted, rejected));
    EXPECT_FALSE(
        StepInfo::same_call(accepted, StepInfo::with_step(StepInfo::pack(3, false, 9), step)));
    EXPECT_FALSE(
        StepInfo::same_call(accepted, StepInfo::with_step(StepInfo::pack(2, false, 10), step)));
  }
}

}  // namespace
}  // namespace moe_ep::cuda_backend
