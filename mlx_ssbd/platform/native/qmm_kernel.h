// Quantized matrix products on the CPU: out[M, N] = x[M, K] @ dequantize(w)[N, K]^T.
//
// The weight is in MLX's affine layout: each row of w packs K codes of `bits` bits as a
// little-endian bit stream (uint32 words), and every `group` codes share a scale and a bias:
// w[n, k] = scales[n, k / group] * code + biases[n, k / group].
//
// The arithmetic is the same for every number of rows, so a row's result does not depend on the
// rows beside it (a verify pass of 16 tokens gives each token the logits a one-token decode step
// would): for each (m, n), eight lanes accumulate fma(x, w, acc) over k in order, w = fma(code,
// scale, bias) in fp32, and the lanes are added in one fixed order at the end.
//
// One source for every CPU: written with GCC/Clang vector extensions, it compiles to AVX2/FMA
// code on x86-64 (qmm_avx2.cpp, built with -mavx2 -mfma and chosen at run time when the CPU has
// both), to NEON on aarch64, and to plain SSE2 or scalar code elsewhere (qmm_generic.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__FMA__) && defined(__AVX2__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

// Each translation unit that includes this header names its own namespace (QMM_NS), so the
// AVX2 and the generic builds of the same templates never meet at link time.
namespace mlx_ssbd::QMM_NS {

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));

// acc + a * b with one rounding, on every target (so both paths below agree bit for bit).
static inline v8f fma8(v8f a, v8f b, v8f acc) {
#if defined(__FMA__) && defined(__AVX2__)
  return (v8f)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)acc);
#elif defined(__ARM_NEON)
  float32x4_t a0, a1, b0, b1, c0, c1;
  std::memcpy(&a0, &a, 16), std::memcpy(&a1, (const char*)&a + 16, 16);
  std::memcpy(&b0, &b, 16), std::memcpy(&b1, (const char*)&b + 16, 16);
  std::memcpy(&c0, &acc, 16), std::memcpy(&c1, (const char*)&acc + 16, 16);
  c0 = vfmaq_f32(c0, a0, b0);
  c1 = vfmaq_f32(c1, a1, b1);
  v8f out;
  std::memcpy(&out, &c0, 16), std::memcpy((char*)&out + 16, &c1, 16);
  return out;
#else
  v8f out;
  for (int i = 0; i < 8; ++i) out[i] = __builtin_fmaf(a[i], b[i], acc[i]);
  return out;
#endif
}

