// The transports' persistent exchanges (src/backends/cuda/transport.h; label gpu, skipped
// without a GPU), which decode mode across nodes will launch inside CUDA graphs: the parts are
// fixed once, then every launch moves new bytes, eagerly and replayed from a graph that holds the
// launch, each round checked byte for byte on every rank (every pair, a rank's part to itself
// included). The loopback's copy kernel (loopback.cu) at W = 4 in the one-GPU world, NCCL's
// grouped send and receive with one rank per GPU (one GPU: a rank to itself); parts whose two
// ends disagree fail on every rank when the exchange is made.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moe_ep/cuda.h"
#ifdef MOE_EP_WITH_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_comm.h"
#include "backends/cuda/factory.h"
#include "backends/cuda/transport.h"
#include "testing/gpu_world.h"
#endif

namespace moe_ep {
namespace {

#ifndef MOE_EP_WITH_CUDA
TEST(GpuPersistentExchange, NeedsTheCudaBackend) {
  GTEST_SKIP() << "moe-ep was built without CUDA";
}
#else

using cuda_backend::ErrorSink;
using cuda_backend::PersistentExchange;
using cuda_backend::TransferPart;
using testing::DeviceBuffer;
using testing::TestStream;

// Bytes rank src sends rank dst: odd sizes take the loopback kernel's byte path, and one pair
// per source a multiple of 16 (the buffers are 16-byte aligned), its vector path.
size_t part_bytes(int src, int dst, int world) {
  return dst == (src + 1) % world ? 4096 + 16 * src : 1000 + 97 * src + 13 * dst;
}

std::vector<uint8_t> pattern(int src, int dst, int round, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  const uint64_t seed = testing::test_seed();
  for (size_t i = 0; i < bytes; ++i) {
    v[i] = static_cast<uint8_t>((seed + 131 * src + 31 * dst + 7 * round + i * 13) % 251);
  }
  return v;
}

// An error sink of the test's own: the device flag and the mapped host record.
struct TestSink {
  TestSink() {
    MOE_EP_CUDA_CHECK(
        cudaHostAlloc(reinterpret_cast<void**>(&record), sizeof(*record), cudaHostAllocMapped));
    *record = {};
    MOE_EP_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&sink.host), record, 0));
    flag = DeviceBuffer::copy_of(std::vector<int32_t>{0});
    sink.flag = static_cast<int32_t*>(flag.ptr.get());
  }
  ~TestSink() { cudaFreeHost(record); }
  int32_t flag_value() const {
    int32_t v = -1;
    testing::device_to_host(&v, sink.flag, sizeof(v));
    return v;
  }
  cuda_backend::DeviceError* record = nullptr;
  DeviceBuffer flag;
  ErrorSink sink{};
};

