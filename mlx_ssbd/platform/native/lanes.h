// Sixteen fp32 lanes in GCC's vector extension, and the few functions on them the small operations
// share.
//
// Sixteen lanes are one native vector where the target has 64-byte registers (`Wide`, AVX-512)
// and two or four narrower ones elsewhere (`Pair`: two 8-lane AVX2 vectors; `Quad`: four 4-lane
// SSE2 or NEON vectors), each a `Two` of halves. A 64-byte GCC vector on a target without 64-byte
// registers is kept in memory: a loop that accumulates in one stores and reloads it piece by piece
// every step, which made AVX2 code slower than SSE2. Every operation is lane-wise, and a sum of
// the lanes always adds lane i and i + 8, then halves pairwise, so each form gives the same bits.
//
// A loop over lanes is written once, as an always-inlined template `NAME_lanes<L>` over the lane
// type, and MLX_SSBD_LANE_TARGETS(NAME, (params), (args)) defines `NAME`, which runs it as built
// for AVX-512 (Wide), AVX2 (Pair) or the baseline (Quad) on x86-64: the build that lane_target()
// names, the path the quantized kernel takes (qmm.cpp's simd_path(): the widest the CPU has, or a
// narrower one that $MLX_SSBD_QMM_SIMD asks for, so that tests can run each). Elsewhere it is
// built once, as Quad (NEON on aarch64). No contraction: the builds do the same operations in
// the same order, a fused multiply-add only where fma_lanes asks for one (one IEEE operation in
// every build: an FMA instruction where the target has one, else libm's fmaf);
// tests/test_quantized_kernel.py checks they give the same bits on each path this CPU can run.
//
// Every function here is always inlined (MLX_SSBD_LANES_INLINE): each build must compile them for
// its own target, since a call across targets would pass the vectors in different registers (or
// memory) on each side.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__aarch64__)
#include <arm_neon.h>
#elif defined(__x86_64__)
#include <immintrin.h>  // declares GCC's builtins of every x86 target (fma_lanes)
#endif

#define MLX_SSBD_LANES_INLINE inline __attribute__((always_inline))

