// What the CPU and the kernel's tiles reach, timed (included by qmm_kernel.h inside its
// per-target namespace, last): the kernel's in-cache ceiling (its own tiles on operands in L1),
// the CPU's int8 peak (its widest int8 multiply-add alone) and that peak beside a band's fp32 work
// (the most a product in the bands' format reaches). Each runs on every thread at once for about
// the seconds asked and returns multiply-adds per second, all threads together.
#pragma once

// An instruction 12 times, its destination register 0 to 11 (`op` ends with the register prefix).
#define QMM_PEAK_12(op) \
  op "0\n\t" op "1\n\t" op "2\n\t" op "3\n\t" op "4\n\t" op "5\n\t" op "6\n\t" op "7\n\t" op "8\n\t" op "9\n\t" op "10\n\t" op "11"

// One row of a band's block (scaled_peak_block), as band_tile computes it: 8 dpbusd of the codes
// %[a] and x's word %[x] (broadcast from memory) into zmm12, the sum converted, the scale %[scale]
// times x's step %[step] (broadcast), and two fmas into the accumulator `acc`: the scaled sum, and
// the bias %[bias] times x's sum (here the step again).
#define QMM_DPBUSD "vpdpbusd %[x]%{1to16%}, %[a], %%zmm12\n\t"
#define QMM_SCALED_ROW(acc)                                                                                \
  "vpxord %%zmm12, %%zmm12, %%zmm12\n\t" QMM_DPBUSD QMM_DPBUSD QMM_DPBUSD QMM_DPBUSD QMM_DPBUSD QMM_DPBUSD \
      QMM_DPBUSD QMM_DPBUSD "vcvtdq2ps %%zmm12, %%zmm13\n\t"                                                \
      "vmulps %[step]%{1to16%}, %[scale], %%zmm14\n\t"                                                     \
      "vfmadd231ps %%zmm14, %%zmm13, %%zmm" acc "\n\t"                                                     \
      "vfmadd231ps %[step]%{1to16%}, %[bias], %%zmm" acc "\n\t"
#define QMM_SCALED_16                                                                                        \
  QMM_SCALED_ROW("16") QMM_SCALED_ROW("17") QMM_SCALED_ROW("18") QMM_SCALED_ROW("19") QMM_SCALED_ROW("20") \
  QMM_SCALED_ROW("21") QMM_SCALED_ROW("22") QMM_SCALED_ROW("23") QMM_SCALED_ROW("24") QMM_SCALED_ROW("25") \
  QMM_SCALED_ROW("26") QMM_SCALED_ROW("27") QMM_SCALED_ROW("28") QMM_SCALED_ROW("29") QMM_SCALED_ROW("30") \
  QMM_SCALED_ROW("31")

#if defined(__AVX512F__)

// The CPU's int8 peak (int8_peak_rate): a block of its widest int8 multiply-add alone, here VNNI's
// dpbusd (64 products each), on operands in registers, in assembly (as intrinsics, GCC kept such
// accumulators in memory); returns the multiply-adds done.
constexpr bool kHasPeak = true;
static inline double peak_block() {
  const __m512i a = _mm512_set1_epi8(3), x = _mm512_set1_epi8(-5);
  for (int i = 0; i < 4096; ++i)  // 12 accumulators: more than its latency times its ports
    __asm__ volatile(QMM_PEAK_12("vpdpbusd %1, %0, %%zmm")
                     :
                     : "v"(a), "v"(x)
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11");
  return 4096.0 * 12 * 64;
}

// The same peak with a band's arithmetic around it (int8_peak_rate's `scaled`): per row of a block,
// its 8 dpbusd into a block sum, then the sum converted, the scale times x's step, and two fmas (the
// scaled sum, the group's bias times x's sum), 16 rows into 16 accumulators, in assembly (the
// registers, loads and broadcasts band_tile uses, without its code loads); returns the
// multiply-adds done: what band_tile's in-cache ceiling can reach, up to the timings' noise.
constexpr bool kHasScaledPeak = true;
static inline double scaled_peak_block() {
  // Each row's sum is -480 (8 dpbusd of 4 products 3 * -5), and the bias 480 times the step takes
  // back what the scaled sum adds: the accumulators stay small normal numbers.
  const __m512i a = _mm512_set1_epi8(3);
  const __m512 scale = _mm512_set1_ps(1.0f), bias = _mm512_set1_ps(480.0f);
  const int32_t x = -0x04040405;  // four bytes of -5
  const float step = 1e-6f;
  for (int i = 0; i < 256; ++i)
    __asm__ volatile(QMM_SCALED_16
                     :
                     : [a] "v"(a), [scale] "v"(scale), [bias] "v"(bias), [x] "m"(x), [step] "m"(step)
                     : "xmm12", "xmm13", "xmm14", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22",
                       "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31");
  return 256.0 * 16 * 8 * 64;
}

#elif defined(__AVX2__)

// The CPU's int8 peak (int8_peak_rate): a block of maddubs alone (32 int8 products each, summed in
// pairs; AVX-VNNI's dpbusd takes as many per instruction), 12 independent ones at a time on operands
// in registers, in assembly (as intrinsics the compiler would compute them once for all); returns
// the multiply-adds done.
constexpr bool kHasPeak = true;
static inline double peak_block() {
  const __m256i a = _mm256_set1_epi8(3), x = _mm256_set1_epi8(-5);
  for (int i = 0; i < 4096; ++i)
    __asm__ volatile(QMM_PEAK_12("vpmaddubsw %1, %0, %%ymm")
                     :
                     : "x"(a), "x"(x)
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11");
  return 4096.0 * 12 * 32;
}

// Not timed here: AVX2's bands take 4 rows at a time, in halves (scaled_peak_block: AVX-512 only).
constexpr bool kHasScaledPeak = false;
static inline double scaled_peak_block() { return 0.0; }

#else

// No int8 peak measured here: the compiler's vector code has no one instruction to time.
constexpr bool kHasPeak = false;
static inline double peak_block() { return 0.0; }
constexpr bool kHasScaledPeak = false;
static inline double scaled_peak_block() { return 0.0; }

#endif

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
// a band of 16 weight rows for 4, 5, 6 and 8 bits, else kRows by kCols, over K = 1536, the default
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
