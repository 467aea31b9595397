// GPU test of the deployment SGLang and vLLM use (label `gpu`): one process per GPU, each with
// its own ncclComm_t from ncclCommInitRank, handed to moe-ep through make_nccl_communicator.
// The parent makes the NCCL unique id and forks one child per rank before touching CUDA; every
// child checks its dispatch outputs and combine output bit for bit against the plain-loop
// reference (it regenerates every rank's inputs from the seed) and exits 0, 1 (wrong), 2
// (exception) or 77 (not enough GPUs: the test skips).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "moe_ep/cuda.h"
#include "testing/harness.h"
#include "testing/inputs.h"

#ifdef MOE_EP_WITH_CUDA
#include <nccl.h>

#include "testing/gpu.h"
#endif

namespace moe_ep::testing {
namespace {

#ifdef MOE_EP_WITH_CUDA

constexpr int kWorld = 2;
constexpr int kSkipCode = 77;

template <typename T>
bool same(const char* what, int rank, const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() == want.size() &&
      (got.empty() || std::memcmp(got.data(), want.data(), got.size() * sizeof(T)) == 0)) {
    return true;
  }
  fprintf(stderr, "rank %d: %s differs (%zu vs %zu elements)\n", rank, what, got.size(),
          want.size());
  return false;
}

int run_child(int rank, const ncclUniqueId& id, const OpConfig& config, uint64_t seed) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < kWorld) return kSkipCode;
  MOE_EP_CUDA_CHECK(cudaSetDevice(rank));
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, kWorld, id, rank) != ncclSuccess) return 2;
  bool ok = true;
  {
    std::shared_ptr<Communicator> c = make_nccl_communicator(comm, rank);
    std::shared_ptr<Op> op = create_op(c, config);
    InputSpec spec{config, kWorld, 0.1, -1, false};
    const std::vector<RankInput> inputs = make_inputs(spec, seed, {96, 130});
    const Expected expected = expect_round(config, kWorld, inputs);
    DeviceInput dev(inputs[rank], rank);
    const DispatchResult d = op->dispatch(dev.view);
    op->synchronize(nullptr);
    const DispatchOutputs got = download_outputs(d);
    const DispatchOutputs& want = expected.received[rank];
    ok &= got.num_recv == want.num_recv;
    ok &= same("recv_x", rank, got.recv_x, want.recv_x);
    ok &= same("recv_x_scales", rank, got.recv_x_scales, want.recv_x_scales);
    ok &= same("recv_topk_idx", rank, got.recv_topk_idx, want.recv_topk_idx);
    ok &= same("recv_topk_weights", rank, got.recv_topk_weights, want.recv_topk_weights);
    ok &= same("recv_src_rank", rank, got.recv_src_rank, want.recv_src_rank);
    ok &= same("recv_src_token", rank, got.recv_src_token, want.recv_src_token);
    ok &= same("recv_count_per_local_expert", rank, got.recv_count_per_local_expert,
               want.recv_count_per_local_expert);
    const int64_t tokens = inputs[rank].num_tokens;
    DeviceBuffer y_dev = DeviceBuffer::copy_of(expected.y[rank]);
    DeviceBuffer out_dev =
        DeviceBuffer::copy_of(std::vector<uint16_t>(tokens * config.hidden, 0xffff));
    op->combine(d.handle,
                TensorView::matrix(y_dev.ptr.get(), ScalarType::kBFloat16, d.num_recv,
                                   config.hidden, DeviceType::kCuda, rank),
                TensorView::matrix(out_dev.ptr.get(), ScalarType::kBFloat16, tokens, config.hidden,
                                   DeviceType::kCuda, rank),
                nullptr);
    op->synchronize(nullptr);
    const auto out = download_view<uint16_t>(TensorView::matrix(
        out_dev.ptr.get(), ScalarType::kBFloat16, tokens, config.hidden, DeviceType::kCuda, rank));
    ok &= same("out", rank, out, expected.out[rank]);
  }
  ncclCommDestroy(comm);
  return ok ? 0 : 1;
}

TEST(GpuMultiprocess, OneProcessPerGpuMatchesReference) {
  const uint64_t seed = test_seed();
  OpConfig config{64, 2048, 6, 130, DispatchDtype::fp8, CombineDtype::fp8, 0};
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<pid_t> children;
  for (int rank = 0; rank < kWorld; ++rank) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      int code = 2;
      try {
        code = run_child(rank, id, config, seed);
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: %s\n", rank, e.what());
      }
      _exit(code);
    }
    children.push_back(pid);
  }
  // Bounded wait: a hung child fails the test instead of hanging it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::vector<int> codes(kWorld, -1);
  for (int rank = 0; rank < kWorld; ++rank) {
    int status = 0;
    while (waitpid(children[rank], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t pid : children) kill(pid, SIGKILL);
        waitpid(children[rank], &status, 0);
        FAIL() << "rank " << rank << " did not finish within 120 s";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    codes[rank] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  if (codes[0] == kSkipCode || codes[1] == kSkipCode) {
    GTEST_SKIP() << "needs " << kWorld << " visible CUDA devices: GPU test skipped";
  }
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(codes[rank], 0) << "rank " << rank << " (1 = wrong output, 2 = exception; see "
                              << "stderr)";
  }
}

#else

TEST(GpuMultiprocess, SkippedWithoutCuda) { GTEST_SKIP() << "moe-ep was built without CUDA"; }

#endif  // MOE_EP_WITH_CUDA

}  // namespace
}  // namespace moe_ep::testing
