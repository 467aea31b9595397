// GPU tests of the kernels' fast encoders (src/formats/packed_fast.cuh) and the packed e4m3
// decode against the scalar traits (label gpu, skipped without a GPU). Rows are built on the host
// so that every bf16 value appears next to block maxima of every scale: for fp8 blockwise and
// direct cast, all 65536 bf16 patterns (NaN and Inf included, which send their warp down the
// reference path) in blocks led by 40 maxima from the smallest normal to the largest finite bf16;
// for mxfp4, every bf16 value up to each of the 256 block maxima 2^(e+2) (every e8m0 exponent the
// encoder can produce, plus zero and subnormal maxima), the two also a slice of 4 steps at a time
// (encode_lanes, the dispatch kernel's whole-slice path); for int8/e3m4, all 65536 patterns in
// blocks led by 44 maxima across the bf16 range and at the edges of its fast path
// (tests/test_gpu_formats.cu sweeps every value in every position as well). The device encodes
// warp-step by warp-step (256 elements, 8 per lane) exactly as the data kernels do; the host
// encodes the same rows with encode_row of the trait, and payload and scales must be equal bit
// for bit; the device's outputs start poisoned, so a byte it skips fails. The decode test
// takes every e4m3 code times sampled block scales through lane_decode_add.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "formats/packed_fast.cuh"
#include "testing/format_refs.h"
#include "testing/gpu.h"

namespace moe_ep::formats {
namespace {

constexpr int kStep = 256;  // elements a warp encodes per call: 32 lanes x 8

bool have_gpu() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

// Warp w encodes elements [w * 256, (w + 1) * 256) of `x` like the data kernels do.
template <typename F>
__global__ void encode_steps_kernel(const uint16_t* x, int64_t num_steps, uint8_t* payload,
                                    uint8_t* scales) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; w < num_steps; w += warps) {
    const int64_t elem = w * kStep + lane * kElemsPerLane;
    const uint4 v = *reinterpret_cast<const uint4*>(x + elem);
    LaneWord<F> word;
    typename F::Params params;
    encode_lane<F>(v, word, params);
    *reinterpret_cast<LaneWord<F>*>(payload + payload_bytes_of<F>(elem)) = word;
    if constexpr (F::kBlock != 0) {
      if (elem % F::kBlock == 0) {
        reinterpret_cast<typename F::Scale*>(scales)[elem / F::kBlock] = params.stored;
      }
    }
  }
}

// Warp w encodes the slice of 4 warp steps [w * 1024, (w + 1) * 1024) of `x` at once, through
// encode_lanes, as the dispatch kernel's whole-slice path does (lane l holds elements
// l * 8 + u * 256 of step u).
constexpr int kSliceSteps = 4;
template <typename F>
__global__ void encode_slices_kernel(const uint16_t* x, int64_t num_steps, uint8_t* payload,
                                     uint8_t* scales) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; w < num_steps / kSliceSteps;
       w += warps) {
    uint4 v[kSliceSteps];
    for (int u = 0; u < kSliceSteps; ++u) {
      v[u] =
          *reinterpret_cast<const uint4*>(x + (w * kSliceSteps + u) * kStep + lane * kElemsPerLane);
    }
    LaneWord<F> words[kSliceSteps];
    typename F::Scale stored[kSliceSteps];
    encode_lanes<F, kSliceSteps>(v, words, stored);
    for (int u = 0; u < kSliceSteps; ++u) {
      const int64_t elem = (w * kSliceSteps + u) * kStep + lane * kElemsPerLane;
      *reinterpret_cast<LaneWord<F>*>(payload + payload_bytes_of<F>(elem)) = words[u];
      if (elem % F::kBlock == 0) {
        reinterpret_cast<typename F::Scale*>(scales)[elem / F::kBlock] = stored[u];
      }
    }
  }
}

