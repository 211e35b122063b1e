// Scaled dot-product attention (attention.h): the primitive and its loop over query rows.
#include "attention.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "lanes.h"
#include "mlx/backend/cpu/encoder.h"
#include "qmm.h"

namespace mlx_ssbd {

namespace {

enum MaskKind { kNone = 0, kCausal = 1, kAdditive = 2, kBool = 3 };

struct View {  // an array's data and its strides, in elements
  const void* data;
  int64_t stride[4];
};

View view_of(const mx::array& a) {
  View v{a.data<void>(), {0, 0, 0, 0}};
  for (int d = 0; d < 4; ++d) v.stride[d] = a.strides()[d];
  return v;
}

struct AttentionArgs {
  View q, k, v, mask;
  float* out;
  int B, Hq, Hkv, L, S, D, Dv, mask_kind;
  float scale;
};

// A thread's buffers for its rows (kept between rows and calls: no allocation per row).
struct Scratch {
  std::vector<float> scores, scaled, acc;
};

// One query row: out[Dv] = softmax(scores) @ values, scores over the keys [0, keys).
template <class L>
MLX_SSBD_LANES_INLINE void attend_row_lanes(const AttentionArgs& a, int b, int h, int l, Scratch& scratch) {
  const int kv = h / (a.Hq / a.Hkv);
  const int keys = a.mask_kind == kCausal ? a.S - a.L + l + 1 : a.S;
  const float* q = static_cast<const float*>(a.q.data) + b * a.q.stride[0] + h * a.q.stride[1] + l * a.q.stride[2];
  const float* k = static_cast<const float*>(a.k.data) + b * a.k.stride[0] + kv * a.k.stride[1];
  const float* v = static_cast<const float*>(a.v.data) + b * a.v.stride[0] + kv * a.v.stride[1];
  float* out = a.out + (((int64_t)b * a.Hq + h) * a.L + l) * a.Dv;
  if (keys <= 0) {  // a causal row with no key of its own (more queries than keys): as MLX, zeros
    for (int d = 0; d < a.Dv; ++d) out[d] = 0.0f;
    return;
  }
  std::vector<float>& scores = scratch.scores;
  std::vector<float>& scaled = scratch.scaled;
  std::vector<float>& acc = scratch.acc;
  scores.resize(keys + kWidth);
  // The scaled query, as MLX scales it before the product.
  scaled.resize(a.D);
  for (int d = 0; d < a.D; ++d) scaled[d] = a.scale * q[d];
  // Each key's product with the query: its lanes add up d in order, then sum_lanes, then the
  // d past the last whole set of lanes. Four keys at a time: four independent sums in flight.
  const int whole = a.D / kWidth * kWidth;
  const int64_t key_stride = a.k.stride[2];
  int j = 0;
  for (; j + 4 <= keys; j += 4) {
    const float* key = k + j * key_stride;
    L dot[4] = {splat<L>(0.0f), splat<L>(0.0f), splat<L>(0.0f), splat<L>(0.0f)};
    for (int d = 0; d < whole; d += kWidth) {
      const L x = load_lanes<L>(scaled.data() + d);
      for (int i = 0; i < 4; ++i) dot[i] += x * load_lanes<L>(key + i * key_stride + d);
    }
    for (int i = 0; i < 4; ++i) scores[j + i] = sum_lanes(dot[i]);
  }
  for (; j < keys; ++j) {
    const float* key = k + j * key_stride;
    L dot = splat<L>(0.0f);
    for (int d = 0; d < whole; d += kWidth) dot += load_lanes<L>(scaled.data() + d) * load_lanes<L>(key + d);
    scores[j] = sum_lanes(dot);
  }
  float top = -FLT_MAX;
  for (j = 0; j < keys; ++j) {
    const float* key = k + j * key_stride;
    float s = scores[j];
    for (int d = whole; d < a.D; ++d) s += scaled[d] * key[d];
    if (a.mask_kind >= kAdditive) {
      const int64_t at = b * a.mask.stride[0] + h * a.mask.stride[1] + l * a.mask.stride[2] + j * a.mask.stride[3];
      if (a.mask_kind == kAdditive) {
        s += static_cast<const float*>(a.mask.data)[at];
      } else if (!static_cast<const bool*>(a.mask.data)[at]) {
        s = -FLT_MAX;  // as MLX's where(mask, scores, finfo.min)
      }
    }
    scores[j] = s;
    top = s > top ? s : top;
  }
  // exp(s - top): a score 87 below the top gives 0, and so does the padding to whole lanes (-inf);
  // a masked score (-FLT_MAX) gives 0 unless every score is masked (then each gives 1, as MLX's).
  for (j = keys; j < keys + kWidth; ++j) scores[j] = -INFINITY;
  L total = splat<L>(0.0f);
  for (j = 0; j < keys; j += kWidth) {
    const L p = exp_or_zero(load_lanes<L>(scores.data() + j) - top);
    total += p;
    store_lanes(scores.data() + j, p);
  }
  const float inverse = 1.0f / sum_lanes(total);
  // The weighted sum of the values, key after key for each output; 64 outputs at a time held in
  // registers across the keys (a key of weight 0 adds nothing and is skipped).
  const int whole_v = a.Dv / kWidth * kWidth;
  const int64_t value_stride = a.v.stride[2];
  acc.assign(a.Dv, 0.0f);
  int d = 0;
  for (; d + 4 * kWidth <= whole_v; d += 4 * kWidth) {
    L sum[4] = {splat<L>(0.0f), splat<L>(0.0f), splat<L>(0.0f), splat<L>(0.0f)};
    for (j = 0; j < keys; ++j) {
      if (scores[j] == 0.0f) continue;
      const L weight = splat<L>(scores[j]);
      const float* value = v + j * value_stride + d;
      for (int i = 0; i < 4; ++i) sum[i] += weight * load_lanes<L>(value + i * kWidth);
    }
    for (int i = 0; i < 4; ++i) store_lanes(acc.data() + d + i * kWidth, sum[i]);
  }
  for (; d < whole_v; d += kWidth) {
    L sum = splat<L>(0.0f);
    for (j = 0; j < keys; ++j)
      if (scores[j] != 0.0f) sum += splat<L>(scores[j]) * load_lanes<L>(v + j * value_stride + d);
    store_lanes(acc.data() + d, sum);
  }
  for (; d < a.Dv; ++d)
    for (j = 0; j < keys; ++j)
      if (scores[j] != 0.0f) acc[d] += scores[j] * v[j * value_stride + d];
  for (int d = 0; d < a.Dv; ++d) out[d] = acc[d] * inverse;
}
MLX_SSBD_LANE_TARGETS(
    attend_row, (const AttentionArgs& a, int b, int h, int l, Scratch& scratch), (a, b, h, l, scratch))

void attend(const AttentionArgs& a) {
  const int64_t rows = (int64_t)a.B * a.Hq * a.L;
  const double work = (double)rows * a.S * (a.D + a.Dv);
  (void)work;  // without OpenMP
#pragma omp parallel for schedule(static) if (work > 1 << 16)
  for (int64_t r = 0; r < rows; ++r) {
    thread_local Scratch scratch;
    const int l = r % a.L, h = (r / a.L) % a.Hq, b = r / ((int64_t)a.L * a.Hq);
    attend_row(a, b, h, l, scratch);
  }
}

// ``a`` (fp32, 4-D) with its last axis contiguous: itself, or a row-major copy.
mx::array last_axis_contiguous(const mx::array& a, mx::cpu::CommandEncoder& encoder) {
  return a.strides()[3] == 1 || a.shape(3) == 1 ? a : row_major(a, encoder);
}

}  // namespace

mx::array attention(
    const mx::array& q,
    const mx::array& k,
    const mx::array& v,
    float scale,
    const std::string& mask_mode,
    const std::optional<mx::array>& mask,
    mx::StreamOrDevice s) {
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4 || q.dtype() != mx::float32 ||
      k.dtype() != mx::float32 || v.dtype() != mx::float32) {
    throw std::invalid_argument("[mlx_ssbd.attention] q, k and v must be 4-D fp32 arrays");
  }
  if (k.shape(0) != q.shape(0) || v.shape(0) != q.shape(0) || k.shape(1) != v.shape(1) ||
      q.shape(1) % k.shape(1) != 0 || k.shape(3) != q.shape(3) || k.shape(2) != v.shape(2)) {
    throw std::invalid_argument(
        "[mlx_ssbd.attention] shapes do not match: q [B, Hq, L, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv], "
        "Hq a multiple of Hkv");
  }
  auto stream = cpu_stream(s, "attention");
  std::vector<mx::array> inputs{q, k, v};
  int kind = kNone;
  if (mask_mode == "causal") {
    kind = kCausal;
  } else if (mask_mode == "array") {
    if (!mask) throw std::invalid_argument("[mlx_ssbd.attention] mask_mode 'array' needs a mask");
    kind = mask->dtype() == mx::bool_ ? kBool : kAdditive;
    auto m = kind == kBool ? *mask : mx::astype(*mask, mx::float32, stream);
    mx::Shape full{q.shape(0), q.shape(1), q.shape(2), k.shape(2)};
    inputs.push_back(mx::broadcast_to(m, full, stream));
  } else if (!mask_mode.empty()) {
    throw std::invalid_argument("[mlx_ssbd.attention] mask_mode must be '', 'causal' or 'array'");
  }
  mx::Shape shape{q.shape(0), q.shape(1), q.shape(2), v.shape(3)};
  return mx::array(shape, mx::float32, std::make_shared<AttentionCpu>(stream, scale, kind), std::move(inputs));
}

