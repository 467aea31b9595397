// The CUDA backend on W ranks of ONE GPU (make_single_gpu_world; label gpu, skipped without a
// GPU). The unchanged kernels and protocol run between the ranks; these tests check the
// protocol, never link speed. Every output of all 9 dtype pairs at W = 2, 4 and 8 is compared bit
// for bit with the reference, two rounds per op; pre-quantized input; calls of one op moving
// between streams; two ops interleaved on two streams; and dispatch + combine finishing while
// every SM outside their budget is held by a long kernel on another stream, also with one rank
// on each of two GPUs (TwoGpuBusy, skipped with fewer than 2 GPUs); a misaligned x refused on
// every rank.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>

#include "backends/cuda/policy.h"
#include "testing/gpu_world.h"

namespace moe_ep {
namespace {

using testing::check_round;
using testing::DtypePair;
using testing::InputSpec;
using testing::make_inputs;
using testing::RankInput;
using testing::RoundResult;
using testing::TestStream;
using testing::world_test_config;
using testing::world_test_inputs;

// Two rounds on one op per rank, each rank on its own thread and stream; checked exactly.
void run_and_check(int world_size, const OpConfig& c, bool prequantized = false) {
  testing::run_and_check_rounds(make_single_gpu_world(world_size), c, prequantized);
}

class SingleGpuWorld : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  }
};

TEST_P(SingleGpuWorld, AllDtypePairsEqualTheReference) {
  const int world_size = GetParam();
  for (const DtypePair& pair : testing::all_pairs()) {
    SCOPED_TRACE(testing::pair_name(pair) + " at W=" + std::to_string(world_size));
    run_and_check(world_size, world_test_config(world_size, pair));
  }
}

TEST_P(SingleGpuWorld, PrequantizedInputEqualsTheReference) {
  const int world_size = GetParam();
  for (DispatchDtype d : {DispatchDtype::fp8, DispatchDtype::fp4}) {
    SCOPED_TRACE(short_name(d));
    run_and_check(world_size, world_test_config(world_size, {d, CombineDtype::fp8}), true);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, SingleGpuWorld, ::testing::Values(2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "W" + std::to_string(info.param);
                         });

TEST(SingleGpuWorldLimits, BudgetsFitTheGpuOrTheWorldSaysSo) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  int sms = 0;
  MOE_EP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // 8 ranks of an H200's 132 SMs get 2 each (cuda_backend::single_gpu_world_sms_per_rank, at 4
  // data blocks a SM): an explicit 3 is refused on every rank.
  const int cap = cuda_backend::single_gpu_world_sms_per_rank(sms, 8);
  auto comms = make_single_gpu_world(8);
  OpConfig c = world_test_config(8, {DispatchDtype::bf16, CombineDtype::bf16});
  c.num_sms = cap + 1;
  const auto outcomes = testing::run_world_outcomes(
      comms, [&](int, const std::shared_ptr<Communicator>& comm) { create_op(comm, c); });
  for (size_t r = 0; r < outcomes.size(); ++r) {
    testing::expect_error(outcomes[r], ErrorCode::kInvalidArgument,
                          {"num_sms=" + std::to_string(cap + 1),
                           "exceeds the " + std::to_string(cap) + " SMs one op"},
                          static_cast<int>(r));
  }
  testing::expect_error(testing::outcome_of([&] { make_single_gpu_world(65); }),
                        ErrorCode::kInvalidArgument, {"world_size=65 must be in [1, 64]"});
}

