// Sixteen fp32 lanes in GCC's vector extension (one AVX-512 register, two AVX2 ones, four NEON
// ones), and the few functions on them the small operations share.
//
// A loop over lanes marked MLX_SSBD_VECTOR_CLONES is built for AVX-512, AVX2 and the baseline on
// x86-64, the loader picking the widest the CPU has (GCC's and Clang's target_clones); elsewhere
// it is built once, for what the build targets (NEON on aarch64). The clones do the same
// operations in the same order (no contraction), so by construction they give the same bits.
// Every function here is always inlined (MLX_SSBD_LANES_INLINE): a clone must compile them for its
// own target, since a call across targets would pass the 64-byte vectors in different registers
// (or memory) on each side.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__APPLE__)
#define MLX_SSBD_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MLX_SSBD_VECTOR_CLONES
#endif
#define MLX_SSBD_LANES_INLINE inline __attribute__((always_inline))

namespace mlx_ssbd {

typedef float Lanes __attribute__((vector_size(64)));
typedef int32_t IntLanes __attribute__((vector_size(64)));
constexpr int kWidth = 16;

MLX_SSBD_LANES_INLINE Lanes load_lanes(const float* p) {
  Lanes a;
  std::memcpy(&a, p, sizeof a);
  return a;
}

MLX_SSBD_LANES_INLINE void store_lanes(float* p, Lanes a) {
  std::memcpy(p, &a, sizeof a);
}

// exp(x) for x in [-87, 88] (callers clamp): x = n ln2 + r with |r| <= ln2 / 2, exp(r) by Cephes'
// expf polynomial, 2**n built in the exponent bits.
MLX_SSBD_LANES_INLINE Lanes exp_lanes(Lanes x) {
  const Lanes round = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // n, to nearest
  Lanes r = x - round * 0.693359375f;
  r = r - round * -2.12194440e-4f;
  Lanes p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const IntLanes bits = (__builtin_convertvector(round, IntLanes) + 127) << 23;
  return p * (Lanes)bits;
}

// The sum of the lanes, in a fixed order (pairwise halves).
MLX_SSBD_LANES_INLINE float sum_lanes(Lanes a) {
  float half[8];
  for (int i = 0; i < 8; ++i) half[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; ++i) half[i] += half[i + 4];
  return (half[0] + half[2]) + (half[1] + half[3]);
}

}  // namespace mlx_ssbd
