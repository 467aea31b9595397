// Decode mode's overlap hooks on the CUDA backend (label gpu, skipped without a GPU), at W = 2 on
// one GPU (make_single_gpu_world): two micro-batches on two ops per rank, every call split into
// its send part (return_recv_hook) and its receive part in the overlapped order with no host wait
// in between, eagerly for every dtype pair (equal to the reference and to the same calls without
// hooks) and captured in one graph replayed with new inputs; and a receive whose send part a peer
// rejected raises an error instead of returning the previous dispatch's rows.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "testing/gpu_low_latency.h"
#include "testing/gpu_world.h"
#include "testing/low_latency.h"

namespace moe_ep {
namespace {

using testing::decode_config;
using testing::decode_inputs;
using testing::DtypePair;
using testing::gpu_low_latency_round;
using testing::LowLatencyRound;
using testing::RankInput;
using testing::TestStream;

// One micro-batch of one rank on the device: its inputs, y (the expert's output) and out.
struct DeviceMicroBatch {
  testing::DeviceInput input;
  testing::DeviceBuffer y;
  testing::DeviceBuffer out;
  int64_t tokens = 0;
  LowLatencyDispatchResult d;

  DeviceMicroBatch(const OpConfig& c, int world_size, const RankInput& in)
      : input(in, 0), tokens(in.num_tokens) {
    const int64_t slabs = c.num_experts / world_size;
    const int64_t slab_rows = static_cast<int64_t>(world_size) * c.max_tokens_per_rank;
    y = testing::DeviceBuffer::of_bytes(slabs * slab_rows * c.hidden * 2);
    out = testing::DeviceBuffer::copy_of(std::vector<uint16_t>(tokens * c.hidden, 0xffff));
  }
  TensorView y_view(const OpConfig& c, int world_size) const {
    return TensorView::tensor3(y.ptr.get(), ScalarType::kBFloat16, c.num_experts / world_size,
                               static_cast<int64_t>(world_size) * c.max_tokens_per_rank, c.hidden,
                               DeviceType::kCuda, 0);
  }
  TensorView out_view(const OpConfig& c) const {
    return TensorView::matrix(out.ptr.get(), ScalarType::kBFloat16, tokens, c.hidden,
                              DeviceType::kCuda, 0);
  }
};

// Queues rank `rank`'s two micro-batches, batches[0] on ops[0] and batches[1] on ops[1], on
// `stream` in the order an engine overlapping them uses, with no host wait: dispatch(A, hook),
// dispatch(B, hook), dispatch_recv(A), dispatch_recv(B), the scaled expert on both, combine(A,
// hook), combine(B, hook), combine_recv(A), combine_recv(B). Capturable as it is.
void queue_two_micro_batches(Op* const ops[2], DeviceMicroBatch* const batches[2], int rank,
                             cudaStream_t stream) {
  const OpConfig& c = ops[0]->config();
  const int w = ops[0]->world_size();
  for (int m = 0; m < 2; ++m) {
    LowLatencyDispatchArgs args(batches[m]->input.view, /*hook=*/true);
    args.stream = stream;
    batches[m]->d = ops[m]->low_latency_dispatch(args);
    EXPECT_TRUE(batches[m]->d.recv_pending);
  }
  for (int m = 0; m < 2; ++m) ops[m]->low_latency_dispatch_recv(batches[m]->d.handle, stream);
  for (int m = 0; m < 2; ++m) {
    testing::launch_scaled_expert(c, w, rank, batches[m]->d,
                                  static_cast<uint16_t*>(batches[m]->y.ptr.get()), stream);
  }
  for (int m = 0; m < 2; ++m) {
    ops[m]->low_latency_combine(batches[m]->y_view(c, w), batches[m]->d.handle,
                                batches[m]->out_view(c), stream, /*return_recv_hook=*/true);
  }
  for (int m = 0; m < 2; ++m) ops[m]->low_latency_combine_recv(batches[m]->d.handle, stream);
}

// Downloads one micro-batch's outputs on rank `rank` into `round`.
void download_micro_batch(const Op& op, int rank, const DeviceMicroBatch& batch,
                          LowLatencyRound& round) {
  const OpConfig& c = op.config();
  round.views[rank] = batch.d;
  round.op_uids[rank] = op.uid();
  round.received[rank] = reference::copy_low_latency_outputs(batch.d, testing::device_to_host);
  round.out[rank].assign(batch.tokens * c.hidden, 0);
  if (batch.tokens > 0) {
    testing::device_to_host(round.out[rank].data(), batch.out.ptr.get(),
                            batch.tokens * c.hidden * 2);
  }
}

TEST(GpuLowLatencyHooks, TwoMicroBatchesEqualTheReferenceAndTheCallsWithoutHooks) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world_size = 2;
  for (const DtypePair& pair : testing::all_pairs()) {
    SCOPED_TRACE(testing::pair_name(pair) + " at W=2");
    const OpConfig c = decode_config(world_size, pair);
    OpConfig config_b = c;
    config_b.instance_id = 1;
    OpConfig config_plain = c;
    config_plain.instance_id = 2;
    // Two rounds of each micro-batch on the same two ops, then the same inputs on a third op
    // without hooks.
    std::vector<LowLatencyRound> a, b, plain_a, plain_b;
    for (int i = 0; i < 2; ++i) {
      a.emplace_back(world_size, decode_inputs(c, world_size, 10 + i));
      b.emplace_back(world_size, decode_inputs(c, world_size, 20 + i));
      plain_a.emplace_back(world_size, a.back().inputs);
      plain_b.emplace_back(world_size, b.back().inputs);
    }
    auto comms = make_single_gpu_world(world_size);
    testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
      auto op_a = testing::kept_op(comm, c);
      auto op_b = testing::kept_op(comm, config_b);
      auto op_plain = testing::kept_op(comm, config_plain);
      TestStream stream;
      for (size_t i = 0; i < a.size(); ++i) {
        DeviceMicroBatch batch_a(c, world_size, a[i].inputs[rank]);
        DeviceMicroBatch batch_b(c, world_size, b[i].inputs[rank]);
        Op* const ops[2] = {op_a.get(), op_b.get()};
        DeviceMicroBatch* const batches[2] = {&batch_a, &batch_b};
        queue_two_micro_batches(ops, batches, rank, stream.s);
        op_a->synchronize(stream.s);
        op_b->synchronize(stream.s);
        download_micro_batch(*op_a, rank, batch_a, a[i]);
        download_micro_batch(*op_b, rank, batch_b, b[i]);
      }
      for (size_t i = 0; i < a.size(); ++i) {
        gpu_low_latency_round(*op_plain, rank, plain_a[i], stream.s);
      }
      for (size_t i = 0; i < a.size(); ++i) {
        gpu_low_latency_round(*op_plain, rank, plain_b[i], stream.s);
      }
    });
    for (size_t i = 0; i < a.size(); ++i) {
      SCOPED_TRACE("round " + std::to_string(i + 1));
      testing::check_low_latency_round(c, world_size, a[i], i + 1);
      testing::check_low_latency_round(config_b, world_size, b[i], i + 1);
      for (int r = 0; r < world_size; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r) + ": with hooks against without");
        for (const auto* pair_of : {&a, &b}) {
          const LowLatencyRound& hooked = (*pair_of)[i];
          const LowLatencyRound& plain = pair_of == &a ? plain_a[i] : plain_b[i];
          testing::expect_same("recv_count", hooked.received[r].recv_count,
                               plain.received[r].recv_count);
          testing::expect_same("recv_x", hooked.received[r].recv_x, plain.received[r].recv_x);
          testing::expect_same("recv_x_scales", hooked.received[r].recv_x_scales,
                               plain.received[r].recv_x_scales);
          testing::expect_same("recv_src_slot", hooked.received[r].recv_src_slot,
                               plain.received[r].recv_src_slot);
          testing::expect_same("out", hooked.out[r], plain.out[r]);
        }
      }
    }
    if (::testing::Test::HasFailure()) return;  // one pair's report is enough
  }
}