// A rank whose x starts 2 bytes into its allocation (bf16-aligned, not on 16 bytes) is refused by
// the host checks before any kernel reads it (a misaligned 16-byte load would end the context):
// that rank names x and the rule, the other names the rank that rejected, and the op then
// dispatches a good round on every rank.
TEST(SingleGpuWorldAlignment, MisalignedXOnOneRankFailsEveryRankAndTheOpStaysUsable) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  constexpr int kWorld = 2;
  const OpConfig c = world_test_config(kWorld, {DispatchDtype::fp8, CombineDtype::bf16});
  const std::vector<RankInput> inputs = world_test_inputs(c, kWorld, 7);
  std::vector<testing::RankOutcome> refused(kWorld);
  std::vector<int64_t> recv(kWorld, -1);
  testing::run_world(
      make_single_gpu_world(kWorld), [&](int rank, const std::shared_ptr<Communicator>& comm) {
        auto op = testing::kept_op(comm, c);
        TestStream stream;
        testing::DeviceInput in(inputs[rank], 0);
        DispatchArgs args = in.view;
        args.stream = stream.s;
        // 8 bf16 more than x needs, so the shifted view stays inside the allocation.
        const testing::DeviceBuffer padded = testing::DeviceBuffer::copy_of(
            std::vector<uint16_t>(static_cast<size_t>(inputs[rank].num_tokens + 1) * c.hidden, 0));
        DispatchArgs shifted = args;
        if (rank == 1) shifted.x.data = static_cast<char*>(padded.ptr.get()) + 2;
        refused[rank] = testing::outcome_of([&] { op->dispatch(shifted); });
        const DispatchResult d = op->dispatch(args);
        op->synchronize(stream.s);
        recv[rank] = d.num_recv;
      });
  testing::expect_error(refused[1], ErrorCode::kInvalidArgument,
                        {"x=bf16[", "not a multiple of 16 bytes", "16-byte boundary"}, 1);
  testing::expect_error(refused[0], ErrorCode::kInvalidArgument, {"rank 1 rejected its input"}, 0);
  for (int r = 0; r < kWorld; ++r) EXPECT_GE(recv[r], 0) << "rank " << r << ": op unusable";
}

TEST(SingleGpuWorldStreams, CallsMoveBetweenStreams) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  // Dispatch n+1 is queued on another stream than combine n; the op orders its buffer reuse.
  const int world_size = 2;
  const OpConfig c = world_test_config(world_size, {DispatchDtype::fp8, CombineDtype::fp8});
  auto comms = make_single_gpu_world(world_size);
  std::vector<std::vector<RankInput>> inputs;
  for (int i = 0; i < 4; ++i) inputs.push_back(world_test_inputs(c, world_size, 10 + i));
  std::vector<RoundResult> rounds = testing::make_round_results(world_size, inputs);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = testing::kept_op(comm, c);
    TestStream a, b, d;
    const testing::RoundStreams plan[] = {{a.s, b.s}, {d.s, a.s}, {b.s, d.s}, {a.s, a.s}};
    for (size_t i = 0; i < rounds.size(); ++i) {
      testing::gpu_round(*op, rank, world_size, rounds[i], plan[i]);
    }
  });
  for (size_t i = 0; i < rounds.size(); ++i) {
    SCOPED_TRACE("round " + std::to_string(i + 1));
    check_round(c, world_size, rounds[i], i + 1);
  }
}

