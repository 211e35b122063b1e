// Products of 4, 5, 6 and 8-bit codes in bands of 16 weight rows (included by qmm_kernel.h inside
// its per-target namespace, after the vectors and the activations).
//
// A band is 16 weight rows (output columns n0..n0+15) side by side: each 64 bytes of its codes
// hold the same 4 bytes of one block of all 16 rows (lane c: row n0 + c), and each 16 of its
// scales (or biases) one group of all 16 rows (BandView: repacked so at load, or copied so at
// each product). Every lane then computes one output: the products of a block are dot products of
// its lanes against the same 4 values of x at a time (x's bytes broadcast), and one fma per block
// scales them. So for each (m, n), in every build:
//
//     acc = 0
//     for each block b (32 codes) in order:
//         acc = fma(float(sum of the block's code * xq, exact in int32), scale[n, g] * dx[m, b], acc)
//         at the last block of group g: acc = fma(bias[n, g], sums[m, g], acc)
//     out[m, n] = acc (+ bias[n])
//
// with sums[m, g] the group's sum of x as rounded (Activations::sums). Nothing depends on the
// rows of x beside m: a verify pass gives each token the bits a decode step would. The quads
// (qmm_quads.h's tile) convert, scale and accumulate 16 lanes per quad for every (m, n), four
// lanes per block; a band does it once per block for 16 outputs, a quarter of the fp32 work, and
// unpacks each block's codes once for all the rows of a tile (up to 16): on an AVX-512 EPYC its
// in-cache ceiling for 4-bit codes is 332 GMAC/s against the quads' 168
// (benchmarks/engine/quantized_kernel.py). x's 4-byte words go to their broadcasts straight from
// memory (a load each); through a general register each cost two vector-pipe instructions beside
// its dpbusd, and the ceiling was 296.
//
// x's bytes in a block are ordered as the band takes them: for 8-bit codes as they come; for
// 4-bit codes, whose 64-byte loads give the low nibbles (even k) and the high nibbles (odd k)
// apart, each 8 values k..k+7 as k, k+2, k+4, k+6, then k+1, k+3, k+5, k+7; and a block of all
// the rows side by side (Activations), so that a tile finds its rows' at fixed offsets. A block of
// 5-bit (6-bit) codes is 5 (6) chunks: 4 of their low 4 bits, taken as 4-bit codes are, then a
// plane per higher bit, each bit added to its code's byte by a shift, a mask and an or
// (band_codes.h: the repacking at load, or at each product, puts them in that order); x's order is
// the 4-bit one.
#pragma once

constexpr int kBand = kLanes;  // weight rows in a band

// Rows of x a band tile takes at once, and whether a block's codes are all loaded before the
// rows meet them (else a pair of chunks at a time, each row keeping its block's sum): AVX-512's
// 32 registers hold 16 rows' accumulators beside all of a block's codes.
#if defined(QMM_BAND_ROWS)
constexpr int kBandRows = QMM_BAND_ROWS;
constexpr bool kWholeBlock = QMM_BAND_WHOLE;
#elif defined(__AVX512F__)
constexpr int kBandRows = 16;
constexpr bool kWholeBlock = true;
#else  // AVX2's 16 registers: 4 rows (measured against 2, 3, 6 and 8), a pair of chunks at a time
constexpr int kBandRows = 4;
constexpr bool kWholeBlock = false;
#endif

// One band's codes, scales and biases: codes, per block, B chunks of 64 bytes, chunk h holding in
// lane c the bytes 4h..4h+3 of row c's block; scales and biases as stored (fp32, fp16 or bf16),
// per group 16 of them, lane c row c's. A weight repacked at load (repack_bands: every band so,
// one after the other) is read where it lies; one in MLX's layout is copied so, band by band.
struct BandView {
  const uint32_t* codes;
  const void* scales;
  const void* biases;
};

// 16 scales (or biases) from element `i` of `p`, as fp32.
template <ScaleType T>
static inline Floats band_scales(const void* p, size_t i) {
  if constexpr (T == ScaleType::f32) {
    return load_floats(static_cast<const float*>(p) + i);
#if defined(__AVX512F__)
  } else if constexpr (T == ScaleType::f16) {
    // Converted as loaded: through memory (two 32-byte stores, then a 64-byte load) the load
    // waited for the stores (benchmarks/results/2026-11-30-linux-x86_64-2cpu-epyc-vnni-bands).
    return load_halves(static_cast<const uint16_t*>(p) + i);
#endif
  } else {
    alignas(64) float f[kBand];
    scales_to_float<T>(static_cast<const uint16_t*>(p) + i, kBand, f);
    return load_floats(f);
  }
}

