// moe_ep::op_memory and Op::memory() on the CPU backend (docs/design.md#memory-per-op): the
// figure op_memory gives before a creation equals what the op made then holds, on every rank, in
// normal and decode mode, over one node and several, at world sizes 1 to 4; two figures counted
// by hand from the buffers' shapes; and op_memory checking the configuration as create_op does.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "moe_ep/cpu.h"
#include "moe_ep/errors.h"
#include "testing/ranks.h"

namespace moe_ep {
namespace {

OpConfig config_of(int experts, int topk, int hidden, int max_tokens, DispatchDtype dispatch,
                   CombineDtype combine, bool low_latency, int ranks_per_node = 0) {
  OpConfig c;
  c.num_experts = experts;
  c.topk = topk;
  c.hidden = hidden;
  c.max_tokens_per_rank = max_tokens;
  c.dispatch_dtype = dispatch;
  c.combine_dtype = combine;
  c.low_latency = low_latency;
  c.ranks_per_node = ranks_per_node;
  return c;
}

// op_memory on every rank before the creation, then Op::memory() of the op each rank made.
void expect_figure_before_equals_after(const OpConfig& c, int world_size) {
  std::shared_ptr<CpuWorld> world = CpuWorld::create(world_size, testing::kTestTimeoutS);
  std::vector<OpMemory> before(world_size), after(world_size);
  for (int r = 0; r < world_size; ++r) before[r] = op_memory(world->communicator(r), c);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] { after[r] = create_op(world->communicator(r), c)->memory(); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(world_size) + ": " +
                 c.describe());
    EXPECT_GT(before[r].peer_bytes, 0);
    EXPECT_EQ(before[r].peer_bytes, after[r].peer_bytes);
    EXPECT_EQ(before[r].private_bytes, after[r].private_bytes);
    EXPECT_EQ(after[r].private_bytes, 0);  // the CPU backend's receive area is all peer memory
  }
}

TEST(OpMemory, CpuFigureBeforeEqualsTheOpsAfter) {
  for (bool low_latency : {false, true}) {
    expect_figure_before_equals_after(
        config_of(8, 2, 256, 8, DispatchDtype::fp8, CombineDtype::bf16, low_latency), 2);
    expect_figure_before_equals_after(
        config_of(6, 3, 128, 5, DispatchDtype::fp4, CombineDtype::int8_e3m4, low_latency), 3);
    expect_figure_before_equals_after(
        config_of(4, 1, 128, 3, DispatchDtype::bf16, CombineDtype::fp8_direct_cast, low_latency),
        1);
    expect_figure_before_equals_after(
        config_of(8, 2, 256, 4, DispatchDtype::fp8, CombineDtype::fp8, low_latency, 2), 4);
  }
}

// W = 2, E = 8, K = 2, H = 256, Tmax = 8, fp8 dispatch (256 payload bytes and 2 fp32 scales a
// row), bf16 combine (512 bytes a row): W * Tmax = 16 receive rows.
TEST(OpMemory, CpuFiguresCountedByHand) {
  constexpr int64_t normal = 16 * 256      // recv payload
                             + 16 * 8      // recv scales
                             + 16 * 2 * 4  // top-k ids
                             + 16 * 2 * 4  // top-k weights
                             + 16 * 4      // source ranks
                             + 16 * 4      // source tokens
                             + 4 * 4       // counts of the E/W = 4 local experts
                             + 16 * 512;   // combine rows
  static_assert(normal == 12816, "the sum above, worked out");
  // Decode mode adds the staging of W * Tmax rows and E/W slabs of W * Tmax rows (E * Tmax = 64).
  const int64_t decode = normal + 16 * (256 + 8 + 2 * 4 + 2 * 4 + 4) + 2 * 4  // staging
                         + 64 * (256 + 8) + 4 * 4 + 3 * 64 * 4;               // slabs
  std::shared_ptr<CpuWorld> world = CpuWorld::create(2, testing::kTestTimeoutS);
  EXPECT_EQ(op_memory(world->communicator(0),
                      config_of(8, 2, 256, 8, DispatchDtype::fp8, CombineDtype::bf16, false))
                .total(),
            normal);
  EXPECT_EQ(op_memory(world->communicator(1),
                      config_of(8, 2, 256, 8, DispatchDtype::fp8, CombineDtype::bf16, true))
                .total(),
            decode);
}

TEST(OpMemory, ChecksTheConfigurationAsCreateOpDoes) {
  std::shared_ptr<CpuWorld> world = CpuWorld::create(2, testing::kTestTimeoutS);
  const auto outcome = [&](const OpConfig& c) {
    testing::RankOutcome o;
    try {
      op_memory(world->communicator(0), c);
    } catch (const Error& e) {
      o = {true, e.code(), e.what(), true};
    }
    return o;
  };
  testing::expect_error(
      outcome(config_of(8, 2, 100, 8, DispatchDtype::fp8, CombineDtype::bf16, false)),
      ErrorCode::kInvalidArgument, {"hidden=100 is not a multiple of 128"});
  testing::expect_error(
      outcome(config_of(7, 2, 256, 8, DispatchDtype::fp8, CombineDtype::bf16, false)),
      ErrorCode::kInvalidArgument, {"num_experts=7 is not divisible by world_size=2"});
  OpConfig columns = config_of(8, 2, 256, 8, DispatchDtype::fp8, CombineDtype::bf16, false);
  columns.column_major_scales = true;
  testing::expect_error(outcome(columns), ErrorCode::kInvalidArgument,
                        {"column_major_scales=true with low_latency=false"});
  try {
    op_memory(nullptr, config_of(8, 2, 256, 8, DispatchDtype::fp8, CombineDtype::bf16, false));
    ADD_FAILURE() << "a null communicator was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("op_memory: comm is null"), std::string::npos);
  }
}

}  // namespace
}  // namespace moe_ep
