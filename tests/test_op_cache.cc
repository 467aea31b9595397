// The per-rank LRU OpCache (docs/design.md#configuration): capacity 4 by default, a hit returns the same op and makes
// it the most recent, a miss creates the op (collectively) and evicts the least recently used,
// the eviction log lists evicted configurations in order, an evicted op is released once nobody
// else holds it, and -- the property collective destruction relies on -- ranks that make the
// same get() calls evict the same ops in the same order.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "moe_ep/cpu.h"
#include "moe_ep/op.h"
#include "testing/ranks.h"

namespace moe_ep {
namespace {

using testing::expect_error;
using testing::outcome_of;
using testing::run_ranks;

OpConfig config_number(int i) {
  OpConfig c;
  c.num_experts = 6;
  c.hidden = 128;
  c.topk = 2;
  c.max_tokens_per_rank = 4;
  c.dispatch_dtype = i % 2 ? DispatchDtype::fp8 : DispatchDtype::bf16;
  c.instance_id = i;
  return c;
}

std::shared_ptr<Communicator> single_rank() {
  return CpuWorld::create(1, testing::kTestTimeoutS)->communicator(0);
}

TEST(OpCache, DefaultCapacityIsFour) {
  OpCache cache;
  EXPECT_EQ(cache.capacity(), 4u);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(OpCache, CapacityZeroIsInvalid) {
  expect_error(outcome_of([] { OpCache cache(0); }), ErrorCode::kInvalidArgument,
               {"OpCache capacity=0 must be >= 1"});
}

TEST(OpCache, NullCommunicatorIsInvalid) {
  OpCache cache;
  expect_error(outcome_of([&] { cache.get(nullptr, config_number(0)); }),
               ErrorCode::kInvalidArgument, {"comm is null"});
}

TEST(OpCache, HitReturnsTheSameOp) {
  auto comm = single_rank();
  OpCache cache;
  const auto a = cache.get(comm, config_number(0));
  const auto b = cache.get(comm, config_number(1));
  EXPECT_NE(a, b);
  EXPECT_EQ(cache.get(comm, config_number(0)), a);
  EXPECT_EQ(cache.get(comm, config_number(1)), b);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_TRUE(cache.eviction_log().empty());
  EXPECT_EQ(a->config(), config_number(0));
}

TEST(OpCache, KeyedByGroupToo) {
  // The same configuration on two worlds gives two ops.
  auto first = single_rank();
  auto second = single_rank();
  ASSERT_NE(first->group_id(), second->group_id());
  OpCache cache;
  EXPECT_NE(cache.get(first, config_number(0)), cache.get(second, config_number(0)));
  EXPECT_EQ(cache.size(), 2u);
}

TEST(OpCache, KeyedByRanksPerNodeToo) {
  // ranks_per_node is part of the configuration: 0 and 1 (both one node here) are two ops.
  auto comm = single_rank();
  OpCache cache;
  OpConfig one = config_number(0);
  one.ranks_per_node = 1;
  const auto a = cache.get(comm, config_number(0));
  const auto b = cache.get(comm, one);
  EXPECT_NE(a, b);
  EXPECT_EQ(cache.get(comm, one), b);
  EXPECT_EQ(b->config().ranks_per_node, 1);
}

TEST(OpCache, EvictsLeastRecentlyUsed) {
  auto comm = single_rank();
  OpCache cache;
  std::weak_ptr<Op> op1;
  {
    for (int i = 0; i < 4; ++i) cache.get(comm, config_number(i));  // order 3 2 1 0
    op1 = cache.get(comm, config_number(1));                        // hit:   1 3 2 0
    cache.get(comm, config_number(0));                              // hit:   0 1 3 2
  }
  cache.get(comm, config_number(4));  // evicts 2:                          4 0 1 3
  cache.get(comm, config_number(5));  // evicts 3:                          5 4 0 1
  cache.get(comm, config_number(0));  // hit:                               0 5 4 1
  EXPECT_FALSE(op1.expired());
  cache.get(comm, config_number(2));  // evicts 1:                          2 0 5 4
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.eviction_log(),
            std::vector<std::string>({config_number(2).describe(), config_number(3).describe(),
                                      config_number(1).describe()}));
  EXPECT_TRUE(op1.expired()) << "the cache held the last reference; eviction must release it";
  // CPU ops are never captured in a CUDA graph, so the cache keeps none past its eviction (the
  // captured case: GpuCapture.CapturedDecodeOpOutlivesItsEvictionUntilClear).
  EXPECT_EQ(cache.retained(), 0u);
}

TEST(OpCache, EvictedOpHeldByCallerStaysAlive) {
  auto comm = single_rank();
  OpCache cache(1);
  const std::shared_ptr<Op> held = cache.get(comm, config_number(0));
  cache.get(comm, config_number(1));
  EXPECT_EQ(cache.eviction_log().size(), 1u);
  EXPECT_EQ(held->config(), config_number(0));         // still usable by its holder
  EXPECT_NE(cache.get(comm, config_number(0)), held);  // a new op: the cache forgot it
}

TEST(OpCache, FailedCreationLeavesTheCacheAsItWas) {
  auto comm = single_rank();
  OpCache cache(2);
  cache.get(comm, config_number(0));
  cache.get(comm, config_number(1));
  OpConfig bad = config_number(2);
  bad.topk = 0;
  expect_error(outcome_of([&] { cache.get(comm, bad); }), ErrorCode::kInvalidArgument, {"topk=0"});
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_TRUE(cache.eviction_log().empty());
}

TEST(OpCache, ClearDropsEverything) {
  auto comm = single_rank();
  OpCache cache;
  std::weak_ptr<Op> op = cache.get(comm, config_number(0));
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_TRUE(op.expired());
}

TEST(OpCache, EveryRankEvictsTheSameOpsInTheSameOrder) {
  // 3 ranks (threads), each with its own cache, make the same get() calls over 6
  // configurations; every miss is a collective creation, so a rank that diverged would hang
  // or time out. The logs must be identical and in LRU order.
  const std::vector<int> sequence = {0, 1, 2, 3, 0, 4, 1, 5, 2, 0, 3, 4};
  // Recency after each call (most recent first) and the evictions it causes:
  //   0 1 2 3 -> 3 2 1 0; 0 hit -> 0 3 2 1; 4 evicts 1 -> 4 0 3 2; 1 evicts 2 -> 1 4 0 3;
  //   5 evicts 3 -> 5 1 4 0; 2 evicts 0 -> 2 5 1 4; 0 evicts 4 -> 0 2 5 1;
  //   3 evicts 1 -> 3 0 2 5; 4 evicts 5 -> 4 3 0 2.
  const std::vector<int> expected_evictions = {1, 2, 3, 0, 4, 1, 5};
  std::vector<std::string> expected_log;
  for (int i : expected_evictions) expected_log.push_back(config_number(i).describe());

  std::vector<std::vector<std::string>> logs(3);
  std::vector<std::vector<uint64_t>> uids(3);
  run_ranks(3, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    OpCache cache;
    for (int i : sequence) {
      const std::shared_ptr<Op> op = cache.get(comm, config_number(i));
      EXPECT_EQ(op->config().instance_id, i);
      EXPECT_EQ(op->rank(), rank);
      uids[rank].push_back(op->uid());
    }
    logs[rank] = cache.eviction_log();
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(logs[r], expected_log) << "rank " << r;
  // Hits return the op created earlier: the call to 0 right after 0..3 repeats the first uid.
  EXPECT_EQ(uids[0][4], uids[0][0]);
}

}  // namespace
}  // namespace moe_ep
