// What the two ends of a transport's transfers must agree on (src/backends/cuda/transfer_check.h;
// no GPU needed): a rank's parts name each peer at most once, inside the world, with a buffer when
// they have bytes; every rank's send to a peer meets that peer's receive with the same count, and
// the first pair that does not is named with both sides.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/cuda/transfer_check.h"

namespace moe_ep {
namespace {

using cuda_backend::check_transfer_parts;
using cuda_backend::transfer_mismatch;
using cuda_backend::TransferEnds;
using cuda_backend::TransferPart;

std::string internal_error_of(const std::vector<TransferPart>& parts, int world_size) {
  try {
    check_transfer_parts(parts, world_size, "sends");
  } catch (const Internal& e) {
    return e.what();
  }
  return "";
}

TEST(TransferCheck, PartsNameEachPeerOnceInsideTheWorldWithABuffer) {
  char buffer[16];
  EXPECT_EQ(internal_error_of({}, 4), "");
  EXPECT_EQ(internal_error_of({{0, buffer, 16}, {3, buffer, 8}, {2, nullptr, 0}}, 4), "")
      << "an empty part needs no buffer";
  EXPECT_NE(internal_error_of({{4, buffer, 16}}, 4).find("peer=4 is outside [0, 4)"),
            std::string::npos);
  EXPECT_NE(internal_error_of({{-1, buffer, 16}}, 4).find("peer=-1 is outside [0, 4)"),
            std::string::npos);
  EXPECT_NE(internal_error_of({{1, buffer, 16}, {1, buffer, 8}}, 4).find("peer 1 named twice"),
            std::string::npos);
  EXPECT_NE(internal_error_of({{2, nullptr, 8}}, 4).find("peer 2 has 8 bytes and no buffer"),
            std::string::npos);
}

TEST(TransferCheck, EveryPairsEndsAgreeOrTheFirstThatDoesNotIsNamed) {
  const int w = 3;
  std::vector<TransferEnds> pairs(w * w);  // nothing declared anywhere: agreement
  EXPECT_EQ(transfer_mismatch(pairs, w), "");
  pairs[0 * w + 1] = {100, 100};
  pairs[2 * w + 2] = {0, 0};  // a declared empty transfer to itself
  EXPECT_EQ(transfer_mismatch(pairs, w), "");
  pairs[2 * w + 0] = {64, -1};  // rank 2 sends, rank 0 expects nothing
  pairs[1 * w + 2] = {-1, 32};  // rank 2 expects from rank 1, which sends nothing
  EXPECT_EQ(transfer_mismatch(pairs, w),
            "rank 1 sends nothing to rank 2, which receives 32 bytes from it")
      << "the first pair in (src, dst) order";
  pairs[1 * w + 2] = {32, 32};
  EXPECT_EQ(transfer_mismatch(pairs, w),
            "rank 2 sends 64 bytes to rank 0, which receives nothing from it");
  pairs[2 * w + 0] = {64, 48};
  EXPECT_EQ(transfer_mismatch(pairs, w),
            "rank 2 sends 64 bytes to rank 0, which receives 48 bytes from it");
}

}  // namespace
}  // namespace moe_ep
