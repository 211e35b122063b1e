// Quantized matrix products on the CPU: out[M, N] = x[M, K] @ dequantize(w)[N, K]^T.
//
// The weight is in MLX's affine layout: each row of w packs K codes of `bits` bits as a
// little-endian bit stream (uint32 words), and every `group` codes (32, 64 or 128) share a scale
// and a bias: w[n, k] = scales[n, k / group] * code + biases[n, k / group].
//
// The products are integer dot products, as llama.cpp computes them: each block of 32 values of a
// row of x is rounded to int8 steps of its own size (dx = max|x| / 127, ties to even), so that for
// a group g of weight row n
//     sum_k w[n, k] x[k] ~ scale[n, g] * sum_b dx_b * sum_{k in b} code[k] * xq[k]
//                          + bias[n, g] * sum_b dx_b * sum_{k in b} xq[k],
// the inner sums exact in int32 (u8 codes times s8 values: VNNI's dpbusd, AVX2's maddubs, or
// for 8-bit codes on AVX2 madd on both as int16). That is
// the product of the exact weights with x rounded to dx * xq: only x is rounded, by at most half a
// step of 1/127 of its block's largest value. (The bias term on the rounded x too: on x's exact sums
// the error would be sum_k (w[k] - bias) * e[k], with w - bias = scale * code 2-3 times larger than
// w itself.)
//
// The arithmetic is the same for every number of rows, so a row's result does not depend on the
// rows beside it (a verify pass of 16 tokens gives each token the logits a one-token decode step
// would). 4, 5, 6 and 8-bit codes (the shipped models' widths among them) are multiplied in bands
// of 16 weight rows, one output per lane, each a chain of one fma per block (qmm_bands.h, which
// states that order). The other widths (2 and 3 bits) go through quads (qmm_quads.h).
//
// One source for every CPU, built once per target (each build names its namespace, QMM_NS):
// AVX-512 with VNNI, AVX2 with AVX-VNNI and AVX2/FMA on x86-64, chosen at run time by what the
// CPU has; NEON on aarch64 and plain code elsewhere (qmm_generic.cpp). The vectors of each
// target: qmm_simd.h; x rounded for the products: qmm_round.h; what the CPU and the tiles reach,
// timed: qmm_rates.h.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <new>
#include <type_traits>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "band_codes.h"
#include "pool.h"

#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace mlx_ssbd::QMM_NS {

constexpr int kBlock = 32;  // x's rounding block (every supported group is whole blocks)
constexpr int kQuad = 128;  // k per step of the products: four blocks

#include "qmm_simd.h"

// How the scales and biases are stored.
enum class ScaleType { f32, f16, bf16 };

template <ScaleType T>
static inline float scale_at(const void* p, size_t i) {
  if constexpr (T == ScaleType::f32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (T == ScaleType::bf16) {
    const uint32_t bits = (uint32_t) static_cast<const uint16_t*>(p)[i] << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  } else {  // fp16, exactly (every fp16 is an fp32): its fields moved into fp32's
    const uint16_t h = static_cast<const uint16_t*>(p)[i];
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    if (exp == 0) {  // zero and subnormals: mant * 2**-24, exact
      const float magnitude = (float)mant * 0x1p-24f;
      return sign ? -magnitude : magnitude;
    }
    const uint32_t bits = sign | (exp == 31 ? 0x7F800000u : (exp + 112) << 23) | mant << 13;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
}

// `count` scales (or biases) from `p` as fp32.
template <ScaleType T>
static inline void scales_to_float(const void* p, size_t count, float* out) {
  if constexpr (T == ScaleType::f32) {
    std::memcpy(out, p, count * 4);
    return;
  }
  size_t i = 0;
#if defined(__F16C__)
  if constexpr (T == ScaleType::f16) {
    const uint16_t* h = static_cast<const uint16_t*>(p);
    for (; i + 8 <= count; i += 8)
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
    if (i + 4 <= count) {  // four more through one 8-byte load (a row of 28 groups ends so)
      _mm_storeu_ps(out + i, _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(h + i))));
      i += 4;
    }
    // The last 0-3 one by one, below (a zero-padded copy through memory converted as a set of 8
    // stalled every row of 28 groups, the 0.5B's, on a store forward).
  }
#endif
  for (; i < count; ++i) out[i] = scale_at<T>(p, i);
}

// A quad's 128 codes (16 * B bytes at `p`, every 8 codes filling exactly B bytes) as its A and B
// bytes: quarters 0 and 2 of each 64 codes are the blocks' first 16 k, quarters 1 and 3 the last.
template <int B>
static inline void quad_codes(const uint8_t* p, Bytes& a, Bytes& b) {
  split_quarters(unpack<B>(p), unpack<B>(p + 8 * B), a, b);
}

