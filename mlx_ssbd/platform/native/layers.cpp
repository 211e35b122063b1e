// Rotary position embeddings and RMS normalisation (layers.h): the primitives and their loops.
#include "layers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "mlx/backend/cpu/encoder.h"
#include "lanes.h"
#include "op_clock.h"
#include "qmm.h"

namespace mlx_ssbd {

namespace {

struct RopeArgs {
  const float* x;
  const float* inv;
  const int32_t* offset;
  float* out;
  mx::Shape shape;
  mx::Strides strides;
  int offsets, dims;
  bool traditional;
  float scale;
};

// cos and sin of every (offset, t, i), shared by every head. A forward pass rotates every layer's
// queries and keys at the same positions, so each thread keeps its last table and computes it
// again only when the offsets, the positions, the scale or the frequencies change.
struct RopeTable {
  std::vector<int32_t> offsets;
  std::vector<float> inv;
  int64_t T = -1;
  float scale = 0.0f;
  std::vector<float> cos, sin;
};

const RopeTable& rope_table(const RopeArgs& a, int64_t T, int half) {
  thread_local RopeTable table;
  const bool same = table.T == T && table.scale == a.scale && table.offsets.size() == (size_t)a.offsets &&
      table.inv.size() == (size_t)half && std::equal(table.offsets.begin(), table.offsets.end(), a.offset) &&
      std::memcmp(table.inv.data(), a.inv, (size_t)half * sizeof(float)) == 0;
  if (same) return table;
  table.offsets.assign(a.offset, a.offset + a.offsets);
  table.inv.assign(a.inv, a.inv + half);
  table.T = T, table.scale = a.scale;
  table.cos.resize((size_t)a.offsets * T * half), table.sin.resize(table.cos.size());
  for (int o = 0; o < a.offsets; ++o)
    for (int64_t t = 0; t < T; ++t) {
      // As MLX's graph: (float(t) + float(offset)) * scale, times the inverse frequency.
      const float position = ((float)t + (float)a.offset[o]) * a.scale;
      for (int i = 0; i < half; ++i) {
        const float theta = position * a.inv[i];
        table.cos[((size_t)o * T + t) * half + i] = std::cos(theta);
        table.sin[((size_t)o * T + t) * half + i] = std::sin(theta);
      }
    }
  return table;
}

void rope_rows(const RopeArgs& a) {
  const int n = static_cast<int>(a.shape.size());
  const int64_t D = a.shape[n - 1], T = a.shape[n - 2];
  const int half = a.dims / 2;
  const RopeTable& table = rope_table(a, T, half);
  const int64_t step = a.strides[n - 1];
  for_each_row(a.shape, a.strides, [&](int64_t r, int64_t at, const std::vector<int64_t>& index) {
    const float* x = a.x + at;
    float* out = a.out + r * D;
    const int o = a.offsets == 1 ? 0 : (int)index[0];
    const size_t row = ((size_t)o * T + index[n - 2]) * half;
    const float* c = table.cos.data() + row;
    const float* s = table.sin.data() + row;
    // The same products and sums as MLX's graph, each rounded to fp32 (no contraction).
    for (int i = 0; i < half; ++i) {
      const int64_t first = a.traditional ? 2 * i : i, second = a.traditional ? 2 * i + 1 : i + half;
      const float x1 = x[first * step], x2 = x[second * step];
      out[first] = x1 * c[i] - x2 * s[i];
      out[second] = x1 * s[i] + x2 * c[i];
    }
    for (int64_t k = a.dims; k < D; ++k) out[k] = x[k * step];
  });
}

template <class L>
MLX_SSBD_LANES_INLINE void rms_norm_rows_lanes(
    const float* x, const float* weight, float* out, int64_t rows, int64_t D, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* v = x + r * D;
    L lanes = splat<L>(0.0f);
    int64_t k = 0;
    for (; k + kWidth <= D; k += kWidth) {
      const L a = load_lanes<L>(v + k);
      lanes += a * a;
    }
    float sum = sum_lanes(lanes);
    for (; k < D; ++k) sum += v[k] * v[k];
    // As MLX's graph: x * rsqrt(mean + eps), rounded, then times the weight.
    const float norm = 1.0f / std::sqrt(sum * (1.0f / (float)D) + eps);
    float* o = out + r * D;
    for (k = 0; k < D; ++k) o[k] = (v[k] * norm) * weight[k];
  }
}
MLX_SSBD_LANE_TARGETS(
    rms_norm_rows,
    (const float* x, const float* weight, float* out, int64_t rows, int64_t D, float eps),
    (x, weight, out, rows, D, eps))

}  // namespace

