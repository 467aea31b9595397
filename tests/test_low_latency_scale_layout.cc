// Decode mode's column-major scales (OpConfig::column_major_scales,
// docs/decode-mode.md#scale-layout) on the CPU backend: the view's shape [E/W, scale_dim, W*Tmax]; the bytes as stored, read at
// (e * scale_dim + j) * W*Tmax + r (written out here, not through the library's getter) against
// the reference's scale rows, also when the receive part of a hooked dispatch fills them; whole
// rounds (dispatch, expert, combine) bit for bit at every pair with a quantized dispatch, over
// several nodes and with pre-quantized x; the configuration rules (decode mode only, the same on
// every rank); and the warning for columns a TMA load cannot take in place.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "testing/harness.h"
#include "testing/log_capture.h"
#include "testing/low_latency.h"

namespace moe_ep {
namespace {

using testing::check_low_latency_round;
using testing::InputSpec;
using testing::make_inputs;
using testing::RankInput;
using testing::test_seed;

InputSpec column_spec(int world_size, int experts, int topk, int hidden, int max_tokens,
                      DispatchDtype dispatch, CombineDtype combine) {
  InputSpec spec;
  spec.world_size = world_size;
  spec.config.num_experts = experts;
  spec.config.topk = topk;
  spec.config.hidden = hidden;
  spec.config.max_tokens_per_rank = max_tokens;
  spec.config.dispatch_dtype = dispatch;
  spec.config.combine_dtype = combine;
  spec.config.low_latency = true;
  spec.config.column_major_scales = true;
  return spec;
}

// What one rank's low_latency_dispatch returned, copied while its op lived.
struct Stored {
  LowLatencyDispatchResult view;    // shapes and flags only (the memory is gone)
  std::vector<uint8_t> scales;      // recv_x_scales's bytes as the op stores them
  std::vector<int32_t> recv_count;  // [E/W]
};

// hooked: the dispatch made with return_recv_hook, its receive part then called.
std::vector<Stored> dispatch_and_copy(const InputSpec& spec, const std::vector<RankInput>& in,
                                      bool hooked = false) {
  std::vector<Stored> got(spec.world_size);
  testing::run_ranks(spec.world_size, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    std::shared_ptr<Op> op = create_op(comm, spec.config);
    const LowLatencyDispatchResult d =
        op->low_latency_dispatch(LowLatencyDispatchArgs(in[rank].args(), hooked));
    EXPECT_EQ(d.recv_pending, hooked);
    if (hooked) op->low_latency_dispatch_recv(d.handle);
    Stored& s = got[rank];
    s.view = d;
    if (d.recv_x_scales.defined()) {
      const auto* bytes = d.recv_x_scales.ptr<uint8_t>();
      s.scales.assign(bytes, bytes + d.recv_x_scales.nbytes());
    }
    const int32_t* count = d.recv_count.ptr<int32_t>();
    s.recv_count.assign(count, count + d.recv_count.rows());
  });
  return got;
}

// Every scale of every row below the counts sits at (e * scale_dim + j) * W*Tmax + r of the
// stored bytes, equal to scale j of the reference's row (e, r).
void expect_stored_column_by_column(const InputSpec& spec, const std::vector<RankInput>& in,
                                    bool hooked = false) {
  const OpConfig& c = spec.config;
  const std::vector<Stored> got = dispatch_and_copy(spec, in, hooked);
  const reference::Shape shape = testing::reference_shape(c, spec.world_size);
  const std::vector<reference::RankInput> ref_in = testing::reference_inputs(in);
  const int64_t cols = scale_dim(c.dispatch_dtype, c.hidden);
  const int64_t elem = scale_bytes(c.dispatch_dtype, c.hidden) / cols;
  const int64_t experts = c.num_experts / spec.world_size;
  const int64_t slab_rows = static_cast<int64_t>(spec.world_size) * c.max_tokens_per_rank;
  int64_t checked = 0;
  for (int rank = 0; rank < spec.world_size; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const Stored& s = got[rank];
    ASSERT_TRUE(s.view.scales_column_major);
    ASSERT_EQ(static_cast<int64_t>(s.scales.size()), experts * slab_rows * cols * elem);
    const reference::LowLatencyOutputs want = reference::low_latency_dispatch(
        shape, c.dispatch_dtype, c.max_tokens_per_rank, ref_in, rank);
    ASSERT_EQ(s.recv_count, want.recv_count);
    for (int64_t e = 0; e < experts; ++e) {
      for (int64_t r = 0; r < want.recv_count[e]; ++r) {
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t stored = (e * cols + j) * slab_rows + r;
          const int64_t row_major = (e * slab_rows + r) * cols + j;
          ASSERT_EQ(std::memcmp(s.scales.data() + stored * elem,
                                want.recv_x_scales.data() + row_major * elem, elem),
                    0)
              << "expert " << e << " row " << r << " scale " << j;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 0);  // the case really moves rows
}

TEST(ColumnMajorScales, ViewIsScaleDimByRows) {
  for (DispatchDtype dispatch : {DispatchDtype::bf16, DispatchDtype::fp8, DispatchDtype::fp4}) {
    SCOPED_TRACE(to_string(dispatch));
    const InputSpec spec = column_spec(2, 4, 2, 256, 8, dispatch, CombineDtype::bf16);
    const std::vector<Stored> got = dispatch_and_copy(spec, make_inputs(spec, test_seed(), {5, 8}));
    for (const Stored& s : got) {
      EXPECT_TRUE(s.view.scales_column_major);
      const TensorView& v = s.view.recv_x_scales;
      if (dispatch == DispatchDtype::bf16) {
        EXPECT_FALSE(v.defined());  // no scales to lay out
        continue;
      }
      ASSERT_EQ(v.ndim, 3);
      EXPECT_EQ(v.shape[0], 2);                                                      // E/W
      EXPECT_EQ(v.shape[1], dispatch == DispatchDtype::fp8 ? 256 / 128 : 256 / 32);  // scale_dim
      EXPECT_EQ(v.shape[2], 16);                                                     // W * Tmax
      EXPECT_EQ(v.dtype,
                dispatch == DispatchDtype::fp8 ? ScalarType::kFloat32 : ScalarType::kFloat8E8M0);
    }
  }
}

TEST(ColumnMajorScales, StoredColumnByColumn) {
  // 7 fp8 blocks or 28 e8m0 scales a row; rank 0 sends Tmax tokens; W = 1 too.
  for (DispatchDtype dispatch : {DispatchDtype::fp8, DispatchDtype::fp4}) {
    for (int world_size : {1, 2, 4}) {
      SCOPED_TRACE(std::string(to_string(dispatch)) + " W=" + std::to_string(world_size));
      const InputSpec spec = column_spec(world_size, 8, 3, 896, 12, dispatch, CombineDtype::bf16);
      std::vector<int64_t> tokens(world_size, 5);
      tokens[0] = 12;
      expect_stored_column_by_column(spec, make_inputs(spec, test_seed(), tokens));
    }
  }
}

TEST(ColumnMajorScales, PrequantizedXStoredColumnByColumn) {
  for (DispatchDtype dispatch : {DispatchDtype::fp8, DispatchDtype::fp4}) {
    SCOPED_TRACE(to_string(dispatch));
    InputSpec spec = column_spec(3, 6, 2, 256, 8, dispatch, CombineDtype::bf16);
    spec.prequantized = true;
    expect_stored_column_by_column(spec, make_inputs(spec, test_seed() + 1, {8, 0, 6}));
  }
}

// With overlap hooks the receive part fills the columns, as it fills the rows.
TEST(ColumnMajorScales, HookedDispatchFillsTheColumnsInItsReceive) {
  for (DispatchDtype dispatch : {DispatchDtype::fp8, DispatchDtype::fp4}) {
    SCOPED_TRACE(to_string(dispatch));
    const InputSpec spec = column_spec(2, 4, 2, 256, 8, dispatch, CombineDtype::bf16);
    expect_stored_column_by_column(spec, make_inputs(spec, test_seed() + 3, {8, 5}),
                                   /*hooked=*/true);
  }
}

// Whole rounds through the test harness, whose copies turn the columns back into rows
// (reference::copy_low_latency_outputs): recv_x, counts, sources and out bit for bit.
TEST(ColumnMajorScales, RoundsMatchTheReferenceAtEveryPair) {
  for (DispatchDtype dispatch : {DispatchDtype::fp8, DispatchDtype::fp4}) {
    for (CombineDtype combine : kAllCombineDtypes) {
      for (int world_size : {1, 3}) {
        SCOPED_TRACE(std::string(to_string(dispatch)) + "/" + to_string(combine) +
                     " W=" + std::to_string(world_size));
        const InputSpec spec = column_spec(world_size, 6, 3, 256, 10, dispatch, combine);
        std::vector<int64_t> tokens(world_size, 7);
        tokens[world_size - 1] = 10;
        const std::vector<std::vector<RankInput>> rounds = {
            make_inputs(spec, test_seed(), tokens), make_inputs(spec, test_seed() + 2, tokens)};
        const std::vector<testing::LowLatencyRound> res =
            testing::run_low_latency_rounds(spec.config, world_size, rounds);
        for (size_t i = 0; i < res.size(); ++i) {
          check_low_latency_round(spec.config, world_size, res[i], i + 1);
        }
      }
    }
  }
}

TEST(ColumnMajorScales, SeveralNodes) {
  InputSpec spec = column_spec(4, 8, 3, 256, 6, DispatchDtype::fp8, CombineDtype::fp8);
  spec.config.ranks_per_node = 2;
  const std::vector<RankInput> in = make_inputs(spec, test_seed(), {6, 3, 0, 5});
  expect_stored_column_by_column(spec, in);
  const testing::LowLatencyRound res =
      testing::run_low_latency_rounds(spec.config, 4, {in}).front();
  check_low_latency_round(spec.config, 4, res);
}

// Ranks whose configurations differ only in the layout do not pair: every rank's creation
// fails naming the field.
TEST(ColumnMajorScales, RanksMustAgree) {
  const InputSpec spec = column_spec(2, 4, 2, 128, 4, DispatchDtype::fp8, CombineDtype::bf16);
  const std::vector<testing::RankOutcome> outcomes = testing::run_ranks_outcomes(
      2,
      [&](int rank, const std::shared_ptr<Communicator>& comm) {
        OpConfig c = spec.config;
        c.column_major_scales = rank == 1;
        create_op(comm, c);
      },
      /*timeout_s=*/0.5);
  for (int rank = 0; rank < 2; ++rank) {
    testing::expect_error(outcomes[rank], ErrorCode::kInvalidArgument,
                          {"configuration differs between ranks", "column_major_scales=1 on rank 1",
                           "column_major_scales=0 on rank 0"},
                          rank);
  }
}

// Columns that do not start at 16-byte boundaries (W * Tmax scales of 4 or 1 bytes) cannot be
// TMA-loaded in place: rank 0 warns once per op, naming the sizes; aligned ones, rows and bf16
// say nothing.
class ColumnMajorScalesLog : public testing::LogTest {};

TEST_F(ColumnMajorScalesLog, UnalignedColumnsWarnOnceOnRankZero) {
  struct Case {
    DispatchDtype dispatch;
    int world_size, max_tokens;
    bool columns, warns;
  };
  for (const Case& k : {Case{DispatchDtype::fp8, 3, 5, true, true},       // 60 bytes
                        Case{DispatchDtype::fp8, 2, 8, true, false},      // 64
                        Case{DispatchDtype::fp4, 2, 8, true, false},      // 16
                        Case{DispatchDtype::fp4, 2, 6, true, true},       // 12
                        Case{DispatchDtype::bf16, 3, 5, true, false},     // no scales
                        Case{DispatchDtype::fp8, 3, 5, false, false}}) {  // rows
    SCOPED_TRACE(std::string(to_string(k.dispatch)) + " W=" + std::to_string(k.world_size) +
                 " Tmax=" + std::to_string(k.max_tokens) + (k.columns ? " columns" : " rows"));
    InputSpec spec =
        column_spec(k.world_size, 6, 2, 256, k.max_tokens, k.dispatch, CombineDtype::bf16);
    spec.config.column_major_scales = k.columns;
    const size_t before = testing::log_snapshot().size();
    testing::run_ranks(k.world_size, [&](int, const std::shared_ptr<Communicator>& comm) {
      create_op(comm, spec.config);
    });
    const std::vector<testing::LogRecord> all = testing::log_snapshot();
    int warnings = 0;
    for (size_t i = before; i < all.size(); ++i) {
      if (all[i].message.find("column_major_scales columns") == std::string::npos) continue;
      ++warnings;
      EXPECT_EQ(all[i].level, LogLevel::kWarn);
      const int64_t bytes = static_cast<int64_t>(k.world_size) * k.max_tokens *
                            (k.dispatch == DispatchDtype::fp8 ? 4 : 1);
      EXPECT_NE(all[i].message.find(std::to_string(bytes) + " bytes, not a multiple of 16"),
                std::string::npos)
          << all[i].message;
    }
    EXPECT_EQ(warnings, k.warns ? 1 : 0);
  }
}

}  // namespace
}  // namespace moe_ep
