// moe_ep::op_memory and Op::memory() on the CUDA backend (docs/design.md#memory-per-op). Two
// parts:
// - host only (runs without a GPU): the geometry and array list the CUDA op allocates from
//   (CudaOpGeometry, CudaOp::visit_arrays) give DeepSeek-V3's decode op at W = 2, Tmax = 128 its
//   slabs (E * Tmax rows of 7392 bytes in fp8, with 12 bytes of sources each) plus less than
//   1 MiB of other arrays, and a normal-mode op less than 1 MiB of private arrays;
// - on a GPU (label gpu, skipped without one): in the one-GPU world, what op_memory says before
//   a creation equals Op::memory() of the op made on every rank, and the bytes the library's
//   device pool handed out during the creation (device_alloc_bytes) are exactly the sum of the
//   ranks' totals (the world's buffers come from the same pool), in normal mode, decode mode
//   and the copy-engine path.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_op.h"
#include "moe_ep/cuda.h"
#include "testing/gpu_world.h"

namespace moe_ep {
namespace {

using cuda_backend::CudaOp;
using cuda_backend::CudaOpGeometry;

OpConfig v3_config(bool low_latency) {
  OpConfig c;
  c.num_experts = 256;
  c.topk = 8;
  c.hidden = 7168;
  c.max_tokens_per_rank = 128;
  c.dispatch_dtype = DispatchDtype::fp8;
  c.combine_dtype = CombineDtype::bf16;
  c.low_latency = low_latency;
  return c;
}

TEST(OpMemoryGeometry, DeepSeekV3DecodeIsItsSlabsAndLittleElse) {
  const OpConfig c = v3_config(true);
  const CudaOpGeometry g = CudaOpGeometry::of(c, 2, 0, 32);
  const int64_t slabs = int64_t{256} * 128 * (7168 + 56 * 4);  // E * Tmax rows of payload, scales
  const int64_t sources = int64_t{256} * 128 * 3 * 4;          // 3 int32 a slab row
  const int64_t private_bytes = CudaOp::private_bytes(c, 2, g);
  std::printf("DeepSeek-V3 decode op, fp8 / bf16, W = 2, Tmax = 128: peer %lld, private %lld\n",
              static_cast<long long>(g.layout.total_bytes()),
              static_cast<long long>(private_bytes));
  EXPECT_GE(private_bytes, slabs + sources);
  EXPECT_LT(private_bytes, slabs + sources + (int64_t{1} << 20));
  // The peer buffer: normal mode's rows plus decode mode's staging (two parities) and flags,
  // a few MiB (docs/decode-mode.md#memory-per-op), far below the slabs.
  EXPECT_GT(g.layout.total_bytes(), int64_t{2} * 2 * 128 * (7168 + 56 * 4));
  EXPECT_LT(g.layout.total_bytes(), slabs / 8);

  const OpConfig n = v3_config(false);
  const CudaOpGeometry gn = CudaOpGeometry::of(n, 2, 0, 32);
  const int64_t normal_private = CudaOp::private_bytes(n, 2, gn);
  std::printf("DeepSeek-V3 normal op, fp8 / bf16, W = 2, Tmax = 128: peer %lld, private %lld\n",
              static_cast<long long>(gn.layout.total_bytes()),
              static_cast<long long>(normal_private));
  EXPECT_LT(normal_private, int64_t{1} << 20);
  EXPECT_LT(gn.layout.total_bytes(), g.layout.total_bytes());
}

// op_memory on every rank of a fresh one-GPU world, then the creation, counting the pool's
// bytes handed out during it.
void expect_creation_allocates_the_figure(const OpConfig& c, int world_size) {
  SCOPED_TRACE(c.describe() + " at W=" + std::to_string(world_size));
  auto comms = make_single_gpu_world(world_size);
  // A first op on these communicators, made and released before counting: whatever a world or
  // a device allocates once (at its first creation) is not the op's.
  testing::run_world(
      comms, [&](int, const std::shared_ptr<Communicator>& comm) { testing::kept_op(comm, c); });
  std::vector<OpMemory> before(world_size), after(world_size);
  for (int r = 0; r < world_size; ++r) before[r] = op_memory(comms[r], c);
  const int64_t pool_before = cuda_backend::device_alloc_bytes();
  testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
    after[rank] = testing::kept_op(comm, c)->memory();
  });
  const int64_t pool_bytes = cuda_backend::device_alloc_bytes() - pool_before;
  int64_t total = 0;
  for (int r = 0; r < world_size; ++r) {
    EXPECT_EQ(before[r].peer_bytes, after[r].peer_bytes) << "rank " << r;
    EXPECT_EQ(before[r].private_bytes, after[r].private_bytes) << "rank " << r;
    total += after[r].total();
  }
  EXPECT_EQ(pool_bytes, total);
}

TEST(GpuOpMemory, CreationAllocatesWhatOpMemorySaid) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  OpConfig c = testing::world_test_config(2, {DispatchDtype::fp8, CombineDtype::bf16});
  expect_creation_allocates_the_figure(c, 2);
  c.low_latency = true;
  expect_creation_allocates_the_figure(c, 2);
  expect_creation_allocates_the_figure(c, 1);
  c.low_latency = false;
  c.copy_engine = true;
  c.combine_dtype = CombineDtype::fp8;
  expect_creation_allocates_the_figure(c, 2);
}

}  // namespace
}  // namespace moe_ep
