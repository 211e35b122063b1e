// The kernel built for x86-64 CPUs with AVX2, FMA, F16C and AVX-VNNI but not AVX-512 (compiled with
// -mavx2 -mfma -mf16c -mavxvnni): the AVX2 kernel with 256-bit dpbusd for the dot products.
#define QMM_NS avxvnni
#include "qmm_kernel.h"
#include "qmm.h"

namespace mlx_ssbd {
bool qmm_avxvnni(const QmmParams& p) {
  return avxvnni::qmm_dispatch(
      {p.x, p.w, p.scales, p.biases, p.bias, p.out, p.M, p.N, p.K, p.group, p.bits, p.banded},
      static_cast<avxvnni::ScaleType>(p.scale_type));
}
double qmm_avxvnni_in_cache(int bits, double seconds) { return avxvnni::in_cache_dispatch(bits, seconds); }
double qmm_avxvnni_int8_peak(double seconds, bool scaled) { return avxvnni::int8_peak_rate(seconds, scaled); }
}  // namespace mlx_ssbd
