// The CPU bench backend: ranks are threads of one process sharing a CpuWorld, buffers are host
// memory, copies are memcpy and every op call is synchronous, so a timer is the steady clock
// read around the call. There is no link to measure against, so no bandwidth floor.
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "bench_backend.h"
#include "moe_ep/cpu.h"
#include "moe_ep/errors.h"

namespace moe_ep::cli {
namespace {

using Clock = std::chrono::steady_clock;

class CpuBenchBackend final : public BenchBackend {
 public:
  Backend kind() const override { return Backend::kCpu; }
  std::string describe(int ranks) const override {
    return "cpu (" + std::to_string(ranks) + (ranks == 1 ? " thread)" : " threads)");
  }

  std::vector<std::shared_ptr<Communicator>> communicators(int ranks) override {
    world_ = CpuWorld::create(ranks);
    timers_.assign(ranks, RankTimers{});
    std::vector<std::shared_ptr<Communicator>> comms;
    for (int r = 0; r < ranks; ++r) comms.push_back(world_->communicator(r));
    return comms;
  }

  void bind_rank(int) override {}
  void* stream(int) override { return nullptr; }

  BenchTensor alloc(int, const TensorView& shape) override {
    // 64-byte alignment covers every element type and the 16-byte row rule; zero rows still get
    // a real allocation so that the pointer is never null.
    constexpr size_t kAlign = 64;
    const size_t bytes = static_cast<size_t>(shape.nbytes());
    const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    void* data = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
    if (data == nullptr) throw Internal("bench: out of host memory for " + shape.describe());
    std::memset(data, 0, rounded == 0 ? kAlign : rounded);
    BenchTensor t;
    t.storage = std::shared_ptr<void>(data, [](void* p) { std::free(p); });
    t.view = shape;
    t.view.data = data;
    t.view.device = DeviceType::kCpu;
    t.view.device_index = 0;
    return t;
  }

  void upload(int, const void* host, const BenchTensor& dst) override {
    if (dst.view.nbytes() > 0) std::memcpy(dst.view.data, host, dst.view.nbytes());
  }
  void download(int, const TensorView& src, void* host) override {
    if (src.nbytes() > 0) std::memcpy(host, src.data, src.nbytes());
  }
  void synchronize(int) override {}

  void timer_start(int rank, Leg leg) override { timers_[rank].start[index(leg)] = Clock::now(); }
  void timer_stop(int rank, Leg leg) override { timers_[rank].stop[index(leg)] = Clock::now(); }
  double elapsed_us(int rank, Leg leg) override {
    const RankTimers& t = timers_[rank];
    return std::chrono::duration<double, std::micro>(t.stop[index(leg)] - t.start[index(leg)])
        .count();
  }

  std::optional<double> link_floor_gbps() const override { return std::nullopt; }

 private:
  // Each rank's thread touches only its own entry, so no lock is needed.
  struct RankTimers {
    Clock::time_point start[kNumLegs];
    Clock::time_point stop[kNumLegs];
  };
  static int index(Leg leg) { return static_cast<int>(leg); }

  std::shared_ptr<CpuWorld> world_;
  std::vector<RankTimers> timers_;  // [ranks]
};

}  // namespace

std::unique_ptr<BenchBackend> make_cpu_bench_backend() {
  return std::make_unique<CpuBenchBackend>();
}

}  // namespace moe_ep::cli
