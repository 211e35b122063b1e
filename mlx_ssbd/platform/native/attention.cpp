// Scaled dot-product attention (attention.h): the primitive and its loop over query rows.
#include "attention.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "lanes.h"
#include "op_clock.h"
#include "mlx/backend/cpu/encoder.h"
#include "pool.h"
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

// Query rows that read one key head, taken together so that each key and value is loaded once
// for all of them; each row's arithmetic is the one-row computation's, in the same order, so a
// row's result does not depend on the rows beside it. Rows per group: 4 on AVX-512; 1 elsewhere
// (AVX2's 16 registers hold no more accumulators: two rows at a time measured no faster).
template <class L>
constexpr int kGroupRows = std::is_same_v<L, Wide> ? 4 : 1;

struct Row {
  int h, l, keys;  // query head, position, keys it sees
};

// Where query row (b, h, l)'s Dv outputs go.
inline float* row_out(const AttentionArgs& a, int b, int h, int l) {
  return a.out + (((int64_t)b * a.Hq + h) * a.L + l) * a.Dv;
}

// sum_lanes of 16 native 16-lane vectors at once, in sum_lanes' order (lane i and i + 8, then
// halves pairwise): the same bits, with 15 vector additions instead of 16 scalar trees
// (__builtin_shufflevector: Clang's, and GCC's from GCC 12; older compilers sum each on its own).
template <class W>  // Wide (a template: only the AVX-512 build instantiates it)
MLX_SSBD_LANES_INLINE void sum_lanes16(const W (&v)[16], float* out) {
#if !defined(__clang__) && defined(__GNUC__) && __GNUC__ < 12
  for (int i = 0; i < 16; ++i) out[i] = sum_lanes(v[i]);
#else
  W eight[8], four[4], two[2];
  for (int k = 0; k < 8; ++k)  // v[2k] and v[2k + 1]: lanes i + 8 added to lanes i
    eight[k] = __builtin_shufflevector(v[2 * k], v[2 * k + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
               __builtin_shufflevector(v[2 * k], v[2 * k + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  for (int k = 0; k < 4; ++k)  // each set of 8: lanes i + 4 added to lanes i
    four[k] = __builtin_shufflevector(eight[2 * k], eight[2 * k + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
              __builtin_shufflevector(eight[2 * k], eight[2 * k + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  for (int k = 0; k < 2; ++k)  // each set of 4: lanes i + 2 added to lanes i
    two[k] = __builtin_shufflevector(four[2 * k], four[2 * k + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
             __builtin_shufflevector(four[2 * k], four[2 * k + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  const W sums =  // each pair: lane 1 added to lane 0; lane i is v[i]'s sum
      __builtin_shufflevector(two[0], two[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
      __builtin_shufflevector(two[0], two[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  std::memcpy(out, &sums, sizeof sums);
#endif
}

// N query rows of batch b and key head kv: out[Dv] = softmax(scores) @ values for each, scores
// over its keys [0, keys).
template <class L, int N>
MLX_SSBD_LANES_INLINE void attend_rows(const AttentionArgs& a, int b, int kv, const Row* rows, Scratch& scratch) {
  int most = 0;
  for (int r = 0; r < N; ++r) most = rows[r].keys > most ? rows[r].keys : most;
  const float* k = static_cast<const float*>(a.k.data) + b * a.k.stride[0] + kv * a.k.stride[1];
  const float* v = static_cast<const float*>(a.v.data) + b * a.v.stride[0] + kv * a.v.stride[1];
  const int64_t span = most + kWidth;  // each row's scores, padded to whole lanes
  scratch.scores.resize(N * span);
  scratch.scaled.resize(N * a.D);
  scratch.acc.resize(N * a.Dv);
  float* scaled[N];
  float* scores[N];
  for (int r = 0; r < N; ++r) {
    // The scaled query, as MLX scales it before the product.
    const float* q = static_cast<const float*>(a.q.data) + b * a.q.stride[0] + rows[r].h * a.q.stride[1] +
                     rows[r].l * a.q.stride[2];
    scaled[r] = scratch.scaled.data() + r * a.D;
    scores[r] = scratch.scores.data() + r * span;
    for (int d = 0; d < a.D; ++d) scaled[r][d] = a.scale * q[d];
  }
  // Each key's product with each query: its lanes add up d in order, then sum_lanes, then the d
  // past the last whole set of lanes. Two keys at a time, four for a group of one row; with 16
  // native lanes, 16 dot products at a time for groups of 1, 2 or 4 rows (16, 8 or 4 keys), whose
  // 16 sums are taken together.
  constexpr bool kSum16 = std::is_same_v<L, Wide> && (N == 1 || N == 2 || N == 4);
  constexpr int J = kSum16 ? 16 / N : N == 1 ? 4 : 2;
  const int whole = a.D / kWidth * kWidth;
  const int64_t key_stride = a.k.stride[2];
  int j = 0;
  for (; j + J <= most; j += J) {
    const float* key = k + j * key_stride;
    L dot[N][J];
    for (int r = 0; r < N; ++r)
      for (int i = 0; i < J; ++i) dot[r][i] = splat<L>(0.0f);
    for (int d = 0; d < whole; d += kWidth) {
      L keys[J];
      for (int i = 0; i < J; ++i) keys[i] = load_lanes<L>(key + i * key_stride + d);
      for (int r = 0; r < N; ++r) {
        const L x = load_lanes<L>(scaled[r] + d);
        for (int i = 0; i < J; ++i) dot[r][i] = fma_lanes(x, keys[i], dot[r][i]);
      }
    }
    if constexpr (kSum16) {
      float sums[16];
      sum_lanes16(reinterpret_cast<const Wide(&)[16]>(dot), sums);
      for (int r = 0; r < N; ++r)
        for (int i = 0; i < J; ++i) scores[r][j + i] = sums[r * J + i];
    } else {
      for (int r = 0; r < N; ++r)
        for (int i = 0; i < J; ++i) scores[r][j + i] = sum_lanes(dot[r][i]);
    }
  }
  for (; j < most; ++j) {
    const float* key = k + j * key_stride;
    for (int r = 0; r < N; ++r) {
      L dot = splat<L>(0.0f);
      for (int d = 0; d < whole; d += kWidth)
        dot = fma_lanes(load_lanes<L>(scaled[r] + d), load_lanes<L>(key + d), dot);
      scores[r][j] = sum_lanes(dot);
    }
  }
  float inverse[N];
  for (int r = 0; r < N; ++r) {
    const int keys = rows[r].keys;
    if (whole < a.D || a.mask_kind >= kAdditive)
      for (j = 0; j < keys; ++j) {
        const float* key = k + j * key_stride;
        float s = scores[r][j];
        for (int d = whole; d < a.D; ++d) s = __builtin_fmaf(scaled[r][d], key[d], s);
        if (a.mask_kind >= kAdditive) {
          const int64_t at = b * a.mask.stride[0] + rows[r].h * a.mask.stride[1] + rows[r].l * a.mask.stride[2] +
                             j * a.mask.stride[3];
          if (a.mask_kind == kAdditive) {
            s += static_cast<const float*>(a.mask.data)[at];
          } else if (!static_cast<const bool*>(a.mask.data)[at]) {
            s = -FLT_MAX;  // as MLX's where(mask, scores, finfo.min)
          }
        }
        scores[r][j] = s;
      }
    // The largest score (exact in any order, a NaN never taken): lanes, then the last keys.
    L tops = splat<L>(-FLT_MAX);
    const int whole_keys = keys / kWidth * kWidth;
    for (j = 0; j < whole_keys; j += kWidth) {
      const L s = load_lanes<L>(scores[r] + j);
      tops = where_greater(s, tops, s, tops);
    }
    float top = -FLT_MAX, lanes[kWidth];
    store_lanes(lanes, tops);
    for (const float s : lanes) top = s > top ? s : top;
    for (j = whole_keys; j < keys; ++j) top = scores[r][j] > top ? scores[r][j] : top;
    // exp(s - top): a score 87 below the top gives 0, and so does the padding to whole lanes and
    // every key past the row's own (-inf); a masked score (-FLT_MAX) gives 0 unless every score is
    // masked (then each gives 1, as MLX's).
    for (j = keys; j < span; ++j) scores[r][j] = -INFINITY;
    L total = splat<L>(0.0f);
    for (j = 0; j < keys; j += kWidth) {
      const L p = exp_or_zero(load_lanes<L>(scores[r] + j) - top);
      total += p;
      store_lanes(scores[r] + j, p);
    }
    for (j = (keys + kWidth - 1) / kWidth * kWidth; j < most; ++j) scores[r][j] = 0.0f;
    inverse[r] = 1.0f / sum_lanes(total);
  }
  // The weighted sum of the values, key after key for each output; C sets of lanes of every row
  // held in registers across the keys. A key of weight 0 (past a row's own, or exp's range) adds
  // 0 to each sum, which leaves its bits as they are: a sum from +0 is never -0.
  constexpr int C = 4;
  const int whole_v = a.Dv / kWidth * kWidth;
  const int64_t value_stride = a.v.stride[2];
  int d = 0;
  for (; d + C * kWidth <= whole_v; d += C * kWidth) {
    L sum[N][C];
    for (int r = 0; r < N; ++r)
      for (int i = 0; i < C; ++i) sum[r][i] = splat<L>(0.0f);
    for (j = 0; j < most; ++j) {
      const float* value = v + j * value_stride + d;
      L values[C];
      for (int i = 0; i < C; ++i) values[i] = load_lanes<L>(value + i * kWidth);
      for (int r = 0; r < N; ++r) {
        const L weight = splat<L>(scores[r][j]);
        for (int i = 0; i < C; ++i) sum[r][i] = fma_lanes(weight, values[i], sum[r][i]);
      }
    }
    for (int r = 0; r < N; ++r)
      for (int i = 0; i < C; ++i) store_lanes(scratch.acc.data() + r * a.Dv + d + i * kWidth, sum[r][i]);
  }
  for (; d < whole_v; d += kWidth)
    for (int r = 0; r < N; ++r) {
      L sum = splat<L>(0.0f);
      for (j = 0; j < most; ++j)
        sum = fma_lanes(splat<L>(scores[r][j]), load_lanes<L>(v + j * value_stride + d), sum);
      store_lanes(scratch.acc.data() + r * a.Dv + d, sum);
    }
  for (int r = 0; r < N; ++r) {
    float* acc = scratch.acc.data() + r * a.Dv;
    for (int e = whole_v; e < a.Dv; ++e) {
      acc[e] = 0.0f;
      for (j = 0; j < most; ++j)
        acc[e] = __builtin_fmaf(scores[r][j], v[j * value_stride + e], acc[e]);
    }
    float* out = row_out(a, b, rows[r].h, rows[r].l);
    for (int e = 0; e < a.Dv; ++e) out[e] = acc[e] * inverse[r];
  }
}

// Key head kv's query rows [first, first + size) (its heads' rows, head after head, position after
// position), kGroupRows<L> at a time; a causal row with no key of its own (more queries than keys)
// gets zeros, as MLX's.
template <class L>
MLX_SSBD_LANES_INLINE void attend_group_lanes(const AttentionArgs& a, int b, int kv, int first, int size,
                                              Scratch& scratch) {
  constexpr int R = kGroupRows<L>;
  const int heads = a.Hq / a.Hkv, end = std::min(first + size, heads * a.L);
  for (int start = first; start < end; start += R) {
    Row rows[R];
    int n = 0;
    for (int i = start; i < end && i < start + R; ++i) {
      const int h = kv * heads + i / a.L, l = i % a.L;
      const int keys = a.mask_kind == kCausal ? a.S - a.L + l + 1 : a.S;
      if (keys <= 0) {
        float* out = row_out(a, b, h, l);
        for (int e = 0; e < a.Dv; ++e) out[e] = 0.0f;
        continue;
      }
      rows[n++] = {h, l, keys};
    }
    if constexpr (R == 4) {
      if (n == 4) attend_rows<L, 4>(a, b, kv, rows, scratch);
      if (n == 3) attend_rows<L, 3>(a, b, kv, rows, scratch);
      if (n == 2) attend_rows<L, 2>(a, b, kv, rows, scratch);
    }
    if (n == 1) attend_rows<L, 1>(a, b, kv, rows, scratch);
  }
}
MLX_SSBD_LANE_TARGETS(attend_group, (const AttentionArgs& a, int b, int kv, int first, int size, Scratch& scratch),
                      (a, b, kv, first, size, scratch))

void attend(const AttentionArgs& a) {
  // Tasks of 4 rows of one key head (the widest build's group; a narrower one takes them in
  // smaller groups), or all of a key head's rows where they are at most 8 (a decode step's): one
  // thread then brings that head's keys and values into its cache once for all of its rows.
  constexpr int kTaskRows = 4;
  const int rows = a.Hq / a.Hkv * a.L;  // query rows per key head
  const int task_rows = rows <= 2 * kTaskRows ? rows : kTaskRows;
  const int per_head = (rows + task_rows - 1) / task_rows;  // tasks per key head
  const int64_t tasks = (int64_t)a.B * a.Hkv * per_head;
  const double work = (double)a.B * a.Hq * a.L * a.S * (a.D + a.Dv);
  parallel_for(tasks, split_grain(tasks, work > 1 << 16), [&](int64_t i) {
    thread_local Scratch scratch;
    const int g = i % per_head, kv = (i / per_head) % a.Hkv, b = i / ((int64_t)per_head * a.Hkv);
    attend_group(a, b, kv, g * task_rows, task_rows, scratch);
  });
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
  encoder.dispatch([a]() {
    OpTimer timer(OpKind::attention);
    attend(a);
  });
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