// Encodes `x` (a multiple of 256 elements; of 1024 with kSlices) on the GPU and on the host;
// expects equal bytes. kSlices: by encode_lanes a slice at a time, else encode_lane a step at a
// time.
template <typename F, bool kSlices = false>
void expect_device_equals_host(const std::vector<uint16_t>& x, const char* what) {
  const int64_t n = static_cast<int64_t>(x.size());
  ASSERT_EQ(n % kStep, 0);
  const int64_t payload_n = payload_bytes_of<F>(n);
  const int64_t scales_n = scales_of<F>(n) * static_cast<int64_t>(sizeof(typename F::Scale));
  std::vector<uint8_t> want_payload(payload_n), want_scales(scales_n > 0 ? scales_n : 1);
  encode_row<F>(x.data(), n, want_payload.data(),
                reinterpret_cast<typename F::Scale*>(want_scales.data()));

  testing::DeviceBuffer dx = testing::DeviceBuffer::copy_of(x);
  testing::DeviceBuffer dp = testing::DeviceBuffer::poisoned(payload_n);
  testing::DeviceBuffer ds = testing::DeviceBuffer::poisoned(want_scales.size());
  if constexpr (kSlices) {
    ASSERT_EQ(n % (kSliceSteps * kStep), 0);
    encode_slices_kernel<F><<<264, 512>>>(static_cast<const uint16_t*>(dx.ptr.get()), n / kStep,
                                          static_cast<uint8_t*>(dp.ptr.get()),
                                          static_cast<uint8_t*>(ds.ptr.get()));
  } else {
    encode_steps_kernel<F><<<264, 512>>>(static_cast<const uint16_t*>(dx.ptr.get()), n / kStep,
                                         static_cast<uint8_t*>(dp.ptr.get()),
                                         static_cast<uint8_t*>(ds.ptr.get()));
  }
  MOE_EP_CUDA_CHECK(cudaGetLastError());
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> got_payload(payload_n), got_scales(want_scales.size());
  testing::device_to_host(got_payload.data(), dp.ptr.get(), payload_n);
  if (scales_n > 0) testing::device_to_host(got_scales.data(), ds.ptr.get(), scales_n);

  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < payload_n; ++i) {
    if (got_payload[i] != want_payload[i] && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " payload bytes differ, first at byte " << first
                    << " (element " << first * 8 / F::kBitsPerElem << ", bf16 0x" << std::hex
                    << x[first * 8 / F::kBitsPerElem] << std::dec << "): got "
                    << +got_payload[first < 0 ? 0 : first] << ", want "
                    << +want_payload[first < 0 ? 0 : first];
  if (scales_n > 0) {
    int64_t bad_scales = 0, first_scale = -1;
    for (int64_t i = 0; i < scales_n; ++i) {
      if (got_scales[i] != want_scales[i] && bad_scales++ == 0) first_scale = i;
    }
    EXPECT_EQ(bad_scales, 0) << what << ": " << bad_scales << " scale bytes differ, first at "
                             << first_scale;
  }
  std::printf("%s: %lld elements, %lld payload bytes compared\n", what, static_cast<long long>(n),
              static_cast<long long>(payload_n));
}

// Every bf16 pattern, in blocks of `block` elements whose element 0 is a block maximum taken in
// turn from `maxima`; padded with zeros to whole warp steps.
std::vector<uint16_t> rows_with_maxima(const std::vector<uint16_t>& values, int block,
                                       const std::vector<uint16_t>& maxima, int pad_to = kStep) {
  std::vector<uint16_t> x;
  for (uint16_t m : maxima) {
    size_t i = 0;
    while (i < values.size()) {
      x.push_back(m);
      for (int j = 1; j < block; ++j) x.push_back(i < values.size() ? values[i++] : 0);
    }
  }
  while (x.size() % pad_to != 0) x.push_back(0);
  return x;
}

uint16_t bf16_of(float f) { return float_to_bf16(f); }

TEST(GpuFastCodecs, Fp8BlockwiseEqualsTheTraitOnEveryBf16) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<uint16_t> maxima;
  for (int e = -126; e <= 127; e += 7) maxima.push_back(bf16_of(std::ldexp(1.5f, e)));
  maxima.push_back(0x7f7f);           // the largest finite bf16
  maxima.push_back(0x0080);           // the smallest normal
  maxima.push_back(bf16_of(448.0f));  // amax == the e4m3 maximum: scale 1
  maxima.push_back(0x0000);           // zero: scale 1 unless the block has more
  expect_device_equals_host<Fp8BlockWire>(rows_with_maxima(all, Fp8BlockWire::kBlock, maxima),
                                          "fp8 blockwise");
  // A slice (4 steps) at a time: a block outside the fast path sends its whole slice down
  // encode_lane.
  expect_device_equals_host<Fp8BlockWire, true>(
      rows_with_maxima(all, Fp8BlockWire::kBlock, maxima, kSliceSteps * kStep),
      "fp8 blockwise, by slices");
}

