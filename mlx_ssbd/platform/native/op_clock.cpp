// The extension's operations timed by kind (op_clock.h states the contract).
#include "op_clock.h"

#include <atomic>
#include <chrono>

namespace mlx_ssbd {
namespace {

std::atomic<bool> timing{false};
std::array<std::atomic<int64_t>, kOpKinds> nanoseconds{}, calls{};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void set_op_timing(bool on) {
  if (on) {
    for (int k = 0; k < kOpKinds; ++k) nanoseconds[k] = 0, calls[k] = 0;
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

}  // namespace mlx_ssbd
