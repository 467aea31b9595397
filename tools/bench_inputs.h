// Replayable inputs of `moe-ep bench` (every value derives from (seed, rank, index), so any rank
// can regenerate any other rank's data): gaussian x of standard deviation x_std, uniform
// routing with distinct experts per token, positive weights normalised over the token's slots,
// and a fraction of masked slots. Also the two measures that depend only on the inputs: the
// number of rows that cross ranks (for the byte counts) and the error of `out` against
// unquantized fp64 math.
#pragma once

#include <cstdint>
#include <vector>

namespace moe_ep::cli {

struct InputShape {
  int ranks = 1;                 // W
  int tokens = 0;                // T per rank
  int hidden = 0;                // H
  int experts = 1;               // E
  int topk = 1;                  // K
  double masked_fraction = 0.0;  // probability that a slot is -1
  double x_std = 0.02;           // standard deviation of x (docs/bench.md)
  uint64_t seed = 0;
};

struct RankInputs {
  std::vector<uint16_t> x;          // [T, H] bf16 bits
  std::vector<int32_t> topk_idx;    // [T, K] expert ids, distinct per token, -1 = masked
  std::vector<float> topk_weights;  // [T, K] > 0, summing to 1 over the token's K slots
};

RankInputs make_inputs(const InputShape& shape, int rank);

// Rows that dispatch moves from each rank to each rank, self included: entry [s * W + r] counts
// the tokens of rank s with an unmasked slot whose expert rank r owns (each token once per r).
// Combine sends the same rows back, r -> s.
std::vector<int64_t> count_route_rows(const InputShape& shape,
                                      const std::vector<RankInputs>& inputs);  // [W, W]

// Rows that dispatch moves between different ranks, summed over all source ranks: token t of
// rank s counts once for every rank r != s that owns an expert of an unmasked slot of t.
int64_t count_remote_rows(const InputShape& shape, const std::vector<RankInputs>& inputs);

// Rows that cross node boundaries with nodes of `ranks_per_node` ranks (ranks [n*L, (n+1)*L) form
// node n; 0 or >= W: one node, no such rows), summed over all source ranks: token t of rank s
// counts once for every node other than s's that owns an expert of an unmasked slot of t. It is
// the dispatch rows that go over the network (each to one forwarder of that node) and, equally,
// the partial rows combine sends back (one per token and other node holding it). With L = 1 every
// other rank is another node, so it equals count_remote_rows.
int64_t count_net_rows(const InputShape& shape, const std::vector<RankInputs>& inputs,
                       int ranks_per_node);

// Squared L2 norms for the relative error of `out` against fp64 math on the bf16 input:
// want[t] = sum over unmasked slots k of w_k * x[t]; err2 += |out - want|^2, ref2 += |want|^2.
struct ErrorSums {
  double err2 = 0.0;
  double ref2 = 0.0;
};
ErrorSums unquantized_error(const InputShape& shape, const RankInputs& in,
                            const uint16_t* out);  // out: [T, H] bf16 bits

}  // namespace moe_ep::cli
