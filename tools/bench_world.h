// Where the ranks of `moe-ep bench` run (docs/bench.md#one-process-per-rank-mpirun): all as
// threads of this process (the default), or one rank per process when launched by `mpirun -np N`
// (Open MPI, as nccl-tests does; built when CMake finds MPI, tools/CMakeLists.txt). The runner
// asks the world which ranks are its own and uses its collectives to start iterations together
// and to gather every rank's times and checks; only process 0 prints the report.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace moe_ep::cli {

class BenchWorld {
 public:
  virtual ~BenchWorld() = default;

  // One rank per process (mpirun); false: every rank is a thread of this process.
  virtual bool distributed() const { return false; }
  // This process's rank and the number of processes (0 and 1 without mpirun).
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  // The processes on this host: how many, the lowest rank among them, and whether their ranks
  // are consecutive.
  virtual int local_size() const { return 1; }
  virtual int local_first() const { return 0; }
  virtual bool local_consecutive() const { return true; }
  // This process's index among the processes of its host.
  int local_rank() const { return rank() - local_first(); }
  // Prints the report: process 0.
  bool root() const { return rank() == 0; }

  // Collectives over the processes; every process calls each one, in the same order.
  virtual void barrier() {}
  // Process 0's `bytes` on every process.
  virtual std::string broadcast(const std::string& bytes) { return bytes; }
  // Every process's `mine` (the same length on all), concatenated in rank order.
  virtual std::vector<double> allgather(const std::vector<double>& mine) { return mine; }
  // Every process's `mine`, in rank order.
  virtual std::vector<std::string> allgather(const std::string& mine) { return {mine}; }
  // True on every process when `mine` is true on every process.
  virtual bool all(bool mine) { return mine; }
  // A rank failed where the others cannot be told in step (inside the timed loop): print
  // `message` naming this rank and end every process (MPI_Abort). Without mpirun: throws.
  [[noreturn]] virtual void abort(const std::string& message);
};

// Launched by mpirun (its environment variables), built with MPI: MPI_Init and the MPI world.
// Launched by mpirun, built without MPI: RunFailure saying so (N copies of a thread-per-rank
// bench would each take every GPU). Otherwise the world of threads.
std::unique_ptr<BenchWorld> make_bench_world();

// True when this process was started by an MPI launcher (Open MPI, PMIx, PMI, MVAPICH).
bool launched_by_mpi();

// The node split under mpirun: ranks [n*L, (n+1)*L) must be the processes of one host, host by
// host (the library further checks that they are NVLink peers, when the op is created). Empty
// when this host's processes fit; otherwise why not. L = 0 means one node: every rank on this
// host.
std::string node_split_problem(int rank, int size, int local_size, int local_first,
                               bool local_consecutive, int ranks_per_node);

}  // namespace moe_ep::cli
