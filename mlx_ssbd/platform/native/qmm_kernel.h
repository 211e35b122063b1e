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
// would). 4-bit and 8-bit codes, the default models' widths, are multiplied in bands of 16 weight
// rows, one output per lane, each a chain of one fma per block (qmm_bands.h, which states that
// order). The other widths (2, 3, 5, 6 bits) go through quads, below.
//
// Quads: k runs in steps of 128 (four blocks, a "quad"); a quad's codes and x are two sets of 64
// bytes, A and B, laid out so that bytes 16t..16t+15 of each belong to block t. For each (m, n),
// 16 int32 lanes hold a quad's sums (lane i: bytes 4i..4i+3 of A and of B, so lanes 4t..4t+3 sum
// block t's 32 products), converted to fp32 and accumulated with fma(lanes, scale * dx, acc) quad
// after quad (scale and dx those of the lane's block); the bias term in 16 lanes too, lane i
// accumulating fma(bias, sum of the rounded x, acc) over groups i, i + 16, ... (zero-padded to a
// multiple of 16). At the end each set of lanes is summed (lane i and i + 8 added, then halves
// pairwise) and the bias term's sum added to the products'. Every build does exactly these
// operations (no contraction, -ffp-contract=off), so every path agrees bit for bit.
//
// Quad layout: A holds the first 16 k of each block and B the last 16, for the codes and for x
// when it is quantized. A last quad with fewer than four blocks is padded with zero codes and
// zero x.
//
// One source for every CPU, built once per target (each build names its namespace, QMM_NS):
// AVX-512 with VNNI, AVX2 with AVX-VNNI and AVX2/FMA on x86-64, chosen at run time by what the
// CPU has; NEON on aarch64 and plain code elsewhere (qmm_generic.cpp). The vectors of each
// target: qmm_simd.h.
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

// Where value i (0..31) of a block of x goes: for 4-bit codes the order a band takes them
// (qmm_bands.h), for every other width in order.
template <int B>
static constexpr int band_slot(int i) {
  if constexpr (B == 4) return 8 * (i / 8) + 4 * (i % 2) + (i % 8) / 2;
  return i;
}

#include "qmm_round.h"

template <int B>
constexpr bool kBanded = B == 4 || B == 8;  // the widths multiplied in bands (qmm_bands.h)

template <int B>
static void quantize_rows(const float* x, int M, int K, int group, Activations& a) {
  const int blocks = K / kBlock;
  a.quads = (blocks + 3) / 4;
  a.groups = K / group;
  a.rows = M;
  a.padded = padded_groups(a.groups + 3);  // a spread4 of the last quad's scales reads 4 groups
  a.q.assign((size_t)M * a.quads * kQuad, 0);
  a.dx.assign((size_t)M * a.quads * kLanes, 0.0f);
  a.sums.assign((size_t)M * a.padded, 0.0f);
#pragma omp parallel for schedule(static) if (M >= 8)
  for (int m = 0; m < M; ++m) {
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
  }
}

struct QmmArgs {
  const float* x;       // [M, K], rows contiguous
  const uint32_t* w;    // [N, K * bits / 32]
  const void* scales;   // [N, K / group], of ScaleType
  const void* biases;   // [N, K / group]
  const float* bias;    // [N], added to each row of out, or null
  float* out;           // [M, N]
  int M, N, K, group, bits;
  bool banded;          // w, scales and biases repacked in bands of 16 rows (qmm_bands.h), 4 and 8 bits
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

// NC weight rows from `w` (packed, `row_bytes` each) as quads of A and B bytes, `xa.quads` a row
// (the last quad zero-padded as in the products).
template <int B>
static void unpack_rows(const uint8_t* w, size_t row_bytes, int NC, int K, int quads, uint8_t* out) {
  const int full = K / kQuad, blocks = K / kBlock;
  for (int j = 0; j < NC; ++j)
    for (int u = 0; u < quads; ++u) {
      const uint8_t* p = w + (size_t)j * row_bytes + (size_t)u * 16 * B;
      Bytes codes_a, codes_b;
      if (u < full)
        quad_codes<B>(p, codes_a, codes_b);
      else
        last_quad_codes<B>(p, blocks - 4 * u, codes_a, codes_b);
      uint8_t* q = out + ((size_t)j * quads + u) * kQuad;
      store_bytes(q, codes_a);
      store_bytes(q + 64, codes_b);
    }
}

// MR rows of x (from row m0) by NC weight rows (from n0), over all of k. `scales` and `biases`:
// the NC rows' scales and biases as fp32, row after row, each `xa.padded` long (zero-padded).
// Unpacked: the NC rows are read from `unpacked`, as unpack_rows gives them, not from the weights.
template <int B, int MR, int NC, bool Unpacked>
static void tile(const QmmArgs& a, const Activations& xa, const float* scales, const float* biases, int m0, int n0,
                 const uint8_t* unpacked) {
  const int K = a.K, padded = xa.padded, full = K / kQuad, blocks = K / kBlock;
  const size_t row_bytes = (size_t)K * B / 8, unpacked_bytes = (size_t)xa.quads * kQuad;
  const uint8_t* w = reinterpret_cast<const uint8_t*>(a.w) + (size_t)n0 * row_bytes;
  // Lane i of a quad takes the scale of its block 4u + i / 4: group (4u + i / 4) / blocks per group,
  // spread from the 4 groups from (4u) / blocks per group.
  const int group_shift = a.group == 32 ? 0 : a.group == 64 ? 1 : 2;  // log2 of blocks per group
  int32_t spread[kLanes];
  for (int i = 0; i < kLanes; ++i) spread[i] = (i / 4) >> group_shift;
  const LaneIndex index = lane_index(spread);
  Floats acc[MR][NC];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NC; ++j) acc[r][j] = zeros();

