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
          sends.insert({rank, f});  // rank -> its forwarder on node
        }
        ASSERT_EQ(static_cast<int>(slots.size()), n.num_nodes - 1);
        // From the receiving side: rank, as a forwarder, expects one source on every other node,
        // its rail peer there.
        for (int node = 0; node < n.num_nodes; ++node) {
          if (node != n.node) recvs.insert({n.rail_peer(rank, node), rank});
        }
      }
      // Every send is expected by its forwarder and every expected source sends: W * (N - 1) of
      // each, the same pairs.
      EXPECT_EQ(static_cast<int>(sends.size()), world * (world / size - 1));
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

TEST(NodeGeometry, DecodeMessagesAreFixedSizedAlignedAndTheirFieldsDisjoint) {
  // Decode mode across nodes (planned): the message per rail peer and leg. Every field starts on
  // 16 bytes, the fields follow one another without overlap, a row holds its payload and scales
  // then the K ids, weights and slot ranks, and the size depends on Tmax, never on T.
  const int64_t step_bytes = 400;  // sizeof(StepWire): info, tag and a 384-byte reason
  const std::pair<int64_t, int64_t> rows[] = {{14336, 0}, {7168, 224}, {3584, 224}, {48, 3}};
  for (const auto& [payload, scales] : rows) {
    for (int topk : {1, 8, 64}) {
      for (int size : {1, 2, 8}) {
        for (int local : {1, 8, 32}) {
          for (int tmax : {1, 128, 1000}) {
            SCOPED_TRACE("payload " + std::to_string(payload) + " scales " +
                         std::to_string(scales) + " K " + std::to_string(topk) + " L " +
                         std::to_string(size) + " E/W " + std::to_string(local) + " Tmax " +
                         std::to_string(tmax));
            const DecodeMessageLayout d =
                DecodeMessageLayout::dispatch(step_bytes, payload, scales, topk, size, local, tmax);
            EXPECT_EQ(d.step, 0);
            EXPECT_GE(d.num_tokens, step_bytes);
            EXPECT_GE(d.sent, d.num_tokens + 4);  // T, then the sent step (8-byte aligned)
            EXPECT_EQ(d.sent % 8, 0);
            EXPECT_GE(d.counts, d.sent + 8);
            EXPECT_GE(d.rows, d.counts + 4 * size * local);
            EXPECT_GE(d.row_ids, payload + scales);
            EXPECT_EQ(d.row_weights, d.row_ids + 4 * topk);
            EXPECT_EQ(d.row_ranks, d.row_weights + 4 * topk);
            EXPECT_GE(d.row_stride, d.row_ranks + 4 * topk);
            EXPECT_LT(d.row_stride, d.row_ranks + 4 * topk + 16);
            EXPECT_EQ(d.row(tmax - 1) + d.row_stride, d.bytes);
            for (int64_t v : {d.num_tokens, d.counts, d.rows, d.row_ids, d.row_stride, d.bytes}) {
              EXPECT_EQ(v % 16, 0) << v;
            }
            const DecodeMessageLayout c =
                DecodeMessageLayout::combine(step_bytes, payload + scales, tmax);
            EXPECT_GE(c.sent, step_bytes);  // the step word, then the sent step
            EXPECT_EQ(c.sent % 8, 0);
            EXPECT_GE(c.rows, c.sent + 8);
            EXPECT_EQ(c.rows % 16, 0);
            EXPECT_GE(c.row_stride, payload + scales);
            EXPECT_EQ(c.row_stride % 16, 0);
            EXPECT_EQ(c.bytes, c.rows + c.row_stride * tmax);
          }
        }
      }
    }
  }
  // DeepSeek-V3 with fp8 dispatch (7168 payload + 224 scale bytes), top-8, L = 8, 32 local
  // experts, Tmax = 128: about 0.96 MB per message, the figure of multi-node.md's plan.
  const DecodeMessageLayout v3 =
      DecodeMessageLayout::dispatch(step_bytes, 7168, 224, 8, 8, 32, 128);
  EXPECT_EQ(v3.row_stride, 7488);  // 7392 bytes of row, then 3 x 32 bytes of ids, weights, ranks
  // The plan quotes two digits, hence 0.01e6; the exact sum: the header rows, then 128 x 7488.
  EXPECT_NEAR(static_cast<double>(v3.bytes), 0.96e6, 0.01e6);
  EXPECT_EQ(v3.bytes - v3.rows, 128 * 7488);
  EXPECT_LT(v3.rows, 2048);  // step, counts of 8 ranks x 32 experts (1 KiB), padding
}

}  // namespace
}  // namespace moe_ep::cuda_backend
