// The pure configuration check (check_config) rule by rule, OpConfig equality and description,
// backend names, and the argument errors of create_op and CpuWorld::create. Each rule is checked
// for the exception type and for a message naming the field, the value and the rule.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "moe_ep/config.h"
#include "moe_ep/cpu.h"
#include "moe_ep/op.h"
#include "testing/ranks.h"

namespace moe_ep {
namespace {

using testing::expect_error;
using testing::outcome_of;

OpConfig valid() {
  OpConfig c;
  c.num_experts = 64;
  c.hidden = 7168;
  c.topk = 8;
  c.max_tokens_per_rank = 4096;
  c.dispatch_dtype = DispatchDtype::fp8;
  c.combine_dtype = CombineDtype::bf16;
  return c;
}

void expect_rejected(const OpConfig& c, int world_size, const std::vector<std::string>& fragments) {
  expect_error(outcome_of([&] { check_config(c, world_size); }), ErrorCode::kInvalidArgument,
               fragments);
}

TEST(OpConfig, ValidConfigurationsPass) {
  EXPECT_NO_THROW(check_config(valid(), 8));
  OpConfig c = valid();
  c.hidden = 2880;  // gpt-oss: 90 mxfp4 blocks, bf16 combine
  c.dispatch_dtype = DispatchDtype::fp4;
  EXPECT_NO_THROW(check_config(c, 8));
  c.hidden = 8;  // bf16 on both legs only needs whole 16-byte rows
  c.dispatch_dtype = DispatchDtype::bf16;
  EXPECT_NO_THROW(check_config(c, 1));
}

TEST(OpConfig, WorldSize) {
  expect_rejected(valid(), 0, {"world_size=0 must be >= 1"});
  expect_rejected(valid(), 2048, {"world_size=2048 exceeds the limit 1024"});
}

TEST(OpConfig, NumExperts) {
  OpConfig c = valid();
  c.num_experts = 0;
  expect_rejected(c, 1, {"num_experts=0 must be >= 1"});
  c.num_experts = 10;
  c.topk = 2;
  expect_rejected(c, 4, {"num_experts=10 is not divisible by world_size=4"});
  c.num_experts = 8192;
  expect_rejected(c, 4, {"num_experts=8192 exceeds the limit 4096"});
}

TEST(OpConfig, Topk) {
  OpConfig c = valid();
  c.topk = 0;
  expect_rejected(c, 8, {"topk=0 must be in [1, num_experts=64]"});
  c.topk = 65;
  expect_rejected(c, 8, {"topk=65 must be in [1, num_experts=64]"});
  c.num_experts = 256;
  c.topk = 100;
  expect_rejected(c, 8, {"topk=100 exceeds the limit 64"});
}

TEST(OpConfig, HiddenBlockSizes) {
  OpConfig c = valid();
  c.hidden = 7100;
  expect_rejected(c, 8,
                  {"hidden=7100 is not a multiple of 128, the block size of float8_blockwise "
                   "(dispatch)"});
  c.dispatch_dtype = DispatchDtype::fp4;
  expect_rejected(c, 8,
                  {"hidden=7100 is not a multiple of 32, the block size of mxfp4_blockwise "
                   "(dispatch)"});
  c.hidden = 2880;
  c.combine_dtype = CombineDtype::fp8;
  expect_rejected(c, 8,
                  {"hidden=2880 is not a multiple of 128, the block size of float8_blockwise "
                   "(combine)"});
}

TEST(OpConfig, HiddenRowsOfSixteenBytes) {
  OpConfig c = valid();
  c.dispatch_dtype = DispatchDtype::bf16;
  c.hidden = 100;
  expect_rejected(c, 8, {"hidden=100 is not a multiple of 8", "16-byte"});
  // fp8 direct cast rows are `hidden` bytes: whole 16-byte units need hidden % 16 == 0.
  c.hidden = 24;
  c.combine_dtype = CombineDtype::fp8_direct_cast;
  expect_rejected(c, 8, {"hidden=24 gives 24-byte rows in float8_direct_cast (combine)"});
}

TEST(OpConfig, HiddenRange) {
  OpConfig c = valid();
  c.hidden = 0;
  expect_rejected(c, 8, {"hidden=0 must be >= 1"});
  c.hidden = 65536 * 2;
  expect_rejected(c, 8, {"hidden=131072 exceeds the limit 65536"});
}

TEST(OpConfig, MaxTokens) {
  OpConfig c = valid();
  c.max_tokens_per_rank = 0;
  expect_rejected(c, 8, {"max_tokens_per_rank=0 must be >= 1"});
  c.max_tokens_per_rank = 1 << 21;
  expect_rejected(c, 8, {"max_tokens_per_rank=2097152 exceeds the limit"});
}

TEST(OpConfig, NumSmsRange) {
  OpConfig c = valid();
  c.num_sms = -1;
  expect_rejected(c, 8, {"num_sms=-1 must be in [0, 1024]"});
  c.num_sms = 1025;
  expect_rejected(c, 8, {"num_sms=1025 must be in [0, 1024]"});
  c.num_sms = 1024;
  check_config(c, 8);
}

TEST(OpConfig, DtypeEnumsOutOfRange) {
  OpConfig c = valid();
  c.dispatch_dtype = static_cast<DispatchDtype>(7);
  expect_rejected(c, 8, {"dispatch_dtype=7 is not a valid DispatchDtype"});
  c = valid();
  c.combine_dtype = static_cast<CombineDtype>(9);
  expect_rejected(c, 8, {"combine_dtype=9 is not a valid CombineDtype"});
}

TEST(OpConfig, EqualityCoversEveryField) {
  const OpConfig base = valid();
  EXPECT_TRUE(base == valid());
  std::vector<OpConfig> changed(12, base);
  changed[0].num_experts = 128;
  changed[1].hidden = 4096;
  changed[2].topk = 4;
  changed[3].max_tokens_per_rank = 128;
  changed[4].dispatch_dtype = DispatchDtype::fp4;
  changed[5].combine_dtype = CombineDtype::fp8;
  changed[6].instance_id = 3;
  changed[7].num_sms = 16;
  changed[8].low_latency = true;
  changed[9].ranks_per_node = 4;
  changed[10].copy_engine = true;
  changed[11].column_major_scales = true;
  for (const OpConfig& c : changed) EXPECT_FALSE(c == base) << c.describe();
}

TEST(OpConfig, Describe) {
  EXPECT_EQ(valid().describe(),
            "num_experts=64 hidden=7168 topk=8 max_tokens_per_rank=4096 "
            "dispatch_dtype=float8_blockwise combine_dtype=bfloat16 instance_id=0");
}

TEST(OpConfig, DescribeNamesRanksPerNodeWhenSet) {
  OpConfig c = valid();
  c.ranks_per_node = 4;
  EXPECT_NE(c.describe().find(" ranks_per_node=4"), std::string::npos) << c.describe();
}

TEST(OpConfig, RanksPerNode) {
  OpConfig c = valid();
  for (int l : {0, 1, 2, 4, 8}) {
    c.ranks_per_node = l;
    EXPECT_NO_THROW(check_config(c, 8)) << "ranks_per_node=" << l;
  }
  c.ranks_per_node = 3;
  expect_rejected(c, 8, {"ranks_per_node=3 does not divide world_size=8"});
  c.ranks_per_node = -1;
  expect_rejected(c, 8, {"ranks_per_node=-1 must be >= 0"});
  c.ranks_per_node = 16;
  expect_rejected(c, 8, {"ranks_per_node=16 exceeds world_size=8"});
}

TEST(OpConfig, DescribeNamesCopyEngineWhenSet) {
  OpConfig c = valid();
  EXPECT_EQ(c.describe().find("copy_engine"), std::string::npos) << c.describe();
  c.copy_engine = true;
  EXPECT_NE(c.describe().find(" copy_engine=1"), std::string::npos) << c.describe();
}

TEST(OpConfig, DescribeNamesColumnMajorScalesWhenSet) {
  OpConfig c = valid();
  c.low_latency = true;
  EXPECT_EQ(c.describe().find("column_major_scales"), std::string::npos) << c.describe();
  c.column_major_scales = true;
  EXPECT_NE(c.describe().find(" column_major_scales=1"), std::string::npos) << c.describe();
}

// Column-major scales are a layout of decode mode's slabs: refused without low_latency, naming
// both fields; taken with it whatever the dispatch dtype (bf16 has no scales to lay out).
TEST(OpConfig, ColumnMajorScalesAreDecodeModeOnly) {
  OpConfig c = valid();
  c.column_major_scales = true;
  expect_rejected(c, 8, {"column_major_scales=true with low_latency=false", "scale rows"});
  c.low_latency = true;
  for (DispatchDtype d : {DispatchDtype::bf16, DispatchDtype::fp8, DispatchDtype::fp4}) {
    c.dispatch_dtype = d;
    EXPECT_NO_THROW(check_config(c, 8)) << to_string(d);
  }
}

// The copy-engine path is normal mode on one node: copy_engine=true with decode mode or with
// nodes smaller than the world is refused, naming both fields and their values.
TEST(OpConfig, CopyEngineIsNormalModeOnOneNode) {
  OpConfig c = valid();
  c.copy_engine = true;
  for (int l : {0, 8}) {
    c.ranks_per_node = l;
    EXPECT_NO_THROW(check_config(c, 8)) << "ranks_per_node=" << l;
  }
  c.ranks_per_node = 0;
  EXPECT_NO_THROW(check_config(c, 1));
  c.ranks_per_node = 2;
  expect_rejected(c, 8,
                  {"copy_engine=true with ranks_per_node=2 < world_size=8",
                   "one node only (ranks_per_node=0 or 8)"});
  c.ranks_per_node = 0;
  c.low_latency = true;
  expect_rejected(c, 8, {"copy_engine=true with low_latency=true", "normal mode only"});
  c.copy_engine = false;  // both without the copy engine: fine
  c.ranks_per_node = 2;
  EXPECT_NO_THROW(check_config(c, 8));
}

// MOE_EP_COPY_ENGINE is the default of the ops that can use the path; a caller's true stands.
TEST(OpConfig, CopyEngineFromTheEnvironmentOnlyWhereThePathApplies) {
  const Knobs off = Knobs::from({});
  const Knobs on = Knobs::from({{"MOE_EP_COPY_ENGINE", "1"}});
  OpConfig c = valid();
  EXPECT_FALSE(resolve_copy_engine(c, 8, off));
  EXPECT_TRUE(resolve_copy_engine(c, 8, on));
  c.ranks_per_node = 8;  // one node, spelled out
  EXPECT_TRUE(resolve_copy_engine(c, 8, on));
  c.ranks_per_node = 4;  // two nodes: the SM path, not a refusal
  EXPECT_FALSE(resolve_copy_engine(c, 8, on));
  c.ranks_per_node = 0;
  c.low_latency = true;  // decode mode: the SM path, not a refusal
  EXPECT_FALSE(resolve_copy_engine(c, 8, on));
  c.low_latency = false;
  c.copy_engine = true;
  EXPECT_TRUE(resolve_copy_engine(c, 8, off));
}

// Creation agrees on copy_engine like on every field: a rank whose copy_engine differs never
// pairs (each rank fails naming the field after the bounded wait), and a rank that asks for it
// with decode mode rejects its configuration, which fails every rank at once with its reason.
// The CPU backend has no copy-engine path; it takes the field as part of the op's identity.
TEST(OpConfig, CopyEngineIsAgreedAtCreation) {
  const auto differing = testing::run_ranks_outcomes(
      2,
      [](int rank, const std::shared_ptr<Communicator>& comm) {
        OpConfig c = valid();
        c.num_experts = 8;
        c.max_tokens_per_rank = 4;
        c.copy_engine = rank == 1;
        create_op(comm, c);
      },
      /*timeout_s=*/0.5);
  for (int r = 0; r < 2; ++r) {
    expect_error(differing[r], ErrorCode::kInvalidArgument,
                 {"configuration differs between ranks: ", "copy_engine=1 on rank 1",
                  "copy_engine=0 on rank 0"},
                 r);
  }
  const auto refused =
      testing::run_ranks_outcomes(2, [](int rank, const std::shared_ptr<Communicator>& comm) {
        OpConfig c = valid();
        c.num_experts = 8;
        c.max_tokens_per_rank = 4;
        c.low_latency = true;
        c.copy_engine = rank == 0;
        create_op(comm, c);
      });
  expect_error(refused[0], ErrorCode::kInvalidArgument, {"copy_engine=true with low_latency=true"},
               0);
  expect_error(refused[1], ErrorCode::kInvalidArgument,
               {"rank 0", "copy_engine=true with low_latency=true"}, 1);
  // Equal configurations with copy_engine create (and the CPU backend runs them as usual).
  const auto agreed =
      testing::run_ranks_outcomes(2, [](int, const std::shared_ptr<Communicator>& comm) {
        OpConfig c = valid();
        c.num_experts = 8;
        c.max_tokens_per_rank = 4;
        c.copy_engine = true;
        EXPECT_TRUE(create_op(comm, c)->config().copy_engine);
      });
  for (const auto& o : agreed) EXPECT_FALSE(o.threw) << o.message;
}

TEST(OpConfig, BackendNames) {
  EXPECT_STREQ(to_string(Backend::kCpu), "cpu");
  EXPECT_STREQ(to_string(Backend::kCuda), "cuda");
}

TEST(OpConfig, CreateOpWithNullCommunicator) {
  expect_error(outcome_of([] { create_op(nullptr, valid()); }), ErrorCode::kInvalidArgument,
               {"create_op: comm is null"});
  expect_error(outcome_of([] { reject_create(nullptr, "a reason"); }), ErrorCode::kInvalidArgument,
               {"reject_create: comm is null"});
}

// A communicator of another layer's making that reports the CPU backend without being one of a
// CpuWorld: the CPU backend cannot use it and says so instead of misreading it.
class ForeignCpuCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Backend backend() const override { return Backend::kCpu; }
  uint64_t group_id() const override { return 12345; }
};

TEST(OpConfig, CreateOpWithAForeignCpuCommunicator) {
  OpConfig c = valid();
  c.num_experts = 8;
  c.max_tokens_per_rank = 4;
  expect_error(outcome_of([&] { create_op(std::make_shared<ForeignCpuCommunicator>(), c); }),
               ErrorCode::kInvalidArgument,
               {"create_op: the communicator reports backend cpu but does not come from a "
                "CpuWorld"});
}

TEST(OpConfig, CpuWorldArguments) {
  expect_error(outcome_of([] { CpuWorld::create(0); }), ErrorCode::kInvalidArgument,
               {"world_size=0"});
  expect_error(outcome_of([] { CpuWorld::create(2, -1.0); }), ErrorCode::kInvalidArgument,
               {"timeout_s=-1"});
  auto world = CpuWorld::create(2, 1.0);
  EXPECT_EQ(world->size(), 2);
  EXPECT_EQ(world->communicator(1)->rank(), 1);
  EXPECT_EQ(world->communicator(1)->size(), 2);
  EXPECT_EQ(world->communicator(0)->backend(), Backend::kCpu);
  EXPECT_EQ(world->communicator(0)->group_id(), world->communicator(1)->group_id());
  EXPECT_NE(world->communicator(0)->group_id(), CpuWorld::create(1)->communicator(0)->group_id());
  expect_error(outcome_of([&] { world->communicator(2); }), ErrorCode::kInvalidArgument,
               {"rank=2 must be in [0, world_size=2)"});
}

}  // namespace
}  // namespace moe_ep