  auto quad = [&](int u, auto last) {
    Bytes codes_a[NC], codes_b[NC];
    Floats scale[NC];
#pragma GCC unroll 8
    for (int j = 0; j < NC; ++j) {
      if constexpr (Unpacked) {
        const uint8_t* p = unpacked + (size_t)j * unpacked_bytes + (size_t)u * kQuad;
        codes_a[j] = load_bytes(p);
        codes_b[j] = load_bytes(p + 64);
      } else {
        const uint8_t* p = w + (size_t)j * row_bytes + (size_t)u * 16 * B;
#pragma GCC unroll 4
        for (int line = 0; line < 16 * B; line += 64) __builtin_prefetch(p + kPrefetch + line, 0, 1);
        if constexpr (decltype(last)::value)
          last_quad_codes<B>(p, blocks - 4 * u, codes_a[j], codes_b[j]);
        else
          quad_codes<B>(p, codes_a[j], codes_b[j]);
      }
      scale[j] = spread4(scales + (size_t)j * padded + ((4 * u) >> group_shift), index);
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const size_t row = (size_t)(m0 + r) * xa.quads + u;
      const Bytes xq_a = load_bytes(xa.q.data() + row * kQuad);
      const Bytes xq_b = load_bytes(xa.q.data() + row * kQuad + 64);
      const Floats dx = load_floats(xa.dx.data() + row * kLanes);
#pragma GCC unroll 8
      for (int j = 0; j < NC; ++j) {  // the lanes' sums are exact in fp32: |sum| < 2**24
        const Ints lanes = dot2<B>(codes_a[j], xq_a, codes_b[j], xq_b);
        acc[r][j] = fmadd(to_floats(lanes), mul(scale[j], dx), acc[r][j]);
      }
    }
  };
  for (int u = 0; u < full; ++u) quad(u, std::false_type{});
  if (full < xa.quads) quad(full, std::true_type{});

