// The kernel built for x86-64 CPUs with AVX2, FMA and F16C (compiled with -mavx2 -mfma -mf16c): maddubs (and madd) for the dot products.
#define QMM_NS avx2
#include "qmm_kernel.h"
#include "qmm.h"

namespace mlx_ssbd {
bool qmm_avx2(const QmmParams& p) {
  return avx2::qmm_dispatch(
      {p.x, p.w, p.scales, p.biases, p.bias, p.out, p.M, p.N, p.K, p.group, p.bits, p.banded},
      static_cast<avx2::ScaleType>(p.scale_type));
}
double qmm_avx2_in_cache(int bits, double seconds) { return avx2::in_cache_dispatch(bits, seconds); }
double qmm_avx2_int8_peak(double seconds, bool scaled) { return avx2::int8_peak_rate(seconds, scaled); }
}  // namespace mlx_ssbd
