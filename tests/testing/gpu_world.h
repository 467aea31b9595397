// Helpers of the GPU tests that run W ranks on one GPU (make_single_gpu_world): a runner with
// one thread and one stream per rank, and one round of dispatch -> identity expert (the
// reference's, on the downloaded rows) -> combine on a rank's op, with device buffers for y and
// out and every output downloaded for the comparison of testing/harness.h. Compiled only with
// the CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/barrier.h"
#include "testing/gpu.h"
#include "testing/harness.h"

namespace moe_ep::testing {

// Before the process first uses CUDA, two settings the single-GPU world needs, since its ranks'
// kernels wait on each other across streams of one device:
// - enough hardware queues that every rank's stream has its own (with the default 8, a rank's
//   kernel can queue behind another rank's waiting kernel; src/backends/cuda/resources.h);
// - eager module loading: with lazy loading (the default) the first launch of a kernel loads its
//   module and may wait for the whole context, i.e. for another rank's kernel that is waiting
//   for this rank. Graph replays, which load everything at instantiation, never hit it.
// A third, unless the environment already sets it: a timeout of 30 s instead of the library's
// default 100 s, so that a wait that never ends fails the test with the library's Timeout (which
// names the phase and the peer) well inside ctest's time limit, instead of a kill with no output.
inline const bool kEnoughHardwareQueues =
    (setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1), setenv("CUDA_MODULE_LOADING", "EAGER", 1),
     setenv("MOE_EP_TIMEOUT_S", "30", 0), true);

// Ops of the single-GPU world are destroyed only after every rank's thread has returned. The
// library frees stream-ordered now (src/backends/cuda/resources.h), but an op's destructor still
// waits for its last call, and the tests' buffers still go with it: keeping every op until all
// ranks are done leaves no host call of a finished rank between the others' calls. kept_op()
// hands the op to the runner below, which releases it after joining every rank's thread.
inline thread_local std::vector<std::shared_ptr<void>>* kept_by_this_rank = nullptr;

template <typename T>
std::shared_ptr<T> keep(std::shared_ptr<T> p) {
  if (kept_by_this_rank != nullptr) kept_by_this_rank->push_back(p);
  return p;
}

inline std::shared_ptr<Op> kept_op(const std::shared_ptr<Communicator>& comm, const OpConfig& c) {
  trace("create_op");
  std::shared_ptr<Op> op = keep(create_op(comm, c));
  trace("created");
  return op;
}

// True when a GPU is visible; GPU tests skip (visibly) otherwise.
inline bool have_gpu() { return kEnoughHardwareQueues && cuda_device_count() > 0; }

// A compute stream of the current device from the tests' pool (testing/gpu.h, pooled_stream):
// the k-th TestStream a thread makes (k mod 3) is its k-th stream of the pool, so that no two
// ranks' streams share a hardware queue. The stream outlives the object; whoever used it has
// synchronised it before the next user takes it.
inline thread_local int test_streams_taken = 0;
struct TestStream {
  cudaStream_t s = nullptr;
  TestStream() {
    const int k = test_streams_taken++ % 3;
    const int index =
        test_rank >= 0 ? k * kPooledRanks + test_rank % kPooledRanks : kStreamPool - 1 - k;
    s = pooled_stream(current_device(), index);
  }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
};

// The runner's barrier of the rank threads (the CPU backend's bounded barrier: a rank that
// throws breaks it, so the others throw instead of waiting; a wait has a bound).
inline thread_local cpu_backend::BoundedBarrier* world_barrier_of_this_rank = nullptr;

// Waits until every rank of the world has arrived. For a point after which a rank's kernels may
// wait on its peers while a peer's host thread could still be in a call that waits for the whole
// device: cudaGraphInstantiate (which may allocate device memory) is one. With it, every rank
// has instantiated its graph before any rank launches one.
inline void world_barrier() {
  if (world_barrier_of_this_rank != nullptr) {
    world_barrier_of_this_rank->arrive_and_wait(test_rank, "world_barrier");
  }
}

