// x's rounding to int8, one block of 32 values at a time (included by qmm_kernel.h inside its
// per-target namespace, after band_slot):
//
//   block_amax(v)                        max |v[i]| over the block, NaNs skipped (0 if none)
//   round_block<B>(v, inv, first, second)
//                                        value i = nearbyint(v[i] * inv) (one fp32 product, ties
//                                        to even) as int8, at slot band_slot<B>(i) of the block:
//                                        slots 0..15 to first[0..15], 16..31 to second[0..15];
//                                        returns their sum
//
// band_slot<4> (and <5>, <6>) orders each 8 values k..k+7 as k, k+2, k+4, k+6, k+1, k+3, k+5, k+7 (the
// order a band of 4-bit codes takes x: qmm_bands.h); every other width keeps them in order.
// |v[i] * inv| <= 127 for the inv quantize_rows gives, so no value saturates. The maximum is exact
// in any order and each value one IEEE product rounded in the current (default) rounding mode, so
// AVX-512 and AVX2 give the bits the plain loop does; they compute a verify pass's 16 rows about
// 10x faster than the loop.
#pragma once

#if defined(__AVX512F__)

static inline float block_amax(const float* v) {
  const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(v)), b = _mm512_abs_ps(_mm512_loadu_ps(v + 16));
  const __m512 a0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, a, _CMP_ORD_Q), a);  // NaN -> 0
  const __m512 b0 = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(b, b, _CMP_ORD_Q), b);
  return _mm512_reduce_max_ps(_mm512_max_ps(a0, b0));
}

template <int B>
static inline int32_t round_block(const float* v, float inv, int8_t* first, int8_t* second) {
  const __m512 scale = _mm512_set1_ps(inv);
  __m512i a = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(v), scale));
  __m512i b = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(v + 16), scale));
  if constexpr (kNibbles<B>) {  // band_slot<4>
    const __m512i order = _mm512_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
    a = _mm512_permutexvar_epi32(order, a), b = _mm512_permutexvar_epi32(order, b);
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(first), _mm512_cvtsepi32_epi8(a));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(second), _mm512_cvtsepi32_epi8(b));
  return _mm512_reduce_add_epi32(_mm512_add_epi32(a, b));
}

#elif defined(__AVX2__)

static inline float block_amax(const float* v) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 top = _mm256_setzero_ps();
  for (int i = 0; i < 32; i += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(v + i), magnitude);
    top = _mm256_max_ps(top, _mm256_and_ps(a, _mm256_cmp_ps(a, a, _CMP_ORD_Q)));  // NaN -> 0
  }
  const __m128 four = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
  const __m128 two = _mm_max_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_max_ss(two, _mm_movehdup_ps(two)));
}

template <int B>
static inline int32_t round_block(const float* v, float inv, int8_t* first, int8_t* second) {
  const __m256 scale = _mm256_set1_ps(inv);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 8 * i), scale));
    if constexpr (kNibbles<B>) q[i] = _mm256_permutevar8x32_epi32(q[i], _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
  }
  // packs interleaves 128-bit lanes: dwords q0[0..3] q1[0..3] q2[0..3] q3[0..3] | q0[4..7] ...
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  const __m256i bytes = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(first), _mm256_castsi256_si128(bytes));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(second), _mm256_extracti128_si256(bytes, 1));
  const __m256i total = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  const __m128i four = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
  const __m128i two = _mm_add_epi32(four, _mm_unpackhi_epi64(four, four));
  return _mm_cvtsi128_si32(_mm_add_epi32(two, _mm_shuffle_epi32(two, 1)));
}

#else  // portable

static inline float block_amax(const float* v) {
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) {  // fmax's result (a NaN skipped), inlined: no libm call
    const float magnitude = std::fabs(v[i]);
    amax = magnitude > amax ? magnitude : amax;
  }
  return amax;
}

template <int B>
static inline int32_t round_block(const float* v, float inv, int8_t* first, int8_t* second) {
  int32_t total = 0;
  for (int i = 0; i < 32; ++i) {
    const int at = band_slot<B>(i);
    const int8_t value = (int8_t)std::nearbyint(v[i] * inv);
    (at < 16 ? first : second)[at % 16] = value;
    total += value;
  }
  return total;
}

#endif