TEST(GpuLowLatencyHooks, ReceiveWhoseSendPartFailedReportsAnErrorNotEarlierRows) {
  // Rank 0's hooked send part is accepted on its host, rank 1 rejects its own: the step fails on
  // both and nothing moves. Rank 0 then makes another call while the receive is pending; that
  // call raises the send part's failure, which leaves the receive pending. The receive must not
  // hand out the previous dispatch's rows without an error: its expand finds that its send part
  // never ran and reports it, and rank 0's next call (a dispatch) rejects with it on every rank.
  // Then a clean round on both ranks.
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world_size = 2;
  const OpConfig c = decode_config(world_size, {DispatchDtype::fp8, CombineDtype::bf16});
  LowLatencyRound first(world_size, decode_inputs(c, world_size, 40));
  LowLatencyRound last(world_size, decode_inputs(c, world_size, 41));
  const std::vector<RankInput> hooked = decode_inputs(c, world_size, 42);
  std::vector<testing::RankOutcome> misuse(world_size), after(world_size);
  auto comms = make_single_gpu_world(world_size);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = testing::kept_op(comm, c);
    TestStream stream;
    gpu_low_latency_round(*op, rank, first, stream.s);
    testing::DeviceInput input(hooked[rank], 0);
    LowLatencyDispatchArgs args(input.view, /*hook=*/true);
    args.stream = stream.s;
    LowLatencyDispatchArgs plain(input.view, /*hook=*/false);
    plain.stream = stream.s;
    if (rank == 0) {
      const LowLatencyDispatchResult d = op->low_latency_dispatch(args);
      EXPECT_TRUE(d.recv_pending);
      // Made before rank 1's rejection reaches this device: the call's first check finds no
      // error, and it waits in its own step for rank 1's next call.
      misuse[rank] = testing::outcome_of([&] { op->low_latency_dispatch(args); });
      // Still pending after that call: the receive is accepted and launched.
      op->low_latency_dispatch_recv(d.handle, stream.s);
      // The receive's report makes this rank reject its next call, on every rank.
      after[rank] = testing::outcome_of([&] {
        op->low_latency_dispatch(plain);
        op->synchronize(stream.s);
      });
    } else {
      // Late, so that rank 0's second call has passed its first check (above) by now.
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      LowLatencyDispatchArgs bad = args;
      bad.x.shape[1] = c.hidden / 2;  // rejected by this rank's host checks
      misuse[rank] = testing::outcome_of([&] { op->low_latency_dispatch(bad); });
      // Pairs with rank 0's second call, which rank 0 rejected (raised at the synchronize).
      const testing::RankOutcome paired = testing::outcome_of([&] {
        op->low_latency_dispatch(plain);
        op->synchronize(stream.s);
      });
      EXPECT_TRUE(paired.threw) << "rank 1's dispatch paired with rank 0's rejected call";
      // Pairs with rank 0's dispatch after the receive.
      after[rank] = testing::outcome_of([&] {
        op->low_latency_dispatch(plain);
        op->synchronize(stream.s);
      });
    }
    gpu_low_latency_round(*op, rank, last, stream.s);
  });
  testing::check_low_latency_round(c, world_size, first, 1);
  EXPECT_TRUE(misuse[0].threw) << "rank 0's call with a receive pending raised nothing";
  EXPECT_TRUE(misuse[1].threw) << "rank 1's rejected send part raised nothing";
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("the call after rank 0's receive, on rank " + std::to_string(r));
    ASSERT_TRUE(after[r].threw) << "a receive of a send part that never ran raised nothing "
                                   "(earlier rows, no error)";
    EXPECT_NE(after[r].message.find("had no send part to complete"), std::string::npos)
        << after[r].message;
  }
  EXPECT_EQ(after[0].code, ErrorCode::kInvalidUsage) << after[0].message;
  EXPECT_NE(after[1].message.find("rank 0 rejected"), std::string::npos) << after[1].message;
  // The failed calls counted on neither host nor device: the clean round is call 2 everywhere.
  testing::check_low_latency_round(c, world_size, last, 2);
}

