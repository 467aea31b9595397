// The node split of `moe-ep bench` under mpirun (tools/bench_world.h, node_split_problem): which
// placements of a host's processes fit --ranks-per-node, and what the refusal says. The CLI tests
// (cli_mpi_*) run the check through mpirun on one host; here every branch, hosts included.
#include "bench_world.h"

#include <gtest/gtest.h>

#include <string>

namespace moe_ep::cli {
namespace {

TEST(NodeSplit, HostsOfExactlyLConsecutiveRanksFit) {
  // 16 ranks, 2 hosts of 8: both hosts fit L = 8.
  EXPECT_EQ(node_split_problem(3, 16, 8, 0, true, 8), "");
  EXPECT_EQ(node_split_problem(12, 16, 8, 8, true, 8), "");
  // One host, every rank: fits one node (L = 0) and L = W.
  EXPECT_EQ(node_split_problem(1, 4, 4, 0, true, 0), "");
  EXPECT_EQ(node_split_problem(1, 4, 4, 0, true, 4), "");
  // One rank per host.
  EXPECT_EQ(node_split_problem(5, 8, 1, 5, true, 1), "");
}

TEST(NodeSplit, OneNodeSpanningHostsIsRefused) {
  const std::string p = node_split_problem(9, 16, 8, 8, true, 0);
  EXPECT_NE(p.find("the 16 ranks of mpirun span several hosts (this one runs ranks 8-15) but "
                   "--ranks-per-node is not given"),
            std::string::npos)
      << p;
}

TEST(NodeSplit, HostWithOtherThanLRanksIsRefused) {
  const std::string more = node_split_problem(0, 4, 4, 0, true, 2);
  EXPECT_NE(more.find("--ranks-per-node=2 but rank 0's host runs 4 rank(s), 0-3"),
            std::string::npos)
      << more;
  EXPECT_NE(more.find("--map-by ppr:2:node"), std::string::npos) << more;
  const std::string fewer = node_split_problem(6, 8, 2, 6, true, 4);
  EXPECT_NE(fewer.find("--ranks-per-node=4 but rank 6's host runs 2 rank(s), 6-7"),
            std::string::npos)
      << fewer;
}

TEST(NodeSplit, HostStartingOffANodeBoundaryIsRefused) {
  // 4 ranks on this host, L = 4, but they are ranks 2-5: they straddle nodes 0 and 1.
  const std::string p = node_split_problem(3, 8, 4, 2, true, 4);
  EXPECT_NE(p.find("host n must run ranks [n*4, (n+1)*4)"), std::string::npos) << p;
}

TEST(NodeSplit, HostWithRanksNotConsecutiveIsRefused) {
  // mpirun --map-by node: host 0 runs ranks 0, 2, 4, 6.
  const std::string p = node_split_problem(2, 8, 4, 0, false, 4);
  EXPECT_NE(p.find("rank 2's host runs 4 ranks that are not consecutive"), std::string::npos) << p;
}

}  // namespace
}  // namespace moe_ep::cli
