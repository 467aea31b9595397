// GPU test of the device-only paths of the codecs (label `gpu`): on all 2^32 float bit patterns,
// the device e2m1 rounding by midpoints must equal the CUDA header's conversion, which
// tests/test_formats_random.cc ties to the host path; and the packed int8/e3m4 codecs (the
// reference encode of formats/packed.cuh, the kernels' encode_lane of formats/packed_fast.cuh
// with its fast path, and the decode-add) must equal the scalar trait run on the host, bit for
// bit: every bf16 value at every position of a block (so in every lane and lane slot) over
// backgrounds that set small, unit, outlier, tiny and huge block scales, and every (code, scale
// word) pair through the decode-add. Skips visibly without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <thread>
#include <vector>

#include "formats/packed_fast.cuh"
#include "formats/scalar.h"

namespace moe_ep::formats {
namespace {

bool have_gpu() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

__global__ void count_e2m1_mismatches(unsigned long long* mismatches, uint32_t* first) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned long long local = 0;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
       i <= 0xffffffffull; i += stride) {
    const float x = bits_float(static_cast<uint32_t>(i));
    const uint8_t header = __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest) & 0xf;
    if (e2m1_rne(x) != header) {
      ++local;
      atomicMin(first, static_cast<uint32_t>(i));
    }
  }
  if (local) atomicAdd(mismatches, local);
}

TEST(GpuFormats, E2m1FastPathEqualsHeaderOnEveryFloat) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  unsigned long long* mismatches = nullptr;
  uint32_t* first = nullptr;
  ASSERT_EQ(cudaMalloc(&mismatches, sizeof(*mismatches)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&first, sizeof(*first)), cudaSuccess);
  ASSERT_EQ(cudaMemset(mismatches, 0, sizeof(*mismatches)), cudaSuccess);
  ASSERT_EQ(cudaMemset(first, 0xff, sizeof(*first)), cudaSuccess);
  count_e2m1_mismatches<<<1024, 256>>>(mismatches, first);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  unsigned long long host_mismatches = 0;
  uint32_t host_first = 0;
  cudaMemcpy(&host_mismatches, mismatches, sizeof(host_mismatches), cudaMemcpyDeviceToHost);
  cudaMemcpy(&host_first, first, sizeof(host_first), cudaMemcpyDeviceToHost);
  cudaFree(mismatches);
  cudaFree(first);
  EXPECT_EQ(host_mismatches, 0ull) << "first mismatching float bits 0x" << std::hex << host_first;
}

// --- int8/e3m4: packed device codec vs the scalar trait ------------------------------------------

using I8 = Int8E3m4Wire;
constexpr int kBlocksPerValueSweep = 65536;  // one block per bf16 bit pattern
constexpr int kPositions = 32;               // the swept value's position in its block
constexpr int kBackgrounds = 5;

// Background values of the 31 other elements (bf16 bits): zeros (the swept value alone sets the
// scale: every scale bf16 can reach, the zero and non-finite blocks), integers around 1, gaussian
// values with an outlier (e3m4 blocks), and values near 2^-120 and 2^100.
std::vector<uint16_t> backgrounds() {
  std::vector<uint16_t> bg(kBackgrounds * 32, 0);
  for (int i = 0; i < 32; ++i) {
    const float z = std::sin(1.0f + 2.7f * static_cast<float>(i));  // fixed, in [-1, 1]
    bg[1 * 32 + i] = float_to_bf16(static_cast<float>(i % 7) - 3.0f);
    bg[2 * 32 + i] = float_to_bf16(i == 5 ? 100.0f : z);
    bg[3 * 32 + i] = float_to_bf16(std::ldexp(z, -120));
    bg[4 * 32 + i] = float_to_bf16(std::ldexp(z, 100));
  }
  return bg;
}

// Element i of block b in a sweep over one background: block b = pos * 65536 + value.
__host__ __device__ inline uint16_t sweep_elem(const uint16_t* background, int64_t b, int i) {
  const int pos = static_cast<int>(b / kBlocksPerValueSweep);
  return i == pos ? static_cast<uint16_t>(b % kBlocksPerValueSweep) : background[i];
}

