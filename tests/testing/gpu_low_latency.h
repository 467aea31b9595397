// One eager decode-mode round on a rank of a GPU world (testing/low_latency.h's LowLatencyRound):
// dispatch on the GPU, the reference's expert on the downloaded slabs, combine, outputs
// downloaded into the round for check_low_latency_round.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "testing/gpu.h"
#include "testing/low_latency.h"

namespace moe_ep::testing {

// Inputs of replay `i` of a graph test, every rank Tmax tokens (the captured shape), seeded from
// test_seed() + salt + i: new routing and weights every time; every 7th replay masks every token
// (zero tokens by masking), the others 20% of slots and every slot of every 5th token.
inline std::vector<RankInput> replay_inputs(const OpConfig& c, int world_size, int i,
                                            uint64_t salt) {
  InputSpec spec;
  spec.world_size = world_size;
  spec.config = c;
  spec.mask_prob = 0.2;
  std::vector<RankInput> inputs = make_inputs(
      spec, test_seed() + salt + i, std::vector<int64_t>(world_size, c.max_tokens_per_rank));
  for (RankInput& in : inputs) {
    for (int64_t t = 0; t < in.num_tokens; ++t) {
      if (i % 7 == 0 || (t + i) % 5 == 0) in.mask_token(t);
    }
  }
  return inputs;
}

// One eager round on rank `rank`: dispatch on the GPU, the reference's expert on the downloaded
// slabs, combine; outputs downloaded into `round`.
inline void gpu_low_latency_round(Op& op, int rank, LowLatencyRound& round, cudaStream_t stream) {
  const OpConfig& c = op.config();
  const int w = op.world_size();
  DeviceInput input(round.inputs[rank], 0);
  DispatchArgs args = input.view;
  args.stream = stream;
  const LowLatencyDispatchResult d = op.low_latency_dispatch(args);
  MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
  round.views[rank] = d;
  round.op_uids[rank] = op.uid();
  round.received[rank] = reference::copy_low_latency_outputs(d, device_to_host);
  DeviceBuffer y = DeviceBuffer::copy_of(low_latency_expert(round.received[rank], c, w, rank));
  const int64_t t = round.inputs[rank].num_tokens;
  DeviceBuffer out = DeviceBuffer::copy_of(std::vector<uint16_t>(t * c.hidden, 0xffff));
  op.low_latency_combine(
      TensorView::tensor3(y.ptr.get(), ScalarType::kBFloat16, c.num_experts / w,
                          static_cast<int64_t>(w) * c.max_tokens_per_rank, c.hidden,
                          DeviceType::kCuda, 0),
      d.handle,
      TensorView::matrix(out.ptr.get(), ScalarType::kBFloat16, t, c.hidden, DeviceType::kCuda, 0),
      stream);
  op.synchronize(stream);
  round.out[rank].assign(t * c.hidden, 0);
  if (t > 0) device_to_host(round.out[rank].data(), out.ptr.get(), t * c.hidden * 2);
}

}  // namespace moe_ep::testing
