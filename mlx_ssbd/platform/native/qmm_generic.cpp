// The kernel built for the baseline of the target: NEON on aarch64, SSE2 on x86-64.
#define QMM_NS generic
#include "qmm_kernel.h"
#include "qmm.h"

namespace mlx_ssbd {
bool qmm_generic(const QmmParams& p) {
  return generic::qmm_dispatch(
      {p.x, p.w, p.scales, p.biases, p.bias, p.out, p.M, p.N, p.K, p.group, p.bits, p.banded},
      static_cast<generic::ScaleType>(p.scale_type));
}
double qmm_generic_in_cache(int bits, double seconds) { return generic::in_cache_dispatch(bits, seconds); }
double qmm_generic_int8_peak(double seconds, bool scaled) { return generic::int8_peak_rate(seconds, scaled); }
}  // namespace mlx_ssbd
