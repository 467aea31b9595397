// CUDA graph capture of calls that cannot be captured (label gpu; skipped without a GPU), in the
// one-GPU world at W = 2. Normal mode's dispatch, combine and reject inside a capture raise
// InvalidUsage naming the call and the capture, launch nothing into the graph, and leave the op
// usable: checked rounds follow. A decode-mode reject inside a capture raises the caller's reason
// on this rank alone (as a rejected low_latency_dispatch does there), without the host wait of
// the agreement, and the op stays usable. An OpCache keeps an evicted decode op whose calls a
// graph captured until it is cleared. The capturable calls (decode mode) have their graph tests
// in test_gpu_low_latency.cu.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "moe_ep/cuda.h"
#include "testing/harness.h"
#include "testing/ranks.h"

#ifdef MOE_EP_WITH_CUDA
#include "backends/cuda/cuda_check.h"
#include "testing/gpu_world.h"
#endif

namespace moe_ep::testing {
namespace {

#ifndef MOE_EP_WITH_CUDA
TEST(GpuCapture, NeedsTheCudaBackend) { GTEST_SKIP() << "moe-ep was built without CUDA"; }
#else

// Runs `call` between the begin and the end of a capture of `stream`; returns its outcome and
// the number of nodes the graph got (0: nothing was launched into it).
template <typename Fn>
RankOutcome in_capture(cudaStream_t stream, Fn&& call, size_t* nodes) {
  MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  RankOutcome outcome = outcome_of(call);
  cudaGraph_t graph = nullptr;
  MOE_EP_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));  // fails if the call broke the capture
  MOE_EP_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, nodes));
  MOE_EP_CUDA_CHECK(cudaGraphDestroy(graph));
  return outcome;
}

TEST(GpuCapture, NormalModeCallsInACaptureAreRefusedAndCheckedRoundsFollow) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world_size = 2;
  const OpConfig c = world_test_config(world_size, {DispatchDtype::fp8, CombineDtype::bf16});
  std::vector<RoundResult> rounds = make_round_results(
      world_size, {world_test_inputs(c, world_size, 1), world_test_inputs(c, world_size, 2)});
  std::vector<RankOutcome> dispatch(world_size), combine(world_size), reject(world_size);
  std::vector<size_t> nodes(3 * world_size, 99);
  run_world(
      make_single_gpu_world(world_size), [&](int rank, const std::shared_ptr<Communicator>& comm) {
        auto op = kept_op(comm, c);
        TestStream stream;
        DeviceInput input(rounds[0].inputs[rank], 0);
        DispatchArgs args = input.view;
        args.stream = stream.s;
        dispatch[rank] = in_capture(
            stream.s, [&] { op->dispatch(args); }, &nodes[3 * rank]);
        gpu_round(*op, rank, world_size, rounds[0], {stream.s, stream.s});
        // A combine in a capture, of round 1's handle: refused for the capture before its arguments.
        DeviceBuffer y = DeviceBuffer::of_bytes(c.hidden * 2);
        DeviceBuffer out = DeviceBuffer::of_bytes(c.hidden * 2);
        combine[rank] = in_capture(
            stream.s,
            [&] {
              op->combine(rounds[0].handles[rank],
                          TensorView::matrix(y.ptr.get(), ScalarType::kBFloat16, 1, c.hidden,
                                             DeviceType::kCuda, 0),
                          TensorView::matrix(out.ptr.get(), ScalarType::kBFloat16, 1, c.hidden,
                                             DeviceType::kCuda, 0),
                          stream.s);
            },
            &nodes[3 * rank + 1]);
        reject[rank] = in_capture(
            stream.s, [&] { op->reject(CallKind::kDispatch, "the caller's reason", stream.s); },
            &nodes[3 * rank + 2]);
        gpu_round(*op, rank, world_size, rounds[1], {stream.s, stream.s});
      });
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    expect_error(dispatch[r], ErrorCode::kInvalidUsage,
                 {"dispatch: stream=", "is capturing a CUDA graph",
                  "normal mode's calls cannot be captured", "low_latency_dispatch"});
    expect_error(combine[r], ErrorCode::kInvalidUsage,
                 {"combine: stream=", "is capturing a CUDA graph"});
    expect_error(reject[r], ErrorCode::kInvalidUsage,
                 {"dispatch: stream=", "is capturing a CUDA graph"});
    for (int i = 0; i < 3; ++i) EXPECT_EQ(nodes[3 * r + i], 0u) << "call " << i;
  }
  for (size_t i = 0; i < rounds.size(); ++i) {
    SCOPED_TRACE("round " + std::to_string(i + 1));
    check_round(c, world_size, rounds[i], i + 1);
  }
}

