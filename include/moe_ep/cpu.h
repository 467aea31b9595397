// The CPU backend (docs/design.md#backends-and-transports): W ranks as threads of one process
// exchanging through shared memory. It is the readable reference of the semantics and the default
// without a GPU.
#pragma once

#include <memory>

#include "moe_ep/op.h"

namespace moe_ep {

class CpuWorld {
 public:
  // world_size >= 1. Each rank's thread takes communicator(rank) and creates its op from it.
  // timeout_s bounds every wait of a collective call; 0 takes MOE_EP_TIMEOUT_S (default 100).
  static std::shared_ptr<CpuWorld> create(int world_size, double timeout_s = 0);
  virtual ~CpuWorld() = default;
  virtual int size() const = 0;
  virtual std::shared_ptr<Communicator> communicator(int rank) = 0;
};

}  // namespace moe_ep