// One rank's rounds: makes the exchange of every pair (itself included), then per round writes
// new bytes into its send buffers and launches, eagerly for the first rounds and then from a
// graph captured once, and checks every received byte. Nothing orders the ranks' rounds on the
// host: a fast sender's next launch must wait on the device until this rank has read the bytes
// and launched its next round (PersistentExchange::launch), which a corrupted round would show.
void persistent_rounds(cuda_backend::Transport& transport, int rank, int world,
                       cudaStream_t stream) {
  const int eager_rounds = 3, graph_rounds = 20;
  std::vector<DeviceBuffer> out(world), in(world);
  std::vector<TransferPart> sends, recvs;
  for (int q = 0; q < world; ++q) {
    out[q] = DeviceBuffer::of_bytes(part_bytes(rank, q, world));
    in[q] = DeviceBuffer::of_bytes(part_bytes(q, rank, world));
    sends.push_back({q, out[q].ptr.get(), part_bytes(rank, q, world)});
    recvs.push_back({q, in[q].ptr.get(), part_bytes(q, rank, world)});
  }
  const std::unique_ptr<PersistentExchange> exchange = transport.persistent(sends, recvs, stream);
  TestSink sink;
  const uint64_t timeout_ns = 20'000'000'000ull;
  cudaGraphExec_t graph = nullptr;
  for (int round = 0; round < eager_rounds + graph_rounds; ++round) {
    SCOPED_TRACE("rank " + std::to_string(rank) + ", round " + std::to_string(round));
    for (int q = 0; q < world; ++q) {
      const std::vector<uint8_t> bytes = pattern(rank, q, round, part_bytes(rank, q, world));
      testing::upload(out[q].ptr.get(), bytes, stream);
    }
    if (round < eager_rounds) {
      exchange->launch(stream, sink.sink, timeout_ns);
    } else {
      if (graph == nullptr) {  // the first graph round captures the launch, once
        cudaGraph_t captured = nullptr;
        MOE_EP_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        exchange->launch(stream, sink.sink, timeout_ns);
        MOE_EP_CUDA_CHECK(cudaStreamEndCapture(stream, &captured));
        MOE_EP_CUDA_CHECK(cudaGraphInstantiate(&graph, captured, 0));
        MOE_EP_CUDA_CHECK(cudaGraphDestroy(captured));
        testing::world_barrier();  // every rank instantiated before any launches (gpu_world.h)
      }
      MOE_EP_CUDA_CHECK(cudaGraphLaunch(graph, stream));
    }
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(sink.flag_value(), 0) << "the exchange reported an error (its code)";
    for (int q = 0; q < world; ++q) {
      const size_t bytes = part_bytes(q, rank, world);
      std::vector<uint8_t> got(bytes);
      testing::device_to_host(got.data(), in[q].ptr.get(), bytes);
      EXPECT_EQ(got, pattern(q, rank, round, bytes)) << "bytes from rank " << q;
    }
  }
  if (graph != nullptr) cudaGraphExecDestroy(graph);
}

TEST(GpuPersistentExchange, LoopbackMovesNewBytesEveryLaunchEagerAndInAGraph) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world = 4;
  auto comms = make_single_gpu_world(world, 0, 0.0, /*domain_size=*/1);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    cuda_backend::Transport& transport = cuda_backend::cuda_comm_of(comm)->transport();
    EXPECT_STREQ(transport.name(), "loopback");
    TestStream stream;
    persistent_rounds(transport, rank, world, stream.s);
  });
}

TEST(GpuPersistentExchange, NcclMovesNewBytesEveryLaunchEagerAndInAGraph) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  // One rank per GPU: one GPU gives a rank that sends to itself, two give a pair.
  testing::run_nccl_ranks(2, [](int rank, int world, const std::shared_ptr<Communicator>& comm) {
    cuda_backend::Transport& transport = cuda_backend::cuda_comm_of(comm)->transport();
    EXPECT_STREQ(transport.name(), "nccl");
    TestStream stream;
    persistent_rounds(transport, rank, world, stream.s);
  });
}

TEST(GpuPersistentExchange, LoopbackExchangeWhoseEndsDisagreeFailsOnEveryRank) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world = 3;
  auto comms = make_single_gpu_world(world, 0, 0.0, /*domain_size=*/1);
  std::vector<DeviceBuffer> buffers(world);
  for (DeviceBuffer& b : buffers) b = DeviceBuffer::of_bytes(256);
  const std::vector<testing::RankOutcome> outcomes =
      testing::run_world_outcomes(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
        const auto cuda = cuda_backend::cuda_comm_of(comm);
        TestStream stream;
        // Rank 0 sends 100 bytes to rank 1, which expects 105.
        std::vector<TransferPart> sends, recvs;
        if (rank == 0) sends.push_back({1, buffers[0].ptr.get(), 100});
        if (rank == 1) recvs.push_back({0, buffers[1].ptr.get(), 105});
        cuda->transport().persistent(sends, recvs, stream.s);
      });
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(outcomes[r].threw) << "a disagreeing exchange was made";
    EXPECT_EQ(outcomes[r].code, ErrorCode::kInternal) << outcomes[r].message;
    EXPECT_NE(outcomes[r].message.find("loopback transport (persistent exchange)"),
              std::string::npos)
        << outcomes[r].message;
    EXPECT_NE(outcomes[r].message.find("100"), std::string::npos) << outcomes[r].message;
    EXPECT_NE(outcomes[r].message.find("105"), std::string::npos) << outcomes[r].message;
  }
}

#endif  // MOE_EP_WITH_CUDA

}  // namespace
}  // namespace moe_ep
