// Replayable inputs of `moe-ep bench` (every value derives from (seed, rank, index), so any rank
// can regenerate any other rank's data): gaussian x of standard deviation x_std, routing with
// distinct experts per token (uniform, skewed by a Zipf law, or limited to a few groups of
// experts: Routing), positive weights normalised over the token's slots, and a fraction of
// masked slots. Also the measures that depend only on the inputs: the rows that cross ranks
// (for the byte counts), how evenly they land, and the error of `out` against unquantized fp64
// math.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe_ep::cli {

// How tokens pick their K distinct experts (--routing, docs/bench.md#routing).
//   kUniform: every set of K experts equally likely (the default).
//   kZipf: expert popularity falls as a Zipf law: the expert at place i (0-based) of a popularity
//     order has weight 1 / (i + 1)^zipf_s, and each token draws its K experts one after another,
//     each in proportion to the weights of the experts not drawn yet. The order is a shuffle of
//     the experts made from the seed alone, so every rank has the same hot experts (a router's
//     preference is the model's, not the rank's), wherever they are placed.
//   kGroups: DeepSeek-V3's group-limited routing: the experts form `groups` groups of E / groups
//     consecutive ids; each token picks groups_per_token distinct groups uniformly, then K
//     distinct experts uniformly among theirs. With groups = W each group is one rank's experts,
//     so a token reaches at most groups_per_token ranks (V3: 8 groups, 4 a token).
struct Routing {
  enum class Kind { kUniform, kZipf, kGroups };
  Kind kind = Kind::kUniform;
  double zipf_s = 0.0;       // kZipf: the exponent, > 0
  int groups = 0;            // kGroups: G, dividing E
  int groups_per_token = 0;  // kGroups: M, 1 <= M <= G, K <= M * E / G
};
// "uniform", "zipf:1.2", "groups:8:4": the text --routing takes.
std::string to_string(const Routing& routing);

struct InputShape {
  int ranks = 1;                 // W
  int tokens = 0;                // T per rank
  int hidden = 0;                // H
  int experts = 1;               // E
  int topk = 1;                  // K
  double masked_fraction = 0.0;  // probability that a slot is -1
  double x_std = 0.02;           // standard deviation of x (docs/bench.md)
  Routing routing;
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

// How evenly the rows land: the most and the mean over ranks of the rows each rank receives
// (self included: column sums of count_route_rows), and the most and the mean over experts of the
// (token, expert) pairs each expert receives (unmasked slots). The slowest rank and the busiest
// expert bound a leg and a grouped GEMM; uniform routing keeps both near their means.
struct Balance {
  int64_t recv_rows_max = 0;
  double recv_rows_mean = 0.0;
  int64_t expert_rows_max = 0;
  double expert_rows_mean = 0.0;
};
Balance count_balance(const InputShape& shape, const std::vector<RankInputs>& inputs,
                      const std::vector<int64_t>& route_rows);  // route_rows: [W, W]

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
