// Quantized matrix products on the CPU: out[M, N] = x[M, K] @ dequantize(w)[N, K]^T.
//
// The weight is in MLX's affine layout: each row of w packs K codes of `bits` bits as a
// little-endian bit stream (uint32 words), and every `group` codes share a scale and a bias:
// w[n, k] = scales[n, k / group] * code + biases[n, k / group].
//
// The arithmetic is the same for every number of rows, so a row's result does not depend on the
// rows beside it (a verify pass of 16 tokens gives each token the logits a one-token decode step
// would): for each (m, n), L lanes accumulate fma(x, w, acc) over k in one fixed order, with
// w = fma(code, scale, bias) in fp32, and the lanes are added in one fixed order at the end.
// Within each block of 32 weights, 4-bit codes are taken in "kernel order" (the 16 even k, then
// the 16 odd k: a byte's low and high nibble), and x is permuted to match once per product.
//
// One source for every CPU, written with GCC/Clang vector extensions and built once per target
// (each build names its namespace, QMM_NS, and lane count, QMM_LANES): AVX-512 (16 lanes,
// qmm_avx512.cpp) and AVX2/FMA (8 lanes, qmm_avx2.cpp) on x86-64, chosen at run time by what
// the CPU has; NEON on aarch64 and plain SSE2/scalar code elsewhere (qmm_generic.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

#ifndef QMM_LANES
#define QMM_LANES 8
#endif

namespace mlx_ssbd::QMM_NS {

constexpr int L = QMM_LANES;  // fp32 lanes per vector
constexpr int kBlock = 32;    // weights per block (every supported group is whole blocks)
constexpr int kVecs = kBlock / L;

typedef float vf __attribute__((vector_size(4 * L)));
typedef int32_t vi __attribute__((vector_size(4 * L)));
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

// acc + a * b with one rounding, on every target (so every path agrees bit for bit).
static inline vf fmav(vf a, vf b, vf acc) {
#if defined(__AVX512F__) && QMM_LANES == 16
  return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)acc);
#elif defined(__FMA__) && defined(__AVX2__) && QMM_LANES == 8
  return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)acc);
#elif defined(__ARM_NEON)
  vf out;
  for (int i = 0; i < L; i += 4) {
    float32x4_t va, vb, vc;
    std::memcpy(&va, (const float*)&a + i, 16);
    std::memcpy(&vb, (const float*)&b + i, 16);
    std::memcpy(&vc, (const float*)&acc + i, 16);
    vc = vfmaq_f32(vc, va, vb);
    std::memcpy((float*)&out + i, &vc, 16);
  }
  return out;
#else
  vf out;
  for (int i = 0; i < L; ++i) out[i] = __builtin_fmaf(a[i], b[i], acc[i]);
  return out;
#endif
}

// The lanes added pairwise, halves first: one fixed order.
static inline float hsum(vf v) {
  float t[L];
  std::memcpy(t, &v, sizeof(v));
  for (int width = L / 2; width > 0; width /= 2)
    for (int i = 0; i < width; ++i) t[i] += t[i + width];
  return t[0];
}

static inline vf loadv(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

static inline void storev(float* p, vf v) {
  std::memcpy(p, &v, sizeof(v));
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

// Eight consecutive codes of `B` bits: exactly `B` bytes at `p`.
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

// The 32 codes of one block (4 * B bytes at `p`) as kVecs vectors, in kernel order: for 4 bits,
// the low nibbles (even k) then the high nibbles (odd k); for every other width, k in order.
template <int B>
static inline void block_codes(const uint8_t* p, vf* out) {
  if constexpr (B == 4) {
#if defined(__AVX2__)
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(bytes, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
#if QMM_LANES == 16
    out[0] = (vf)_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo));
    out[1] = (vf)_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi));
#else
    out[0] = (vf)_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
    out[1] = (vf)_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
    out[2] = (vf)_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
    out[3] = (vf)_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
#endif
#else
    int32_t c[kBlock];
    for (int i = 0; i < 16; ++i) c[i] = p[i] & 0x0F, c[16 + i] = p[i] >> 4;
    for (int v = 0; v < kVecs; ++v) {
      vi codes;
      std::memcpy(&codes, c + v * L, sizeof(codes));
      out[v] = __builtin_convertvector(codes, vf);
    }
#endif
  } else if constexpr (B == 8) {
#if defined(__AVX2__) && QMM_LANES == 16
    out[0] = (vf)_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    out[1] = (vf)_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))));
#elif defined(__AVX2__)
    for (int v = 0; v < 4; ++v)
      out[v] = (vf)_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * v))));
#else
    for (int v = 0; v < kVecs; ++v) {
      vi codes;
      for (int i = 0; i < L; ++i) codes[i] = p[v * L + i];
      out[v] = __builtin_convertvector(codes, vf);
    }
