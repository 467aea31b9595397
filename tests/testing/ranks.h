// Runs one lambda per rank on W threads of a CpuWorld, the way a test drives a collective op:
// run_ranks reports every rank's exception as a test failure; run_ranks_outcomes returns what
// each rank threw (code and message) so error tests can assert on every rank.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "moe_ep/cpu.h"
#include "moe_ep/errors.h"

namespace moe_ep::testing {

// Bounds every wait in tests that expect no timeout: a bug shows up as a Timeout in seconds
// rather than as a hang of MOE_EP_TIMEOUT_S (100 s).
inline constexpr double kTestTimeoutS = 20.0;

using RankFn = std::function<void(int rank, const std::shared_ptr<Communicator>& comm)>;

struct RankOutcome {
  bool threw = false;
  ErrorCode code = ErrorCode::kInternal;  // meaningful when threw
  std::string message;
  bool is_moe_ep_error = false;
};

// Runs fn(rank, comm) for every rank of a fresh CpuWorld on its own thread and joins them.
inline std::vector<RankOutcome> run_ranks_outcomes(int world_size, const RankFn& fn,
                                                   double timeout_s = kTestTimeoutS) {
  std::shared_ptr<CpuWorld> world = CpuWorld::create(world_size, timeout_s);
  std::vector<RankOutcome> outcomes(world_size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      RankOutcome& outcome = outcomes[rank];
      try {
        fn(rank, world->communicator(rank));
      } catch (const Error& e) {
        outcome = {true, e.code(), e.what(), true};
      } catch (const std::exception& e) {
        outcome = {true, ErrorCode::kInternal, e.what(), false};
      } catch (...) {
        outcome = {true, ErrorCode::kInternal, "unknown exception", false};
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return outcomes;
}

// Like run_ranks_outcomes, but every exception is a test failure naming its rank.
inline void run_ranks(int world_size, const RankFn& fn, double timeout_s = kTestTimeoutS) {
  const std::vector<RankOutcome> outcomes = run_ranks_outcomes(world_size, fn, timeout_s);
  for (int rank = 0; rank < world_size; ++rank) {
    const RankOutcome& o = outcomes[rank];
    if (o.threw) {
      ADD_FAILURE() << "rank " << rank << " threw "
                    << (o.is_moe_ep_error ? to_string(o.code) : "a non-moe_ep exception") << ": "
                    << o.message;
    }
  }
}

// Asserts that `outcome` is an moe_ep error of `code` whose message contains every fragment.
inline void expect_error(const RankOutcome& outcome, ErrorCode code,
                         const std::vector<std::string>& fragments, int rank = -1) {
  SCOPED_TRACE(rank >= 0 ? "rank " + std::to_string(rank) : std::string("call"));
  ASSERT_TRUE(outcome.threw) << "expected " << to_string(code) << ", nothing was thrown";
  ASSERT_TRUE(outcome.is_moe_ep_error) << "expected moe_ep error, got: " << outcome.message;
  EXPECT_EQ(outcome.code, code) << "got " << to_string(outcome.code) << ": " << outcome.message;
  for (const std::string& fragment : fragments) {
    EXPECT_NE(outcome.message.find(fragment), std::string::npos)
        << "message does not contain \"" << fragment << "\": " << outcome.message;
  }
}

// Runs `call` and reports what it threw, for single-rank assertions.
template <typename Fn>
RankOutcome outcome_of(Fn&& call) {
  RankOutcome outcome;
  try {
    call();
  } catch (const Error& e) {
    outcome = {true, e.code(), e.what(), true};
  } catch (const std::exception& e) {
    outcome = {true, ErrorCode::kInternal, e.what(), false};
  }
  return outcome;
}

}  // namespace moe_ep::testing
