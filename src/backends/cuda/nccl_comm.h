// The NCCL communicator of the CUDA backend: one rank per GPU over an ncclComm_t, ops' buffers
// in NCCL symmetric memory (ncclMemAlloc + ncclCommWindowRegister; peers' addresses from
// ncclGetPeerPointer, read once by a kernel). Its control area, registered when the
// communicator is made (a collective moment anyway), carries the creation rendezvous.
#pragma once

#include <nccl.h>

#include <cstdint>
#include <memory>

#include "backends/cuda/cuda_comm.h"

namespace moe_ep::cuda_backend {

class NcclCommunicator : public CudaComm {
 public:
  // Collective over `comm` (registers the control area). `owned`: destroy comm with this.
  NcclCommunicator(ncclComm_t comm, int device, uint64_t group_id, bool owned);
  ~NcclCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  uint64_t group_id() const override { return group_id_; }
  int device() const override { return device_; }
  int max_sms() const override { return sms_; }
  // NCCL's load/store team (ncclTeamLsa): the ranks of this rank's machine, in practice.
  int domain_size() const override { return domain_size_; }
  std::unique_ptr<SymmetricMemory> allocate(size_t bytes) override;
  void publish(SymmetricMemory& memory) override;
  const SymmetricMemory& control() const override { return *control_; }
  Transport& transport() override { return *transport_; }
  ncclComm_t comm() const { return comm_; }

 private:
  ncclComm_t comm_;
  int device_;
  int rank_ = 0;
  int size_ = 1;
  int domain_size_ = 1;
  int sms_ = 0;
  uint64_t group_id_;
  bool owned_;
  std::unique_ptr<SymmetricMemory> control_;
  std::unique_ptr<Transport> transport_;
};

}  // namespace moe_ep::cuda_backend
