// A user program of the installed moe-ep package: two CPU ranks (threads) each create an op,
// dispatch a few bf16 tokens to the ranks that own their experts, pass the received rows back
// unchanged and combine. Combine sums one copy per destination rank, so every output row must
// equal the input row times the number of distinct ranks its experts live on (0 when every slot
// is masked). The values are small multiples of 0.5, so every sum is exact in bf16.
// Each rank also asks op_memory before creating its op and checks that Op::memory() agrees.
// Prints "consumer OK" and returns 0 only when every value is right.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "moe_ep/moe_ep.h"

namespace {

constexpr int kWorldSize = 2;
constexpr int kNumExperts = 4;  // 2 per rank
constexpr int kHidden = 128;
constexpr int kTopk = 2;
constexpr int kNumTokens = 5;  // per rank

// bf16 is the upper half of an fp32; exact for the values used here.
uint16_t to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16);
}
float from_bf16(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// Input value of (rank, token, column): a multiple of 0.5 in [-3, 3.5] that differs per rank.
float input_value(int rank, int token, int col) {
  return 0.5f * static_cast<float>((rank * 3 + token * 5 + col) % 14 - 6);
}

// Expert of (rank, token, slot); -1 masks the slot. Token 3 masks one slot, token 4 both.
int expert_of(int rank, int token, int slot) {
  if (token == 4 || (token == 3 && slot == 1)) return -1;
  return slot == 0 ? token % kNumExperts : (token + 1 + rank) % kNumExperts;
}

// Returns the number of wrong output values of this rank (throws on library errors).
int run_rank(const std::shared_ptr<moe_ep::CpuWorld>& world, int rank) {
  moe_ep::OpConfig config;
  config.num_experts = kNumExperts;
  config.hidden = kHidden;
  config.topk = kTopk;
  config.max_tokens_per_rank = 8;
  config.dispatch_dtype = moe_ep::DispatchDtype::bf16;
  config.combine_dtype = moe_ep::CombineDtype::bf16;
  // What the op will hold on this rank, asked before it exists; the op made must say the same.
  const moe_ep::OpMemory planned = moe_ep::op_memory(world->communicator(rank), config);
  std::shared_ptr<moe_ep::Op> op = moe_ep::create_op(world->communicator(rank), config);
  const moe_ep::OpMemory held = op->memory();
  if (held.peer_bytes != planned.peer_bytes || held.private_bytes != planned.private_bytes ||
      planned.total() <= 0) {
    std::fprintf(stderr, "rank %d: op_memory %lld bytes, Op::memory %lld\n", rank,
                 static_cast<long long>(planned.total()), static_cast<long long>(held.total()));
    return 1;
  }

  std::vector<uint16_t> x(kNumTokens * kHidden);              // [num_tokens, hidden] bf16
  std::vector<int32_t> topk_idx(kNumTokens * kTopk);          // [num_tokens, topk]
  std::vector<float> topk_weights(kNumTokens * kTopk, 0.5f);  // [num_tokens, topk]
  for (int t = 0; t < kNumTokens; ++t) {
    for (int c = 0; c < kHidden; ++c) x[t * kHidden + c] = to_bf16(input_value(rank, t, c));
    for (int k = 0; k < kTopk; ++k) topk_idx[t * kTopk + k] = expert_of(rank, t, k);
  }

  using moe_ep::ScalarType;
  using moe_ep::TensorView;
  moe_ep::DispatchArgs args;
  args.x = TensorView::matrix(x.data(), ScalarType::kBFloat16, kNumTokens, kHidden);
  args.topk_idx = TensorView::matrix(topk_idx.data(), ScalarType::kInt32, kNumTokens, kTopk);
  args.topk_weights =
      TensorView::matrix(topk_weights.data(), ScalarType::kFloat32, kNumTokens, kTopk);
  const moe_ep::DispatchResult recv = op->dispatch(args);

  // The "expert" returns each received row unchanged (y = recv_x), in a buffer of our own.
  const int64_t num_recv = recv.num_recv;
  std::vector<uint16_t> y(num_recv * kHidden);  // [num_recv, hidden] bf16
  if (num_recv > 0) std::memcpy(y.data(), recv.recv_x.data, y.size() * sizeof(uint16_t));
  std::vector<uint16_t> out(kNumTokens * kHidden, to_bf16(-1.0f));  // [num_tokens, hidden] bf16
  op->combine(recv.handle, TensorView::matrix(y.data(), ScalarType::kBFloat16, num_recv, kHidden),
              TensorView::matrix(out.data(), ScalarType::kBFloat16, kNumTokens, kHidden));

  const int experts_per_rank = kNumExperts / kWorldSize;
  int wrong = 0;
  for (int t = 0; t < kNumTokens; ++t) {
    bool to_rank[kWorldSize] = {};
    for (int k = 0; k < kTopk; ++k) {
      const int e = expert_of(rank, t, k);
      if (e >= 0) to_rank[e / experts_per_rank] = true;
    }
    int num_dest = 0;
    for (bool b : to_rank) num_dest += b ? 1 : 0;
    for (int c = 0; c < kHidden; ++c) {
      const float expected = static_cast<float>(num_dest) * input_value(rank, t, c);
      const float got = from_bf16(out[t * kHidden + c]);
      if (got != expected) {
        if (wrong < 5) {
          std::fprintf(stderr, "rank %d token %d col %d: got %g, expected %g (%d ranks)\n", rank, t,
                       c, got, expected, num_dest);
        }
        ++wrong;
      }
    }
  }
  return wrong;
}

}  // namespace

int main() {
  std::shared_ptr<moe_ep::CpuWorld> world = moe_ep::CpuWorld::create(kWorldSize);
  std::vector<int> wrong(kWorldSize, 0);
  std::vector<std::string> errors(kWorldSize);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorldSize; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        wrong[rank] = run_rank(world, rank);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  int total_wrong = 0;
  bool failed = false;
  for (int rank = 0; rank < kWorldSize; ++rank) {
    if (!errors[rank].empty()) {
      std::fprintf(stderr, "rank %d: error: %s\n", rank, errors[rank].c_str());
      failed = true;
    }
    total_wrong += wrong[rank];
  }
  if (failed || total_wrong != 0) {
    std::printf("consumer FAILED: %d wrong values\n", total_wrong);
    return 1;
  }
  std::printf("consumer OK\n");
  return 0;
}