#endif
  } else {
    float c[kBlock];
    for (int e = 0; e < 4; ++e) {
      const v8f eight = codes8<B>(p + e * B);
      std::memcpy(c + 8 * e, &eight, sizeof(eight));
    }
    for (int v = 0; v < kVecs; ++v) out[v] = loadv(c + v * L);
  }
}

// x in kernel order: for 4 bits each block of 32 becomes its 16 even entries, then its 16 odd.
static inline void permute_for_4bit(const float* x, float* out, size_t count) {
  for (size_t b = 0; b < count; b += kBlock) {
    for (int i = 0; i < 16; ++i) {
      out[b + i] = x[b + 2 * i];
      out[b + 16 + i] = x[b + 2 * i + 1];
    }
  }
}

struct QmmArgs {
  const float* x;        // [M, K], rows contiguous (for 4 bits, in kernel order)
  const uint32_t* w;     // [N, K * bits / 32]
  const float* scales;   // [N, K / group]
  const float* biases;   // [N, K / group]
  float* out;            // [M, N]
  int M, N, K, group, bits;
};

constexpr int kCols = 4;    // weight rows (output columns) per register tile of several rows
constexpr int kStep = 2;    // weight rows a decode step handles together
constexpr int kPanel = 16;  // weight rows that share one pass over x when there are several rows
constexpr int kChunk = 256; // k per chunk: a panel's dequantized chunk (16 KB) stays in L1
constexpr int kRows = L == 16 ? 6 : 3;  // rows of x per register tile (kRows x 4 accumulators)
constexpr int kPrefetch = 4096;         // bytes ahead of a decode step's weight reads

// One step (M = 1): dequantize in registers, never store the weight.
template <int B>
void decode_block(const QmmArgs& a, int n0, int nb) {
  const int K = a.K, groups = K / a.group, blocks_per_group = a.group / kBlock;
  const size_t row_bytes = (size_t)K * B / 8;
  const uint8_t* w = reinterpret_cast<const uint8_t*>(a.w) + (size_t)n0 * row_bytes;
  const float* sc = a.scales + (size_t)n0 * groups;
  const float* bi = a.biases + (size_t)n0 * groups;
  vf acc[kStep] = {};
  for (int g = 0; g < groups; ++g) {
    vf s[kStep], b[kStep];
    for (int j = 0; j < nb; ++j) {
      s[j] = (vf){} + sc[(size_t)j * groups + g];
      b[j] = (vf){} + bi[(size_t)j * groups + g];
    }
    for (int blk = 0; blk < blocks_per_group; ++blk) {
      const int k = (g * blocks_per_group + blk) * kBlock;
      vf xv[kVecs];
      for (int v = 0; v < kVecs; ++v) xv[v] = loadv(a.x + k + v * L);
      for (int j = 0; j < nb; ++j) {
        const uint8_t* wj = w + (size_t)j * row_bytes + (size_t)k * B / 8;
        __builtin_prefetch(wj + kPrefetch);  // the hardware prefetcher alone falls behind
        vf codes[kVecs];
        block_codes<B>(wj, codes);
        for (int v = 0; v < kVecs; ++v) acc[j] = fmav(xv[v], fmav(codes[v], s[j], b[j]), acc[j]);
      }
    }
  }
  for (int j = 0; j < nb; ++j) a.out[n0 + j] = hsum(acc[j]);
}

// MR rows of x (from `x`, row stride K) times NC dequantized weight rows (from `w`, row stride
// kChunk) over `kc` values of k, accumulating into `acc` (L floats per accumulator, row stride
// kPanel accumulators). The accumulators live in registers for the chunk (the loops unroll at
// compile time).
template <int MR, int NC>
static inline void tile(const float* x, size_t K, const float* w, int kc, float* acc) {
  vf c[MR][NC];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NC; ++j) c[r][j] = loadv(acc + ((size_t)r * kPanel + j) * L);
  for (int k = 0; k < kc; k += L) {
    vf xv[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) xv[r] = loadv(x + (size_t)r * K + k);
#pragma GCC unroll 4
    for (int j = 0; j < NC; ++j) {
      const vf wv = loadv(w + (size_t)j * kChunk + k);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) c[r][j] = fmav(xv[r], wv, c[r][j]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NC; ++j) storev(acc + ((size_t)r * kPanel + j) * L, c[r][j]);
}

template <int MR>
static inline void tile_cols(int nc, const float* x, size_t K, const float* w, int kc, float* acc) {
  switch (nc) {
    case 4: tile<MR, 4>(x, K, w, kc, acc); break;
    case 3: tile<MR, 3>(x, K, w, kc, acc); break;
    case 2: tile<MR, 2>(x, K, w, kc, acc); break;
    default: tile<MR, 1>(x, K, w, kc, acc); break;
  }
}