TEST(SingleGpuWorldStreams, TwoOpsInterleavedOnTwoStreams) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  // Two micro-batches: ops with instance_id 0 and 1, each dispatched on its own stream before
  // either is combined, then both combines in flight at once.
  const int world_size = 2;
  OpConfig c0 = world_test_config(world_size, {DispatchDtype::fp4, CombineDtype::bf16});
  c0.num_sms = 16;
  OpConfig c1 = c0;
  c1.instance_id = 1;
  c1.dispatch_dtype = DispatchDtype::bf16;
  c1.combine_dtype = CombineDtype::fp8;
  auto comms = make_single_gpu_world(world_size);
  std::vector<RoundResult> r0 =
      testing::make_round_results(world_size, {world_test_inputs(c0, world_size, 21)});
  std::vector<RoundResult> r1 =
      testing::make_round_results(world_size, {world_test_inputs(c1, world_size, 22)});
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op0 = testing::kept_op(comm, c0);
    auto op1 = testing::kept_op(comm, c1);
    TestStream s0, s1;
    struct Leg {
      Op* op;
      RoundResult* res;
      cudaStream_t stream;
      const OpConfig* c;
      testing::DeviceInput input;
      DispatchResult d;
      testing::DeviceBuffer y, out;
    };
    Leg legs[2] = {{op0.get(), &r0[0], s0.s, &c0, {r0[0].inputs[rank], 0}, {}, {}, {}},
                   {op1.get(), &r1[0], s1.s, &c1, {r1[0].inputs[rank], 0}, {}, {}, {}}};
    for (Leg& leg : legs) {
      DispatchArgs args = leg.input.view;
      args.stream = leg.stream;
      leg.d = leg.op->dispatch(args);
    }
    for (Leg& leg : legs) {
      MOE_EP_CUDA_CHECK(cudaStreamSynchronize(leg.stream));
      leg.res->received[rank] = testing::download_outputs(leg.d);
      leg.res->handles[rank] = leg.d.handle;
      leg.res->op_uids[rank] = leg.op->uid();
      leg.y = testing::DeviceBuffer::copy_of(
          testing::identity_expert(leg.res->received[rank], *leg.c, world_size));
      const int64_t t = leg.res->inputs[rank].num_tokens;
      leg.out = testing::DeviceBuffer::copy_of(std::vector<uint16_t>(t * leg.c->hidden, 0xffff));
    }
    for (Leg& leg : legs) {
      const int64_t t = leg.res->inputs[rank].num_tokens;
      leg.op->combine(leg.d.handle,
                      TensorView::matrix(leg.y.ptr.get(), ScalarType::kBFloat16, leg.d.num_recv,
                                         leg.c->hidden, DeviceType::kCuda, 0),
                      TensorView::matrix(leg.out.ptr.get(), ScalarType::kBFloat16, t, leg.c->hidden,
                                         DeviceType::kCuda, 0),
                      leg.stream);
    }
    for (Leg& leg : legs) {
      leg.op->synchronize(leg.stream);
      const int64_t t = leg.res->inputs[rank].num_tokens;
      leg.res->out[rank].assign(t * leg.c->hidden, 0);
      if (t > 0) {
        testing::device_to_host(leg.res->out[rank].data(), leg.out.ptr.get(),
                                t * leg.c->hidden * 2);
      }
    }
  });
  check_round(c0, world_size, r0[0]);
  check_round(c1, world_size, r1[0]);
}

// Holds one SM per block (1024 threads and all of the SM's shared memory) until the deadline.
__global__ void hold_sms_kernel(uint64_t until_ns) {
  extern __shared__ char hold[];
  uint64_t now = 0;
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (threadIdx.x == 0) hold[0] = static_cast<char>(now);
  } while (now < until_ns);
}

__global__ void read_globaltimer_kernel(uint64_t* out) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  *out = t;
}

uint64_t gpu_time_ns() {
  testing::DeviceBuffer d = testing::DeviceBuffer::of_bytes(sizeof(uint64_t));
  read_globaltimer_kernel<<<1, 1>>>(static_cast<uint64_t*>(d.ptr.get()));
  uint64_t t = 0;
  testing::device_to_host(&t, d.ptr.get(), sizeof(t));
  return t;
}