// Band `i` of a weight in MLX's layout, copied into `store` (rows past the weight's last: zeros).
template <int B, ScaleType T>
static BandView copy_band(const QmmArgs& a, int i, Lines<uint32_t>& store) {
  const int n0 = kBand * i, rows = std::min(kBand, a.N - n0), groups = a.K / a.group;
  const size_t words = (size_t)a.K * B / 32, elements = (size_t)groups * kBand;
  const size_t scale_words = T == ScaleType::f32 ? elements : elements / 2;  // 2 or 4 bytes each
  store.assign(words * kBand + 2 * scale_words, 0u);
  uint32_t* codes = store.data();
  for (int c = 0; c < rows; ++c) {
    const uint32_t* w = a.w + (size_t)(n0 + c) * words;
    if constexpr (has_planes(B)) {  // each block's words in a band's order (band_codes.h)
      for (size_t d = 0; d < words; d += B) {
        uint32_t block[B];
        band_block<B>(w + d, block);
        for (int t = 0; t < B; ++t) codes[(d + t) * kBand + c] = block[t];
      }
    } else {
      for (size_t d = 0; d < words; ++d) codes[d * kBand + c] = w[d];
    }
  }
  void* scales = codes + words * kBand;
  void* biases = codes + words * kBand + scale_words;
  for (int which = 0; which < 2; ++which) {
    const void* from = which ? a.biases : a.scales;
    void* to = which ? biases : scales;
    for (int c = 0; c < rows; ++c)
      for (int g = 0; g < groups; ++g) {
        const size_t at = (size_t)(n0 + c) * groups + g, into = (size_t)g * kBand + c;
        if constexpr (T == ScaleType::f32)
          static_cast<float*>(to)[into] = static_cast<const float*>(from)[at];
        else
          static_cast<uint16_t*>(to)[into] = static_cast<const uint16_t*>(from)[at];
      }
  }
  return {codes, scales, biases};
}

// Band `i` of a weight repacked at load.
template <int B, ScaleType T>
static BandView repacked_band(const QmmArgs& a, int i) {
  const size_t words = (size_t)a.K * B / 32, groups = a.K / a.group, bytes = T == ScaleType::f32 ? 4 : 2;
  const size_t first = (size_t)kBand * i;
  return {a.w + first * words, static_cast<const char*>(a.scales) + first * groups * bytes,
          static_cast<const char*>(a.biases) + first * groups * bytes};
}

