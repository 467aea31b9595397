// Combine on the CPU backend (docs/design.md#combine). Step 1 checks the handle (this op, latest
// dispatch), the shapes of y and out and that out is not the op's own memory; verdicts and call
// identities are exchanged at "combine/publish". The sender encodes each
// row of y in the combine wire format into the source rank's combine buffer at (this rank, source
// token); after "combine/exchange" the receiver decodes, for each of its tokens, the rows of the
// ranks it was sent to in ascending rank order and sums them in fp32 from 0.0f, then rounds to
// bf16. A token sent nowhere (every slot masked) is never touched and comes out as zeros.
#include <vector>

#include "backends/cpu/cpu_op.h"
#include "core/arg_checks.h"
#include "core/check.h"
#include "formats/codecs.h"

namespace moe_ep::cpu_backend {

// Throws InvalidArgument (without the "combine: " prefix, which the verdict adds).
void CpuOp::check_combine_args(const Handle& handle, const TensorView& y,
                               const TensorView& out) const {
  moe_ep::check_combine_args(config_, latest_, handle, y, out, {DeviceType::kCpu, 0});
  check_not_aliased("out", out, owned_memory());
}

void CpuOp::combine(const Handle& handle, const TensorView& y, const TensorView& out,
                    void* /*stream*/) {
  CallScope scope(*this, CallKind::kCombine);
  check_usable();
  RankPost& post = my_post();
  post.num_tokens = 0;
  post.send_counts.assign(world_size_, 0);
  StepVerdict verdict = next_step(CallKind::kCombine);
  try {
    check_nothing_pending();
    check_combine_args(handle, y, out);
  } catch (const InvalidArgument& e) {
    verdict.error = e.what();
  } catch (const InvalidUsage& e) {
    verdict.error = e.what();
    verdict.usage_error = true;
  }
  publish_and_settle(verdict);
  guarded([&] {
    send_combine_rows(y);
    sync("combine/exchange");  // every partial result has landed
    receive_combine(plan_, latest_.num_tokens, out);
  });
}

// Sender role: received row i came from (src rank, src token); its partial result goes back to
// that rank's combine buffer at row (this rank, src token), encoded as the wire carries it.
void CpuOp::send_combine_rows(const TensorView& y) {
  const int64_t h = config_.hidden;
  const int64_t max_tokens = config_.max_tokens_per_rank;
  const int64_t payload = payload_bytes(config_.combine_dtype, h);  // bytes per row
  const int64_t scales = scale_bytes(config_.combine_dtype, h);     // bytes per row
  const uint16_t* y_rows = y.ptr<uint16_t>();                       // [num_recv, hidden] bf16
  formats::visit_format(config_.combine_dtype, [&](auto format) {
    using F = decltype(format);
    for (int64_t i = 0; i < latest_.num_recv; ++i) {
      RankBuffers& dst = shared_->buffers[route_src_rank_[i]];
      const int64_t row = rank_ * max_tokens + route_src_token_[i];
      formats::encode_row<F>(
          y_rows + i * h, h, dst.combine_payload.data() + row * payload,
          reinterpret_cast<typename F::Scale*>(dst.combine_scales.data() + row * scales));
    }
  });
}

// Receiver role, in both modes: out[t] = bf16(sum over the destination ranks r of t in `plan`,
// ascending, of decode(row(r, t))) with the sum in fp32 starting from 0.0f.
void CpuOp::receive_combine(const SendPlan& plan, int64_t num_tokens, const TensorView& out) {
  const int64_t h = config_.hidden;
  const int64_t max_tokens = config_.max_tokens_per_rank;
  const int64_t payload = payload_bytes(config_.combine_dtype, h);  // bytes per row
  const int64_t scales = scale_bytes(config_.combine_dtype, h);     // bytes per row
  const RankBuffers& mine = shared_->buffers[rank_];
  std::vector<float> sums(num_tokens * h, 0.0f);  // [num_tokens, hidden]
  std::vector<float> decoded(h);                  // [hidden]
  formats::visit_format(config_.combine_dtype, [&](auto format) {
    using F = decltype(format);
    for (int r = 0; r < world_size_; ++r) {
      for (const int32_t t : plan.tokens_per_dest[r]) {
        const int64_t row = r * max_tokens + t;
        formats::decode_row<F>(
            mine.combine_payload.data() + row * payload,
            reinterpret_cast<const typename F::Scale*>(mine.combine_scales.data() + row * scales),
            h, decoded.data());
        float* sum = sums.data() + t * h;
        for (int64_t j = 0; j < h; ++j) sum[j] += decoded[j];
      }
    }
  });
  uint16_t* out_rows = out.ptr<uint16_t>();  // [num_tokens, hidden] bf16
  for (int64_t i = 0; i < num_tokens * h; ++i) out_rows[i] = formats::float_to_bf16(sums[i]);
}

}  // namespace moe_ep::cpu_backend