mx::array rope(
    const mx::array& x,
    int dims,
    bool traditional,
    const mx::array& inv_freqs,
    float scale,
    const mx::array& offset,
    mx::StreamOrDevice s) {
  if (x.ndim() < 3 || x.dtype() != mx::float32) {
    throw std::invalid_argument("[mlx_ssbd.rope] x must be fp32 with at least 3 dimensions");
  }
  if (dims <= 0 || dims % 2 != 0 || dims > x.shape(-1)) {
    throw std::invalid_argument("[mlx_ssbd.rope] dims must be even, positive and at most x.shape[-1]");
  }
  if (inv_freqs.ndim() != 1 || inv_freqs.shape(0) != dims / 2) {
    throw std::invalid_argument("[mlx_ssbd.rope] inv_freqs must be 1-D with dims / 2 elements");
  }
  if (offset.ndim() > 1 || (offset.size() != 1 && offset.size() != (size_t)x.shape(0)) ||
      !mx::issubdtype(offset.dtype(), mx::integer)) {
    throw std::invalid_argument("[mlx_ssbd.rope] offset must be an integer scalar or one per x.shape[0]");
  }
  auto stream = cpu_stream(s, "rope");
  return mx::array(
      x.shape(), mx::float32, std::make_shared<RopeCpu>(stream, dims, traditional, scale),
      {x, row_contiguous(mx::astype(inv_freqs, mx::float32, stream), stream),
       row_contiguous(mx::astype(offset, mx::int32, stream), stream)});
}

void RopeCpu::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  auto& x = inputs[0];
  auto& out = outputs[0];
  out.set_data(mx::allocator::malloc(out.nbytes()));
  for (auto& input : inputs) encoder.set_input_array(input);
  encoder.set_output_array(out);
  RopeArgs a{x.data<float>(), inputs[1].data<float>(), inputs[2].data<int32_t>(), out.data<float>(),
             x.shape(), x.strides(), static_cast<int>(inputs[2].size()), dims_, traditional_, scale_};
  encoder.dispatch([a = std::move(a)]() {
    OpTimer timer(OpKind::rope);
    rope_rows(a);
  });
}

void RopeCpu::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  throw std::runtime_error("[mlx_ssbd.rope] has no GPU implementation: use mx.fast.rope");
}

bool RopeCpu::is_equivalent(const mx::Primitive& other) const {
  auto& o = static_cast<const RopeCpu&>(other);
  return dims_ == o.dims_ && traditional_ == o.traditional_ && scale_ == o.scale_;
}

mx::array rms_norm(const mx::array& x, const mx::array& weight, float eps, mx::StreamOrDevice s) {
  if (x.ndim() < 1 || x.dtype() != mx::float32) {
    throw std::invalid_argument("[mlx_ssbd.rms_norm] x must be fp32 with at least 1 dimension");
  }
  if (weight.ndim() != 1 || weight.shape(0) != x.shape(-1)) {
    throw std::invalid_argument("[mlx_ssbd.rms_norm] weight must be 1-D with x.shape[-1] elements");
  }
  auto stream = cpu_stream(s, "rms_norm");
  return mx::array(
      x.shape(), mx::float32, std::make_shared<RmsNormCpu>(stream, eps),
      {x, row_contiguous(mx::astype(weight, mx::float32, stream), stream)});
}

void RmsNormCpu::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  const mx::array x = row_major(inputs[0], encoder);
  auto& out = outputs[0];
  out.set_data(mx::allocator::malloc(out.nbytes()));
  encoder.set_input_array(x);
  encoder.set_input_array(inputs[1]);
  encoder.set_output_array(out);
  const int64_t D = x.shape(-1), rows = D == 0 ? 0 : static_cast<int64_t>(x.size()) / D;
  encoder.dispatch([x = x.data<float>(), w = inputs[1].data<float>(), o = out.data<float>(), rows, D,
                    eps = eps_]() {
    OpTimer timer(OpKind::rms_norm);
    rms_norm_rows(x, w, o, rows, D, eps);
  });
}

void RmsNormCpu::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  throw std::runtime_error("[mlx_ssbd.rms_norm] has no GPU implementation: use mx.fast.rms_norm");
}

}  // namespace mlx_ssbd
