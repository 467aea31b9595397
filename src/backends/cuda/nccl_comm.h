// The NCCL communicator behind moe_ep::Communicator for the CUDA backend.
#pragma once

#include <nccl.h>

#include <cstdint>

#include "moe_ep/op.h"

namespace moe_ep::cuda_backend {

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device, uint64_t group_id, bool owned);
  ~NcclCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::kCuda; }
  uint64_t group_id() const override { return group_id_; }
  ncclComm_t comm() const { return comm_; }
  int device() const { return device_; }

 private:
  ncclComm_t comm_;
  int device_;
  int rank_ = 0;
  int size_ = 1;
  uint64_t group_id_;
  bool owned_;
};

}  // namespace moe_ep::cuda_backend
