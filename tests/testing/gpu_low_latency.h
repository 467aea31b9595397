// One eager decode-mode round on a rank of a GPU world (testing/low_latency.h's LowLatencyRound):
// dispatch on the GPU, the reference's expert on the downloaded slabs, combine, outputs
// downloaded into the round for check_low_latency_round.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "formats/codecs.h"
#include "testing/gpu.h"
#include "testing/gpu_world.h"
#include "testing/low_latency.h"

namespace moe_ep::testing {

// The decode tests' op on the one-GPU world (testing/gpu_world.h's shape) with slabs of 32 rows
// per source.
inline OpConfig decode_config(int world_size, DtypePair pair) {
  OpConfig c = world_test_config(world_size, pair);
  c.max_tokens_per_rank = 32;
  c.low_latency = true;
  return c;
}

// Their inputs, `tokens` per rank; empty: rank 1 none, the others part of the 32 rows.
inline std::vector<RankInput> decode_inputs(const OpConfig& c, int world_size, uint64_t salt,
                                            std::vector<int64_t> tokens = {}) {
  InputSpec spec;
  spec.world_size = world_size;
  spec.config = c;
  spec.mask_prob = 0.2;
  if (tokens.empty()) {
    tokens.resize(world_size);
    for (int r = 0; r < world_size; ++r) tokens[r] = r == 1 ? 0 : 32 - 3 * r % 32;
  }
  return make_inputs(spec, test_seed() + salt, tokens);
}

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
// With delay_ms, the rank waits that long between its upload and its dispatch (a late rank).
// before_combine, when given, runs between the dispatch and the combine with the combine's y and
// the dispatch's handle (a call the test makes there, such as one that every rank rejects).
using BeforeCombine = std::function<void(const TensorView& y, const LowLatencyHandle& handle)>;
inline void gpu_low_latency_round(Op& op, int rank, LowLatencyRound& round, cudaStream_t stream,
                                  int delay_ms = 0, const BeforeCombine& before_combine = {}) {
  const OpConfig& c = op.config();
  const int w = op.world_size();
  DeviceInput input(round.inputs[rank], 0);
  DispatchArgs args = input.view;
  args.stream = stream;
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  const LowLatencyDispatchResult d = op.low_latency_dispatch(args);
  MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream));
  round.views[rank] = d;
  round.op_uids[rank] = op.uid();
  round.received[rank] = reference::copy_low_latency_outputs(d, device_to_host);
  DeviceBuffer y = DeviceBuffer::copy_of(low_latency_expert(round.received[rank], c, w, rank));
  const int64_t t = round.inputs[rank].num_tokens;
  DeviceBuffer out = DeviceBuffer::copy_of(std::vector<uint16_t>(t * c.hidden, 0xffff));
  const TensorView y_view = TensorView::tensor3(
      y.ptr.get(), ScalarType::kBFloat16, c.num_experts / w,
      static_cast<int64_t>(w) * c.max_tokens_per_rank, c.hidden, DeviceType::kCuda, 0);
  if (before_combine) before_combine(y_view, d.handle);
  op.low_latency_combine(
      y_view, d.handle,
      TensorView::matrix(out.ptr.get(), ScalarType::kBFloat16, t, c.hidden, DeviceType::kCuda, 0),
      stream);
  op.synchronize(stream);
  round.out[rank].assign(t * c.hidden, 0);
  if (t > 0) device_to_host(round.out[rank].data(), out.ptr.get(), t * c.hidden * 2);
}

// The expert of the tests on the device: y[e][row] = bf16(decode(x_row) * (e_global + 1) / 8)
// for rows below the count, NaN (0xffff) past it, as testing::low_latency_expert does on the host.
template <typename F>
__global__ void scaled_expert_kernel(const uint8_t* payload, const uint8_t* scales,
                                     const int32_t* count, int local_experts, int64_t slab_rows,
                                     int hidden, int first_expert, uint16_t* y) {
  const int64_t total = local_experts * slab_rows * hidden;
  const int64_t payload_row = formats::payload_bytes_of<F>(hidden);
  const int64_t scales_row = formats::scales_of<F>(hidden);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / hidden;  // e * slab_rows + r
    const int e = static_cast<int>(row / slab_rows);
    if (row - e * slab_rows >= count[e]) {
      y[i] = 0xffff;
      continue;
    }
    const auto* s = reinterpret_cast<const typename F::Scale*>(scales) + row * scales_row;
    const float v = formats::decode_elem<F>(payload + row * payload_row, s, i % hidden);
    const float scaled = v * static_cast<float>(first_expert + e + 1);
    y[i] = formats::float_to_bf16(scaled * 0.125f);
  }
}

inline void launch_scaled_expert(const OpConfig& c, int world_size, int rank,
                                 const LowLatencyDispatchResult& d, uint16_t* y,
                                 cudaStream_t stream) {
  const int local = c.num_experts / world_size;
  const int64_t slab_rows = static_cast<int64_t>(world_size) * c.max_tokens_per_rank;
  formats::visit_format(c.dispatch_dtype, [&](auto format) {
    using F = decltype(format);
    scaled_expert_kernel<F><<<256, 256, 0, stream>>>(
        static_cast<const uint8_t*>(d.recv_x.data),
        static_cast<const uint8_t*>(d.recv_x_scales.defined() ? d.recv_x_scales.data : nullptr),
        static_cast<const int32_t*>(d.recv_count.data), local, slab_rows, c.hidden, rank * local,
        y);
  });
  MOE_EP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace moe_ep::testing
