// v65 probe (not part of the library or its tests; run5.sh copies it into tests/): decode
// combine times in the one-GPU world at W = 2 (two ranks on one GPU: NOT a two-GPU figure), T =
// 32 tokens a rank, Tmax 32 and 256, DeepSeek-V3's hidden 7168, 256 experts, top-8, fp8 dispatch
// and bf16 combine, the world's budget (16 SMs a rank). Per rank: 10 warm-up and 40 timed rounds
// (an eager dispatch, then the combine between two events on the rank's stream, y zeros); prints
// the median of each rank's combines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "moe_ep/cuda.h"
#include "testing/gpu_low_latency.h"

namespace moe_ep {
namespace {

TEST(TmaxProbe, DecodeCombineTimesAtTwoRanksOnOneGpu) {
  if (!testing::have_gpu()) GTEST_SKIP() << "no CUDA device visible";
  const int w = 2;
  const int64_t tokens = 32;
  for (int tmax : {32, 256}) {
    OpConfig c = testing::world_test_config(w, {DispatchDtype::fp8, CombineDtype::bf16});
    c.hidden = 7168;
    c.num_experts = 256;
    c.topk = 8;
    c.max_tokens_per_rank = tmax;
    c.low_latency = true;
    testing::InputSpec spec;
    spec.world_size = w;
    spec.config = c;
    spec.mask_prob = 0.0;
    const std::vector<testing::RankInput> inputs =
        testing::make_inputs(spec, testing::test_seed() + 90, {tokens, tokens});
    std::vector<double> median(w, 0);
    auto comms = make_single_gpu_world(w);
    testing::run_world(comms, [&](int rank, const std::shared_ptr<Communicator>& comm) {
      auto op = create_op(comm, c);
      testing::TestStream stream;
      testing::DeviceInput in(inputs[rank], 0);
      DispatchArgs args = in.view;
      args.stream = stream.s;
      const int64_t slab_rows = static_cast<int64_t>(w) * tmax;
      const int64_t y_bytes = c.num_experts / w * slab_rows * c.hidden * 2;
      testing::DeviceBuffer y = testing::DeviceBuffer::of_bytes(y_bytes);
      MOE_EP_CUDA_CHECK(cudaMemset(y.ptr.get(), 0, y_bytes));
      testing::DeviceBuffer out =
          testing::DeviceBuffer::copy_of(std::vector<uint16_t>(tokens * c.hidden, 0));
      const TensorView y_view =
          TensorView::tensor3(y.ptr.get(), ScalarType::kBFloat16, c.num_experts / w, slab_rows,
                              c.hidden, DeviceType::kCuda, 0);
      const TensorView out_view = TensorView::matrix(out.ptr.get(), ScalarType::kBFloat16, tokens,
                                                     c.hidden, DeviceType::kCuda, 0);
      cudaEvent_t e0, e1;
      MOE_EP_CUDA_CHECK(cudaEventCreate(&e0));
      MOE_EP_CUDA_CHECK(cudaEventCreate(&e1));
      std::vector<double> times;
      for (int it = 0; it < 50; ++it) {
        const LowLatencyDispatchResult d = op->low_latency_dispatch(args);
        MOE_EP_CUDA_CHECK(cudaEventRecord(e0, stream.s));
        op->low_latency_combine(y_view, d.handle, out_view, stream.s);
        MOE_EP_CUDA_CHECK(cudaEventRecord(e1, stream.s));
        MOE_EP_CUDA_CHECK(cudaStreamSynchronize(stream.s));
        float ms = 0;
        MOE_EP_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (it >= 10) times.push_back(ms * 1e3);
      }
      std::sort(times.begin(), times.end());
      median[rank] = times[times.size() / 2];
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
    });
    std::printf("TMAXPROBE W %d T %lld Tmax %d combine_us rank0 %.2f rank1 %.2f\n", w,
                static_cast<long long>(tokens), tmax, median[0], median[1]);
  }
}

}  // namespace
}  // namespace moe_ep