// MR rows of x (from m0) against a band (outputs n0..n0+15, of which `rows` are the weight's).
template <int B, ScaleType T, int MR>
static void band_tile(const QmmArgs& a, const Activations& xa, const BandView& band, int m0, int n0, int rows) {
  const int blocks = a.K / kBlock, per_group = a.group / kBlock;
  const uint8_t* codes = reinterpret_cast<const uint8_t*>(band.codes);
  Floats acc[MR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) acc[r] = zeros();  // unrolled: register moves (rolled: a memset)
  const size_t M = xa.rows;
  // Pair h of a block's chunks: for 4 bits a load's low and high nibbles (for 5 and 6 bits with
  // their higher bits added from the planes after them), for 8 bits two loads.
  auto pair = [](const uint8_t* p, int h, Bytes& first, Bytes& second) {
    if constexpr (kNibbles<B>) {
      nibble_pair(p + 64 * h, first, second);
      for (int bit = 4; bit < B; ++bit) {
        const Bytes plane = load_bytes(p + 64 * bit);
        first = high_bits(first, plane, 2 * h, bit), second = high_bits(second, plane, 2 * h + 1, bit);
      }
    } else {
      first = load_bytes(p + 128 * h), second = load_bytes(p + 128 * h + 64);
    }
  };
  for (int b = 0; b < blocks; ++b) {
    const uint8_t* p = codes + (size_t)b * B * 64;
#pragma GCC unroll 8
    for (int line = 0; line < B * 64; line += 64) __builtin_prefetch(p + kPrefetch + line, 0, 1);
    const int g = b / per_group;
    const Floats scale = band_scales<T>(band.scales, (size_t)g * kBand);
    const bool group_ends = b % per_group == per_group - 1;
    const Floats bias = group_ends ? band_scales<T>(band.biases, (size_t)g * kBand) : zeros();
    const int8_t* x = xa.q.data() + ((size_t)b * M + m0) * kBlock;  // the tile's rows of block b
    const float* dx = xa.dx.data() + (size_t)b * M + m0;
    auto finish = [&](int r, Ints sum) {  // row r's block sum, scaled into its accumulator
      acc[r] = fmadd(to_floats(sum), mul(scale, splat(dx[r])), acc[r]);
    };
    if constexpr (kWholeBlock) {  // each row against all of the block's codes, then the next row
      Bytes chunk[8];
#pragma GCC unroll 4
      for (int h = 0; h < 4; ++h) pair(p, h, chunk[2 * h], chunk[2 * h + 1]);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        // Pair h meets the row's bytes 8h..8h+3 and 8h+4..8h+7; pairs 0 and 2 and pairs 1 and 3
        // sum apart (two chains of dependent dot products, each half as long, exact in int32),
        // then together.
        Ints sum[2] = {zero_ints(), zero_ints()};
#pragma GCC unroll 4
        for (int h = 0; h < 4; ++h) {
          const int8_t* xr = x + r * kBlock + 8 * h;
          sum[h % 2] = band_dot<B>(sum[h % 2], chunk[2 * h], xr, chunk[2 * h + 1], xr + 4);
        }
        finish(r, add_ints(sum[0], sum[1]));
      }
    } else {  // a pair of chunks at a time against every row
      Ints sum[MR];
      for (int r = 0; r < MR; ++r) sum[r] = zero_ints();
#pragma GCC unroll 4
      for (int h = 0; h < 4; ++h) {
        Bytes first, second;
        pair(p, h, first, second);
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
          const int8_t* xr = x + r * kBlock + 8 * h;
          sum[r] = band_dot<B>(sum[r], first, xr, second, xr + 4);
        }
      }
      for (int r = 0; r < MR; ++r) finish(r, sum[r]);
    }
    if (group_ends) {  // the bias term, after the group's last products (each row's order as above)
      const float* sums = xa.sums.data() + (size_t)g * M + m0;
      for (int r = 0; r < MR; ++r) acc[r] = fmadd(bias, splat(sums[r]), acc[r]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    // A whole band's outputs are stored where they go; a last band's through `part`.
    float* to = a.out + (size_t)(m0 + r) * a.N + n0;
    alignas(64) float part[kBand];
    float* into = rows == kBand ? to : part;
    store_floats(into, acc[r]);
    if (a.bias)
      for (int c = 0; c < rows; ++c) into[c] += a.bias[n0 + c];
    if (into == part) std::memcpy(to, part, (size_t)rows * sizeof(float));
  }
}

// Every row of x against one band, in tiles of kBandRows rows, then 8, 4, 2 and 1.
template <int B, ScaleType T>
static void band_rows(const QmmArgs& a, const Activations& xa, const BandView& band, int n0) {
  const int rows = std::min(kBand, a.N - n0);
  int m = 0;
  for (; m + kBandRows <= a.M; m += kBandRows) band_tile<B, T, kBandRows>(a, xa, band, m, n0, rows);
  if constexpr (kBandRows > 8)
    if (a.M - m >= 8) band_tile<B, T, 8>(a, xa, band, m, n0, rows), m += 8;
  if constexpr (kBandRows > 4)
    if (a.M - m >= 4) band_tile<B, T, 4>(a, xa, band, m, n0, rows), m += 4;
  if (a.M - m >= 2) band_tile<B, T, 2>(a, xa, band, m, n0, rows), m += 2;
  if (a.M - m == 1) band_tile<B, T, 1>(a, xa, band, m, n0, rows);
}

// The whole product in bands, split between threads.
template <int B, ScaleType T>
static void band_product(const QmmArgs& a, const Activations& xa, bool parallel) {
  const int bands = (a.N + kBand - 1) / kBand;
  auto one = [&](int64_t i) {
    thread_local Lines<uint32_t> store;
    const BandView band = a.banded ? repacked_band<B, T>(a, i) : copy_band<B, T>(a, i, store);
    band_rows<B, T>(a, xa, band, kBand * (int)i);
  };
  parallel_for(bands, split_grain(bands, parallel), one);
}