// Fewer rows than a full tile (1 to kRows - 1).
static inline void rest_rows(int rows, int nc, const float* x, size_t K, const float* w, int kc, float* acc) {
  switch (rows) {
    case 1: tile_cols<1>(nc, x, K, w, kc, acc); break;
    case 2: tile_cols<2>(nc, x, K, w, kc, acc); break;
#if QMM_LANES == 16
    case 3: tile_cols<3>(nc, x, K, w, kc, acc); break;
    case 4: tile_cols<4>(nc, x, K, w, kc, acc); break;
    default: tile_cols<5>(nc, x, K, w, kc, acc); break;
#else
    default: tile_cols<2>(nc, x, K, w, kc, acc); break;
#endif
  }
}

// Several rows: weight rows [n0, n0 + np) against every row of x, k in chunks. Each chunk of the
// panel is dequantized once into `wbuf` (L1), and every row of x streams through it; each (row,
// column) keeps its accumulator in `acc` between chunks, so the sum runs over k in the same
// order as in a decode step.
template <int B>
void panel(const QmmArgs& a, int n0, int np, std::vector<float>& wbuf, std::vector<float>& acc) {
  const int M = a.M, K = a.K, G = a.group, groups = K / G;
  const size_t row_bytes = (size_t)K * B / 8;
  const uint8_t* w = reinterpret_cast<const uint8_t*>(a.w) + (size_t)n0 * row_bytes;
  const float* sc = a.scales + (size_t)n0 * groups;
  const float* bi = a.biases + (size_t)n0 * groups;
  wbuf.resize((size_t)kPanel * kChunk);
  acc.assign((size_t)M * kPanel * L, 0.0f);
  for (int k0 = 0; k0 < K; k0 += kChunk) {
    const int kc = K - k0 < kChunk ? K - k0 : kChunk;
    for (int j = 0; j < np; ++j) {
      float* dst = wbuf.data() + (size_t)j * kChunk;
      for (int k = k0; k < k0 + kc; k += kBlock) {
        const int g = k / G;
        const vf s = (vf){} + sc[(size_t)j * groups + g], b = (vf){} + bi[(size_t)j * groups + g];
        vf codes[kVecs];
        block_codes<B>(w + (size_t)j * row_bytes + (size_t)k * B / 8, codes);
        for (int v = 0; v < kVecs; ++v) storev(dst + (k - k0) + v * L, fmav(codes[v], s, b));
      }
    }
    int m = 0;
    for (; m + kRows <= M; m += kRows) {
      for (int j = 0; j < np; j += kCols) {
        const int nc = np - j < kCols ? np - j : kCols;
        tile_cols<kRows>(nc, a.x + (size_t)m * K + k0, K, wbuf.data() + (size_t)j * kChunk, kc,
                         acc.data() + ((size_t)m * kPanel + j) * L);
      }
    }
    if (m < M) {  // the last rows, fewer than a tile
      for (int j = 0; j < np; j += kCols) {
        const int nc = np - j < kCols ? np - j : kCols;
        rest_rows(M - m, nc, a.x + (size_t)m * K + k0, K, wbuf.data() + (size_t)j * kChunk, kc,
                  acc.data() + ((size_t)m * kPanel + j) * L);
      }
    }
  }
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < np; ++j)
      a.out[(size_t)m * a.N + n0 + j] = hsum(loadv(acc.data() + ((size_t)m * kPanel + j) * L));
}

// Every block of columns, split between threads (OpenMP, when the build has it).
template <int B>
void qmm_all(const QmmArgs& args) {
  QmmArgs a = args;
  std::vector<float> permuted;
  if constexpr (B == 4) {
    permuted.resize((size_t)a.M * a.K);
    permute_for_4bit(a.x, permuted.data(), permuted.size());
    a.x = permuted.data();
  }
  const bool parallel = (double)a.N * a.K * (a.M < 4 ? a.M : 4) > 1 << 16;
  (void)parallel;
  if (a.M == 1) {
    const int blocks = (a.N + kStep - 1) / kStep;
#pragma omp parallel for schedule(static) if (parallel)
    for (int i = 0; i < blocks; ++i) {
      const int n0 = i * kStep;
      decode_block<B>(a, n0, a.N - n0 < kStep ? a.N - n0 : kStep);
    }
    return;
  }
  const int panels = (a.N + kPanel - 1) / kPanel;
#pragma omp parallel if (parallel)
  {
    static thread_local std::vector<float> wbuf;
    static thread_local std::vector<float> acc;  // L floats per accumulator
#pragma omp for schedule(static)
    for (int i = 0; i < panels; ++i) {
      const int n0 = i * kPanel;
      panel<B>(a, n0, a.N - n0 < kPanel ? a.N - n0 : kPanel, wbuf, acc);
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
