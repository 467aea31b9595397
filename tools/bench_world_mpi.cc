// The MPI world of `moe-ep bench` (bench_world.h): one rank per process, the processes of a host
// found with MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). Compiled when CMake finds MPI.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_world.h"
#include "commands.h"

namespace moe_ep::cli {
namespace {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw RunFailure(std::string("MPI: ") + what + " failed: " + std::string(text, length));
}

class MpiWorld final : public BenchWorld {
 public:
  MpiWorld() {
    int initialized = 0;
    check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
    if (!initialized) check_mpi(MPI_Init(nullptr, nullptr), "MPI_Init");
    // Errors come back as codes (check_mpi) instead of ending the job inside MPI.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    MPI_Comm host = MPI_COMM_NULL;
    check_mpi(
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &host),
        "MPI_Comm_split_type");
    check_mpi(MPI_Comm_size(host, &local_size_), "MPI_Comm_size (host)");
    int last = 0;
    check_mpi(MPI_Allreduce(&rank_, &local_first_, 1, MPI_INT, MPI_MIN, host),
              "MPI_Allreduce (host)");
    check_mpi(MPI_Allreduce(&rank_, &last, 1, MPI_INT, MPI_MAX, host), "MPI_Allreduce (host)");
    local_consecutive_ = last - local_first_ + 1 == local_size_;
    MPI_Comm_free(&host);
  }
  ~MpiWorld() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }

  bool distributed() const override { return true; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  int local_first() const override { return local_first_; }
  bool local_consecutive() const override { return local_consecutive_; }

  void barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  std::string broadcast(const std::string& bytes) override {
    int length = static_cast<int>(bytes.size());
    check_mpi(MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
    std::string out = rank_ == 0 ? bytes : std::string(static_cast<size_t>(length), '\0');
    check_mpi(MPI_Bcast(out.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
    return out;
  }

  std::vector<double> allgather(const std::vector<double>& mine) override {
    std::vector<double> all(mine.size() * static_cast<size_t>(size_));
    check_mpi(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
                            static_cast<int>(mine.size()), MPI_DOUBLE, MPI_COMM_WORLD),
              "MPI_Allgather");
    return all;
  }

  std::vector<std::string> allgather(const std::string& mine) override {
    const int length = static_cast<int>(mine.size());
    std::vector<int> lengths(static_cast<size_t>(size_));
    check_mpi(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD),
              "MPI_Allgather");
    std::vector<int> offsets(static_cast<size_t>(size_), 0);
    int total = 0;
    for (int p = 0; p < size_; ++p) {
      offsets[p] = total;
      total += lengths[p];
    }
    std::string joined(static_cast<size_t>(total), '\0');
    check_mpi(MPI_Allgatherv(mine.data(), length, MPI_CHAR, joined.data(), lengths.data(),
                             offsets.data(), MPI_CHAR, MPI_COMM_WORLD),
              "MPI_Allgatherv");
    std::vector<std::string> out;
    for (int p = 0; p < size_; ++p) out.push_back(joined.substr(offsets[p], lengths[p]));
    return out;
  }

  bool all(bool mine) override {
    int in = mine ? 1 : 0, out = 0;
    check_mpi(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
    return out == 1;
  }

  [[noreturn]] void abort(const std::string& message) override {
    std::fprintf(stderr, "moe-ep: error: rank %d of %d: %s\n", rank_, size_, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();  // MPI_Abort does not return; if it did, end this process anyway
  }

 private:
  int rank_ = 0;
  int size_ = 1;
  int local_size_ = 1;
  int local_first_ = 0;
  bool local_consecutive_ = true;
};

}  // namespace

std::unique_ptr<BenchWorld> make_mpi_world() { return std::make_unique<MpiWorld>(); }

}  // namespace moe_ep::cli
