// What a decision over logit rows needs, on the CPU, as one MLX primitive: per chosen row, its
// largest logit, the first index holding it (the greedy token) and softmax's normaliser.
//
// MLX's CPU backend on Linux computes exp one element at a time through libm's expf (about 16 ns
// an element here): its softmax over a 16-token verify pass with a 152k-token vocabulary took
// about half a decode step of the default model (benchmarks/engine/verify_cost.py). This reads
// each chosen row twice, 16 lanes at a time: once for the largest logit and its first index, once
// (when asked) for the sum of exp(logit - largest) with lanes.h's exp; rows are split between
// threads where there are many. Each row's result depends on that row alone, and every build
// (AVX-512, AVX2, baseline) gives the same bits.
#pragma once

#include "mlx/ops.h"
#include "mlx/primitives.h"

namespace mlx_ssbd {

namespace mx = mlx::core;

// For each k, row rows[k] of logits ([N, V], fp32): {largest logit (fp32), sum of exp(logit -
// largest) over the row (fp32; 0 unless `sums`), first index of the largest (uint32)}, each of
// shape [K]. `rows` is int32 [K], each in [0, N); a row out of range gives NaN, NaN and 0.
std::vector<mx::array> logit_stats(const mx::array& logits, const mx::array& rows, bool sums, mx::StreamOrDevice s = {});

class LogitStatsCpu : public mx::Primitive {
 public:
  LogitStatsCpu(mx::Stream stream, bool sums) : mx::Primitive(stream), sums_(sums) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;

  const char* name() const override {
    return "MlxSsbdLogitStatsCpu";
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    return sums_ == static_cast<const LogitStatsCpu&>(other).sums_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[1].shape(), inputs[1].shape(), inputs[1].shape()};
  }

 private:
  bool sums_;
};

}  // namespace mlx_ssbd