// Which encoder a sweep runs, and how its blocks sit in the warp steps:
//   kReference: lane_block_params + lane_encode of formats/packed.cuh (the reference the kernels'
//               fast path falls back to), 8 swept blocks per warp step;
//   kFast:      encode_lane of formats/packed_fast.cuh, what the kernels call, 8 swept blocks
//               per warp step (a step with a block outside the fast path's range, Inf, NaN or a
//               tiny maximum, takes the reference path as a whole);
//   kFastAmongFastBlocks: encode_lane with one swept block per warp step, in lane group
//               b % 8, beside 7 filler blocks that the fast path takes, so that every swept
//               block the fast path can take (zeros, every maximum from 2^-119 up) goes through it.
enum class Path { kReference, kFast, kFastAmongFastBlocks };

// Filler blocks in the fast path's range: values between 1 and 1.5 in even lane groups, one
// outlier of 100 among values near 2^-7 in odd ones.
__host__ __device__ inline uint16_t filler_elem(int group, int i) {
  if (group % 2 == 0) return static_cast<uint16_t>(0x3f80 + 0x10 * (i % 5));          // 1 .. 1.5
  return i == 3 ? static_cast<uint16_t>(0x42c8) : static_cast<uint16_t>(0x3c00 + i);  // 100, ~2^-7
}

// One swept block per warp step.
__host__ __device__ constexpr bool isolated(Path path) {
  return path == Path::kFastAmongFastBlocks;
}

// Lane l holds elements 8(l % 4) .. +7 of the block of its lane group l / 4, exactly as the
// combine kernel holds a row: a sweep's warp step `step` as lane `lane` sees it.
struct SweepLane {
  int64_t b;   // the block of the lane's group
  bool swept;  // a swept block (else a filler, not written)
  int first;   // the lane's first element in its block
  uint4 v;     // its 8 values
};

template <Path kPath>
__device__ SweepLane sweep_lane(const uint16_t* background, int64_t step, int lane) {
  constexpr bool kIsolated = isolated(kPath);
  const int group = lane / 4;
  SweepLane s;
  s.b = kIsolated ? step : step * 8 + group;
  s.swept = !kIsolated || group == step % 8;
  s.first = (lane % 4) * kElemsPerLane;
  uint16_t e[kElemsPerLane];
  for (int j = 0; j < kElemsPerLane; ++j) {
    e[j] = s.swept ? sweep_elem(background, s.b, s.first + j) : filler_elem(group, s.first + j);
  }
  s.v = make_uint4(
      e[0] | static_cast<uint32_t>(e[1]) << 16, e[2] | static_cast<uint32_t>(e[3]) << 16,
      e[4] | static_cast<uint32_t>(e[5]) << 16, e[6] | static_cast<uint32_t>(e[7]) << 16);
  return s;
}

// Warp steps of a sweep over num_blocks blocks (a multiple of 8).
template <Path kPath>
__host__ __device__ constexpr int64_t sweep_steps(int64_t num_blocks) {
  return isolated(kPath) ? num_blocks : num_blocks / 8;
}

// fn(lane, sweep_lane(...)) for every warp step of a sweep this warp takes (grid-stride).
template <Path kPath, typename Fn>
__device__ void for_each_sweep_lane(const uint16_t* background, int64_t num_blocks, Fn fn) {
  const int lane = threadIdx.x % 32;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t step = warp; step < sweep_steps<kPath>(num_blocks); step += warps) {
    fn(lane, sweep_lane<kPath>(background, step, lane));
  }
}

// Only the swept blocks are written.
template <Path kPath>
__global__ void encode_int8_e3m4(const uint16_t* background, int64_t num_blocks, uint8_t* codes,
                                 uint16_t* words) {
  for_each_sweep_lane<kPath>(background, num_blocks, [&](int lane, const SweepLane& sl) {
    const int64_t b = sl.b;
    const int first = sl.first;
    const uint4 v = sl.v;
    I8::Params p;
    LaneWord<I8> w;
    if constexpr (kPath == Path::kReference) {
      p = lane_block_params<I8>(v);
      w = lane_encode<I8>(v, p);
    } else {
      encode_lane<I8>(v, w, p);
    }
    if (!sl.swept) return;
    *reinterpret_cast<LaneWord<I8>*>(codes + b * 32 + first) = w;
    if (lane % 4 == 0) words[b] = p.stored;
  });
}

// The accumulator a decode-add starts from for element e: zero, or +-1.25 * 2^k, so that the
// rounding of the addition is exercised too.
__host__ __device__ inline float start_acc(int64_t e) {
  if (e % 3 == 0) return 0.0f;
  const float m = (e & 1) ? -1.25f : 1.25f;
  return m * bits_float(static_cast<uint32_t>(127 - 20 + static_cast<int>(e % 41)) << 23);
}