// fp8 blockwise's quotients come from a table by the block maximum's mantissa, scaled by its
// exponent (fp8_block_params_by_table): every finite bf16 magnitude as a block maximum (32640
// blocks: the table's whole range and the maxima below 2^-117 that take the reference path),
// with either sign, at a position that moves through the block; the other elements random bf16
// values of either sign up to the maximum, one of them the maximum's neighbour below (printed,
// replayable seed). Step by step and a slice at a time (the two maxima share a reduction there).
TEST(GpuFastCodecs, Fp8BlockwiseEqualsTheTraitForEveryBlockMaximum) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  Rng rng(test_seed(), 8);
  constexpr int kBlock = Fp8BlockWire::kBlock;
  std::vector<uint16_t> x;
  for (uint32_t m = 0; m < 0x7f80u; ++m) {
    const int at = static_cast<int>(m % kBlock);
    for (int j = 0; j < kBlock; ++j) {
      uint32_t mag = j == at                           ? m
                     : j == (at + 1) % kBlock && m > 0 ? m - 1
                                                       : (rng.bits() & 0x7fffu) % (m + 1);
      x.push_back(static_cast<uint16_t>(mag | (rng.bits() & 0x8000u)));
    }
  }
  while (x.size() % (kSliceSteps * kStep) != 0) x.push_back(0);
  expect_device_equals_host<Fp8BlockWire>(x, "fp8 blockwise, every block maximum");
  expect_device_equals_host<Fp8BlockWire, true>(x, "fp8 blockwise, every block maximum, by slices");
}

TEST(GpuFastCodecs, Fp8DirectCastEqualsTheTraitOnEveryBf16) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  std::vector<uint16_t> x(65536 * 2);
  for (uint32_t i = 0; i < 65536; ++i) x[i] = static_cast<uint16_t>(i);
  // The same values again, each in another lane position (shifted by 3 elements).
  for (uint32_t i = 0; i < 65536; ++i) x[65536 + (i + 3) % 65536] = static_cast<uint16_t>(i);
  expect_device_equals_host<Fp8DirectWire>(x, "fp8 direct cast");
}

TEST(GpuFastCodecs, Mxfp4EqualsTheTraitForEveryBf16AndEveryExponent) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  // For block maximum 2^(e+2) (biased bf16 exponent 0..254, i.e. every e8m0 exponent the encoder
  // produces, and subnormal maxima), every bf16 value no larger in magnitude, and every special.
  std::vector<uint16_t> x;
  const auto add_blocks_below = [&x](uint16_t m) {  // every bf16 value no larger than m, led by m
    std::vector<uint16_t> values;
    for (uint32_t i = 0; i < 65536; ++i) {
      if ((i & 0x7fffu) <= m) values.push_back(static_cast<uint16_t>(i));
    }
    const std::vector<uint16_t> rows = rows_with_maxima(values, Mxfp4Wire::kBlock, {m});
    x.insert(x.end(), rows.begin(), rows.end());
  };
  for (uint32_t exponent = 0; exponent <= 254; ++exponent) {
    add_blocks_below(static_cast<uint16_t>(exponent << 7 | (exponent == 0 ? 0x40 : 0)));
  }
  // Maxima with a full mantissa (the same e as their power of two, more values below them) at
  // the edges of the integer path (kMxfp4StepsMinAmax 2^-101 = exponent 26, kMxfp4StepsEndAmax
  // 2^122 = exponent 249) and at 1.
  for (uint32_t exponent : {25u, 26u, 27u, 127u, 247u, 248u, 249u}) {
    add_blocks_below(static_cast<uint16_t>(exponent << 7 | 0x7f));
  }
  std::vector<uint16_t> specials;
  for (uint32_t i = 0x7f80; i <= 0x7fff; i += 0x11) {  // Inf and NaNs, both signs
    specials.push_back(static_cast<uint16_t>(i));
    specials.push_back(static_cast<uint16_t>(i | 0x8000));
  }
  const std::vector<uint16_t> rows = rows_with_maxima(specials, Mxfp4Wire::kBlock, {0x3f80});
  x.insert(x.end(), rows.begin(), rows.end());
  expect_device_equals_host<Mxfp4Wire>(x, "mxfp4");
  // A slice (4 steps) at a time, and in another alignment of blocks to slices (by 8 blocks).
  for (int shift : {0, 256}) {
    std::vector<uint16_t> y(shift, 0);
    y.insert(y.end(), x.begin(), x.end());
    while (y.size() % (kSliceSteps * kStep) != 0) y.push_back(0);
    expect_device_equals_host<Mxfp4Wire, true>(y, "mxfp4, by slices");
  }
}