// Runs fn(rank, comm) for every communicator on its own thread (device 0) and returns what
// each rank threw.
inline std::vector<RankOutcome> run_world_outcomes(
    const std::vector<std::shared_ptr<Communicator>>& comms,
    const std::function<void(int, const std::shared_ptr<Communicator>&)>& fn) {
  std::vector<RankOutcome> outcomes(comms.size());
  std::vector<std::vector<std::shared_ptr<void>>> kept(comms.size());  // see kept_op
  std::vector<HostTrace> traces(comms.size());
  // Each rank has its own streams and pinned staging in the pool (testing/gpu.h) up to
  // kPooledRanks ranks; more would share them across threads.
  if (comms.size() > static_cast<size_t>(kPooledRanks)) {
    throw std::invalid_argument("run_world: " + std::to_string(comms.size()) +
                                " ranks; the tests' stream pool serves at most " +
                                std::to_string(kPooledRanks));
  }
  cpu_backend::BoundedBarrier barrier(static_cast<int>(comms.size()), 120.0);
  test_stream_of(0);  // the stream pool set up before any rank runs (testing/gpu.h)
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      RankOutcome& o = outcomes[r];
      kept_by_this_rank = &kept[r];
      host_trace = &traces[r];
      world_barrier_of_this_rank = &barrier;
      test_rank = static_cast<int>(r);
      try {
        MOE_EP_CUDA_CHECK(cudaSetDevice(0));
        fn(static_cast<int>(r), comms[r]);
      } catch (const Error& e) {
        o = {true, e.code(), e.what(), true};
        barrier.break_group(static_cast<int>(r), e.code(), e.what());
      } catch (const std::exception& e) {
        o = {true, ErrorCode::kInternal, e.what(), false};
        barrier.break_group(static_cast<int>(r), ErrorCode::kInternal, e.what());
      }
      world_barrier_of_this_rank = nullptr;
    });
  }
  for (auto& t : threads) t.join();
  kept.clear();  // every rank is done: the kept ops go now
  bool any_threw = false;
  for (const RankOutcome& o : outcomes) any_threw = any_threw || o.threw;
  if (any_threw) print_host_traces(traces);
  return outcomes;
}

// Like run_world_outcomes; every exception is a test failure naming its rank.
inline void run_world(const std::vector<std::shared_ptr<Communicator>>& comms,
                      const std::function<void(int, const std::shared_ptr<Communicator>&)>& fn) {
  const std::vector<RankOutcome> outcomes = run_world_outcomes(comms, fn);
  for (size_t r = 0; r < outcomes.size(); ++r) {
    if (outcomes[r].threw) ADD_FAILURE() << "rank " << r << " threw: " << outcomes[r].message;
  }
}

// One NCCL communicator per GPU, on as many GPUs as there are up to `max_ranks` (one GPU: a rank
// on its own, whose transfers go to itself), and fn(rank, world_size, comm) on a thread per rank
// bound to its GPU (run_gpu_ranks); every exception is a test failure naming its rank.
inline void run_nccl_ranks(
    int max_ranks, const std::function<void(int, int, const std::shared_ptr<Communicator>&)>& fn) {
  const int world_size = std::max(1, std::min(max_ranks, cuda_device_count()));
  std::vector<int> devices;
  for (int r = 0; r < world_size; ++r) devices.push_back(r);
  const std::vector<std::string> failure = run_gpu_ranks(
      make_local_nccl_communicators(devices),
      [&](int r, const std::shared_ptr<Communicator>& comm) { fn(r, world_size, comm); });
  for (int r = 0; r < world_size; ++r) {
    EXPECT_EQ(failure[r], "") << "rank " << r << " threw";
  }
}

// The shape of the one-GPU world tests (test_gpu_world.cu, test_gpu_nodes.cc), which exercises
// everything in little time: 8 experts per rank, top-4, hidden 2048 (16 fp8 blocks, 64 mxfp4
// blocks per row), up to 48 tokens per rank.
inline OpConfig world_test_config(int world_size, DtypePair pair) {
  OpConfig c;
  c.num_experts = 8 * world_size;
  c.hidden = 2048;
  c.topk = 4;
  c.max_tokens_per_rank = 48;
  c.dispatch_dtype = pair.dispatch;
  c.combine_dtype = pair.combine;
  return c;
}

// Their inputs: rank 0 sends a full batch, rank 1 none, the others part; no slot names the last
// rank's experts, so it receives nothing (except at world size 1, where the only rank receives
// everything); 20% of slots masked. Seeded from test_seed() + salt.
inline std::vector<RankInput> world_test_inputs(const OpConfig& c, int world_size, uint64_t salt,
                                                bool prequantized = false) {
  InputSpec spec;
  spec.world_size = world_size;
  spec.config = c;
  spec.mask_prob = 0.2;
  spec.exclude_dest = world_size > 1 ? world_size - 1 : -1;  // W = 1: no expert to pick from
  spec.prequantized = prequantized;
  std::vector<int64_t> tokens(world_size);
  // Rank 0 full, rank 1 empty, the others spread over [0, max_tokens_per_rank].
  for (int r = 0; r < world_size; ++r) {
    tokens[r] = r == 0   ? c.max_tokens_per_rank
                : r == 1 ? 0
                         : (7 + 9 * r) % (c.max_tokens_per_rank + 1);
  }
  return make_inputs(spec, test_seed() + salt, tokens);
}

