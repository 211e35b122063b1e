// Sixteen fp32 lanes in GCC's vector extension (one AVX-512 register, two AVX2 ones, four NEON
// ones), and the few functions on them the small operations share.
//
// A loop over lanes is written once, as an always-inlined function `NAME_lanes`, and
// MLX_SSBD_LANE_TARGETS(NAME, (params), (args)) defines `NAME`, which runs it as built for
// AVX-512, for AVX2 or for the baseline on x86-64: the build that lane_target() names, the path
// the quantized kernel takes (qmm.cpp's simd_path(): the widest the CPU has, or a narrower one
// that $MLX_SSBD_QMM_SIMD asks for, so that tests can run each). Elsewhere it is built once, for
// what the build targets (NEON on aarch64). The builds do the same operations in the same order
// (no contraction), so they give the same bits; tests/test_quantized_kernel.py checks it on each
// path this CPU can run.
//
// Every function here is always inlined (MLX_SSBD_LANES_INLINE): each build must compile them for
// its own target, since a call across targets would pass the 64-byte vectors in different
// registers (or memory) on each side.
#pragma once

#include <cstdint>
#include <cstring>

#define MLX_SSBD_LANES_INLINE inline __attribute__((always_inline))

namespace mlx_ssbd {

enum class LaneTarget { avx512, avx2, baseline };
LaneTarget lane_target();

}  // namespace mlx_ssbd

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MLX_SSBD_LANE_TARGETS(name, params, args)                                      \
  __attribute__((target("avx512f"))) static void name##_avx512 params { name##_lanes args; } \
  __attribute__((target("avx2"))) static void name##_avx2 params { name##_lanes args; }      \
  static void name##_baseline params { name##_lanes args; }                                  \
  static void name params {                                                                  \
    switch (lane_target()) {                                                                 \
      case LaneTarget::avx512: return name##_avx512 args;                                    \
      case LaneTarget::avx2: return name##_avx2 args;                                        \
      default: return name##_baseline args;                                                  \
    }                                                                                        \
  }
#else
#define MLX_SSBD_LANE_TARGETS(name, params, args) \
  static void name params { name##_lanes args; }
#endif

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