void AttentionCpu::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  const mx::array q = last_axis_contiguous(inputs[0], encoder);
  const mx::array k = last_axis_contiguous(inputs[1], encoder);
  const mx::array v = last_axis_contiguous(inputs[2], encoder);
  auto& out = outputs[0];
  out.set_data(mx::allocator::malloc(out.nbytes()));
  encoder.set_input_array(q);
  encoder.set_input_array(k);
  encoder.set_input_array(v);
  AttentionArgs a{view_of(q), view_of(k), view_of(v), View{nullptr, {0, 0, 0, 0}}, out.data<float>(),
                  q.shape(0), q.shape(1), k.shape(1), q.shape(2), k.shape(2), q.shape(3), v.shape(3),
                  mask_kind_, scale_};
  if (inputs.size() > 3) {
    encoder.set_input_array(inputs[3]);
    a.mask = view_of(inputs[3]);
  }
  encoder.set_output_array(out);
  encoder.dispatch([a]() { attend(a); });
}

void AttentionCpu::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  throw std::runtime_error(
      "[mlx_ssbd.attention] has no GPU implementation: use mx.fast.scaled_dot_product_attention");
}

bool AttentionCpu::is_equivalent(const mx::Primitive& other) const {
  auto& o = static_cast<const AttentionCpu&>(other);
  return scale_ == o.scale_ && mask_kind_ == o.mask_kind_;
}

std::vector<mx::Shape> AttentionCpu::output_shapes(const std::vector<mx::array>& inputs) {
  return {{inputs[0].shape(0), inputs[0].shape(1), inputs[0].shape(2), inputs[2].shape(3)}};
}

}  // namespace mlx_ssbd