TEST(GpuCapture, DecodeRejectInACaptureRaisesTheReasonAndTheOpStaysUsable) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world_size = 2;
  OpConfig c = world_test_config(world_size, {DispatchDtype::bf16, CombineDtype::bf16});
  c.low_latency = true;
  const std::vector<RankInput> inputs = world_test_inputs(c, world_size, 3);
  std::vector<RankOutcome> reject(world_size);
  std::vector<int> counted(world_size, -1);
  std::vector<size_t> nodes(world_size, 99);
  run_world(
      make_single_gpu_world(world_size), [&](int rank, const std::shared_ptr<Communicator>& comm) {
        auto op = kept_op(comm, c);
        TestStream stream;
        reject[rank] = in_capture(
            stream.s,
            [&] { op->reject(CallKind::kLowLatencyDispatch, "the caller's reason", stream.s); },
            &nodes[rank]);
        // The op goes on: an eager decode dispatch of every rank.
        DeviceInput input(inputs[rank], 0);
        LowLatencyDispatchArgs args(input.view, /*hook=*/false);
        args.stream = stream.s;
        const LowLatencyDispatchResult d = op->low_latency_dispatch(args);
        op->synchronize(stream.s);
        counted[rank] = static_cast<int>(d.handle.call_seq);
      });
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    expect_error(reject[r], ErrorCode::kInvalidArgument,
                 {"low_latency_dispatch: the caller's reason"});
    EXPECT_EQ(nodes[r], 0u);
    EXPECT_EQ(counted[r], 1) << "the rejected call must not count as a call";
  }
}

// An OpCache of capacity 1 per rank: a decode op whose dispatch a graph captured is evicted by
// the next get, but the cache keeps it (retained), so the graph still replays on live memory;
// clear() releases it. An op never captured is released at its eviction as before.
TEST(GpuCapture, CapturedDecodeOpOutlivesItsEvictionUntilClear) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world_size = 2;
  OpConfig c = world_test_config(world_size, {DispatchDtype::fp8, CombineDtype::bf16});
  c.low_latency = true;
  OpConfig other = c;
  other.instance_id = 1;
  OpConfig third = c;
  third.instance_id = 2;
  const std::vector<RankInput> inputs = world_test_inputs(c, world_size, 4);
  std::vector<int> captured(world_size, -1), alive_after_eviction(world_size, -1),
      retained(world_size, -1), released_by_clear(world_size, -1),
      uncaptured_released(world_size, -1);
  std::vector<std::vector<int32_t>> counts(world_size), replayed_counts(world_size);
  run_world(
      make_single_gpu_world(world_size), [&](int rank, const std::shared_ptr<Communicator>& comm) {
        OpCache cache(1);
        TestStream stream;
        DeviceInput input(inputs[rank], 0);
        LowLatencyDispatchArgs args(input.view, /*hook=*/false);
        args.stream = stream.s;
        std::weak_ptr<Op> weak;
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        LowLatencyDispatchResult in_graph;  // views of the captured op's fixed memory
        {
          const std::shared_ptr<Op> op = cache.get(comm, c);
          weak = op;
          MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
          in_graph = op->low_latency_dispatch(args);
          MOE_EP_CUDA_CHECK(cudaStreamEndCapture(stream.s, &graph));
          MOE_EP_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
          captured[rank] = op->captured() ? 1 : 0;
        }
        // Evicts c's op, of which this rank holds no reference now; `other` (the same shape) gives
        // the counts the replay must give.
        std::weak_ptr<Op> uncaptured;
        {
          const std::shared_ptr<Op> eager_op = cache.get(comm, other);
          uncaptured = eager_op;
          const LowLatencyDispatchResult eager = eager_op->low_latency_dispatch(args);
          eager_op->synchronize(stream.s);
          counts[rank] = download_view<int32_t>(eager.recv_count);
        }
        retained[rank] = static_cast<int>(cache.retained());
        {  // (this reference goes before clear() below, which must release the op)
          const std::shared_ptr<Op> kept = weak.lock();
          alive_after_eviction[rank] = kept != nullptr ? 1 : 0;
          if (kept != nullptr) {
            world_barrier();  // both ranks replay together
            MOE_EP_CUDA_CHECK(cudaGraphLaunch(exec, stream.s));
            kept->synchronize(stream.s);
            replayed_counts[rank] = download_view<int32_t>(in_graph.recv_count);
          }
        }
        MOE_EP_CUDA_CHECK(cudaGraphExecDestroy(exec));
        MOE_EP_CUDA_CHECK(cudaGraphDestroy(graph));
        world_barrier();
        cache.get(comm, third);  // evicts `other`, never captured: released
        uncaptured_released[rank] = uncaptured.expired() ? 1 : 0;
        world_barrier();
        cache.clear();
        released_by_clear[rank] = weak.lock() == nullptr ? 1 : 0;
      });
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(captured[r], 1) << "the op must know a graph captured its call";
    EXPECT_EQ(retained[r], 1);
    EXPECT_EQ(alive_after_eviction[r], 1) << "a captured op was released at its eviction";
    EXPECT_EQ(replayed_counts[r], counts[r]) << "the replay or the call after it went wrong";
    EXPECT_EQ(uncaptured_released[r], 1);
    EXPECT_EQ(released_by_clear[r], 1);
  }
}

#endif  // MOE_EP_WITH_CUDA

}  // namespace
}  // namespace moe_ep::testing
