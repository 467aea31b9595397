// GPU tests of the CUDA backend (label `gpu`): on every visible GPU, one rank per GPU on its own
// thread, every output of dispatch and combine must equal the CPU backend's bit for bit, for all
// 3 x 3 dtype pairs, on random shapes, zero-token ranks, fully masked tokens, pre-quantized x,
// hidden sizes 128 to 7168 and several calls on one op. Also the error paths that need a GPU:
// a rank that never joins (Timeout, no hang) and a rejected input on one rank. The copy-engine
// path (OpConfig::copy_engine) on every pair too. Without a GPU
// (or without the CUDA backend) every test skips with a message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>

#include "moe_ep/config.h"
#include "moe_ep/cuda.h"
#include "testing/harness.h"

#ifdef MOE_EP_WITH_CUDA
#include "testing/gpu.h"
#endif

namespace moe_ep::testing {
namespace {

int gpus_or_skip() { return cuda_device_count(); }

#define MOE_EP_REQUIRE_GPU()                                                  \
  if (!cuda_backend_built()) GTEST_SKIP() << "moe-ep was built without CUDA"; \
  if (gpus_or_skip() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test skipped"

#ifdef MOE_EP_WITH_CUDA

std::vector<std::shared_ptr<Communicator>> comms_for(int world_size) {
  std::vector<int> devices(world_size);
  for (int i = 0; i < world_size; ++i) devices[i] = i;
  return make_local_nccl_communicators(devices);
}

// Combines `y` (the expert's rows for `handle`, on the host) on rank `rank`'s GPU into an output
// poisoned with 0xffff (a bf16 NaN, so that an unwritten row is caught) and downloads it.
std::vector<uint16_t> combine_on_device(Op& op, const OpConfig& config, const Handle& handle,
                                        int64_t num_recv, const std::vector<uint16_t>& y,
                                        int64_t num_tokens, int rank) {
  DeviceBuffer y_dev = DeviceBuffer::copy_of(y);
  DeviceBuffer out_dev =
      DeviceBuffer::copy_of(std::vector<uint16_t>(num_tokens * config.hidden, 0xffff));
  const TensorView out = TensorView::matrix(out_dev.ptr.get(), ScalarType::kBFloat16, num_tokens,
                                            config.hidden, DeviceType::kCuda, rank);
  op.combine(handle,
             TensorView::matrix(y_dev.ptr.get(), ScalarType::kBFloat16, num_recv, config.hidden,
                                DeviceType::kCuda, rank),
             out, nullptr);
  op.synchronize(nullptr);
  return download_view<uint16_t>(out);
}

// The CUDA analogue of run_rounds: the same identity expert, outputs downloaded to the host.
std::vector<RoundResult> run_rounds_cuda(const OpConfig& config, int world_size,
                                         const std::vector<std::vector<RankInput>>& rounds) {
  std::vector<RoundResult> results = make_round_results(world_size, rounds);
  auto comms = comms_for(world_size);
  const auto errors = run_gpu_ranks(comms, [&](int rank, const std::shared_ptr<Communicator>& c) {
    std::shared_ptr<Op> op = create_op(c, config);
    for (size_t i = 0; i < rounds.size(); ++i) {
      RoundResult& res = results[i];
      const RankInput& in = rounds[i][rank];
      DeviceInput dev(in, rank);
      const DispatchResult d = op->dispatch(dev.view);
      op->synchronize(nullptr);
      res.received[rank] = download_outputs(d);
      res.handles[rank] = d.handle;
      res.op_uids[rank] = op->uid();
      res.out[rank] =
          combine_on_device(*op, config, d.handle, d.num_recv,
                            identity_expert(res.received[rank], config), in.num_tokens, rank);
    }
  });
  for (int r = 0; r < world_size; ++r) {
    if (!errors[r].empty()) ADD_FAILURE() << "rank " << r << ": " << errors[r];
  }
  return results;
}

void expect_equal_rounds(const RoundResult& cuda, const RoundResult& cpu, int world_size) {
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    expect_same_dispatch(cuda.received[r], cpu.received[r]);
    expect_same("out", cuda.out[r], cpu.out[r]);
  }
}

struct GpuCase {
  int hidden, num_experts, topk;
  std::vector<int64_t> tokens;  // per rank (cycled when the world is larger)
  double mask_prob;
  bool prequantized;
  int rounds;
};

void run_case(const GpuCase& gc, DtypePair pair, int world_size, uint64_t seed,
              bool copy_engine = false, int num_sms = 0) {
  OpConfig config;
  config.copy_engine = copy_engine;
  config.num_sms = num_sms;
  config.num_experts = gc.num_experts;
  config.hidden = gc.hidden;
  config.topk = gc.topk;
  config.dispatch_dtype = pair.dispatch;
  config.combine_dtype = pair.combine;
  std::vector<int64_t> tokens(world_size);
  for (int r = 0; r < world_size; ++r) tokens[r] = gc.tokens[r % gc.tokens.size()];
  int64_t max_tokens = 1;
  for (int64_t t : tokens) max_tokens = std::max(max_tokens, t);
  config.max_tokens_per_rank = static_cast<int>(max_tokens);
  InputSpec spec{config, world_size, gc.mask_prob, -1, gc.prequantized};
  std::vector<std::vector<RankInput>> rounds;
  for (int i = 0; i < gc.rounds; ++i) {
    rounds.push_back(make_inputs(spec, seed + i, tokens));
    if (tokens[0] > 0) rounds.back()[0].mask_token(0);  // a token that goes nowhere
  }
  SCOPED_TRACE("seed " + std::to_string(seed) + " pair " + pair_name(pair) + " hidden " +
               std::to_string(gc.hidden) + " world " + std::to_string(world_size) + " num_sms " +
               std::to_string(num_sms));
  const auto cpu = run_rounds(config, world_size, rounds);
  const auto cuda = run_rounds_cuda(config, world_size, rounds);
  for (int i = 0; i < gc.rounds; ++i) {
    SCOPED_TRACE("round " + std::to_string(i));
    check_round(config, world_size, cpu[i], i + 1);
    expect_equal_rounds(cuda[i], cpu[i], world_size);
  }
}

TEST(GpuBackend, AllPairsDeepSeekShapeEqualsCpu) {
  MOE_EP_REQUIRE_GPU();
  const uint64_t seed = test_seed();
  for (const DtypePair& pair : all_pairs()) {
    run_case({7168, 256, 8, {300, 257}, 0.1, false, 1}, pair, cuda_device_count(), seed);
  }
}

TEST(GpuBackend, OddShapesZeroTokensAndRepeatedCallsEqualCpu) {
  MOE_EP_REQUIRE_GPU();
  const uint64_t seed = test_seed();
  const int world = cuda_device_count();
  for (const DtypePair& pair : all_pairs()) {
    run_case({128, 4 * world, 3, {5, 0, 17}, 0.3, false, 3}, pair, world, seed);
    run_case({384, 6 * world, 6, {0, 1}, 0.0, false, 2}, pair, world, seed + 10);
    run_case({2048, 64, 5, {1100, 900}, 0.2, false, 2}, pair, world, seed + 20);
  }
}

// notify's scan split into parts (launch.h, notify_parts): 513 tokens take 2 parts, 4097 take
// 8 (the lower parts' words), 40000 one part of 10 chunks; every output against the CPU.
TEST(GpuBackend, ScansInPartsAndInChunksEqualCpu) {
  MOE_EP_REQUIRE_GPU();
  const uint64_t seed = test_seed();
  const int world = cuda_device_count();
  const DtypePair pair{DispatchDtype::bf16, CombineDtype::bf16};
  for (int64_t tokens : {513, 4097, 40000}) {
    run_case({128, 8 * world, 3, {tokens}, 0.2, false, 2}, pair, world, seed + tokens);
  }
}

// A one-node dispatch's count_kernel (notify.cuh) on the fewest blocks: a budget of one SM gives
// it two, which take its tickets in turn (the scan's shares, the step, notify's 8 parts of 4097
// tokens and its receiver), with MOE_EP_VALIDATE=1 (the suite's setting) the scan of x too and
// without (unvalidated.cmake) the ids only; every output against the CPU.
TEST(GpuBackend, OneSmBudgetEqualsCpu) {
  MOE_EP_REQUIRE_GPU();
  const uint64_t seed = test_seed();
  const int world = cuda_device_count();
  for (int64_t tokens : {1, 4097}) {
    run_case({256, 8 * world, 3, {tokens}, 0.2, false, 2}, {DispatchDtype::fp8, CombineDtype::bf16},
             world, seed + tokens, /*copy_engine=*/false, /*num_sms=*/1);
  }
}

TEST(GpuBackend, WorldSizeOneEqualsCpu) {
  MOE_EP_REQUIRE_GPU();
  for (const DtypePair& pair : all_pairs()) {
    run_case({1024, 8, 2, {33}, 0.2, false, 2}, pair, 1, test_seed());
  }
}

// Blocks the kernels' fast encode paths do not take, among rows they do: a zero block, a block of
// bf16 subnormals (mxfp4's fast path needs a maximum of at least 2^-126), the largest finite bf16,
// and with `nonfinite` +Inf, -Inf, NaNs and a whole NaN block; and one the fast paths do take, a
// block whose outlier of 128 makes int8/e3m4 pick e3m4 (its code energy is below the limit). Token
// t gets pattern t % 9 (0 leaves the row alone but for the NaN block on odd t) in its slice of 1024
// elements (t / 9) % slices, at block offset (t / 3) % 8 of 128 elements inside it, so that at a
// hidden size of a multiple of 1024 (the whole-slice path, dispatch.cuh) one odd block sends its
// whole slice down the general path while its neighbours stay fast, and at other sizes the general
// kernel meets the same blocks.
void plant_special_blocks(std::vector<std::vector<RankInput>>& rounds, bool nonfinite) {
  for (auto& round : rounds) {
    for (RankInput& in : round) {
      const int64_t slices = (in.hidden + 1023) / 1024;
      for (int64_t t = 0; t < in.num_tokens; ++t) {
        uint16_t* row = in.x.data() + t * in.hidden;
        const int64_t base =
            std::min<int64_t>(1024 * ((t / 9) % slices) + 128 * ((t / 3) % 8), in.hidden - 128);
        uint16_t* block = row + base;  // 128 elements: one fp8 block, four mxfp4 blocks
        switch (t % 9) {
          case 1: std::fill(block, block + 32, uint16_t{0}); break;  // zero
          case 2:
            for (int i = 0; i < 32; ++i) block[32 + i] = static_cast<uint16_t>(1 + 3 * i);
            break;  // subnormals, one of them negative below
          case 3:
            block[5] = 0x7f7f;
            block[70] = 0xff7f;
            break;  // +-largest finite
          case 4: std::fill(block, block + 128, uint16_t{0}); break;
          case 5:
            if (nonfinite) block[17] = 0x7f80;
            break;  // +Inf
          case 6:
            if (nonfinite) block[100] = 0xff80;
            break;  // -Inf
          case 7:
            if (nonfinite) {
              block[3] = 0x7fc0;
              block[64] = 0xffc1;
            }  // quiet NaNs, any payload
            break;
          case 8: block[41] = 0x4300; break;  // 128 among values below 32: e3m4's block
          default: break;
        }
        if (t % 9 == 2) block[40] |= 0x8000;
        if (nonfinite && t % 9 == 0 && t % 2 == 1)
          std::fill(block + 96, block + 128, uint16_t{0x7fc1});
      }
    }
  }
}

// Every pair at three hidden sizes: 2048 and 7168 take the dispatch's whole slices, 1152 has a
// 128-element tail. At the default SM budget the combine spreads 200 tokens' own rows over
// several warps each; at 2 SMs (64 warps) a warp takes a whole row (combine_kernel's kWholeRows
// path, reduce_own_row_whole, for the hidden sizes that are whole warp steps).
void run_special_blocks(bool nonfinite) {
  const uint64_t seed = test_seed();
  const int world = cuda_device_count();
  for (const auto& [hidden, num_sms] :
       std::vector<std::pair<int, int>>{{2048, 0}, {7168, 0}, {1152, 0}, {2048, 2}, {7168, 2}}) {
    for (const DtypePair& pair : all_pairs()) {
      OpConfig config;
      config.num_experts = 8 * world;
      config.hidden = hidden;
      config.topk = 3;
      config.max_tokens_per_rank = 200;
      config.num_sms = num_sms;
      config.dispatch_dtype = pair.dispatch;
      config.combine_dtype = pair.combine;
      InputSpec spec{config, world, 0.1, -1, false};
      std::vector<std::vector<RankInput>> rounds = {
          make_inputs(spec, seed + hidden, std::vector<int64_t>(world, 200))};
      plant_special_blocks(rounds, nonfinite);
      SCOPED_TRACE("seed " + std::to_string(seed + hidden) + " pair " + pair_name(pair) +
                   " hidden " + std::to_string(hidden) + " num_sms " + std::to_string(num_sms));
      const auto cpu = run_rounds(config, world, rounds);
      check_round(config, world, cpu[0], 1);
      const auto cuda = run_rounds_cuda(config, world, rounds);
      expect_equal_rounds(cuda[0], cpu[0], world);
    }
  }
}

TEST(GpuBackend, ExtremeFiniteBlocksEqualCpu) {
  MOE_EP_REQUIRE_GPU();
  run_special_blocks(/*nonfinite=*/false);
}

// Inf and NaN in x pass only with validation off (MOE_EP_VALIDATE=0 rejects them); their own
// ctest entry (tests/unvalidated.cmake).
TEST(GpuBackendUnvalidated, NonFiniteBlocksEqualCpu) {
  MOE_EP_REQUIRE_GPU();
  if (Knobs::get().validate) GTEST_SKIP() << "needs MOE_EP_VALIDATE=0 (its own ctest entry)";
  run_special_blocks(/*nonfinite=*/true);
}

// The copy-engine path (docs/copy-engine.md) between real GPUs: copies into
// the peers' NCCL symmetric windows (tests/test_gpu_copy_engine.cc covers W ranks on one GPU).
TEST(GpuBackend, CopyEngineAllPairsEqualCpu) {
  MOE_EP_REQUIRE_GPU();
  const uint64_t seed = test_seed();
  const int world = cuda_device_count();
  for (const DtypePair& pair : all_pairs()) {
    run_case({7168, 256, 8, {300, 257}, 0.1, false, 2}, pair, world, seed, /*copy_engine=*/true);
    run_case({128, 4 * world, 3, {5, 0, 17}, 0.3, false, 2}, pair, world, seed + 10, true);
  }
  run_case({1536, 32, 4, {64, 40}, 0.1, true, 2}, {DispatchDtype::fp8, CombineDtype::fp8}, world,
           seed + 20, true);
}

TEST(GpuBackend, PrequantizedInputEqualsCpu) {
  MOE_EP_REQUIRE_GPU();
  for (DispatchDtype d : {DispatchDtype::fp8, DispatchDtype::fp4}) {
    for (CombineDtype c : kAllCombineDtypes) {
      run_case({1536, 32, 4, {64, 40}, 0.1, true, 2}, {d, c}, cuda_device_count(), test_seed());
    }
  }
}

TEST(GpuBackend, RejectedInputFailsEveryRankAndOpStaysUsable) {
  MOE_EP_REQUIRE_GPU();
  const int world = cuda_device_count();
  OpConfig config{16 * world, 256, 2, 8, DispatchDtype::fp8, CombineDtype::bf16, 0};
  InputSpec spec{config, world, 0.0, -1, false};
  auto bad = make_inputs(spec, test_seed(), std::vector<int64_t>(world, 8));
  bad[0].topk_idx[3 * 2 + 1] = config.num_experts;  // out of range on rank 0 only
  auto good = make_inputs(spec, test_seed() + 1, std::vector<int64_t>(world, 8));
  std::vector<std::string> first(world);
  std::vector<int64_t> second_recv(world, -1);
  auto comms = comms_for(world);
  const auto errors = run_gpu_ranks(comms, [&](int rank, const std::shared_ptr<Communicator>& c) {
    auto op = create_op(c, config);
    DeviceInput in_bad(bad[rank], rank);
    try {
      op->dispatch(in_bad.view);
    } catch (const InvalidArgument& e) {
      first[rank] = e.what();
    }
    DeviceInput in_good(good[rank], rank);
    const DispatchResult d = op->dispatch(in_good.view);
    op->synchronize(nullptr);
    second_recv[rank] = d.num_recv;
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_GE(second_recv[r], 0) << "rank " << r << ": the op must stay usable";
  }
  EXPECT_NE(first[0].find("topk_idx[3][1]=" + std::to_string(config.num_experts)),
            std::string::npos)
      << first[0];
  for (int r = 1; r < world; ++r) {
    EXPECT_NE(first[r].find("rank 0 rejected its input"), std::string::npos) << first[r];
  }
}

// A dispatch that fails in the step after an accepted one: rank 0's ids are out of range, which
// only the device scan finds, so every rank's count_kernel (notify.cuh) ran its senders, which
// store the failed call's positions before the step settles. They went to the spare half of the
// op's positions: the accepted dispatch's handle still combines to the CPU's output, bit for bit.
TEST(GpuBackend, DispatchFailingInTheStepLeavesTheLatestHandleCombinable) {
  MOE_EP_REQUIRE_GPU();
  const int world = cuda_device_count();
  const uint64_t seed = test_seed();
  OpConfig config{16 * world, 256, 4, 64, DispatchDtype::fp8, CombineDtype::bf16, 0};
  InputSpec spec{config, world, 0.1, -1, false};
  const auto first = make_inputs(spec, seed, std::vector<int64_t>(world, 64));
  auto bad = make_inputs(spec, seed + 1, std::vector<int64_t>(world, 64));  // other routing
  bad[0].topk_idx[5 * 4 + 2] = config.num_experts;
  SCOPED_TRACE("seed " + std::to_string(seed));
  const RoundResult cpu = run_rounds(config, world, {first}).front();
  std::vector<std::vector<uint16_t>> out(world);
  std::vector<std::string> failure(world);
  auto comms = comms_for(world);
  const auto errors = run_gpu_ranks(comms, [&](int rank, const std::shared_ptr<Communicator>& c) {
    auto op = create_op(c, config);
    DeviceInput in_first(first[rank], rank);
    const DispatchResult d = op->dispatch(in_first.view);
    op->synchronize(nullptr);
    const std::vector<uint16_t> y = identity_expert(download_outputs(d), config);
    DeviceInput in_bad(bad[rank], rank);
    try {
      op->dispatch(in_bad.view);
    } catch (const InvalidArgument& e) {
      failure[rank] = e.what();
    }
    out[rank] =
        combine_on_device(*op, config, d.handle, d.num_recv, y, first[rank].num_tokens, rank);
  });
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(errors[r], "");
    EXPECT_NE(failure[r].find(r == 0 ? "topk_idx[5][2]=" : "rank 0 rejected its input"),
              std::string::npos)
        << failure[r];
    expect_same("out", out[r], cpu.out[r]);
  }
}

// Validation mode (MOE_EP_VALIDATE=1, set by ctest for every test) on the GPU: a NaN or Inf in x,
// an Inf in the weights and a duplicated expert are each reported with their position, on the
// rank that has them, while the others learn that it rejected its input; the largest finite
// values pass.
TEST(GpuBackend, ValidationModeReportsNonfiniteAndDuplicates) {
  MOE_EP_REQUIRE_GPU();
  if (!Knobs::get().validate) GTEST_SKIP() << "needs MOE_EP_VALIDATE=1 (ctest sets it)";
  const int world = cuda_device_count();
  OpConfig config{16 * world, 512, 3, 8, DispatchDtype::fp4, CombineDtype::fp8, 0};
  InputSpec spec{config, world, 0.0, -1, false};
  const auto clean = make_inputs(spec, test_seed(), std::vector<int64_t>(world, 8));
  struct Case {
    std::function<void(RankInput&)> spoil;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](RankInput& in) { in.x[5 * in.hidden + 17] = 0x7fc0; }, "x[5][17] is not finite"},
      // The scan reads x 8 elements a load (validate.cuh): the first and last element of x and
      // of a load, -Inf, +Inf and a NaN with the lowest payload.
      {[](RankInput& in) { in.x[0] = 0xff80; }, "x[0][0] is not finite"},
      {[](RankInput& in) { in.x[7 * in.hidden + 511] = 0x7f80; }, "x[7][511] is not finite"},
      {[](RankInput& in) { in.x[3 * in.hidden + 263] = 0x7f81; }, "x[3][263] is not finite"},
      // The largest finite values either side pass (an empty message: no rank rejects).
      {[](RankInput& in) {
         in.x[2 * in.hidden + 8] = 0x7f7f;
         in.x[6 * in.hidden + 15] = 0xff7f;
       },
       ""},
      {[](RankInput& in) { in.topk_weights[2 * in.topk + 1] = INFINITY; },
       "topk_weights[2][1] is not finite"},
      {[](RankInput& in) { in.topk_idx[4 * in.topk + 2] = in.topk_idx[4 * in.topk]; },
       "topk_idx[4] names expert"},
  };
  auto comms = comms_for(world);
  for (const Case& c : cases) {
    auto inputs = clean;
    c.spoil(inputs[world - 1]);
    std::vector<std::string> messages(world);
    const auto errors =
        run_gpu_ranks(comms, [&](int rank, const std::shared_ptr<Communicator>& cm) {
          auto op = create_op(cm, config);
          DeviceInput in(inputs[rank], rank);
          try {
            op->dispatch(in.view);
          } catch (const InvalidArgument& e) {
            messages[rank] = e.what();
          }
        });
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(errors[r], "") << "rank " << r;
      if (c.message.empty()) {
        EXPECT_EQ(messages[r], "") << "rank " << r;
        continue;
      }
      const std::string want = r == world - 1 ? c.message : "rejected its input";
      EXPECT_NE(messages[r].find(want), std::string::npos) << "rank " << r << ": " << messages[r];
    }
  }
}