// Element e = word * 256 + code: one lane decodes 8 consecutive codes with one scale word.
__global__ void decode_add_int8_e3m4(float* out) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t e0 = t * kElemsPerLane;
  if (e0 >= 65536ll * 256) return;
  const uint16_t word = static_cast<uint16_t>(e0 / 256);
  const uint32_t c0 = static_cast<uint32_t>(e0 % 256);
  LaneWord<I8> w;
  w.x = c0 | (c0 + 1) << 8 | (c0 + 2) << 16 | (c0 + 3) << 24;
  w.y = (c0 + 4) | (c0 + 5) << 8 | (c0 + 6) << 16 | (c0 + 7) << 24;
  float acc[kElemsPerLane];
  for (int j = 0; j < kElemsPerLane; ++j) acc[j] = start_acc(e0 + j);
  lane_decode_add<I8>(w, word, acc);
  for (int j = 0; j < kElemsPerLane; ++j) out[e0 + j] = acc[j];
}

// Runs fn(begin, end) over [0, n) on the host's cores.
template <typename Fn>
void parallel_for(int64_t n, Fn fn) {
  const int threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int k = 0; k < threads; ++k) {
    pool.emplace_back([&, k] { fn(n * k / threads, n * (k + 1) / threads); });
  }
  for (std::thread& th : pool) th.join();
}

// Encodes every swept block of background `bg` (32 elements) on the host's cores with the trait:
// fn(worker, b, codes, word) for block b, worker in [0, 16) a slot of the caller's per-worker
// tallies.
template <typename Fn>
void for_each_swept_block_on_host(const uint16_t* bg, int64_t num_blocks, Fn fn) {
  std::atomic<int> slot{0};
  parallel_for(num_blocks, [&](int64_t begin, int64_t end) {
    const int me = slot++;
    uint16_t x[32];
    uint8_t codes[32];
    uint16_t word = 0;
    for (int64_t b = begin; b < end; ++b) {
      for (int i = 0; i < 32; ++i) x[i] = sweep_elem(bg, b, i);
      encode_row<I8>(x, 32, codes, &word);
      fn(me, b, codes, word);
    }
  });
}

// Every bf16 value at every position of a block over each background, encoded on the device by
// `kPath`, against encode_row of the scalar trait on the host.
template <Path kPath>
void expect_sweep_equals_scalar() {
  const std::vector<uint16_t> bg = backgrounds();
  constexpr int64_t kBlocks = static_cast<int64_t>(kPositions) * kBlocksPerValueSweep;
  uint16_t* d_bg = nullptr;
  uint8_t* d_codes = nullptr;
  uint16_t* d_words = nullptr;
  ASSERT_EQ(cudaMalloc(&d_bg, bg.size() * sizeof(uint16_t)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_codes, kBlocks * 32), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_words, kBlocks * sizeof(uint16_t)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_bg, bg.data(), bg.size() * sizeof(uint16_t), cudaMemcpyHostToDevice),
            cudaSuccess);
  std::vector<uint8_t> codes(kBlocks * 32);  // [kBlocks, 32] device codes
  std::vector<uint16_t> words(kBlocks);      // [kBlocks] device scale words
  int64_t e3m4_blocks = 0;
  for (int g = 0; g < kBackgrounds; ++g) {
    // Poisoned each time: a block the kernel skips must not pass on the last background's codes.
    ASSERT_EQ(cudaMemset(d_codes, 0xa5, kBlocks * 32), cudaSuccess);
    ASSERT_EQ(cudaMemset(d_words, 0xa5, kBlocks * sizeof(uint16_t)), cudaSuccess);
    encode_int8_e3m4<kPath><<<1024, 256>>>(d_bg + g * 32, kBlocks, d_codes, d_words);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(codes.data(), d_codes, codes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(
        cudaMemcpy(words.data(), d_words, words.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost),
        cudaSuccess);
    std::vector<int64_t> first_bad(16, -1);
    std::vector<int64_t> e3m4(16, 0);
    for_each_swept_block_on_host(
        &bg[g * 32], kBlocks,
        [&](int me, int64_t b, const uint8_t* want_codes, uint16_t want_word) {
          e3m4[me] += I8::is_e3m4(want_word);
          if (want_word != words[b] || !std::equal(want_codes, want_codes + 32, &codes[b * 32])) {
            if (first_bad[me] < 0) first_bad[me] = b;
          }
        });
    for (int k = 0; k < 16; ++k) {
      e3m4_blocks += e3m4[k];
      if (first_bad[k] < 0) continue;
      const int64_t b = first_bad[k];
      std::ostringstream msg;
      msg << "background " << g << ", position " << b / kBlocksPerValueSweep << ", value 0x"
          << std::hex << b % kBlocksPerValueSweep << ": device word 0x" << words[b] << ", codes";
      for (int i = 0; i < 32; ++i) msg << " " << +codes[b * 32 + i];
      ADD_FAILURE() << msg.str();
    }
  }
  EXPECT_GT(e3m4_blocks, 0);  // both codes exercised
  cudaFree(d_bg);
  cudaFree(d_codes);
  cudaFree(d_words);
}