TEST(GpuLowLatencyHooksGraph, CapturedTwoMicroBatchRoundReplaysWithNewInputs) {
  // Each rank captures queue_two_micro_batches in one CUDA graph and replays it with new inputs
  // copied into the captured buffers (replay_inputs: new routing, masked slots and tokens).
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world_size = 2;
  const int replays = 50;
  const OpConfig c = decode_config(world_size, {DispatchDtype::fp8, CombineDtype::int8_e3m4});
  OpConfig config_b = c;
  config_b.instance_id = 1;
  std::vector<LowLatencyRound> a, b;
  for (int i = 0; i < replays; ++i) {
    a.emplace_back(world_size, testing::replay_inputs(c, world_size, i, 1000));
    b.emplace_back(world_size, testing::replay_inputs(c, world_size, 1000 + i, 1000));
  }
  auto comms = make_single_gpu_world(world_size);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op_a = testing::kept_op(comm, c);
    auto op_b = testing::kept_op(comm, config_b);
    TestStream stream;
    DeviceMicroBatch batch_a(c, world_size, a[0].inputs[rank]);
    DeviceMicroBatch batch_b(c, world_size, b[0].inputs[rank]);
    Op* const ops[2] = {op_a.get(), op_b.get()};
    DeviceMicroBatch* const batches[2] = {&batch_a, &batch_b};
    cudaGraph_t graph = nullptr;
    MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
    queue_two_micro_batches(ops, batches, rank, stream.s);
    MOE_EP_CUDA_CHECK(cudaStreamEndCapture(stream.s, &graph));
    cudaGraphExec_t exec = nullptr;
    MOE_EP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    testing::world_barrier();  // every rank instantiated before any launches (gpu_world.h)
    for (int i = 0; i < replays; ++i) {
      for (int m = 0; m < 2; ++m) {
        const RankInput& in = (m == 0 ? a[i] : b[i]).inputs[rank];
        const testing::DeviceInput& dev = batches[m]->input;
        dev.upload(in, stream.s);
      }
      MOE_EP_CUDA_CHECK(cudaGraphLaunch(exec, stream.s));
      MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream.s));
      download_micro_batch(*op_a, rank, batch_a, a[i]);
      download_micro_batch(*op_b, rank, batch_b, b[i]);
      // The device counted the calls; the host, which saw only the capture, did not.
      a[i].views[rank].handle.call_seq = i + 1;
      b[i].views[rank].handle.call_seq = i + 1;
    }
    op_a->synchronize(stream.s);  // raises anything the replays reported
    op_b->synchronize(stream.s);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  });
  for (int i = 0; i < replays; ++i) {
    SCOPED_TRACE("replay " + std::to_string(i));
    testing::check_low_latency_round(c, world_size, a[i], i + 1);
    testing::check_low_latency_round(config_b, world_size, b[i], i + 1);
    if (::testing::Test::HasFailure()) break;  // one replay's report is enough
  }
}

}  // namespace
}  // namespace moe_ep