static inline float hsum8(v8f v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

static inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The `B` bytes at `p` as the low bytes of a word, read with fixed-size loads only.
template <int B>
static inline uint64_t load_bytes(const uint8_t* p) {
  uint64_t word = 0;
  if constexpr (B == 8) {
    std::memcpy(&word, p, 8);
  } else if constexpr (B >= 4) {
    uint32_t low;
    std::memcpy(&low, p, 4);
    uint64_t high = 0;
    if constexpr (B == 5) high = p[4];
    if constexpr (B == 6) high = (uint64_t)p[4] | ((uint64_t)p[5] << 8);
    word = low | (high << 32);
  } else {
    uint16_t low;
    std::memcpy(&low, p, 2);
    word = low | (B == 3 ? (uint64_t)p[2] << 16 : 0);
  }
  return word;
}

// Eight consecutive codes; with `bits` bits each they take exactly `bits` bytes at `p`.
#if defined(__AVX2__)
// Code j starts at bit j * B: byte j * B / 8, shift j * B % 8. One byte shuffle puts the four
// bytes from there into lane j, one variable shift and one mask finish it.
template <int B>
static inline v8f codes8(const uint8_t* p) {
  const uint64_t word = load_bytes<B>(p);
  const __m256i bytes = _mm256_broadcastsi128_si256(_mm_cvtsi64_si128((long long)word));
  const __m256i spread = _mm256_shuffle_epi8(
      bytes,
      _mm256_setr_epi8(
          0 * B / 8, 0 * B / 8 + 1, 0 * B / 8 + 2, 0 * B / 8 + 3,
          1 * B / 8, 1 * B / 8 + 1, 1 * B / 8 + 2, 1 * B / 8 + 3,
          2 * B / 8, 2 * B / 8 + 1, 2 * B / 8 + 2, 2 * B / 8 + 3,
          3 * B / 8, 3 * B / 8 + 1, 3 * B / 8 + 2, 3 * B / 8 + 3,
          4 * B / 8, 4 * B / 8 + 1, 4 * B / 8 + 2, 4 * B / 8 + 3,
          5 * B / 8, 5 * B / 8 + 1, 5 * B / 8 + 2, 5 * B / 8 + 3,
          6 * B / 8, 6 * B / 8 + 1, 6 * B / 8 + 2, 6 * B / 8 + 3,
          7 * B / 8, 7 * B / 8 + 1, 7 * B / 8 + 2, 7 * B / 8 + 3));
  const __m256i shifted = _mm256_srlv_epi32(
      spread,
      _mm256_setr_epi32(0 * B % 8, 1 * B % 8, 2 * B % 8, 3 * B % 8, 4 * B % 8, 5 * B % 8, 6 * B % 8, 7 * B % 8));
  const __m256i codes = _mm256_and_si256(shifted, _mm256_set1_epi32((1 << B) - 1));
  return (v8f)_mm256_cvtepi32_ps(codes);
}
#else
template <int B>
static inline v8f codes8(const uint8_t* p) {
  const uint64_t word = load_bytes<B>(p);
  v8i codes;
  for (int j = 0; j < 8; ++j) codes[j] = (int32_t)((word >> (j * B)) & ((1u << B) - 1));
  return __builtin_convertvector(codes, v8f);
}
#endif

struct QmmArgs {
  const float* x;        // [M, K], rows contiguous
  const uint32_t* w;     // [N, K * bits / 32]
  const float* scales;   // [N, K / group]
  const float* biases;   // [N, K / group]
  float* out;            // [M, N]
  int M, N, K, group, bits;
};

constexpr int kCols = 4;  // weight rows handled together (a block)
constexpr int kRows = 3;  // activation rows handled together in the buffered path

// Rows [m, m + MR) times the NC dequantized weight rows in `wbuf` (each K long): MR x NC dot
// products, each with its own accumulator (the loops are unrolled at compile time, so the
// accumulators stay in registers).
template <int MR, int NC>
static inline void rows_tile(const QmmArgs& a, int m, int n0, const float* wbuf) {
  const int K = a.K;
  v8f acc[MR][NC] = {};
  for (int k = 0; k < K; k += 8) {
    v8f xv[MR];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) xv[r] = load8(a.x + (size_t)(m + r) * K + k);
#pragma GCC unroll 4
    for (int j = 0; j < NC; ++j) {
      const v8f wv = load8(wbuf + (size_t)j * K + k);
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) acc[r][j] = fma8(xv[r], wv, acc[r][j]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NC; ++j) a.out[(size_t)(m + r) * a.N + n0 + j] = hsum8(acc[r][j]);
}

// Columns [n0, n0 + nb) for every row of x.
template <int B>
void qmm_block(const QmmArgs& a, int n0, int nb, std::vector<float>& buf) {
  const int K = a.K, G = a.group, groups = K / G;
  const size_t row_bytes = (size_t)K * B / 8;
  const uint8_t* wrow[kCols];
  const float* srow[kCols];
  const float* brow[kCols];
  for (int j = 0; j < nb; ++j) {
    wrow[j] = reinterpret_cast<const uint8_t*>(a.w) + (size_t)(n0 + j) * row_bytes;
    srow[j] = a.scales + (size_t)(n0 + j) * groups;
    brow[j] = a.biases + (size_t)(n0 + j) * groups;
  }
  if (a.M == 1) {  // a decode step: dequantize in registers, never store the weight
    v8f acc[kCols] = {};
    for (int g = 0; g < groups; ++g) {
      for (int k = g * G; k < (g + 1) * G; k += 8) {
        const v8f xv = load8(a.x + k);
        for (int j = 0; j < nb; ++j) {
          const v8f s = (v8f){} + srow[j][g], b = (v8f){} + brow[j][g];
          const v8f wv = fma8(codes8<B>(wrow[j] + (size_t)k * B / 8), s, b);
          acc[j] = fma8(xv, wv, acc[j]);
        }
      }
    }
    for (int j = 0; j < nb; ++j) a.out[n0 + j] = hsum8(acc[j]);
    return;
  }
  // Several rows: dequantize the block once into `buf`, then stream the rows through it.
  buf.resize((size_t)kCols * K);
  for (int j = 0; j < nb; ++j) {
    float* dst = buf.data() + (size_t)j * K;
    for (int g = 0; g < groups; ++g) {
      const v8f s = (v8f){} + srow[j][g], b = (v8f){} + brow[j][g];
      for (int k = g * G; k < (g + 1) * G; k += 8) {
        const v8f wv = fma8(codes8<B>(wrow[j] + (size_t)k * B / 8), s, b);
        std::memcpy(dst + k, &wv, sizeof(wv));
      }
    }
  }
  const float* wbuf = buf.data();
  int m = 0;
  if (nb == kCols) {
    for (; m + kRows <= a.M; m += kRows) rows_tile<kRows, kCols>(a, m, n0, wbuf);
  }
  for (; m < a.M; ++m) {
    switch (nb) {
      case 4: rows_tile<1, 4>(a, m, n0, wbuf); break;
      case 3: rows_tile<1, 3>(a, m, n0, wbuf); break;
      case 2: rows_tile<1, 2>(a, m, n0, wbuf); break;
      default: rows_tile<1, 1>(a, m, n0, wbuf); break;
    }
  }
}

// Every block of columns, split between threads (OpenMP, when the build has it).
template <int B>
void qmm_all(const QmmArgs& a) {
  const int blocks = (a.N + kCols - 1) / kCols;
  const bool parallel = (double)a.N * a.K * (a.M < 4 ? a.M : 4) > 1 << 16;
  (void)parallel;
#pragma omp parallel if (parallel)
  {
    static thread_local std::vector<float> buf;
#pragma omp for schedule(static)
    for (int i = 0; i < blocks; ++i) {
      const int n0 = i * kCols;
      const int nb = a.N - n0 < kCols ? a.N - n0 : kCols;
      qmm_block<B>(a, n0, nb, buf);
    }
  }
}

// Returns false for a bit width it does not know.
inline bool qmm_dispatch(const QmmArgs& a) {
  switch (a.bits) {
    case 2: qmm_all<2>(a); return true;
    case 3: qmm_all<3>(a); return true;
    case 4: qmm_all<4>(a); return true;
    case 5: qmm_all<5>(a); return true;
    case 6: qmm_all<6>(a); return true;
    case 8: qmm_all<8>(a); return true;
    default: return false;
  }
}

}  // namespace mlx_ssbd::QMM_NS