// The last quad of a row with fewer than four blocks: its `blocks` blocks, then zero codes.
template <int B>
static inline void last_quad_codes(const uint8_t* p, int blocks, Bytes& a, Bytes& b) {
  uint8_t padded[16 * B] = {};
  std::memcpy(padded, p, (size_t)blocks * 4 * B);
  quad_codes<B>(padded, a, b);
}

// Groups rounded up to whole sets of 16 (the bias term's lanes); the padding is zeros.
static inline int padded_groups(int groups) { return (groups + kLanes - 1) / kLanes * kLanes; }

// A vector whose data starts a 64-byte cache line. At malloc's 16-byte alignment x's quantized
// rows began 16 bytes past a line, so every 64-byte load (AVX-512) and every other 32-byte one
// (AVX2) crossed two lines; aligned, 16-row products through MLX ran 7-14% faster on the AVX-512
// build and 2-5% on the AVX2 one (64-row 8-bit products in a C++ harness: AVX2 19% faster).
template <class T>
struct LineAligned {
  using value_type = T;
  LineAligned() = default;
  template <class U>
  LineAligned(const LineAligned<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U>
  bool operator==(const LineAligned<U>&) const { return true; }
};
template <class T>
using Lines = std::vector<T, LineAligned<T>>;

// x, quantized for the products, per row: int8 values as each quad's A and B bytes (zero-padded
// to whole quads), each lane's dx (16 floats per quad) and, per group, the sum of the rounded x
// (for the bias term; zero-padded to whole sets of 16 groups, with room for the scales' spread4).
// For the widths multiplied in bands, block by block instead, every row's block side by side (a
// tile's rows at fixed offsets from one place): q [blocks, M, 32] in band order, dx [blocks, M],
// sums [groups, M].
struct Activations {
  int quads = 0, groups = 0, padded = 0, rows = 0;
  Lines<int8_t> q;      // [M, quads * 128]
  Lines<float> dx;      // [M, quads * 16]
  Lines<float> sums;    // [M, padded]
};

// The widths whose codes a band takes as nibbles (5 and 6-bit codes: their low 4 bits, band_codes.h).
template <int B>
constexpr bool kNibbles = B == 4 || has_planes(B);

// Where value i (0..31) of a block of x goes: for codes taken as nibbles the order a band takes
// them (qmm_bands.h), for every other width in order.
template <int B>
static constexpr int band_slot(int i) {
  if constexpr (kNibbles<B>) return 8 * (i / 8) + 4 * (i % 2) + (i % 8) / 2;
  return i;
}

#include "qmm_round.h"

template <int B>
constexpr bool kBanded = banded_width(B);  // the widths multiplied in bands (qmm_bands.h)

template <int B>
static void quantize_rows(const float* x, int M, int K, int group, Activations& a) {
  const int blocks = K / kBlock;
  a.quads = (blocks + 3) / 4;
  a.groups = K / group;
  a.rows = M;
  a.padded = padded_groups(a.groups + 3);  // a spread4 of the last quad's scales reads 4 groups
  if constexpr (kBanded<B>) {  // every value and step a band reads is written below: no zeros first
    a.q.resize((size_t)M * a.quads * kQuad);
    a.dx.resize((size_t)M * a.quads * kLanes);
  } else {  // quads read zero padding past the last block
    a.q.assign((size_t)M * a.quads * kQuad, 0);
    a.dx.assign((size_t)M * a.quads * kLanes, 0.0f);
  }
  a.sums.assign((size_t)M * a.padded, 0.0f);  // accumulated below
  parallel_for(M, M >= 8 ? 2 : M, [&](int64_t row_index) {
    const int m = (int)row_index;
    const float* row = x + (size_t)m * K;
    int8_t* q = a.q.data() + (size_t)m * a.quads * kQuad;
    float* dx = a.dx.data() + (size_t)m * a.quads * kLanes;
    float* sums = a.sums.data() + (size_t)m * a.padded;
    for (int b = 0; b < blocks; ++b) {
      const float* v = row + b * kBlock;
      const float amax = block_amax(v);
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      const float d = amax / 127.0f;
      const int quad = b / 4, t = b % 4, g = b * kBlock / group;
      // Banded widths: the block's 32 bytes in band order; otherwise the first 16 to A bytes
      // 16t.., the rest to B bytes 16t..
      int8_t* first = kBanded<B> ? a.q.data() + ((size_t)b * M + m) * kBlock : q + (size_t)quad * kQuad + 16 * t;
      int8_t* second = kBanded<B> ? first + 16 : first + 64;
      const int32_t total = round_block<B>(v, inv, first, second);
      float& sum = kBanded<B> ? a.sums[(size_t)g * M + m] : sums[g];
      sum = __builtin_fmaf(d, (float)total, sum);
      if constexpr (kBanded<B>)
        a.dx[(size_t)b * M + m] = d;
      else
        for (int i = 0; i < 4; ++i) dx[(size_t)quad * kLanes + 4 * t + i] = d;
    }
  });
}

struct QmmArgs {
  const float* x;       // [M, K], rows contiguous
  const uint32_t* w;    // [N, K * bits / 32]
  const void* scales;   // [N, K / group], of ScaleType
  const void* biases;   // [N, K / group]
  const float* bias;    // [N], added to each row of out, or null
  float* out;           // [M, N]
  int M, N, K, group, bits;
  bool banded;          // w, scales and biases repacked in bands of 16 rows (qmm_bands.h), 4, 5, 6 and 8 bits
};

// The tile shapes and the prefetch distance, chosen by measurement on the development machine
// (each may be set with -D for experiments): a register tile holds kRows rows of x by kCols
// weight rows, and kColBlock weight rows go through the tiles of each kRows rows of x in turn
// (while those rows are in L1: with AVX2's one weight row per tile, 8 rows made a 64-row product
// with K = 1536 9% faster on the AVX2 build and 16% on the AVX-VNNI one; no gain with AVX-512's
// 4); a one-row product (a decode step) takes kDecodeCols weight rows together (one row at a time
// streamed 10% faster here than four). Every
// 64-byte line of the weights is prefetched into L2 kPrefetch bytes ahead: the decode step's
// products (the default model's shapes, 1.2 GB) streamed at 23 GB/s with one prefetch into L1 per
// quad (half the lines of 8-bit codes) 2048 bytes ahead, at 26 GB/s so; the hardware prefetcher
// alone got 20 GB/s.
#ifndef QMM_DECODE_COLS
#define QMM_DECODE_COLS 1
#endif
#ifndef QMM_PREFETCH
#define QMM_PREFETCH 4096
#endif
constexpr int kDecodeCols = QMM_DECODE_COLS;
#if defined(QMM_TILE_ROWS)
constexpr int kRows = QMM_TILE_ROWS, kCols = QMM_TILE_COLS;
#elif defined(__AVX512F__)
constexpr int kRows = 4, kCols = 4;
#else  // AVX2's 16 registers (a weight row's quad is 4 of them) and the portable build
constexpr int kRows = 4, kCols = 1;
#endif
constexpr int kPrefetch = QMM_PREFETCH;  // bytes ahead of the weight reads
#if defined(QMM_COL_BLOCK)
constexpr int kColBlock = QMM_COL_BLOCK;
#elif defined(__AVX512F__)
constexpr int kColBlock = kCols;
#else
constexpr int kColBlock = 8;
#endif

#include "qmm_quads.h"
#include "qmm_bands.h"

// The whole product, split between threads (OpenMP, when the build has it): in bands for 4, 5, 6
// and 8 bits, else by blocks of columns.
template <int B, ScaleType T>
void qmm_all(const QmmArgs& a) {
  static thread_local Activations xa;
  quantize_rows<B>(a.x, a.M, a.K, a.group, xa);
  const bool parallel = (double)a.N * a.K * (a.M < 4 ? a.M : 4) > 1 << 16;
  if constexpr (kBanded<B>)
    band_product<B, T>(a, xa, parallel);
  else if (a.M == 1)
    all_columns<B, T, kDecodeCols>(a, xa, parallel);
  else
    all_columns<B, T, kColBlock>(a, xa, parallel);
}

template <ScaleType T>
static bool dispatch_bits(const QmmArgs& a) {
  switch (a.bits) {
    case 2: qmm_all<2, T>(a); return true;
    case 3: qmm_all<3, T>(a); return true;
    case 4: qmm_all<4, T>(a); return true;
    case 5: qmm_all<5, T>(a); return true;
    case 6: qmm_all<6, T>(a); return true;
    case 8: qmm_all<8, T>(a); return true;
    default: return false;
  }
}

// Returns false for a bit width it does not know.
inline bool qmm_dispatch(const QmmArgs& a, ScaleType scales) {
  switch (scales) {
    case ScaleType::f16: return dispatch_bits<ScaleType::f16>(a);
    case ScaleType::bf16: return dispatch_bits<ScaleType::bf16>(a);
    default: return dispatch_bits<ScaleType::f32>(a);
  }
}

#include "qmm_rates.h"

}  // namespace mlx_ssbd::QMM_NS