// The round trip in registers of combine's own rows (lane_round_trip_add): the same sweeps, each
// lane adding decode(encode(x)) to start_acc, against the trait's encode_row, decode and the
// addition on the host, with the blocks in the warp steps as the encode sweeps place them.
template <Path kPath>
__global__ void round_trip_int8_e3m4(const uint16_t* background, int64_t num_blocks, float* out) {
  for_each_sweep_lane<kPath>(background, num_blocks, [&](int, const SweepLane& sl) {
    const int64_t e0 = sl.b * 32 + sl.first;
    float acc[kElemsPerLane];
    for (int j = 0; j < kElemsPerLane; ++j) acc[j] = start_acc(e0 + j);
    lane_round_trip_add<I8>(sl.v, sl.swept, acc);
    if (!sl.swept) return;
    for (int j = 0; j < kElemsPerLane; ++j) out[e0 + j] = acc[j];
  });
}

template <Path kPath>
void expect_round_trip_equals_scalar(const char* what) {
  const std::vector<uint16_t> bg = backgrounds();
  constexpr int64_t kBlocks = static_cast<int64_t>(kPositions) * kBlocksPerValueSweep;
  uint16_t* d_bg = nullptr;
  float* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_bg, bg.size() * sizeof(uint16_t)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_out, kBlocks * 32 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_bg, bg.data(), bg.size() * sizeof(uint16_t), cudaMemcpyHostToDevice),
            cudaSuccess);
  std::vector<float> out(kBlocks * 32);
  int64_t compared = 0;
  for (int g = 0; g < kBackgrounds; ++g) {
    // Poisoned (0xa5: a finite float, never NaN) each time, as the encode sweep's outputs.
    ASSERT_EQ(cudaMemset(d_out, 0xa5, kBlocks * 32 * sizeof(float)), cudaSuccess);
    round_trip_int8_e3m4<kPath><<<1024, 256>>>(d_bg + g * 32, kBlocks, d_out);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    std::vector<int64_t> first_bad(16, -1);
    for_each_swept_block_on_host(
        &bg[g * 32], kBlocks, [&](int me, int64_t b, const uint8_t* codes, uint16_t word) {
          for (int i = 0; i < 32; ++i) {
            const float want = start_acc(b * 32 + i) + I8::decode(codes[i], word);
            const float got = out[b * 32 + i];
            const bool same = (is_nan(want) && is_nan(got)) || float_bits(want) == float_bits(got);
            if (!same && first_bad[me] < 0) first_bad[me] = b * 32 + i;
          }
        });
    compared += kBlocks * 32;
    for (int k = 0; k < 16; ++k) {
      if (first_bad[k] < 0) continue;
      const int64_t e = first_bad[k], b = e / 32;
      ADD_FAILURE() << "background " << g << ", position " << b / kBlocksPerValueSweep
                    << ", value 0x" << std::hex << b % kBlocksPerValueSweep << std::dec
                    << ": element " << e % 32 << " device " << std::hexfloat << out[e];
    }
  }
  std::printf("round trip (%s): %lld elements compared\n", what, static_cast<long long>(compared));
  cudaFree(d_bg);
  cudaFree(d_out);
}

TEST(GpuFormats, Int8E3m4RoundTripInRegistersEqualsScalarOnEveryBf16InEveryPosition) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  expect_round_trip_equals_scalar<Path::kFast>("8 swept blocks a step");
}

