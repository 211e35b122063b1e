// The extension's operations timed by kind, when asked (off by default).
//
//   set_op_timing(on)     start (clearing the sums) or stop timing
//   op_times()            seconds and calls per kind since timing started
//   OpTimer timer(kind)   in an operation's work on MLX's stream thread: its time, while it lives,
//                         added to `kind` if timing is on (off: one relaxed load of a flag)
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
