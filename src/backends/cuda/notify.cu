// Launchers of the validation and counts-exchange kernels (notify.cuh), inside the op's budget.
#include <algorithm>

#include "backends/cuda/notify.cuh"

namespace moe_ep::cuda_backend {

namespace {

// Shares of the input scan for p: one item a thread (an id, or one of x's elements in validation
// mode), `threads` a share, 1 to max_shares.
int scan_shares(const ValidateParams& p, int threads, int max_shares) {
  const int64_t work = std::max<int64_t>(
      static_cast<int64_t>(p.num_tokens) * p.info.topk,
      p.validate && p.x_bf16 ? static_cast<int64_t>(p.num_tokens) * p.info.hidden : 0);
  return static_cast<int>(std::clamp<int64_t>((work + threads - 1) / threads, 1, max_shares));
}

// notify's tickets (W x parts senders, then 1 receiver, by phase): a block per ticket at most,
// fewer taking several each. Its dynamic shared memory.
int notify_tickets(const NotifyParams& p) {
  const int senders = p.info.world_size * notify_parts(p.num_tokens);
  return p.phase == kNotifyAll ? senders + 1 : p.phase == kNotifySend ? senders : 1;
}
size_t notify_smem(const NotifyParams& p) {
  return sizeof(int) * std::max(p.info.experts_per_rank, p.info.world_size * p.info.world_size);
}

}  // namespace

cudaError_t launch_validate(const ValidateParams& p, int max_blocks, cudaStream_t stream) {
  return launch_following(validate_kernel,
                          dim3(scan_shares(p, Policy::kValidateThreads, max_blocks)),
                          dim3(Policy::kValidateThreads), 0, stream, p);
}

cudaError_t launch_notify(const NotifyParams& p, int max_blocks, cudaStream_t stream) {
  // Several nodes launch the senders and the receiver (one block) apart.
  const int blocks = std::clamp(notify_tickets(p), 1, max_blocks);
  return launch_following(notify_kernel, dim3(blocks), dim3(Policy::kNotifyThreads), notify_smem(p),
                          stream, p);
}

cudaError_t launch_count(CountParams c, int max_blocks, cudaStream_t stream) {
  static_assert(Policy::kNotifyThreads >= Policy::kMaxPeers, "the step block: a thread a peer");
  c.notify.step = c.step.step;
  c.notify.phase = kNotifyAll;
  const int tickets = notify_tickets(c.notify);
  c.scan_tickets = scan_shares(c.scan, Policy::kNotifyThreads,
                               count_scan_blocks(tickets, max_blocks, c.scan.validate));
  const int blocks = std::clamp(c.scan_tickets + tickets, 1, max_blocks);
  return launch_following(c.scan.validate ? count_kernel<true> : count_kernel<false>, dim3(blocks),
                          dim3(Policy::kNotifyThreads), notify_smem(c.notify), stream, c);
}

cudaError_t preload_notify_kernels() {
  // Checked with their largest dynamic shared memory: notify_smem at 64 ranks (or 4096
  // experts a rank), 16 KiB.
  constexpr size_t kSmem = sizeof(int) * Policy::kMaxPeers * Policy::kMaxPeers;
  const cudaError_t status =
      load_budgeted_kernel(validate_kernel, "validate_kernel", Policy::kValidateThreads,
                           Policy::kValidateBlocksPerSm, 0);
  if (status != cudaSuccess) return status;
  const cudaError_t notify = load_budgeted_kernel(
      notify_kernel, "notify_kernel", Policy::kNotifyThreads, Policy::kNotifyBlocksPerSm, kSmem);
  if (notify != cudaSuccess) return notify;
  const cudaError_t count =
      load_budgeted_kernel(count_kernel<false>, "count_kernel<false>", Policy::kNotifyThreads,
                           Policy::kNotifyBlocksPerSm, kSmem);
  return count != cudaSuccess
             ? count
             : load_budgeted_kernel(count_kernel<true>, "count_kernel<true>",
                                    Policy::kNotifyThreads, Policy::kNotifyBlocksPerSm, kSmem);
}

}  // namespace moe_ep::cuda_backend
