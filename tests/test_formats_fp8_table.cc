// fp8 blockwise's block parameters without a division (fp8_params_by_table, formats/codecs.h):
// for every bf16 magnitude that can be a block maximum (0 to the largest finite, 32640 values),
// the table rule must give the bits of Fp8BlockWire::block_params where fp8_by_table admits the
// maximum, and the range must hold every maximum from 2^-117 up (the kernels' fast path) while
// leaving out Inf and NaN. The GPU test (test_gpu_fast_codecs.cu) checks the kernels' encode.
#include <gtest/gtest.h>

#include <cstdint>

#include "formats/codecs.h"

namespace moe_ep::formats {
namespace {

TEST(Fp8QuotientTable, EqualsTheDivisionForEveryMaximumInItsRange) {
  constexpr Fp8Quotients table = make_fp8_quotients();
  int64_t in_range = 0;
  for (uint32_t a = 0; a < 0x7f80u; ++a) {
    const bool fast = fp8_by_table(a);
    // Zero, and every maximum of biased exponent 10 or more.
    ASSERT_EQ(fast, a == 0 || a >= 0x0500u) << "amax bits 0x" << std::hex << a;
    if (!fast) continue;
    ++in_range;
    const float amax = bf16_to_float(static_cast<uint16_t>(a));
    const Fp8BlockWire::Params want = Fp8BlockWire::block_params(amax, false);
    const uint32_t m = a & 0x7fu;
    const Fp8BlockWire::Params got = fp8_params_by_table(table.q[2 * m], table.q[2 * m + 1], a);
    ASSERT_EQ(float_bits(got.inv), float_bits(want.inv))
        << "448 / amax for amax bits 0x" << std::hex << a;
    ASSERT_EQ(float_bits(got.stored), float_bits(want.stored))
        << "amax / 448 for amax bits 0x" << std::hex << a;
  }
  EXPECT_EQ(in_range, 0x7f80 - 0x0500 + 1);
  // Inf and NaN maxima are never in the range.
  for (uint32_t a = 0x7f80u; a <= 0xffffu; ++a) {
    ASSERT_FALSE(fp8_by_table(a)) << "amax bits 0x" << std::hex << a;
  }
}

}  // namespace
}  // namespace moe_ep::formats
