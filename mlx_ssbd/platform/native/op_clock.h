// The extension's operations timed by kind, when asked (off by default).
//
//   set_op_timing(on)     start (clearing the sums) or stop timing
//   op_times()            seconds and calls per kind since timing started
//   OpTimer timer(kind)   in an operation's work on MLX's stream thread: its time, while it lives,
//                         added to `kind` if timing is on (off: one relaxed load of a flag)
//   loop_times()          since timing started, summed over the threads that ran pieces of the
//                         kernel's parallel loops (pool.cpp): the wall time they spent in them and
//                         the CPU time they had meanwhile; the difference is time their core ran
//                         something else (another thread of the process, another process)
//   LoopTimer timer       where a thread runs a loop's pieces: that time, while it lives
//
// What a forward pass spends in each of the extension's operations, beside its wall time, says
// where the rest goes (MLX's own operations and scheduling, the model's Python):
// benchmarks/engine/verify_cost.py reports it.
#pragma once

#include <array>
#include <cstdint>

namespace mlx_ssbd {

enum class OpKind : int { product4, product8, product_other, attention, silu_mul, rope, rms_norm, logit_stats };
constexpr int kOpKinds = 8;
constexpr std::array<const char*, kOpKinds> kOpKindNames = {
    "products, 4-bit", "products, 8-bit", "products, other widths", "attention", "silu_mul", "rope", "rms_norm",
    "logit_stats"};

struct OpTimes {
  std::array<double, kOpKinds> seconds{};
  std::array<int64_t, kOpKinds> calls{};
};

void set_op_timing(bool on);
OpTimes op_times();

struct LoopTimes {
  double wall_seconds = 0, cpu_seconds = 0;
};

LoopTimes loop_times();

class LoopTimer {
 public:
  LoopTimer();
  ~LoopTimer();
  LoopTimer(const LoopTimer&) = delete;
  LoopTimer& operator=(const LoopTimer&) = delete;

 private:
  int64_t wall_ns_, cpu_ns_;  // negative wall: timing was off
};

class OpTimer {
 public:
  explicit OpTimer(OpKind kind);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  int kind_;
  int64_t start_ns_;  // negative: timing was off
};

}  // namespace mlx_ssbd
