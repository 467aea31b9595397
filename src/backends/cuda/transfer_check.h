// What the two ends of a transport's transfers must agree on (transport.h), without CUDA, so that
// the checks are tested on any machine: the parts one rank declares, and the pairing of every
// rank's sends with its peers' receives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "moe_ep/errors.h"

namespace moe_ep::cuda_backend {

// One rank's side of one transfer: a device buffer of this rank and the peer at the other end.
struct TransferPart {
  int peer = 0;
  void* data = nullptr;
  size_t bytes = 0;
};

// Throws Internal when `parts` (the sends or the receives of one rank, `what`) names a peer
// outside [0, world_size) or twice, or has a non-empty part without a buffer.
inline void check_transfer_parts(const std::vector<TransferPart>& parts, int world_size,
                                 const char* what) {
  std::vector<bool> named(static_cast<size_t>(world_size > 0 ? world_size : 0), false);
  for (const TransferPart& part : parts) {
    if (part.peer < 0 || part.peer >= world_size) {
      throw Internal(detail::concat("transport ", what, ": peer=", part.peer, " is outside [0, ",
                                    world_size, ")"));
    }
    if (named[static_cast<size_t>(part.peer)]) {
      throw Internal(detail::concat("transport ", what, ": peer ", part.peer,
                                    " named twice (at most one part per peer and exchange)"));
    }
    named[static_cast<size_t>(part.peer)] = true;
    if (part.bytes > 0 && part.data == nullptr) {
      throw Internal(detail::concat("transport ", what, ": the part for peer ", part.peer, " has ",
                                    part.bytes, " bytes and no buffer"));
    }
  }
}

// The two ends of the transfer from src to dst, as each side declared them (-1: none).
struct TransferEnds {
  int64_t send_bytes = -1;  // what src sends to dst
  int64_t recv_bytes = -1;  // what dst receives from src
};

// Empty when every pair agrees (both ends absent, or both present with the same bytes);
// otherwise a message naming the first pair, in (src, dst) order, that does not. `pairs` is
// [src * world_size + dst].
inline std::string transfer_mismatch(const std::vector<TransferEnds>& pairs, int world_size) {
  const auto side = [](int64_t bytes) {
    return bytes < 0 ? std::string("nothing") : detail::concat(bytes, " bytes");
  };
  for (int src = 0; src < world_size; ++src) {
    for (int dst = 0; dst < world_size; ++dst) {
      const TransferEnds& e = pairs[static_cast<size_t>(src) * world_size + dst];
      if (e.send_bytes == e.recv_bytes) continue;
      return detail::concat("rank ", src, " sends ", side(e.send_bytes), " to rank ", dst,
                            ", which receives ", side(e.recv_bytes), " from it");
    }
  }
  return {};
}

}  // namespace moe_ep::cuda_backend
