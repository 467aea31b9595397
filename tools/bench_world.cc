// The world of threads, the mpirun detection and the node-split check (bench_world.h). The MPI
// world is bench_world_mpi.cc, compiled when CMake finds MPI (MOE_EP_BENCH_HAS_MPI).
#include "bench_world.h"

#include <fmt/format.h>

#include <cstdlib>

#include "commands.h"

namespace moe_ep::cli {

#if MOE_EP_BENCH_HAS_MPI
std::unique_ptr<BenchWorld> make_mpi_world();  // bench_world_mpi.cc
#endif

void BenchWorld::abort(const std::string& message) { throw RunFailure(message); }

bool launched_by_mpi() {
  for (const char* name :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

std::unique_ptr<BenchWorld> make_bench_world() {
  if (!launched_by_mpi()) return std::make_unique<BenchWorld>();
#if MOE_EP_BENCH_HAS_MPI
  return make_mpi_world();
#else
  throw RunFailure(
      "moe-ep was started by mpirun but built without MPI (CMake found no MPI, e.g. Debian's "
      "libopenmpi-dev): each process would run every rank on every GPU. Run it without mpirun "
      "(one process, a thread per GPU) or rebuild with MPI");
#endif
}

std::string node_split_problem(int rank, int size, int local_size, int local_first,
                               bool local_consecutive, int ranks_per_node) {
  const int last = local_first + local_size - 1;
  if (!local_consecutive) {
    return fmt::format(
        "rank {}'s host runs {} ranks that are not consecutive (the lowest is {}): a node's "
        "ranks must be [n*L, (n+1)*L); use mpirun's default --map-by slot",
        rank, local_size, local_first);
  }
  if (ranks_per_node == 0) {
    if (local_size == size) return "";
    return fmt::format(
        "the {} ranks of mpirun span several hosts (this one runs ranks {}-{}) but "
        "--ranks-per-node is not given (one node): pass --ranks-per-node with the ranks per host",
        size, local_first, last);
  }
  const int l = ranks_per_node;
  if (local_size != l || local_first % l != 0) {
    return fmt::format(
        "--ranks-per-node={} but rank {}'s host runs {} rank(s), {}-{}: host n must run ranks "
        "[n*{}, (n+1)*{}) and no others (Open MPI: mpirun --map-by ppr:{}:node)",
        l, rank, local_size, local_first, last, l, l, l);
  }
  return "";
}

}  // namespace moe_ep::cli
