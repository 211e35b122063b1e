// The extension's operations timed by kind (op_clock.h states the contract).
#include "op_clock.h"

#include <atomic>
#include <chrono>
#include <ctime>

namespace mlx_ssbd {
namespace {

std::atomic<bool> timing{false};
std::array<std::atomic<int64_t>, kOpKinds> nanoseconds{}, calls{};
std::atomic<int64_t> loop_wall_ns{0}, loop_cpu_ns{0};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// This thread's CPU time (0 where the platform has no per-thread clock).
int64_t thread_cpu_ns() {
#if defined(CLOCK_THREAD_CPUTIME_ID)
  timespec t;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) == 0) return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
#endif
  return 0;
}

}  // namespace

void set_op_timing(bool on) {
  if (on) {
    for (int k = 0; k < kOpKinds; ++k) nanoseconds[k] = 0, calls[k] = 0;
    loop_wall_ns = 0, loop_cpu_ns = 0;
  }
  timing.store(on, std::memory_order_relaxed);
}

OpTimes op_times() {
  OpTimes out;
  for (int k = 0; k < kOpKinds; ++k) out.seconds[k] = nanoseconds[k].load() * 1e-9, out.calls[k] = calls[k].load();
  return out;
}

OpTimer::OpTimer(OpKind kind)
    : kind_(static_cast<int>(kind)), start_ns_(timing.load(std::memory_order_relaxed) ? now_ns() : -1) {}

OpTimer::~OpTimer() {
  if (start_ns_ < 0) return;
  nanoseconds[kind_].fetch_add(now_ns() - start_ns_, std::memory_order_relaxed);
  calls[kind_].fetch_add(1, std::memory_order_relaxed);
}

LoopTimes loop_times() { return {loop_wall_ns.load() * 1e-9, loop_cpu_ns.load() * 1e-9}; }

LoopTimer::LoopTimer()
    : wall_ns_(timing.load(std::memory_order_relaxed) ? now_ns() : -1), cpu_ns_(wall_ns_ < 0 ? 0 : thread_cpu_ns()) {}

LoopTimer::~LoopTimer() {
  if (wall_ns_ < 0) return;
  loop_cpu_ns.fetch_add(thread_cpu_ns() - cpu_ns_, std::memory_order_relaxed);
  loop_wall_ns.fetch_add(now_ns() - wall_ns_, std::memory_order_relaxed);
}

}  // namespace mlx_ssbd