// Streams for one round: dispatch on `dispatch`, combine on `combine` (may differ).
struct RoundStreams {
  cudaStream_t dispatch = nullptr;
  cudaStream_t combine = nullptr;
};

// One round on rank `rank`'s op, whose tensors live on `device` (the calling thread's current
// device; 0 in the one-GPU world); fills res.received/handles/op_uids/out[rank]. With delay_ms,
// the rank waits that long between its upload and its dispatch (a late rank).
inline void gpu_round(Op& op, int rank, int world_size, RoundResult& res, RoundStreams streams,
                      int device = 0, int delay_ms = 0) {
  const OpConfig& c = op.config();
  const RankInput& in = res.inputs[rank];
  DeviceInput input(in, device);
  DispatchArgs args = input.view;
  args.stream = streams.dispatch;
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  trace("dispatch");
  const DispatchResult d = op.dispatch(args);
  trace("dispatched");
  MOE_EP_CUDA_CHECK(cudaStreamSynchronize(streams.dispatch));
  trace("dispatch synced");
  res.received[rank] = download_outputs(d);
  res.handles[rank] = d.handle;
  res.op_uids[rank] = op.uid();
  const std::vector<uint16_t> y = identity_expert(res.received[rank], c, world_size);
  DeviceBuffer y_dev = DeviceBuffer::copy_of(y);
  // Poison the output with 0xffff (a NaN) so that untouched rows are caught.
  DeviceBuffer out_dev =
      DeviceBuffer::copy_of(std::vector<uint16_t>(in.num_tokens * c.hidden, 0xffff));
  trace("combine");
  op.combine(d.handle,
             TensorView::matrix(y_dev.ptr.get(), ScalarType::kBFloat16, d.num_recv, c.hidden,
                                DeviceType::kCuda, device),
             TensorView::matrix(out_dev.ptr.get(), ScalarType::kBFloat16, in.num_tokens, c.hidden,
                                DeviceType::kCuda, device),
             streams.combine);
  trace("combined");
  op.synchronize(streams.combine);
  trace("combine synced");
  res.out[rank].assign(in.num_tokens * c.hidden, 0);
  if (!res.out[rank].empty()) {
    device_to_host(res.out[rank].data(), out_dev.ptr.get(), res.out[rank].size() * 2);
  }
}

// `rounds` on one op of config `c` per rank of `comms` (a fresh world), each round through
// gpu_round. With `second_stream`, every other round combines on another stream than it
// dispatched on. `check_op(rank, op)`, when given, runs once per rank on its op.
inline void run_rounds_on_world(const std::vector<std::shared_ptr<Communicator>>& comms,
                                const OpConfig& c, std::vector<RoundResult>& rounds,
                                bool second_stream = false,
                                const std::function<void(int, const Op&)>& check_op = {}) {
  const int world_size = static_cast<int>(comms.size());
  run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    auto op = kept_op(comm, c);
    if (check_op) check_op(rank, *op);
    TestStream dispatch_stream, combine_stream;
    for (size_t i = 0; i < rounds.size(); ++i) {
      const cudaStream_t combine =
          second_stream && i % 2 == 1 ? combine_stream.s : dispatch_stream.s;
      gpu_round(*op, rank, world_size, rounds[i], {dispatch_stream.s, combine});
    }
  });
}

// Two rounds (world_test_inputs of salts 1 and 2) as run_rounds_on_world runs them, then each
// checked exactly against the reference.
inline void run_and_check_rounds(const std::vector<std::shared_ptr<Communicator>>& comms,
                                 const OpConfig& c, bool prequantized = false,
                                 bool second_stream = false,
                                 const std::function<void(int, const Op&)>& check_op = {}) {
  const int world_size = static_cast<int>(comms.size());
  std::vector<RoundResult> rounds =
      make_round_results(world_size, {world_test_inputs(c, world_size, 1, prequantized),
                                      world_test_inputs(c, world_size, 2, prequantized)});
  run_rounds_on_world(comms, c, rounds, second_stream, check_op);
  for (size_t i = 0; i < rounds.size(); ++i) {
    SCOPED_TRACE("round " + std::to_string(i + 1));
    check_round(c, world_size, rounds[i], i + 1);
  }
}

}  // namespace moe_ep::testing
