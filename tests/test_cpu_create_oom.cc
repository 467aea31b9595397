// A creation that runs out of host memory (CPU backend): every rank's create_op fails at once
// with InvalidArgument "create_op aborted: rank R could not allocate its receive buffers for
// <config>", none waits for another, and the next creation, a smaller one, works. The memory
// runs out for real: a child process caps its own address space (RLIMIT_AS) a little above what
// it uses, so the first large buffer cannot be had whatever the machine's overcommit policy,
// and nothing of that size is ever touched. Skipped under AddressSanitizer, which reserves
// terabytes of address space up front.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "moe_ep/cpu.h"
#include "moe_ep/errors.h"
#include "moe_ep/op.h"

namespace moe_ep {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// This process's address space in bytes (the first field of /proc/self/statm, in pages).
long long address_space_bytes() {
  std::ifstream statm("/proc/self/statm");
  long long pages = 0;
  statm >> pages;
  return pages * sysconf(_SC_PAGESIZE);
}

OpConfig config_of(int max_tokens) {
  OpConfig c;
  c.num_experts = 8;
  c.hidden = 7168;  // 14,336 bytes a bf16 row
  c.topk = 2;
  c.max_tokens_per_rank = max_tokens;
  return c;
}

// The child's work: returns its exit status (0: every expectation held), printing what failed.
int child() {
  // The cap: what the process uses now plus 1 GiB (room for two rank threads' stacks and the
  // small op below), under one rank's 2.3 GB of receive payload at 80,000 tokens
  // (2 ranks x 80,000 x 14,336 bytes).
  const rlim_t cap = static_cast<rlim_t>(address_space_bytes()) + (rlim_t{1} << 30);
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0) {
    std::perror("getrlimit");
    return 10;
  }
  // Only the soft limit: a hard limit the environment set stays (a lower one only helps).
  if (limit.rlim_max == RLIM_INFINITY || limit.rlim_max > cap) limit.rlim_cur = cap;
  if (setrlimit(RLIMIT_AS, &limit) != 0) {
    std::perror("setrlimit");
    return 10;
  }
  const std::shared_ptr<CpuWorld> world = CpuWorld::create(2, /*timeout_s=*/30);
  std::string errors[2];
  bool second_ok[2] = {false, false};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        create_op(world->communicator(r), config_of(80000));
      } catch (const InvalidArgument& e) {
        errors[r] = e.what();
      } catch (const std::exception& e) {
        errors[r] = std::string("unexpected: ") + e.what();
      }
      try {
        second_ok[r] = create_op(world->communicator(r), config_of(16)) != nullptr;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: the next creation failed: %s\n", r, e.what());
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  int status = 0;
  for (int r = 0; r < 2; ++r) {
    const bool named =
        errors[r].find("create_op aborted: rank ") != std::string::npos &&
        errors[r].find("could not allocate its receive buffers for") != std::string::npos &&
        errors[r].find("max_tokens_per_rank=80000") != std::string::npos;
    if (!named) {
      std::fprintf(stderr, "rank %d: expected the allocation failure named, got: \"%s\"\n", r,
                   errors[r].c_str());
      status = 1;
    }
    if (!second_ok[r]) status = 1;
  }
  return status;
}

TEST(CpuCreateOutOfMemory, EveryRankFailsAtOnceAndTheNextCreationWorks) {
  if (kAddressSanitizer)
    GTEST_SKIP() << "AddressSanitizer reserves the address space RLIMIT_AS caps";
  std::fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << "fork failed";
  if (pid == 0) _exit(child());
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child did not exit normally (signal "
                                 << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's lines above";
}

}  // namespace
}  // namespace moe_ep
