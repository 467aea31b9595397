// The transports that carry staged bytes between nodes (src/backends/cuda/transport.h; label gpu,
// skipped without a GPU): the single-GPU world's loopback at W = 4 and NCCL's send and receive
// (one rank on one GPU, to itself; a rank per GPU where there are two) move every pair's bytes,
// each round with other sizes and contents into the same buffers, with one pair declaring no
// transfer at all and some declaring 0 bytes; receive buffers past the count stay untouched; a
// sender overwrites its send buffers right after the exchange, which must not reach what its
// peers received. A mismatch between the two ends fails every rank of the loopback with an
// error naming both, and the next exchange works.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "moe_ep/cuda.h"
#include "testing/harness.h"
#ifdef MOE_EP_WITH_CUDA
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_comm.h"
#include "testing/gpu_world.h"
#endif

namespace moe_ep {
namespace {

#ifndef MOE_EP_WITH_CUDA
TEST(GpuTransport, NeedsTheCudaBackend) { GTEST_SKIP() << "moe-ep was built without CUDA"; }
#else

using cuda_backend::TransferPart;

constexpr size_t kMaxPairBytes = 5 * 997;

// The bytes src sends dst in round `round`: 0 to 5 * 997, different per pair and round.
size_t pair_bytes(int round, int src, int dst) {
  return static_cast<size_t>((src * 7 + dst * 3 + round * 5) % 6) * 997;
}
// Rank 1 declares no transfer at all to rank 2 (both ends leave it out).
bool pair_declared(int src, int dst) { return !(src == 1 && dst == 2); }

uint8_t pattern(int round, int src, int dst, size_t i) {
  const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
  return static_cast<uint8_t>((h >> 13) ^ (round * 131 + src * 31 + dst * 17));
}

constexpr uint8_t kUntouched = 0xEE;
constexpr uint8_t kOverwritten = 0x5A;

// `rounds` exchanges of one rank over `transport`; returns what it received wrongly ("" if
// nothing).
std::string exchange_rounds(cuda_backend::Transport& transport, int rank, int world_size,
                            cudaStream_t stream, int rounds) {
  std::vector<testing::DeviceBuffer> send, recv;
  for (int p = 0; p < world_size; ++p) {
    send.push_back(testing::DeviceBuffer::of_bytes(kMaxPairBytes));
    recv.push_back(testing::DeviceBuffer::of_bytes(kMaxPairBytes));
  }
  std::string wrong;
  for (int round = 0; round < rounds && wrong.empty(); ++round) {
    std::vector<std::vector<uint8_t>> out(world_size);
    std::vector<TransferPart> sends, recvs;
    for (int p = 0; p < world_size; ++p) {
      out[p].resize(pair_bytes(round, rank, p));
      for (size_t i = 0; i < out[p].size(); ++i) out[p][i] = pattern(round, rank, p, i);
      if (!out[p].empty()) {
        testing::upload(send[p].ptr.get(), out[p], stream);
      }
      MOE_EP_CUDA_CHECK(cudaMemsetAsync(recv[p].ptr.get(), kUntouched, kMaxPairBytes, stream));
      if (pair_declared(rank, p)) sends.push_back({p, send[p].ptr.get(), out[p].size()});
      if (pair_declared(p, rank))
        recvs.push_back({p, recv[p].ptr.get(), pair_bytes(round, p, rank)});
    }
    transport.exchange(sends, recvs, stream);
    // Later work on the stream may reuse the send buffers: the peers must still get the bytes.
    for (int p = 0; p < world_size; ++p) {
      MOE_EP_CUDA_CHECK(cudaMemsetAsync(send[p].ptr.get(), kOverwritten, kMaxPairBytes, stream));
    }
    std::vector<std::vector<uint8_t>> in(world_size, std::vector<uint8_t>(kMaxPairBytes));
    for (int p = 0; p < world_size; ++p) {
      testing::download_bytes(in[p].data(), recv[p].ptr.get(), kMaxPairBytes, stream);
    }
    MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int p = 0; p < world_size && wrong.empty(); ++p) {
      const size_t bytes = pair_declared(p, rank) ? pair_bytes(round, p, rank) : 0;
      for (size_t i = 0; i < kMaxPairBytes; ++i) {
        const uint8_t want = i < bytes ? pattern(round, p, rank, i) : kUntouched;
        if (in[p][i] != want) {
          wrong =
              detail::concat("round ", round, ": byte ", i, " from rank ", p, " is ", int{in[p][i]},
                             ", expected ", int{want}, " (", bytes, " bytes sent)");
          break;
        }
      }
    }
  }
  return wrong;
}

TEST(GpuTransport, LoopbackMovesEveryPairsBytesInTheSingleGpuWorld) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world_size = 4;
  auto comms = make_single_gpu_world(world_size);
  std::vector<std::string> wrong(world_size);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    cuda_backend::Transport& transport = cuda_backend::cuda_comm_of(comm)->transport();
    EXPECT_STREQ(transport.name(), "loopback");
    testing::TestStream stream;
    wrong[rank] = exchange_rounds(transport, rank, world_size, stream.s, 3);
  });
  for (int r = 0; r < world_size; ++r) EXPECT_EQ(wrong[r], "") << "rank " << r;
}

TEST(GpuTransport, LoopbackMismatchFailsEveryRankAndTheNextExchangeWorks) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  const int world_size = 2;
  auto comms = make_single_gpu_world(world_size);
  std::vector<testing::RankOutcome> mismatch(world_size);
  std::vector<std::string> wrong(world_size);
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    cuda_backend::Transport& transport = cuda_backend::cuda_comm_of(comm)->transport();
    testing::TestStream stream;
    testing::DeviceBuffer buffer = testing::DeviceBuffer::of_bytes(100);
    mismatch[rank] = testing::outcome_of([&] {
      if (rank == 0) {
        transport.exchange({{1, buffer.ptr.get(), 100}}, {}, stream.s);
      } else {
        transport.exchange({}, {{0, buffer.ptr.get(), 50}}, stream.s);
      }
    });
    wrong[rank] = exchange_rounds(transport, rank, world_size, stream.s, 2);
  });
  for (int r = 0; r < world_size; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(mismatch[r].threw) << "a transfer whose ends disagree raised nothing";
    EXPECT_EQ(mismatch[r].code, ErrorCode::kInternal) << mismatch[r].message;
    EXPECT_NE(mismatch[r].message.find("rank 0 sends 100 bytes to rank 1, which receives 50 bytes"),
              std::string::npos)
        << mismatch[r].message;
    EXPECT_EQ(wrong[r], "") << "the exchange after the mismatch";
  }
}

TEST(GpuTransport, NcclMovesEveryPairsBytes) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  // One rank per GPU: one GPU gives a rank that sends to itself, two give a pair.
  testing::run_nccl_ranks(
      2, [](int rank, int world_size, const std::shared_ptr<Communicator>& comm) {
        cuda_backend::Transport& transport = cuda_backend::cuda_comm_of(comm)->transport();
        EXPECT_STREQ(transport.name(), "nccl");
        testing::TestStream stream;
        EXPECT_EQ(exchange_rounds(transport, rank, world_size, stream.s, 3), "") << "rank " << rank;
      });
}

#endif  // MOE_EP_WITH_CUDA

}  // namespace
}  // namespace moe_ep
