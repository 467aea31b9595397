// State and helpers shared by the rank threads of one (dispatch, combine) pair of `moe-ep bench`
// (bench_runner.cc, and bench_runner_decode.cc for decode mode): the breakable barrier, the
// per-pair shared results, the pair's context, and the upload of a rank's inputs.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "bench_backend.h"
#include "bench_check.h"
#include "bench_inputs.h"
#include "bench_options.h"
#include "bench_runner.h"
#include "bench_world.h"
#include "moe_ep/op.h"
#include "reference/reference.h"

namespace moe_ep::cli {

// A reusable barrier for the rank threads that can be broken: after abort(), every waiter (and
// every later caller) throws Aborted.
class Barrier {
 public:
  struct Aborted {};
  explicit Barrier(int count) : count_(count) {}

  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (aborted_) throw Aborted{};
    const uint64_t generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
    if (generation_ == generation) throw Aborted{};
  }

  void abort() {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  const int count_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

// State shared by the rank threads of one pair; entry r belongs to rank r's thread.
struct PairShared {
  // `threads`: the ranks this process runs (all of them, or under mpirun one).
  PairShared(int ranks, int threads)
      : barrier(threads),
        ref_recv(ranks),
        ref_slabs(ranks),
        ref_y(ranks),
        check(ranks),
        err(ranks),
        errors(ranks) {
    for (auto& leg : times) leg.resize(ranks);
    for (auto& leg : nccl_times) leg.resize(ranks);
    round_times.resize(ranks);
  }
  Barrier barrier;
  std::vector<DispatchOutputs> ref_recv;                  // [W] expected dispatch outputs
  std::vector<LowLatencyOutputs> ref_slabs;               // [W] decode mode: expected slabs
  std::vector<std::vector<uint16_t>> ref_y;               // [W][R_r * H] reference expert outputs
                                                          // (decode: [E/W * W*Tmax * H])
  std::vector<CheckResult> check;                         // [W]
  std::vector<ErrorSums> err;                             // [W]
  std::vector<std::vector<double>> times[kNumLegs];       // [leg][W][iters] microseconds
  std::vector<std::vector<double>> nccl_times[kNumLegs];  // [leg][W][iters] the NCCL baseline
  std::vector<std::vector<double>> round_times;           // [W][iters] times_rounds(plan)
  std::vector<std::exception_ptr> errors;                 // [W] first failure of each rank
};

struct PairContext {
  BenchWorld& world;
  const BenchPlan& plan;
  DtypePair pair;
  BenchBackend& backend;
  const std::vector<std::shared_ptr<Communicator>>& comms;
  const BenchInputs& inputs;
  const std::vector<reference::RankInput>& ref_inputs;
  reference::Shape ref_shape;
};

// Every rank starts the next step together: the rank threads of this process, then (mpirun)
// every process.
inline void sync(const PairContext& ctx, PairShared& shared) {
  shared.barrier.wait();
  if (ctx.world.distributed()) ctx.world.barrier();
}

// The ranks whose reference this rank's thread computes: its own, or under mpirun every rank
// (the combine's reference needs every rank's expert output, and no other thread makes them).
inline std::vector<int> reference_ranks(const PairContext& ctx, int rank) {
  if (!ctx.world.distributed()) return {rank};
  std::vector<int> all(ctx.plan.shape.ranks);
  for (int r = 0; r < ctx.plan.shape.ranks; ++r) all[r] = r;
  return all;
}

inline TensorView shape_of(ScalarType dtype, int64_t rows, int64_t cols) {
  return TensorView::matrix(nullptr, dtype, rows, cols);
}

inline BenchTensor upload_new(BenchBackend& backend, int rank, const void* host,
                              const TensorView& shape) {
  BenchTensor t = backend.alloc(rank, shape);
  backend.upload(rank, host, t);
  return t;
}

// This rank's inputs uploaded to the backend and its out buffer [T, H], as both modes use them.
struct RankTensors {
  BenchTensor x, topk_idx, topk_weights, out;
  DispatchArgs args(void* stream) const {
    DispatchArgs a;
    a.x = x.view;                        // [T, H] bf16
    a.topk_idx = topk_idx.view;          // [T, K] int32
    a.topk_weights = topk_weights.view;  // [T, K] fp32
    a.stream = stream;
    return a;
  }
};

inline RankTensors upload_rank(BenchBackend& backend, int rank, const RankInputs& in,
                               const InputShape& s) {
  return {
      upload_new(backend, rank, in.x.data(), shape_of(ScalarType::kBFloat16, s.tokens, s.hidden)),
      upload_new(backend, rank, in.topk_idx.data(), shape_of(ScalarType::kInt32, s.tokens, s.topk)),
      upload_new(backend, rank, in.topk_weights.data(),
                 shape_of(ScalarType::kFloat32, s.tokens, s.topk)),
      backend.alloc(rank, shape_of(ScalarType::kBFloat16, s.tokens, s.hidden))};
}

// Decode mode's steps 1 to 3 on one rank (bench_runner_decode.cc).
void run_rank_decode(const PairContext& ctx, int rank, PairShared& shared);

}  // namespace moe_ep::cli