// Two ranks of 16 SMs each, on one GPU (the test world) or on two (one rank per GPU, NCCL
// communicators over the GPUs' link); on every GPU used, a kernel on another stream holds every
// SM outside the ranks' budgets for 6 s. Three rounds of dispatch + combine must finish long
// before it does, with exact outputs: the op makes progress on its budget alone.
void run_while_busy(bool two_gpus) {
  const int world_size = 2;
  const int budget = 16;
  const double hold_s = 6.0;
  OpConfig c = world_test_config(world_size, {DispatchDtype::fp8, CombineDtype::fp8});
  c.max_tokens_per_rank = 512;
  c.num_sms = budget;
  const std::vector<int> devices = two_gpus ? std::vector<int>{0, 1} : std::vector<int>{0};
  const int ranks_per_gpu = world_size / static_cast<int>(devices.size());
  auto comms =
      two_gpus ? make_local_nccl_communicators(devices) : make_single_gpu_world(world_size);
  std::vector<RoundResult> rounds;
  for (int i = 0; i < 3; ++i) {
    InputSpec spec;
    spec.world_size = world_size;
    spec.config = c;
    rounds.push_back(testing::make_round_results(
        world_size, {make_inputs(spec, testing::test_seed() + 30 + i, {512, 384})})[0]);
  }
  // Each rank on its thread and device (rank r on device r with two GPUs, all on 0 with one).
  auto each_rank = [&](const std::function<void(int, const std::shared_ptr<Communicator>&)>& fn) {
    if (!two_gpus) return testing::run_world(comms, fn);
    const std::vector<std::string> errors = testing::run_gpu_ranks(comms, fn);
    for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  };
  // Ops are created first: creation is not what this measures.
  std::vector<std::shared_ptr<Op>> ops(world_size);
  each_rank(
      [&](int rank, const std::shared_ptr<Communicator>& comm) { ops[rank] = create_op(comm, c); });
  std::vector<std::unique_ptr<TestStream>> busy;
  int sms = 0;
  for (int device : devices) {
    MOE_EP_CUDA_CHECK(cudaSetDevice(device));
    int smem = 0;
    MOE_EP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    MOE_EP_CUDA_CHECK(
        cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    MOE_EP_CUDA_CHECK(
        cudaFuncSetAttribute(hold_sms_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    busy.push_back(std::make_unique<TestStream>());
    const int held = sms - ranks_per_gpu * budget;
    hold_sms_kernel<<<held, 1024, smem, busy.back()->s>>>(gpu_time_ns() +
                                                          static_cast<uint64_t>(hold_s * 1e9));
    MOE_EP_CUDA_CHECK(cudaGetLastError());
  }
  MOE_EP_CUDA_CHECK(cudaSetDevice(0));
  const auto start = std::chrono::steady_clock::now();
  each_rank([&](int rank, const std::shared_ptr<Communicator>&) {
    TestStream stream;
    for (RoundResult& res : rounds) {
      testing::gpu_round(*ops[rank], rank, world_size, res, {stream.s, stream.s},
                         two_gpus ? rank : 0);
    }
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t g = 0; g < devices.size(); ++g) {
    MOE_EP_CUDA_CHECK(cudaSetDevice(devices[g]));
    const cudaError_t still_busy = cudaStreamQuery(busy[g]->s);
    std::printf(
        "busy GPU %d: %d of %d SMs held for %.1f s; 3 rounds on the other %d SMs took %.3f s\n",
        devices[g], sms - ranks_per_gpu * budget, sms, hold_s, ranks_per_gpu * budget, seconds);
    EXPECT_EQ(still_busy, cudaErrorNotReady)
        << "GPU " << devices[g] << ": the holding kernel ended before the rounds did";
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(busy[g]->s));
    busy[g].reset();
  }
  MOE_EP_CUDA_CHECK(cudaSetDevice(0));
  EXPECT_LT(seconds, hold_s / 3) << "dispatch and combine waited for the busy SMs";
  for (size_t i = 0; i < rounds.size(); ++i) {
    SCOPED_TRACE("round " + std::to_string(i + 1));
    check_round(c, world_size, rounds[i], i + 1);
  }
}

TEST(SingleGpuWorldBusy, FinishesWhileEverySmOutsideTheBudgetIsBusy) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  run_while_busy(false);
}

TEST(TwoGpuBusy, FinishesWhileEverySmOutsideTheBudgetIsBusyOnBothGpus) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs";
  run_while_busy(true);
}

}  // namespace
}  // namespace moe_ep
