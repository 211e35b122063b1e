// Scaled dot-product attention on the CPU, as an MLX primitive.
//
// MLX's CPU backend runs mx.fast.scaled_dot_product_attention as a graph: a scaled copy of the
// queries, the keys and values broadcast to every query head (copied once per head group for the
// products), two BLAS products and a softmax. This reads the keys and values where they are (a KV
// cache's views) and computes each query row in one pass: scores, their softmax (an exp of its
// own, lanes.h) and the weighted sum of the values, all in fp32, the dot products and the sum
// in fused multiply-adds (lanes.h's fma_lanes: one rounding each); on AVX-512 the rows that read one
// key head go four at a time, so that each key and value is loaded once for all four, and the 16
// dot products of four rows and four keys are summed at once. Each row's arithmetic
// is the one-row computation's, in the same order: a query row's result depends on that row, its
// keys and its mask alone, so a row of a verify pass gets the bits a decode step at that position
// gets.
#pragma once

#include <optional>
#include <string>

#include "mlx/ops.h"
#include "mlx/primitives.h"

namespace mlx_ssbd {

namespace mx = mlx::core;

// softmax(scale * q @ k^T + mask) @ v for fp32 q [B, Hq, L, D], k [B, Hkv, S, D] and
// v [B, Hkv, S, Dv] (Hq a multiple of Hkv: query head h reads key head h / (Hq / Hkv)), as
// mx.fast.scaled_dot_product_attention. mask_mode "" (none), "causal" (query l sees the keys up
// to S - L + l) or "array": `mask` broadcastable to [B, Hq, L, S], bool (false: masked) or fp32
// (added to the scores).
mx::array attention(
    const mx::array& q,
    const mx::array& k,
    const mx::array& v,
    float scale,
    const std::string& mask_mode,
    const std::optional<mx::array>& mask,
    mx::StreamOrDevice s = {});

class AttentionCpu : public mx::Primitive {
 public:
  AttentionCpu(mx::Stream stream, float scale, int mask_kind)
      : mx::Primitive(stream), scale_(scale), mask_kind_(mask_kind) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;

  const char* name() const override {
    return "MlxSsbdAttentionCpu";
  }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  float scale_;
  int mask_kind_;  // 0: none, 1: causal, 2: additive fp32 array, 3: bool array
};

}  // namespace mlx_ssbd
