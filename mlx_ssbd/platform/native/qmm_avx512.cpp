// The kernel built for x86-64 CPUs with AVX-512 (F, BW, DQ, VL), VNNI and VBMI: dpbusd for the dot products.
#define QMM_NS avx512
#include "qmm_kernel.h"
#include "qmm.h"

namespace mlx_ssbd {
bool qmm_avx512(const QmmParams& p) {
  return avx512::qmm_dispatch(
      {p.x, p.w, p.scales, p.biases, p.bias, p.out, p.M, p.N, p.K, p.group, p.bits, p.banded},
      static_cast<avx512::ScaleType>(p.scale_type));
}
double qmm_avx512_in_cache(int bits, double seconds) { return avx512::in_cache_dispatch(bits, seconds); }
double qmm_avx512_int8_peak(double seconds, bool scaled) { return avx512::int8_peak_rate(seconds, scaled); }
}  // namespace mlx_ssbd