namespace mlx_ssbd {

enum class LaneTarget { avx512, avx2, baseline };
LaneTarget lane_target();

constexpr int kWidth = 16;

typedef float F4 __attribute__((vector_size(16)));
typedef float F8 __attribute__((vector_size(32)));
typedef float F16 __attribute__((vector_size(64)));
typedef int32_t I4 __attribute__((vector_size(16)));
typedef int32_t I8 __attribute__((vector_size(32)));
typedef int32_t I16 __attribute__((vector_size(64)));

// The int32 vector of a native fp32 one (only natives have one: it selects their overloads).
template <class V> struct IntOf;
template <> struct IntOf<F4> { using type = I4; };
template <> struct IntOf<F8> { using type = I8; };
template <> struct IntOf<F16> { using type = I16; };
template <class V> using Native = typename IntOf<V>::type;

// Lanes as two halves, each native or itself two halves.
template <class V> struct Two {
  V lo, hi;
};

using Wide = F16;
using Pair = Two<F8>;
using Quad = Two<Two<F4>>;

template <class V> constexpr int kLanesOf = sizeof(V) / sizeof(float);

template <class V> MLX_SSBD_LANES_INLINE Two<V> operator+(Two<V> a, Two<V> b) { return {a.lo + b.lo, a.hi + b.hi}; }
template <class V> MLX_SSBD_LANES_INLINE Two<V> operator-(Two<V> a, Two<V> b) { return {a.lo - b.lo, a.hi - b.hi}; }
template <class V> MLX_SSBD_LANES_INLINE Two<V> operator*(Two<V> a, Two<V> b) { return {a.lo * b.lo, a.hi * b.hi}; }
template <class V> MLX_SSBD_LANES_INLINE Two<V> operator*(Two<V> a, float b) { return {a.lo * b, a.hi * b}; }
template <class V> MLX_SSBD_LANES_INLINE Two<V> operator-(Two<V> a, float b) { return {a.lo - b, a.hi - b}; }
template <class V> MLX_SSBD_LANES_INLINE Two<V>& operator+=(Two<V>& a, Two<V> b) { return a = a + b; }

template <class L> MLX_SSBD_LANES_INLINE L load_lanes(const float* p) {
  if constexpr (requires { typename Native<L>; }) {
    L a;
    std::memcpy(&a, p, sizeof a);
    return a;
  } else {
    using V = decltype(L::lo);
    return {load_lanes<V>(p), load_lanes<V>(p + kLanesOf<V>)};
  }
}

template <class L> MLX_SSBD_LANES_INLINE void store_lanes(float* p, L a) {
  if constexpr (requires { typename Native<L>; }) {
    std::memcpy(p, &a, sizeof a);
  } else {
    store_lanes(p, a.lo), store_lanes(p + kLanesOf<decltype(a.lo)>, a.hi);
  }
}

// a * b + c, each lane rounded once (a fused multiply-add): the FMA instructions of the AVX-512,
// AVX2 and NEON builds, libm's fmaf lane by lane in the SSE2 build. On x86-64 GCC's builtins
// rather than intrinsics (whose target would not inline into these target-neutral functions),
// in plain overloads (a template does not see the builtins).
#if defined(__aarch64__)
MLX_SSBD_LANES_INLINE F4 fma_lanes(F4 a, F4 b, F4 c) {
  return (F4)vfmaq_f32((float32x4_t)c, (float32x4_t)a, (float32x4_t)b);
}
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
MLX_SSBD_LANES_INLINE F16 fma_lanes(F16 a, F16 b, F16 c) {
  return __builtin_ia32_vfmaddps512_mask(a, b, c, (unsigned short)-1, 4);  // 4: the current rounding
}
MLX_SSBD_LANES_INLINE F8 fma_lanes(F8 a, F8 b, F8 c) { return __builtin_ia32_vfmaddps256(a, b, c); }
#endif
template <class V, class I = Native<V>> MLX_SSBD_LANES_INLINE V fma_lanes(V a, V b, V c) {
  V out;
  for (int i = 0; i < kLanesOf<V>; ++i) out[i] = __builtin_fmaf(a[i], b[i], c[i]);
  return out;
}
template <class V> MLX_SSBD_LANES_INLINE Two<V> fma_lanes(Two<V> a, Two<V> b, Two<V> c) {
  return {fma_lanes(a.lo, b.lo, c.lo), fma_lanes(a.hi, b.hi, c.hi)};
}

// Every lane `value`.
template <class L> MLX_SSBD_LANES_INLINE L splat(float value) {
  if constexpr (requires { typename Native<L>; }) {
    return L{} + value;
  } else {
    using V = decltype(L::lo);
    return {splat<V>(value), splat<V>(value)};
  }
}

// exp(x) for x in [-87, 88] (callers clamp): x = n ln2 + r with |r| <= ln2 / 2, exp(r) by Cephes'
// expf polynomial, 2**n built in the exponent bits.
template <class V, class I = Native<V>> MLX_SSBD_LANES_INLINE V exp_lanes(V x) {
  const V round = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // n, to nearest
  V r = x - round * 0.693359375f;
  r = r - round * -2.12194440e-4f;
  V p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const I bits = (__builtin_convertvector(round, I) + 127) << 23;
  return p * (V)bits;
}
template <class V> MLX_SSBD_LANES_INLINE Two<V> exp_lanes(Two<V> x) { return {exp_lanes(x.lo), exp_lanes(x.hi)}; }

// exp(x), or 0 where x is under -87 (exp's range; a softmax weight under 1e-38 of the largest).
template <class V, class I = Native<V>> MLX_SSBD_LANES_INLINE V exp_or_zero(V x) {
  const V floor = V{} - 87.0f, zero = {};
  return x < floor ? zero : exp_lanes(x);
}
template <class V> MLX_SSBD_LANES_INLINE Two<V> exp_or_zero(Two<V> x) { return {exp_or_zero(x.lo), exp_or_zero(x.hi)}; }

// Lane by lane: `then` where a > b, else `otherwise` (a NaN in a or b is never greater).
template <class V, class I = Native<V>> MLX_SSBD_LANES_INLINE V where_greater(V a, V b, V then, V otherwise) {
  return a > b ? then : otherwise;
}
template <class V> MLX_SSBD_LANES_INLINE Two<V> where_greater(Two<V> a, Two<V> b, Two<V> then, Two<V> otherwise) {
  return {where_greater(a.lo, b.lo, then.lo, otherwise.lo), where_greater(a.hi, b.hi, then.hi, otherwise.hi)};
}

// The sum of the lanes, in a fixed order: lane i and i + 8 added, then halves pairwise.
template <class V, class I = Native<V>> MLX_SSBD_LANES_INLINE float sum_lanes(V a) {
  constexpr int n = kLanesOf<V>;
  float h[n];
  for (int i = 0; i < n; ++i) h[i] = a[i];
  for (int w = n / 2; w >= 1; w /= 2)
    for (int i = 0; i < w; ++i) h[i] += h[i + w];
  return h[0];
}
template <class V> MLX_SSBD_LANES_INLINE float sum_lanes(Two<V> a) { return sum_lanes(a.lo + a.hi); }

}  // namespace mlx_ssbd

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MLX_SSBD_LANE_TARGETS(name, params, args)                                                  \
  __attribute__((target("avx512f"))) static void name##_avx512 params { name##_lanes<Wide> args; } \
  __attribute__((target("avx2,fma"))) static void name##_avx2 params { name##_lanes<Pair> args; }  \
  static void name##_baseline params { name##_lanes<Quad> args; }                                  \
  static void name params {                                                                        \
    switch (lane_target()) {                                                                       \
      case LaneTarget::avx512: return name##_avx512 args;                                          \
      case LaneTarget::avx2: return name##_avx2 args;                                              \
      default: return name##_baseline args;                                                        \
    }                                                                                              \
  }
#else
#define MLX_SSBD_LANE_TARGETS(name, params, args) \
  static void name params { name##_lanes<Quad> args; }
#endif