TEST(GpuFormats, Int8E3m4RoundTripInRegistersEqualsScalarOnEveryBf16AmongFastBlocks) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  expect_round_trip_equals_scalar<Path::kFastAmongFastBlocks>("among fast blocks");
}

TEST(GpuFormats, Int8E3m4PackedEncodeEqualsScalarOnEveryBf16InEveryPosition) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  expect_sweep_equals_scalar<Path::kReference>();
}

TEST(GpuFormats, Int8E3m4FastEncodeEqualsScalarOnEveryBf16InEveryPosition) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  expect_sweep_equals_scalar<Path::kFast>();
}

TEST(GpuFormats, Int8E3m4FastEncodeEqualsScalarOnEveryBf16AmongFastBlocks) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  expect_sweep_equals_scalar<Path::kFastAmongFastBlocks>();
}

TEST(GpuFormats, Int8E3m4PackedDecodeAddEqualsScalarOnEveryCodeAndWord) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  constexpr int64_t kElems = 65536ll * 256;
  float* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_out, kElems * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_out, 0xa5, kElems * sizeof(float)), cudaSuccess);  // finite, not NaN
  decode_add_int8_e3m4<<<static_cast<int>(kElems / kElemsPerLane / 256), 256>>>(d_out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> out(kElems);
  ASSERT_EQ(cudaMemcpy(out.data(), d_out, kElems * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(d_out);
  int64_t bad = 0, first = -1;
  for (int64_t e = 0; e < kElems; ++e) {
    const float want =
        start_acc(e) + I8::decode(static_cast<uint8_t>(e % 256), static_cast<uint16_t>(e / 256));
    const bool same = (is_nan(want) && is_nan(out[e])) || float_bits(want) == float_bits(out[e]);
    if (!same && bad++ == 0) first = e;
  }
  EXPECT_EQ(bad, 0) << "first: word 0x" << std::hex << first / 256 << " code 0x" << first % 256
                    << ": device " << std::hexfloat << out[first] << ", host "
                    << start_acc(first) + I8::decode(static_cast<uint8_t>(first % 256),
                                                     static_cast<uint16_t>(first / 256));
}

// The decode combine's bf16 round trip of a sum packed by lane_pack_bf16 (lane_bf16_plus_zero):
// every bf16 value, NaNs as lane_pack_bf16 writes them (kBf16NaN), against the reference's
// float_to_bf16(0 + bf16_to_float(x)) on the host.
__global__ void bf16_plus_zero_all(uint16_t* out) {
  const int lane_first = (blockIdx.x * blockDim.x + threadIdx.x) * kElemsPerLane;
  if (lane_first >= 65536) return;
  uint16_t x[kElemsPerLane];
  for (int j = 0; j < kElemsPerLane; ++j) {
    const auto b = static_cast<uint16_t>(lane_first + j);
    x[j] = is_nan(bf16_to_float(b)) ? kBf16NaN : b;
  }
  uint4 v;
  memcpy(&v, x, sizeof(v));
  const uint4 r = lane_bf16_plus_zero(v);
  memcpy(out + lane_first, &r, sizeof(r));
}

TEST(GpuFormats, Bf16PlusZeroEqualsScalarOnEveryBf16) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  uint16_t* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_out, 65536 * sizeof(uint16_t)), cudaSuccess);
  ASSERT_EQ(cudaMemset(d_out, 0xa5, 65536 * sizeof(uint16_t)), cudaSuccess);  // unwritten: wrong
  bf16_plus_zero_all<<<65536 / kElemsPerLane / 256, 256>>>(d_out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> out(65536);
  ASSERT_EQ(cudaMemcpy(out.data(), d_out, out.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(d_out);
  int bad = 0, first = -1, changed = 0;
  for (int b = 0; b < 65536; ++b) {
    const uint16_t want = float_to_bf16(0.0f + bf16_to_float(static_cast<uint16_t>(b)));
    if (out[b] != want && bad++ == 0) first = b;
    changed += out[b] != b;
  }
  EXPECT_EQ(bad, 0) << "first: 0x" << std::hex << first << " device 0x" << out[first];
  // Changed: -0 (to +0) and the 253 NaN patterns other than kBf16NaN (2 x 127, replaced by it
  // before the call): the sweep saw every value.
  EXPECT_EQ(changed, 254);
}

}  // namespace
}  // namespace moe_ep::formats