// Without validation a token may name one expert in several slots; its row then counts once per
// expert it names, as in the CPU backend and the reference. This test needs MOE_EP_VALIDATE=0,
// which its own ctest entry sets (tests/unvalidated.cmake); the discovered entry, under the
// suite's MOE_EP_VALIDATE=1, skips. Top-k 3, 8 and 16 take notify's warp path (4, 8 and 16 lanes
// a token), 40 its thread-per-token path; 5000 tokens a rank make two scan chunks of 4096.
TEST(GpuBackendUnvalidated, RepeatedExpertsInATokenEqualCpu) {
  MOE_EP_REQUIRE_GPU();
  if (Knobs::get().validate) GTEST_SKIP() << "needs MOE_EP_VALIDATE=0 (its own ctest entry)";
  const int world = cuda_device_count();
  const uint64_t seed = test_seed();
  for (int topk : {3, 8, 16, 40}) {
    OpConfig config;
    config.num_experts = 64 * world;
    config.hidden = 256;
    config.topk = topk;
    config.max_tokens_per_rank = 5000;
    config.dispatch_dtype = DispatchDtype::bf16;
    config.combine_dtype = CombineDtype::bf16;
    InputSpec spec{config, world, 0.1, -1, false};
    std::vector<int64_t> tokens(world, 5000);
    if (world > 1) tokens[1] = 130;
    std::vector<std::vector<RankInput>> rounds = {make_inputs(spec, seed + topk, tokens)};
    int repeats = 0;
    for (RankInput& in : rounds[0]) {
      for (int64_t t = 0; t < in.num_tokens; ++t) {
        int32_t* slots = in.topk_idx.data() + t * topk;
        if (t % 3 == 0) slots[topk - 1] = slots[0];  // last slot repeats the first
        if (t % 5 == 0) slots[1] = slots[0];         // and the second, on some of the same tokens
        repeats += slots[0] >= 0 && (t % 3 == 0 || t % 5 == 0);
      }
    }
    ASSERT_GT(repeats, 0);
    SCOPED_TRACE("seed " + std::to_string(seed + topk) + " topk " + std::to_string(topk));
    const auto cpu = run_rounds(config, world, rounds);
    check_round(config, world, cpu[0], 1);
    const auto cuda = run_rounds_cuda(config, world, rounds);
    expect_equal_rounds(cuda[0], cpu[0], world);
  }
}

