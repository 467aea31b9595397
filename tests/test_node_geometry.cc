// The geometry of the CUDA backend's path across nodes (src/backends/cuda/node_geometry.h),
// checked on the CPU for every world size up to the CUDA limit and every node size dividing it:
// the slots of the per-remote-node buffers, the forwarders, the pairing of every transport
// exchange (what rank r sends to forwarder f is what f expects from r, and the partials go back
// the same way), and the staged row's layout.
#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "backends/cuda/node_geometry.h"

namespace moe_ep::cuda_backend {
namespace {

TEST(NodeGeometry, SlotsForwardersAndExchangesPairUpForEveryWorldAndNodeSize) {
  for (int world = 1; world <= 64; ++world) {
    for (int size = 1; size <= world; ++size) {
      if (world % size != 0) continue;
      SCOPED_TRACE("W=" + std::to_string(world) + " L=" + std::to_string(size));
      std::set<std::pair<int, int>> sends, recvs;  // (from, to) of one exchange
      for (int rank = 0; rank < world; ++rank) {
        const NodeInfo n = NodeInfo::of(world, size == world ? 0 : size, rank);
        ASSERT_EQ(n.node_size, size);
        ASSERT_EQ(n.num_nodes, world / size);
        ASSERT_EQ(n.node, rank / size);
        ASSERT_EQ(n.several(), size < world);
        ASSERT_LE(n.first_rank(), rank);
        ASSERT_LT(rank, n.first_rank() + size);
        std::set<int> slots;
        for (int node = 0; node < n.num_nodes; ++node) {
          if (node == n.node) continue;
          const int slot = n.slot(node);
          ASSERT_GE(slot, 0);
          ASSERT_LT(slot, n.num_nodes - 1);
          ASSERT_EQ(n.node_of_slot(slot), node);
          slots.insert(slot);
          // The forwarder is on `node`, at rank's index; its rail peer back is rank itself.
          const int f = n.rail_peer(rank, node);
          ASSERT_EQ(f / size, node);
          ASSERT_EQ(f % size, rank % size);
          const NodeInfo at_f = NodeInfo::of(world, size, f);
          ASSERT_EQ(at_f.rail_peer(f, n.node), rank);
          sends.insert({rank, f});                       // rank -> its forwarder on node
          recvs.insert({at_f.rail_peer(f, n.node), f});  // f expects it from that source
        }
        ASSERT_EQ(static_cast<int>(slots.size()), n.num_nodes - 1);
      }
      EXPECT_EQ(sends, recvs);
    }
  }
}

TEST(NodeGeometry, StagedRowFieldsAreAlignedInOrderAndInsideTheStride) {
  // Payload and scale sizes of the wire formats at a few hidden sizes, odd scale bytes included
  // (mxfp4 at hidden 96: 48 payload bytes, 3 scale bytes).
  const std::pair<int64_t, int64_t> rows[] = {{14336, 0}, {7168, 224}, {3584, 224},
                                              {48, 3},    {256, 8},    {512, 4}};
  for (const auto& [payload, scales] : rows) {
    for (int topk : {1, 8, 40, 64}) {
      for (int size : {1, 2, 8, 64}) {
        const StageLayout s = StageLayout::make(payload, scales, topk, size);
        SCOPED_TRACE("payload " + std::to_string(payload) + " scales " + std::to_string(scales) +
                     " K " + std::to_string(topk) + " L " + std::to_string(size));
        EXPECT_EQ(s.payload_bytes, payload);
        EXPECT_EQ(s.scale_bytes, scales);
        EXPECT_GE(s.meta, payload + scales);
        EXPECT_LT(s.meta, payload + scales + 4);
        EXPECT_EQ(s.meta % 4, 0);
        EXPECT_EQ(s.ids, s.meta + 4);
        EXPECT_EQ(s.weights, s.ids + 4 * topk);
        EXPECT_EQ(s.rows, s.weights + 4 * topk);
        EXPECT_GE(s.stride, s.rows + 4 * size);
        EXPECT_LT(s.stride, s.rows + 4 * size + 16);
        EXPECT_EQ(s.stride % 16, 0);
      }
    }
  }
}

}  // namespace
}  // namespace moe_ep::cuda_backend
