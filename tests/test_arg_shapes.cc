// The host argument checks (src/core/arg_checks.h) that the backends' error tests do not reach,
// called directly on views that are never dereferenced: an undefined tensor, a tensor of the
// wrong rank or dtype, a null pointer with rows, a negative token count (a C++ view can say so),
// a combine before any dispatch and a handle whose counts were altered. Each error names the
// argument, the value and the rule. Found by taking each check out in turn and running the CPU
// tests (docs/design.md#errors): these were the checks no test noticed.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "core/arg_checks.h"
#include "moe_ep/errors.h"
#include "testing/ranks.h"

namespace moe_ep {
namespace {

constexpr int kHidden = 256;
constexpr int kTopk = 4;
constexpr int kTokens = 8;
constexpr int kExperts = 16;
constexpr int kWorld = 2;

// Never read: the checks look at shapes, dtypes and addresses only.
const void* const kSomewhere = reinterpret_cast<const void*>(uintptr_t{1} << 32);
const ArgDevice kCpu{DeviceType::kCpu, 0};

OpConfig config() {
  OpConfig c;
  c.num_experts = kExperts;
  c.hidden = kHidden;
  c.topk = kTopk;
  c.max_tokens_per_rank = kTokens;
  return c;
}

TensorView matrix(ScalarType dtype, int64_t rows, int64_t cols, const void* data = kSomewhere) {
  return TensorView::matrix(data, dtype, rows, cols, DeviceType::kCpu);
}

DispatchArgs good_args() {
  DispatchArgs a;
  a.x = matrix(ScalarType::kBFloat16, kTokens, kHidden);
  a.topk_idx = matrix(ScalarType::kInt32, kTokens, kTopk);
  a.topk_weights = matrix(ScalarType::kFloat32, kTokens, kTopk);
  return a;
}

// The InvalidArgument message of `call`; a failure when it does not throw one.
std::string error_of(const std::function<void()>& call) {
  const testing::RankOutcome outcome = testing::outcome_of(call);
  testing::expect_error(outcome, ErrorCode::kInvalidArgument, {});
  return outcome.message;
}

std::string dispatch_error(const DispatchArgs& args) {
  bool prequantized = false;
  return error_of([&] { check_dispatch_args(config(), args, kCpu, &prequantized); });
}

#define EXPECT_HAS(text, fragment)                    \
  EXPECT_NE((text).find(fragment), std::string::npos) \
      << "no \"" << (fragment) << "\" in: " << (text)

TEST(ArgShapes, GoodArgumentsPass) {
  bool prequantized = true;
  EXPECT_EQ(check_dispatch_args(config(), good_args(), kCpu, &prequantized), kTokens);
}

TEST(ArgShapes, UndefinedOrWrongRankXIsNamed) {
  DispatchArgs a = good_args();
  a.x = TensorView{};
  EXPECT_HAS(dispatch_error(a), "x is undefined; expected bf16[num_tokens, 256]");
  a.x =
      TensorView::tensor3(kSomewhere, ScalarType::kBFloat16, 2, kTokens, kHidden, DeviceType::kCpu);
  EXPECT_HAS(dispatch_error(a), "must be 2-D [num_tokens, hidden]");
  a.x = TensorView::vector(kSomewhere, ScalarType::kBFloat16, kHidden, DeviceType::kCpu);
  EXPECT_HAS(dispatch_error(a), "must be 2-D [num_tokens, hidden]");
}

TEST(ArgShapes, NegativeTokenCountIsNamed) {
  DispatchArgs a = good_args();
  a.x = matrix(ScalarType::kBFloat16, -3, kHidden);
  EXPECT_HAS(dispatch_error(a), "num_tokens=-3 must be >= 0");
}

TEST(ArgShapes, RoutingTensorsUndefinedOfAnotherDtypeOrRankAreNamed) {
  DispatchArgs a = good_args();
  a.topk_idx = TensorView{};
  EXPECT_HAS(dispatch_error(a), "topk_idx is undefined; expected int32[8, 4]");
  a = good_args();
  a.topk_idx = matrix(ScalarType::kFloat32, kTokens, kTopk);
  EXPECT_HAS(dispatch_error(a), "topk_idx has dtype fp32, expected int32");
  a = good_args();
  a.topk_weights =
      TensorView::tensor3(kSomewhere, ScalarType::kFloat32, kTokens, kTopk, 1, DeviceType::kCpu);
  EXPECT_HAS(dispatch_error(a), "must be 2-D");
  EXPECT_HAS(dispatch_error(a), "topk_weights=");
}

TEST(ArgShapes, NullPointerWithRowsIsNamedAndWithoutRowsPasses) {
  DispatchArgs a = good_args();
  a.topk_weights = matrix(ScalarType::kFloat32, kTokens, kTopk, nullptr);
  EXPECT_HAS(dispatch_error(a), "topk_weights is a null pointer with 8 rows");
  // Zero tokens: every tensor may be null.
  DispatchArgs empty;
  empty.x = matrix(ScalarType::kBFloat16, 0, kHidden, nullptr);
  empty.topk_idx = matrix(ScalarType::kInt32, 0, kTopk, nullptr);
  empty.topk_weights = matrix(ScalarType::kFloat32, 0, kTopk, nullptr);
  bool prequantized = true;
  EXPECT_EQ(check_dispatch_args(config(), empty, kCpu, &prequantized), 0);
}

TEST(ArgShapes, CombineBeforeAnyDispatchIsNamed) {
  // An op that has not dispatched: its latest handle has call_seq 0, as a default Handle does.
  const Handle latest{7, 0, 0, 0};
  const Handle given{7, 0, 0, 0};
  const TensorView none = matrix(ScalarType::kBFloat16, 0, kHidden);
  const std::string m =
      error_of([&] { check_combine_args(config(), latest, given, none, none, kCpu); });
  EXPECT_HAS(m, "handle.call_seq=0 but op uid 7 has not dispatched yet");
}

TEST(ArgShapes, HandleWithAlteredCountsIsNamed) {
  const Handle latest{7, 3, kTokens, 5};
  Handle given = latest;
  given.num_recv = 6;  // rows the dispatch never returned
  const std::string m = error_of([&] {
    check_combine_args(config(), latest, given, matrix(ScalarType::kBFloat16, 6, kHidden),
                       matrix(ScalarType::kBFloat16, kTokens, kHidden), kCpu);
  });
  EXPECT_HAS(m,
             "handle has num_tokens=8, num_recv=6 but dispatch call 3 had num_tokens=8, "
             "num_recv=5");
}

TEST(ArgShapes, DecodeCombineUndefinedOrNullYIsNamed) {
  OpConfig c = config();
  c.low_latency = true;
  const LowLatencyHandle h{7, 1, kTokens};
  const TensorView out = matrix(ScalarType::kBFloat16, kTokens, kHidden);
  const std::string expected = "expected bf16[8, 16, 256] ([E/W, W*Tmax, hidden]";
  std::string m =
      error_of([&] { check_low_latency_combine_args(c, kWorld, h, h, TensorView{}, out, kCpu); });
  EXPECT_HAS(m, "y is undefined; " + expected);
  const TensorView null_y = TensorView::tensor3(nullptr, ScalarType::kBFloat16, kExperts / kWorld,
                                                kWorld * kTokens, kHidden, DeviceType::kCpu);
  m = error_of([&] { check_low_latency_combine_args(c, kWorld, h, h, null_y, out, kCpu); });
  EXPECT_HAS(m, "y is a null pointer; " + expected);
}

}  // namespace
}  // namespace moe_ep