  // The bias term, 16 groups at a time.
  Floats bias_acc[MR][NC];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NC; ++j) bias_acc[r][j] = zeros();
  for (int g = 0; g < padded; g += kLanes) {
    for (int r = 0; r < MR; ++r) {
      const Floats x_sums = load_floats(xa.sums.data() + (size_t)(m0 + r) * padded + g);
      for (int j = 0; j < NC; ++j)
        bias_acc[r][j] = fmadd(load_floats(biases + (size_t)j * padded + g), x_sums, bias_acc[r][j]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NC; ++j) {
      float product = hsum(acc[r][j]) + hsum(bias_acc[r][j]);
      if (a.bias) product += a.bias[n0 + j];
      a.out[(size_t)(m0 + r) * a.N + n0 + j] = product;
    }
}

// Every row of x against weight rows [n0, n0 + NC), in tiles of kRows rows by (up to) kCols.
template <int B, ScaleType T, int NC>
static void column_block(const QmmArgs& a, const Activations& xa, int n0) {
  const size_t groups = xa.groups, padded = xa.padded, bytes = T == ScaleType::f32 ? 4 : 2;
  thread_local Lines<float> converted;  // the NC rows' scales, then their biases, as fp32
  converted.resize(2 * NC * padded);
  // A decode step's blocks (and only theirs: with more rows of x the conversion is a small part,
  // and these lines in L1 made a 16-row pass slower): the scales and biases of the row whose codes
  // are prefetched now (kPrefetch bytes ahead), two streams of their own beside the codes that the
  // hardware prefetcher left to miss.
  if constexpr (NC == kDecodeCols) {
    const size_t ahead = std::max<size_t>(NC, (size_t)kPrefetch / ((size_t)a.K * B / 8));
    if (a.M == 1 && (size_t)n0 + ahead + NC <= (size_t)a.N) {
      for (const void* stored : {a.scales, a.biases}) {
        const char* first = static_cast<const char*>(stored) + ((size_t)n0 + ahead) * groups * bytes;
        for (size_t line = 0; line < NC * groups * bytes; line += 64) __builtin_prefetch(first + line, 0, 3);
        __builtin_prefetch(first + NC * groups * bytes - 1, 0, 3);
      }
    }
  }
  for (int i = 0; i < 2 * NC; ++i) {  // rows of scales, then rows of biases
    const int j = i % NC;
    const char* stored = static_cast<const char*>(i < NC ? a.scales : a.biases);
    float* row = converted.data() + i * padded;
    scales_to_float<T>(stored + ((size_t)n0 + j) * groups * bytes, groups, row);
    std::fill(row + groups, row + padded, 0.0f);
  }
  const float* scales = converted.data();
  const float* biases = scales + NC * padded;
  // Unpacked once where more than one tile of x will read them (on the AVX2 build unpacking was
  // 60% of a 64-row product of 5-bit codes).
  const uint8_t* unpacked = nullptr;
  const size_t unpacked_bytes = (size_t)xa.quads * kQuad;
  constexpr int R = kRows;
  if (a.M > R) {
    thread_local Lines<uint8_t> codes;  // here, so that a decode step never touches it
    codes.resize(NC * unpacked_bytes);
    const size_t row_bytes = (size_t)a.K * B / 8;
    unpack_rows<B>(reinterpret_cast<const uint8_t*>(a.w) + (size_t)n0 * row_bytes, row_bytes, NC, a.K, xa.quads,
                   codes.data());
    unpacked = codes.data();
  }
  // Tiles of TC weight rows, all NC of them against the same rows of x while those are in cache.
  constexpr int TC = NC < kCols ? NC : kCols;
  static_assert(NC % TC == 0, "a block of weight rows is whole tiles");
  auto rows = [&](auto mr, int m) {
    for (int j = 0; j < NC; j += TC) {
      const float *s = scales + (size_t)j * padded, *b = biases + (size_t)j * padded;
      if (unpacked) {
        tile<B, decltype(mr)::value, TC, true>(a, xa, s, b, m, n0 + j, unpacked + (size_t)j * unpacked_bytes);
        continue;
      }
      tile<B, decltype(mr)::value, TC, false>(a, xa, s, b, m, n0 + j, nullptr);
    }
  };
  int m = 0;
  for (; m + R <= a.M; m += R) rows(std::integral_constant<int, R>{}, m);
  if constexpr (kRows > 3) {
    if (a.M - m == 3) return rows(std::integral_constant<int, 3>{}, m);
  }
  if constexpr (kRows > 2) {
    if (a.M - m == 2) return rows(std::integral_constant<int, 2>{}, m);
  }
  if (a.M - m == 1) rows(std::integral_constant<int, 1>{}, m);
}

template <int B, ScaleType T, int NC>
static void columns(const QmmArgs& a, const Activations& xa, int n0) {
  const int nc = a.N - n0 < NC ? a.N - n0 : NC;
  if (nc == NC) return column_block<B, T, NC>(a, xa, n0);
  for (int j = 0; j < nc; ++j) column_block<B, T, 1>(a, xa, n0 + j);
}

// Weight rows [n0, n0 + cols) against every row of x, NC at a time.
template <int B, ScaleType T, int NC>
static void all_columns(const QmmArgs& a, const Activations& xa, bool parallel) {
  (void)parallel;
  const int blocks = (a.N + NC - 1) / NC;
#pragma omp parallel for schedule(static) if (parallel)
  for (int i = 0; i < blocks; ++i) columns<B, T, NC>(a, xa, i * NC);
}

#include "qmm_bands.h"

// The whole product, split between threads (OpenMP, when the build has it): in bands for 4 and 8
// bits, else by blocks of columns.
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

// Inside a parallel region: every thread starts together (a barrier), then calls `block` (which
// returns the multiply-adds it did) at least once and until about `seconds` have passed; this
// thread's multiply-adds per second. The one timing of in_cache_rate and int8_peak_rate.
template <class Block>
static double timed_rate(double seconds, Block block) {
  using clock = std::chrono::steady_clock;
#pragma omp barrier
  const auto start = clock::now();
  double done = 0.0, elapsed = 0.0;
  do {
    done += block();
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  } while (elapsed < seconds);
  return done / elapsed;
}

// The products' ceiling on this CPU for B-bit codes: the kernel's own tile (kBandRows rows of x by
// a band of 16 weight rows for 4 and 8 bits, else kRows by kCols, over K = 1536, the default
// model's hidden size) run again and again on operands already in L1, on every thread at once, for
// about `seconds`. Multiply-adds per second, all threads together: what the products would reach
// if reading the weights and the work around the tiles cost nothing
// (benchmarks/engine/quantized_kernel.py sets the real products against it).
template <int B>
static double in_cache_rate(double seconds) {
  constexpr bool banded = kBanded<B>;
  constexpr int K = 1536, R = banded ? kBandRows : kRows, C = banded ? kBand : kCols;
  double rate = 0.0;
#pragma omp parallel reduction(+ : rate)
  {
    uint32_t state = 0x9E3779B9u;
    auto next = [&] { return state = state * 1664525u + 1013904223u; };
    std::vector<float> x((size_t)R * K), out((size_t)R * C);
    for (float& v : x) v = (float)(int)(next() >> 24) / 128.0f - 1.0f;
    // The codes, then room for the prefetches ahead of them (never read).
    std::vector<uint8_t> w((size_t)C * K * B / 8 + kPrefetch + 16 * B * 4);
    for (uint8_t& v : w) v = (uint8_t)(next() >> 24);
    Activations xa;
    quantize_rows<B>(x.data(), R, K, 32, xa);
    Lines<float> scales((size_t)C * xa.padded, 0.01f), biases((size_t)C * xa.padded, -0.02f);
    const QmmArgs a{x.data(), reinterpret_cast<const uint32_t*>(w.data()), nullptr, nullptr, nullptr,
                    out.data(), R, C, K, 32, B, banded};
    const BandView band{a.w, scales.data(), biases.data()};
    rate = timed_rate(seconds, [&] {
      for (int i = 0; i < 256; ++i) {
        if constexpr (banded)
          band_tile<B, ScaleType::f32, R>(a, xa, band, 0, 0, C);
        else
          tile<B, R, C, false>(a, xa, scales.data(), biases.data(), 0, 0, nullptr);
      }
      return 256.0 * R * C * K;
    });
  }
  return rate;
}

// The ceiling of in_cache_rate for `bits`-bit codes, or 0 for a width the kernel does not know.
inline double in_cache_dispatch(int bits, double seconds) {
  switch (bits) {
    case 2: return in_cache_rate<2>(seconds);
    case 3: return in_cache_rate<3>(seconds);
    case 4: return in_cache_rate<4>(seconds);
    case 5: return in_cache_rate<5>(seconds);
    case 6: return in_cache_rate<6>(seconds);
    case 8: return in_cache_rate<8>(seconds);
    default: return 0.0;
  }
}

// The CPU's int8 peak: multiply-adds per second of its widest int8 multiply-add instruction alone
// (peak_block: AVX-512 VNNI's dpbusd, or on the AVX2 builds maddubs) on operands in registers, on
// every thread at once, for about `seconds`: what no product of int8 values beats on this CPU
// (in_cache_rate and the products are set against it). With `scaled`, the same instruction beside
// the fp32 work a band does per block and row (scaled_peak_block): what the bands' format (a scale
// and a bias per 32 codes, a step per 32 values of x) lets a product reach on this CPU. 0 where the
// build times no such block (the portable one; `scaled`: all but AVX-512).
inline double int8_peak_rate(double seconds, bool scaled) {
  if (!(scaled ? kHasScaledPeak : kHasPeak)) return 0.0;
  double rate = 0.0;
#pragma omp parallel reduction(+ : rate)
  rate = timed_rate(seconds, scaled ? scaled_peak_block : peak_block);
  return rate;
}

}  // namespace mlx_ssbd::QMM_NS
