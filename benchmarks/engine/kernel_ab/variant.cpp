// One side of benchmarks/engine/kernel_ab.py: the kernel's sources of one revision, built in a
// namespace of their own (QMM_NS, set by the compiler's -D), behind one plain entry point.
#include "qmm_kernel.h"

namespace mlx_ssbd::QMM_NS {
// out = x @ dequantize(w).T for weights in bands (4 and 8 bits) or MLX's layout, fp16 scales.
bool product(const float* x, const uint32_t* w, const void* scales, const void* biases, float* out, int M, int N,
             int K, int group, int bits, bool banded) {
  return qmm_dispatch({x, w, scales, biases, nullptr, out, M, N, K, group, bits, banded}, ScaleType::f16);
}
}  // namespace mlx_ssbd::QMM_NS