TEST(GpuBackend, RankThatNeverJoinsGivesTimeoutNotHang) {
  MOE_EP_REQUIRE_GPU();
  const int world = cuda_device_count();
  if (world < 2) GTEST_SKIP() << "needs 2 GPUs";
  // Knobs are read once per process; this test runs in its own process under ctest. Run in one
  // process with other tests, the knob may already hold a timeout longer than the late rank's
  // sleep below, and then no wait would time out: say so instead of failing on it.
  setenv("MOE_EP_TIMEOUT_S", "2", 1);
  if (Knobs::get().timeout_s != 2.0) {
    GTEST_SKIP() << "MOE_EP_TIMEOUT_S was read as " << Knobs::get().timeout_s
                 << " s before this test set it to 2: run it in its own process (ctest does)";
  }
  OpConfig config{8 * world, 256, 2, 8, DispatchDtype::bf16, CombineDtype::bf16, 0};
  InputSpec spec{config, world, 0.0, -1, false};
  auto inputs = make_inputs(spec, test_seed(), std::vector<int64_t>(world, 8));
  std::vector<std::string> messages(world);
  std::vector<double> seconds(world, 0);
  auto comms = comms_for(world);
  run_gpu_ranks(comms, [&](int rank, const std::shared_ptr<Communicator>& c) {
    auto op = create_op(c, config);
    if (rank == world - 1) {
      // Joins only after the others gave up, so that its own wait times out too and every
      // op ends poisoned (a poisoned op skips the collective teardown).
      std::this_thread::sleep_for(std::chrono::seconds(4));
    }
    DeviceInput in(inputs[rank], rank);
    const auto start = std::chrono::steady_clock::now();
    try {
      op->dispatch(in.view);
      op->synchronize(nullptr);
    } catch (const Timeout& e) {
      messages[rank] = e.what();
    }
    seconds[rank] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    try {
      op->dispatch(in.view);
      messages[rank] += " | second call did not fail";
    } catch (const InvalidUsage& e) {
      messages[rank] += std::string(" | ") + e.what();
    }
  });
  for (int r = 0; r < world - 1; ++r) {
    EXPECT_NE(messages[r].find("timed out"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("waited for rank " + std::to_string(world - 1)), std::string::npos)
        << messages[r];
    EXPECT_NE(messages[r].find("op unusable after"), std::string::npos) << messages[r];
    EXPECT_LT(seconds[r], 10.0) << "rank " << r << " took " << seconds[r] << " s";
  }
}

#else

TEST(GpuBackend, SkippedWithoutCuda) { GTEST_SKIP() << "moe-ep was built without CUDA"; }

#endif  // MOE_EP_WITH_CUDA

}  // namespace
}  // namespace moe_ep::testing
