// The host argument checks' alignment rule (src/core/arg_checks.h), on views that are never
// dereferenced: on a CUDA device, x, y and out must start on a 16-byte boundary (the CUDA backend
// moves rows 16 bytes a lane) and the other tensors on their element size; the error names the
// argument, its address and the rule. The same views on the CPU pass. Shapes and dtypes are
// checked first, as before (test_cpu_errors.cc, test_low_latency_errors.cc).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <sstream>
#include <string>

#include "core/arg_checks.h"
#include "moe_ep/errors.h"

namespace moe_ep {
namespace {

constexpr int kHidden = 256;
constexpr int kTopk = 4;
constexpr int kTokens = 8;
constexpr int kExperts = 16;
constexpr int kWorld = 2;

// A device address that is never read: 4 GiB plus `offset`, so only the offset sets its alignment.
void* at(uintptr_t offset) { return reinterpret_cast<void*>((uintptr_t{1} << 32) + offset); }

OpConfig config(DispatchDtype dispatch = DispatchDtype::bf16) {
  OpConfig c;
  c.num_experts = kExperts;
  c.hidden = kHidden;
  c.topk = kTopk;
  c.max_tokens_per_rank = kTokens;
  c.dispatch_dtype = dispatch;
  return c;
}

// x bf16 [T, H] at x_offset, topk_idx and topk_weights [T, K] at their offsets, on `device`.
DispatchArgs bf16_args(DeviceType device, uintptr_t x_offset, uintptr_t idx_offset = 0x10000,
                       uintptr_t weights_offset = 0x20000) {
  DispatchArgs a;
  a.x = TensorView::matrix(at(x_offset), ScalarType::kBFloat16, kTokens, kHidden, device);
  a.topk_idx = TensorView::matrix(at(idx_offset), ScalarType::kInt32, kTokens, kTopk, device);
  a.topk_weights =
      TensorView::matrix(at(weights_offset), ScalarType::kFloat32, kTokens, kTopk, device);
  return a;
}

std::string hex_of(const void* p) {
  std::ostringstream os;
  os << "0x" << std::hex << reinterpret_cast<uintptr_t>(p);
  return os.str();
}

const ArgDevice kCuda{DeviceType::kCuda, 0};
const ArgDevice kCpu{DeviceType::kCpu, 0};

// The InvalidArgument message of `call`; a failure when it does not throw one.
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(ArgAlignment, AlignedCudaViewsPass) {
  bool prequantized = true;
  EXPECT_EQ(check_dispatch_args(config(), bf16_args(DeviceType::kCuda, 0), kCuda, &prequantized),
            kTokens);
  EXPECT_FALSE(prequantized);
}

TEST(ArgAlignment, XOffTheRowBoundaryOnCudaNamesXItsAddressAndTheRule) {
  bool prequantized = false;
  for (const uintptr_t offset : {2, 8, 14}) {  // bf16-aligned, never 16-byte aligned
    const std::string m = error_of([&] {
      check_dispatch_args(config(), bf16_args(DeviceType::kCuda, offset), kCuda, &prequantized);
    });
    EXPECT_NE(m.find("x=bf16[8, 256] on cuda:0 starts at address " + hex_of(at(offset))),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("not a multiple of 16 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("16-byte boundary"), std::string::npos) << m;
  }
}

TEST(ArgAlignment, RoutingTensorsOffTheirElementSizeOnCudaAreNamed) {
  bool prequantized = false;
  std::string m = error_of([&] {
    check_dispatch_args(config(), bf16_args(DeviceType::kCuda, 0, 0x10002), kCuda, &prequantized);
  });
  EXPECT_NE(m.find("topk_idx=int32[8, 4] on cuda:0 starts at address 0x100010002"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("not a multiple of 4 bytes"), std::string::npos) << m;
  m = error_of([&] {
    check_dispatch_args(config(), bf16_args(DeviceType::kCuda, 0, 0x10000, 0x20001), kCuda,
                        &prequantized);
  });
  EXPECT_NE(m.find("topk_weights="), std::string::npos) << m;
  EXPECT_NE(m.find("element size"), std::string::npos) << m;
}

TEST(ArgAlignment, TheSameViewsOnTheCpuPass) {
  bool prequantized = true;
  EXPECT_EQ(check_dispatch_args(config(), bf16_args(DeviceType::kCpu, 8, 0x10002, 0x20001), kCpu,
                                &prequantized),
            kTokens);
}

TEST(ArgAlignment, PrequantizedScalesAreCheckedByTheirElementSize) {
  bool prequantized = false;
  // fp8 blockwise: e4m3 payload [T, H] and fp32 scales [T, H/128]; fp32 needs 4 bytes.
  DispatchArgs a = bf16_args(DeviceType::kCuda, 0);
  a.x = TensorView::matrix(at(0), ScalarType::kFloat8E4M3, kTokens, kHidden, DeviceType::kCuda);
  a.x_scales = TensorView::matrix(at(0x30002), ScalarType::kFloat32, kTokens, kHidden / 128,
                                  DeviceType::kCuda);
  const std::string m =
      error_of([&] { check_dispatch_args(config(DispatchDtype::fp8), a, kCuda, &prequantized); });
  EXPECT_NE(m.find("x_scales=fp32[8, 2] on cuda:0 starts at address 0x100030002"),
            std::string::npos)
      << m;
  a.x_scales.data = at(0x30004);
  EXPECT_EQ(check_dispatch_args(config(DispatchDtype::fp8), a, kCuda, &prequantized), kTokens);
  EXPECT_TRUE(prequantized);
  // mxfp4: a payload row of H/2 bytes must still start on 16 bytes; e8m0 scales are single bytes.
  a.x = TensorView::matrix(at(8), ScalarType::kFloat4E2M1, kTokens, kHidden / 2, DeviceType::kCuda);
  a.x_scales = TensorView::matrix(at(0x30001), ScalarType::kFloat8E8M0, kTokens, kHidden / 32,
                                  DeviceType::kCuda);
  EXPECT_NE(error_of([&] {
              check_dispatch_args(config(DispatchDtype::fp4), a, kCuda, &prequantized);
            }).find("x=e2m1x2[8, 128] on cuda:0 starts at address 0x100000008"),
            std::string::npos);
  a.x.data = at(0);
  EXPECT_EQ(check_dispatch_args(config(DispatchDtype::fp4), a, kCuda, &prequantized), kTokens);
}

TEST(ArgAlignment, CombineYAndOutOffTheRowBoundaryOnCudaAreNamed) {
  const Handle h{1, 1, kTokens, 5};
  const auto view = [](uintptr_t offset, int64_t rows, DeviceType device) {
    return TensorView::matrix(at(offset), ScalarType::kBFloat16, rows, kHidden, device);
  };
  check_combine_args(config(), h, h, view(0, 5, DeviceType::kCuda),
                     view(0x10000, kTokens, DeviceType::kCuda), kCuda);
  EXPECT_NE(error_of([&] {
              check_combine_args(config(), h, h, view(4, 5, DeviceType::kCuda),
                                 view(0x10000, kTokens, DeviceType::kCuda), kCuda);
            }).find("y=bf16[5, 256] on cuda:0 starts at address 0x100000004"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              check_combine_args(config(), h, h, view(0, 5, DeviceType::kCuda),
                                 view(0x10006, kTokens, DeviceType::kCuda), kCuda);
            }).find("out=bf16[8, 256] on cuda:0 starts at address 0x100010006"),
            std::string::npos);
  check_combine_args(config(), h, h, view(4, 5, DeviceType::kCpu),
                     view(0x10006, kTokens, DeviceType::kCpu), kCpu);
}

TEST(ArgAlignment, DecodeCombineYAndOutOffTheRowBoundaryOnCudaAreNamed) {
  OpConfig c = config();
  c.low_latency = true;
  const LowLatencyHandle h{1, 1, kTokens};
  const int64_t local = kExperts / kWorld, slab = kWorld * kTokens;
  const auto y = [&](uintptr_t offset) {
    return TensorView::tensor3(at(offset), ScalarType::kBFloat16, local, slab, kHidden,
                               DeviceType::kCuda);
  };
  const TensorView out =
      TensorView::matrix(at(0x100000), ScalarType::kBFloat16, kTokens, kHidden, DeviceType::kCuda);
  check_low_latency_combine_args(c, kWorld, h, h, y(0), out, kCuda);
  EXPECT_NE(error_of([&] {
              check_low_latency_combine_args(c, kWorld, h, h, y(10), out, kCuda);
            }).find("y=bf16[8, 16, 256] on cuda:0 starts at address 0x10000000a"),
            std::string::npos);
  TensorView shifted = out;
  shifted.data = at(0x100008);
  EXPECT_NE(error_of([&] {
              check_low_latency_combine_args(c, kWorld, h, h, y(0), shifted, kCuda);
            }).find("out=bf16[8, 256] on cuda:0 starts at address 0x100100008"),
            std::string::npos);
}

}  // namespace
}  // namespace moe_ep