TEST(GpuFastCodecs, Int8E3m4EqualsTheTraitOnEveryBf16) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  // Block maxima across the bf16 range, and at the edges of the fast path: the smallest maximum
  // it takes (2^-119, bf16 0x0400) and the bf16 just below, zero and the largest finite value.
  std::vector<uint16_t> maxima;
  for (int e = -126; e <= 127; e += 7) maxima.push_back(bf16_of(std::ldexp(1.5f, e)));
  for (uint16_t m : {0x7f7f, 0x0400, 0x03ff, 0x0080, 0x0000, 0x3f80, 0x42fe}) maxima.push_back(m);
  expect_device_equals_host<Int8E3m4Wire>(rows_with_maxima(all, Int8E3m4Wire::kBlock, maxima),
                                          "int8/e3m4");
}

// Decodes 8 e4m3 codes times `scale` through lane_decode_add (acc starts at zero) or, with
// kFromZero, lane_decode_from_zero (the combine's own rows: one fused multiply-add a value).
template <bool kFromZero>
__global__ void decode_codes_kernel(const uint8_t* codes, const float* scales, int num_scales,
                                    float* out) {
  const int64_t total = 256LL * num_scales / kElemsPerLane;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t elem = i * kElemsPerLane;
    const float scale = scales[elem / 256];
    const uint2 word = *reinterpret_cast<const uint2*>(codes + elem % 256);
    float acc[kElemsPerLane] = {};
    if constexpr (kFromZero) {
      lane_decode_from_zero(word, scale, acc);
    } else {
      lane_decode_add<Fp8BlockWire>(word, scale, acc);
    }
    for (int j = 0; j < kElemsPerLane; ++j) out[elem + j] = acc[j];
  }
}

// Every e4m3 code times every scale of `scales`, decoded on the device (kFromZero as above),
// against 0 + Fp8BlockWire::decode on the host, bit for bit (any NaN for a NaN).
template <bool kFromZero>
void expect_decode_equals_trait(const std::vector<float>& scales) {
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
  const int64_t n = 256 * static_cast<int64_t>(scales.size());
  testing::DeviceBuffer dc = testing::DeviceBuffer::copy_of(codes);
  testing::DeviceBuffer ds = testing::DeviceBuffer::copy_of(scales);
  testing::DeviceBuffer dout = testing::DeviceBuffer::poisoned(sizeof(float) * n);
  decode_codes_kernel<kFromZero><<<264, 256>>>(
      static_cast<const uint8_t*>(dc.ptr.get()), static_cast<const float*>(ds.ptr.get()),
      static_cast<int>(scales.size()), static_cast<float*>(dout.ptr.get()));
  MOE_EP_CUDA_CHECK(cudaGetLastError());
  MOE_EP_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> got(n);
  testing::device_to_host(got.data(), dout.ptr.get(), sizeof(float) * n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = 0.0f + Fp8BlockWire::decode(codes[i % 256], scales[i / 256]);
    const bool same =
        (is_nan(want) && is_nan(got[i])) || std::memcmp(&want, &got[i], sizeof(float)) == 0;
    if (!same && bad++ < 5) {
      ADD_FAILURE() << "code 0x" << std::hex << (i % 256) << std::dec << " scale "
                    << scales[i / 256] << ": got " << got[i] << ", want " << want;
    }
  }
  EXPECT_EQ(bad, 0);
  std::printf("%lld decoded values compared\n", static_cast<long long>(n));
}

TEST(GpuFastCodecs, PackedE4m3DecodeEqualsTheTraitForEveryCode) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  std::vector<float> scales;  // block scales amax / 448 across the fp32 range, and 1
  for (int e = -149; e <= 127; e += 3) scales.push_back(std::ldexp(1.0f + (e & 7) / 8.0f, e));
  scales.push_back(1.0f);
  expect_decode_equals_trait<false>(scales);
}

// The combine's own rows decode into zeros by fused multiply-adds (lane_decode_from_zero): every
// e4m3 code times the scale of every block maximum the fast path takes (fp8_by_table: 31105
// scales from 1.3e-38 up). Outside that range the rule does not hold (a product that rounds to
// -0 stays -0 in the fused form: v29 run A met it at the scale 2^-149), and the path is not taken.
TEST(GpuFastCodecs, E4m3DecodeFromZeroEqualsTheTraitForEveryCodeAndFastScale) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  std::vector<float> scales;
  for (uint32_t a = 0; a < 0x7f80u; ++a) {
    if (fp8_by_table(a)) {
      const float amax = bf16_to_float(static_cast<uint16_t>(a));
      scales.push_back(Fp8BlockWire::block_params(amax, false).stored);
    }
  }
  expect_decode_equals_trait<true>(scales);
}

}  // namespace
}  // namespace moe_ep::formats
