// A decoder layer's small operations on the CPU, as MLX primitives: rotary position embeddings and
// RMS normalisation.
//
// MLX's CPU backend has no kernel of its own for either: mx.fast.rope and mx.fast.rms_norm run as
// a graph of 15-20 and 6 small operations, each a task handed to MLX's stream thread (about 130 and
// 50 microseconds a call here, 6 ms of a decode step of a 28-layer model). Each of these is one
// task. Both compute in fp32 exactly the formula of MLX's own graph, so the result is within a few
// ulp of it (sin, cos, the order of a sum); each row's result depends on that row alone.
#pragma once

#include "mlx/ops.h"
#include "mlx/primitives.h"

namespace mlx_ssbd {

namespace mx = mlx::core;

// mx.fast.rope for fp32 x ([B, ..., T, D], at least 3 dimensions), forward, given the inverse
// frequencies ([dims / 2] fp32: exp(-i log(base) / (dims / 2)), or 1 / freqs) and an int32
// offset (a scalar, or one per x.shape(0)): position p = (t + offset) * scale, angle p * inv[i],
// the first `dims` features rotated (pairs (2i, 2i + 1) when `traditional`, else (i, i + dims/2)).
// The angles' cos and sin are computed once for all the calls at the same positions (a forward
// pass's every layer, queries and keys), not once a call.
mx::array rope(
    const mx::array& x,
    int dims,
    bool traditional,
    const mx::array& inv_freqs,
    float scale,
    const mx::array& offset,
    mx::StreamOrDevice s = {});

// mx.fast.rms_norm for fp32 x: x * rsqrt(mean(x * x) + eps) * weight over the last axis.
mx::array rms_norm(const mx::array& x, const mx::array& weight, float eps, mx::StreamOrDevice s = {});

class RopeCpu : public mx::Primitive {
 public:
  RopeCpu(mx::Stream stream, int dims, bool traditional, float scale)
      : mx::Primitive(stream), dims_(dims), traditional_(traditional), scale_(scale) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;

  const char* name() const override {
    return "MlxSsbdRopeCpu";
  }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }

 private:
  int dims_;
  bool traditional_;
  float scale_;
};

class RmsNormCpu : public mx::Primitive {
 public:
  RmsNormCpu(mx::Stream stream, float eps) : mx::Primitive(stream), eps_(eps) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;

  const char* name() const override {
    return "MlxSsbdRmsNormCpu";
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    return eps_ == static_cast<const RmsNormCpu&>(other).eps_;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }

 private:
  float eps_;
};

}  // namespace mlx_ssbd
