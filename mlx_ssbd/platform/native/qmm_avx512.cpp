// The kernel built for x86-64 CPUs with AVX-512 (F, BW, DQ, VL): 16 lanes.
#define QMM_NS avx512
#define QMM_LANES 16
#include "qmm_kernel.h"
#include "qmm.h"

namespace mlx_ssbd {
bool qmm_avx512(const QmmParams& p) {
  return avx512::qmm_dispatch({p.x, p.w, p.scales, p.biases, p.out, p.M, p.N, p.K, p.group, p.bits});
}
}  // namespace mlx_ssbd
