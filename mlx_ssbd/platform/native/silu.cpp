// silu(gate) * up (silu.h): the primitive, and the vector code behind it.
#include "silu.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "mlx/backend/cpu/encoder.h"
#include "lanes.h"
#include "op_clock.h"
#include "pool.h"
#include "qmm.h"

namespace mlx_ssbd {

template <class V, class I = Native<V>> MLX_SSBD_LANES_INLINE V silu_mul_lanes(V g, V u) {
  const V low = V{} - 87.0f, high = V{} + 88.0f;
  V minus = -g;
  // -g clamped to [-87, 88]: for g > 87, sigmoid(g) is 1 in fp32 anyway; for g < -88 the result
  // is under 1e-30 in magnitude instead of smaller (e**88 is near the largest fp32).
  minus = minus < low ? low : minus;
  minus = minus > high ? high : minus;
  return g / (1.0f + exp_lanes(minus)) * u;
}
template <class V> MLX_SSBD_LANES_INLINE Two<V> silu_mul_lanes(Two<V> g, Two<V> u) {
  return {silu_mul_lanes(g.lo, u.lo), silu_mul_lanes(g.hi, u.hi)};
}

template <class L>
MLX_SSBD_LANES_INLINE void silu_mul_rows_lanes(const float* g, const float* u, float* out, size_t n) {
  size_t i = 0;
  for (; i + kWidth <= n; i += kWidth) store_lanes(out + i, silu_mul_lanes(load_lanes<L>(g + i), load_lanes<L>(u + i)));
  if (i < n) {  // the tail through zero-padded lanes
    float a[kWidth] = {}, b[kWidth] = {}, c[kWidth];
    std::memcpy(a, g + i, (n - i) * sizeof(float));
    std::memcpy(b, u + i, (n - i) * sizeof(float));
    store_lanes(c, silu_mul_lanes(load_lanes<L>(a), load_lanes<L>(b)));
    std::memcpy(out + i, c, (n - i) * sizeof(float));
  }
}
MLX_SSBD_LANE_TARGETS(silu_mul_rows, (const float* g, const float* u, float* out, size_t n), (g, u, out, n))

// Elements a piece of a product's silu takes (a whole number of lanes), and the size from which
// it is shared out.
constexpr size_t kSiluPiece = 8192, kSiluParallel = 4 * kSiluPiece;

mx::array silu_mul(const mx::array& gate, const mx::array& up, mx::StreamOrDevice s) {
  if (gate.shape() != up.shape()) {
    throw std::invalid_argument("[mlx_ssbd.silu_mul] gate and up must have the same shape");
  }
  if (!mx::issubdtype(gate.dtype(), mx::floating) || !mx::issubdtype(up.dtype(), mx::floating)) {
    throw std::invalid_argument("[mlx_ssbd.silu_mul] gate and up must be floating point");
  }
  auto stream = cpu_stream(s, "silu_mul");
  auto out = mx::array(
      gate.shape(), mx::float32, std::make_shared<SiluMulCpu>(stream),
      {mx::astype(gate, mx::float32, stream), mx::astype(up, mx::float32, stream)});
  const auto dtype = mx::promote_types(gate.dtype(), up.dtype());
  return dtype == mx::float32 ? out : mx::astype(out, dtype, stream);
}

void SiluMulCpu::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  const mx::array gate = row_major(inputs[0], encoder);
  const mx::array up = row_major(inputs[1], encoder);
  auto& out = outputs[0];
  out.set_data(mx::allocator::malloc(out.nbytes()));
  encoder.set_input_array(gate);
  encoder.set_input_array(up);
  encoder.set_output_array(out);
  encoder.dispatch([g = gate.data<float>(), u = up.data<float>(), o = out.data<float>(), n = out.size()]() {
    OpTimer timer(OpKind::silu_mul);
    // Elementwise, so any split gives the same bits: a verify pass's (16 rows of the default
    // model's 8960) in pieces over the pool, a decode step's row on this thread.
    const size_t piece = kSiluPiece, pieces = (n + piece - 1) / piece;
    parallel_for((int64_t)pieces, n >= kSiluParallel ? 1 : (int64_t)pieces, [&](int64_t i) {
      const size_t begin = (size_t)i * piece;
      silu_mul_rows(g + begin, u + begin, o + begin, std::min(piece, n - begin));
    });
  });
}

void SiluMulCpu::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  throw std::runtime_error("[mlx_ssbd.silu_mul] has no GPU implementation");
}

}  // namespace mlx_ssbd
