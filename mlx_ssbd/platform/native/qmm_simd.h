// The vectors the quantized kernel computes with, one set per target (included by qmm_kernel.h
// inside its per-target namespace):
//
//   Bytes      64 bytes: 64 codes (u8) or 64 values of x (s8)
//   Ints       16 int32 lanes: dot products, lane i summing bytes 4i..4i+3 of two pairs
//   Floats     16 fp32 lanes
//   LaneIndex  which of 4 floats each of 16 lanes takes (spread4)
//
// AVX-512 holds each in one register (two dpbusd per 128 weights with VNNI; VBMI unpacks
// 2/3/5/6-bit codes), AVX2 in two 256-bit halves (maddubs + madd, or madd on int16 for 8-bit
// codes; AVX-VNNI's 256-bit dpbusd where the build has it), every other target in GCC/Clang
// vector extensions. Every operation is exact or one IEEE operation per lane (fma with one
// rounding), so every target computes the same bits.

constexpr int kLanes = 16;

// The 4 bytes of x at p as one 32-bit word (a broadcast reads it from memory: no general register).
static inline int32_t word(const int8_t* p) {
  int32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

#if defined(__AVX512F__)

struct Bytes { __m512i v; };
struct Ints { __m512i v; };
struct Floats { __m512 v; };

static inline Bytes load_bytes(const void* p) { return {_mm512_loadu_si512(p)}; }
static inline void store_bytes(void* p, Bytes a) { _mm512_storeu_si512(p, a.v); }
static inline Floats zeros() { return {_mm512_setzero_ps()}; }
static inline Floats load_floats(const float* p) { return {_mm512_loadu_ps(p)}; }
// 16 fp16 values at p as fp32 (exact), converted as loaded.
static inline Floats load_halves(const uint16_t* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
static inline void store_floats(float* p, Floats a) { _mm512_storeu_ps(p, a.v); }
static inline Floats mul(Floats a, Floats b) { return {_mm512_mul_ps(a.v, b.v)}; }
static inline Floats fmadd(Floats a, Floats b, Floats acc) { return {_mm512_fmadd_ps(a.v, b.v, acc.v)}; }
static inline Floats to_floats(Ints a) { return {_mm512_cvtepi32_ps(a.v)}; }
static inline Floats splat(float f) { return {_mm512_set1_ps(f)}; }
static inline Ints zero_ints() { return {_mm512_setzero_si512()}; }
static inline Ints add_ints(Ints a, Ints b) { return {_mm512_add_epi32(a.v, b.v)}; }

// acc plus, in lane i, the products of bytes 4i..4i+3 of a with the four bytes at xa (codes u8,
// x s8), and those of b with the four at xb: a band's dot products (every lane against the same x).
template <int B>
static inline Ints band_dot(Ints acc, Bytes a, const int8_t* xa, Bytes b, const int8_t* xb) {
  return {_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc.v, a.v, _mm512_set1_epi32(word(xa))), b.v,
                              _mm512_set1_epi32(word(xb)))};
}

struct LaneIndex { __m512i v; };
static inline LaneIndex lane_index(const int32_t* index) { return {_mm512_loadu_si512(index)}; }
// Lane i: s[index[i]], of the 4 floats at s.
static inline Floats spread4(const float* s, LaneIndex index) {
  return {_mm512_permutexvar_ps(index.v, _mm512_castps128_ps512(_mm_loadu_ps(s)))};
}

// Lane i: the products of bytes 4i..4i+3 of a and xa, plus those of b and xb (codes u8, x s8).
template <int B>
static inline Ints dot2(Bytes a, Bytes xa, Bytes b, Bytes xb) {
  return {_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), a.v, xa.v), b.v, xb.v)};
}

// Two sets of 64 bytes as 16-byte quarters: `first` a's quarters 0 and 2, then b's; `second`
// a's quarters 1 and 3, then b's.
static inline void split_quarters(Bytes a, Bytes b, Bytes& first, Bytes& second) {
  first = {_mm512_shuffle_i64x2(a.v, b.v, 0x88)};
  second = {_mm512_shuffle_i64x2(a.v, b.v, 0xDD)};
}

// 64 packed bytes of 4-bit codes: their low nibbles, and their high nibbles.
static inline void nibble_pair(const uint8_t* p, Bytes& low, Bytes& high) {
  const __m512i bytes = _mm512_loadu_si512(p), mask = _mm512_set1_epi8(0x0F);
  low = {_mm512_and_si512(bytes, mask)};
  high = {_mm512_and_si512(_mm512_srli_epi16(bytes, 4), mask)};
}

// A band's vector j (0..7) of codes with one of their higher bits added from its plane (band_codes.h):
// bit 8i + j of each lane of `plane` moved to bit `bit` of its byte i, as low | (shifted & mask).
static inline Bytes high_bits(Bytes low, Bytes plane, int j, int bit) {
  const __m128i count = _mm_cvtsi32_si128(j <= bit ? bit - j : j - bit);
  const __m512i moved = j <= bit ? _mm512_sll_epi32(plane.v, count) : _mm512_srl_epi32(plane.v, count);
  return {_mm512_ternarylogic_epi32(low.v, moved, _mm512_set1_epi8((char)(1 << bit)), 0xF8)};
}

// 64 codes of B bits (2, 3, 5 or 6) packed in 8 * B bytes, in order: qword i gathers the B bytes
// of codes 8i..8i+7 (vpermb), and byte j of it takes its bits from j * B (vpmultishiftqb).
template <int B>
static inline Bytes unpack(const uint8_t* p) {
  const __m512i data = _mm512_maskz_loadu_epi8((1ull << (8 * B)) - 1, p);  // no read past the codes
  alignas(64) static const auto tables = [] {
    struct { uint8_t gather[64], shift[64]; } t{};
    for (int i = 0; i < 64; ++i) t.gather[i] = (uint8_t)((i / 8) * B + i % 8), t.shift[i] = (uint8_t)((i % 8) * B);
    return t;
  }();
  const __m512i grouped = _mm512_permutexvar_epi8(_mm512_load_si512(tables.gather), data);
  const __m512i codes = _mm512_multishift_epi64_epi8(_mm512_load_si512(tables.shift), grouped);
  return {_mm512_and_si512(codes, _mm512_set1_epi8((1 << B) - 1))};
}

#elif defined(__AVX2__)

struct Bytes { __m256i lo, hi; };
struct Ints { __m256i lo, hi; };
struct Floats { __m256 lo, hi; };

static inline Bytes load_bytes(const void* p) {
  const __m256i* q = static_cast<const __m256i*>(p);
  return {_mm256_loadu_si256(q), _mm256_loadu_si256(q + 1)};
}
static inline void store_bytes(void* p, Bytes a) {
  __m256i* q = static_cast<__m256i*>(p);
  _mm256_storeu_si256(q, a.lo), _mm256_storeu_si256(q + 1, a.hi);
}
static inline Floats zeros() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline Floats load_floats(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
static inline void store_floats(float* p, Floats a) { _mm256_storeu_ps(p, a.lo), _mm256_storeu_ps(p + 8, a.hi); }
static inline Floats mul(Floats a, Floats b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
static inline Floats fmadd(Floats a, Floats b, Floats acc) {
  return {_mm256_fmadd_ps(a.lo, b.lo, acc.lo), _mm256_fmadd_ps(a.hi, b.hi, acc.hi)};
}
static inline Floats to_floats(Ints a) { return {_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
static inline Floats splat(float f) { return {_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
static inline Ints zero_ints() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
static inline Ints add_ints(Ints a, Ints b) { return {_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)}; }

struct LaneIndex { __m256i lo, hi; };
static inline LaneIndex lane_index(const int32_t* index) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(index)),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(index + 8))};
}
static inline Floats spread4(const float* s, LaneIndex index) {
  const __m256 four = _mm256_castps128_ps256(_mm_loadu_ps(s));
  return {_mm256_permutevar8x32_ps(four, index.lo), _mm256_permutevar8x32_ps(four, index.hi)};
}

#if !defined(__AVXVNNI__)
// 8-bit codes: maddubs would saturate on codes above 127, so each int32 lane's four bytes go
// through madd as int16, in two pairs, `first` (bytes 4i, 4i + 1) and `second` (4i + 2, 4i + 3):
// the codes zero-extended here, x's bytes as int16 pairs (band_dot).
// The byte of a 32-byte half that int16 element e (0..15) of its `first` (0) or `second` (1) pairs takes.
static constexpr int wide_source(int e, int second) { return 16 * (e / 8) + (e % 8 / 2) * 4 + 2 * second + e % 2; }

static inline __m256i widen_codes(__m256i bytes, int second) {
  alignas(32) static const auto masks = [] {
    struct { uint8_t m[2][32]; } t{};
    for (int which = 0; which < 2; ++which)
      for (int e = 0; e < 16; ++e) {
        // pshufb works within 16-byte lanes: the source byte's index in its lane, zero above it
        t.m[which][2 * e] = (uint8_t)(wide_source(e, which) % 16);
        t.m[which][2 * e + 1] = 0x80;
      }
    return t;
  }();
  return _mm256_shuffle_epi8(bytes, _mm256_load_si256(reinterpret_cast<const __m256i*>(masks.m[second])));
}

#endif

// Codes of fewer than 8 bits (8-bit codes: band_dot).
template <int B>
static inline __m256i dot2_half(__m256i a, __m256i xa, __m256i b, __m256i xb) {
  static_assert(B < 8);  // codes < 64: four products fit in int16 (4 * 63 * 127)
  const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(a, xa), _mm256_maddubs_epi16(b, xb));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

template <int B>
static inline Ints dot2(Bytes a, Bytes xa, Bytes b, Bytes xb) {
#if defined(__AVXVNNI__)  // AVX-VNNI (256-bit dpbusd): every width as AVX-512 computes it
  const __m256i z = _mm256_setzero_si256();
  return {_mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(z, a.lo, xa.lo), b.lo, xb.lo),
          _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(z, a.hi, xa.hi), b.hi, xb.hi)};
#else
  return {dot2_half<B>(a.lo, xa.lo, b.lo, xb.lo), dot2_half<B>(a.hi, xa.hi, b.hi, xb.hi)};
#endif
}

// acc plus, in lane i, the products of bytes 4i..4i+3 of a with the four bytes at xa, and those
// of b with the four at xb (band_dot of the AVX-512 build).
template <int B>
static inline Ints band_dot(Ints acc, Bytes a, const int8_t* xa, Bytes b, const int8_t* xb) {
#if defined(__AVXVNNI__)
  const __m256i va = _mm256_set1_epi32(word(xa)), vb = _mm256_set1_epi32(word(xb));
  return {_mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc.lo, a.lo, va), b.lo, vb),
          _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc.hi, a.hi, va), b.hi, vb)};
#else
  if constexpr (B == 8) {  // codes widened to int16 (widen_codes), x as int16 pairs
    auto pair = [](int32_t x, int second) {
      const int shift = 16 * second;
      const int16_t lo = (int8_t)(x >> shift), hi = (int8_t)(x >> (shift + 8));
      return _mm256_set1_epi32((int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16));
    };
    const int32_t wa = word(xa), wb = word(xb);
    const __m256i a0 = pair(wa, 0), a1 = pair(wa, 1), b0 = pair(wb, 0), b1 = pair(wb, 1);
    auto half = [&](__m256i acc_half, __m256i codes_a, __m256i codes_b) {
      const __m256i sa = _mm256_add_epi32(_mm256_madd_epi16(widen_codes(codes_a, 0), a0),
                                          _mm256_madd_epi16(widen_codes(codes_a, 1), a1));
      const __m256i sb = _mm256_add_epi32(_mm256_madd_epi16(widen_codes(codes_b, 0), b0),
                                          _mm256_madd_epi16(widen_codes(codes_b, 1), b1));
      return _mm256_add_epi32(acc_half, _mm256_add_epi32(sa, sb));
    };
    return {half(acc.lo, a.lo, b.lo), half(acc.hi, a.hi, b.hi)};
  } else {
    const __m256i va = _mm256_set1_epi32(word(xa)), vb = _mm256_set1_epi32(word(xb));
    return {_mm256_add_epi32(acc.lo, dot2_half<B>(a.lo, va, b.lo, vb)),
            _mm256_add_epi32(acc.hi, dot2_half<B>(a.hi, va, b.hi, vb))};
  }
#endif
}

static inline void split_quarters(Bytes a, Bytes b, Bytes& first, Bytes& second) {
  first = {_mm256_permute2x128_si256(a.lo, a.hi, 0x20), _mm256_permute2x128_si256(b.lo, b.hi, 0x20)};
  second = {_mm256_permute2x128_si256(a.lo, a.hi, 0x31), _mm256_permute2x128_si256(b.lo, b.hi, 0x31)};
}

// 64 codes of B bits (2, 3, 5 or 6) packed in 8 * B bytes, in order, 16 at a time: their 2 * B
// bytes loaded into both halves of a register (never past the 8 * B: the last loads end at the
// chunk's end), each code's two bytes gathered into an int16 lane (pshufb), shifted so that its
// B bits are the lane's top ones (mullo by 2**(16 - B - its bit offset)) and shifted down, then
// the four sets of 16 packed to bytes. Vector instructions only: BMI2's pdep, the scalar way, is
// microcoded (hundreds of cycles) on AMD before Zen 3.
template <int B>
static inline Bytes unpack(const uint8_t* p) {
  struct Tables { uint8_t gather[4][32]; int16_t shift[16]; int base[4]; };
  alignas(32) static const Tables t = [] {
    Tables out{};
    for (int g = 0; g < 4; ++g) {
      out.base[g] = std::min(2 * B * g, 8 * B - 16);  // the 16 bytes loaded for codes 16g..16g+15
      for (int c = 0; c < 16; ++c) {
        const int byte = B * (16 * g + c) / 8;
        out.gather[g][2 * c] = (uint8_t)(byte - out.base[g]);
        out.gather[g][2 * c + 1] = byte + 1 < 8 * B ? (uint8_t)(byte + 1 - out.base[g]) : 0x80;  // 0x80: zero
      }
    }
    for (int c = 0; c < 16; ++c) out.shift[c] = (int16_t)(1 << (16 - B - B * c % 8));  // the offset repeats every 8 codes
    return out;
  }();
  const __m256i shift = _mm256_load_si256(reinterpret_cast<const __m256i*>(t.shift));
  __m256i sixteen[4];
  for (int g = 0; g < 4; ++g) {
    const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + t.base[g])));
    const __m256i pairs = _mm256_shuffle_epi8(bytes, _mm256_load_si256(reinterpret_cast<const __m256i*>(t.gather[g])));
    sixteen[g] = _mm256_srli_epi16(_mm256_mullo_epi16(pairs, shift), 16 - B);
  }
  // packus interleaves the halves: codes 0-7, 16-23 | 8-15, 24-31, put in order by vpermq
  return {_mm256_permute4x64_epi64(_mm256_packus_epi16(sixteen[0], sixteen[1]), 0xD8),
          _mm256_permute4x64_epi64(_mm256_packus_epi16(sixteen[2], sixteen[3]), 0xD8)};
}

static inline void nibble_pair(const uint8_t* p, Bytes& low, Bytes& high) {
  const __m256i first = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i second = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
  const __m256i mask = _mm256_set1_epi8(0x0F);
  low = {_mm256_and_si256(first, mask), _mm256_and_si256(second, mask)};
  high = {_mm256_and_si256(_mm256_srli_epi16(first, 4), mask), _mm256_and_si256(_mm256_srli_epi16(second, 4), mask)};
}

static inline Bytes high_bits(Bytes low, Bytes plane, int j, int bit) {
  const __m128i count = _mm_cvtsi32_si128(j <= bit ? bit - j : j - bit);
  const __m256i mask = _mm256_set1_epi8((char)(1 << bit));
  auto half = [&](__m256i l, __m256i h) {
    const __m256i moved = j <= bit ? _mm256_sll_epi32(h, count) : _mm256_srl_epi32(h, count);
    return _mm256_or_si256(l, _mm256_and_si256(moved, mask));
  };
  return {half(low.lo, plane.lo), half(low.hi, plane.hi)};
}

#else  // portable: GCC/Clang vector extensions (NEON or SSE2 code from the compiler)

typedef float f16v __attribute__((vector_size(64)));
typedef int32_t i16v __attribute__((vector_size(64)));
typedef uint8_t u64v __attribute__((vector_size(64)));
struct Bytes { u64v v; };
struct Ints { i16v v; };
struct Floats { f16v v; };

static inline Bytes load_bytes(const void* p) {
  Bytes b;
  std::memcpy(&b.v, p, 64);
  return b;
}
static inline void store_bytes(void* p, Bytes a) { std::memcpy(p, &a.v, 64); }
static inline Floats zeros() { return {f16v{}}; }
static inline Floats load_floats(const float* p) {
  Floats f;
  std::memcpy(&f.v, p, 64);
  return f;
}
static inline void store_floats(float* p, Floats a) { std::memcpy(p, &a.v, 64); }
static inline Floats mul(Floats a, Floats b) { return {a.v * b.v}; }
static inline Floats fmadd(Floats a, Floats b, Floats acc) {
  Floats out;
#if defined(__ARM_NEON)
  for (int i = 0; i < 16; i += 4) {
    float32x4_t va, vb, vc;
    std::memcpy(&va, (const float*)&a.v + i, 16);
    std::memcpy(&vb, (const float*)&b.v + i, 16);
    std::memcpy(&vc, (const float*)&acc.v + i, 16);
    vc = vfmaq_f32(vc, va, vb);
    std::memcpy((float*)&out.v + i, &vc, 16);
  }
#else
  for (int i = 0; i < 16; ++i) out.v[i] = __builtin_fmaf(a.v[i], b.v[i], acc.v[i]);
#endif
  return out;
}
static inline Floats to_floats(Ints a) { return {__builtin_convertvector(a.v, f16v)}; }
static inline Floats splat(float f) { return {f16v{} + f}; }
static inline Ints zero_ints() { return {i16v{}}; }
static inline Ints add_ints(Ints a, Ints b) { return {a.v + b.v}; }

struct LaneIndex { int32_t v[16]; };
static inline LaneIndex lane_index(const int32_t* index) {
  LaneIndex out;
  std::memcpy(out.v, index, sizeof out.v);
  return out;
}
static inline Floats spread4(const float* s, LaneIndex index) {
  Floats out;
  for (int i = 0; i < 16; ++i) out.v[i] = s[index.v[i]];
  return out;
}

template <int B>
static inline Ints dot2(Bytes a, Bytes xa, Bytes b, Bytes xb) {
  Ints out;
  for (int i = 0; i < 16; ++i) {
    int32_t s = 0;
    for (int j = 4 * i; j < 4 * i + 4; ++j)
      s += (int32_t)a.v[j] * (int32_t)(int8_t)xa.v[j] + (int32_t)b.v[j] * (int32_t)(int8_t)xb.v[j];
    out.v[i] = s;
  }
  return out;
}

template <int B>
static inline Ints band_dot(Ints acc, Bytes a, const int8_t* xa, Bytes b, const int8_t* xb) {
  for (int i = 0; i < 16; ++i) {
    int32_t s = 0;
    for (int j = 0; j < 4; ++j) s += (int32_t)a.v[4 * i + j] * xa[j] + (int32_t)b.v[4 * i + j] * xb[j];
    acc.v[i] += s;
  }
  return acc;
}

static inline void split_quarters(Bytes a, Bytes b, Bytes& first, Bytes& second) {
  for (int q = 0; q < 2; ++q) {
    for (int i = 0; i < 16; ++i) {
      first.v[16 * q + i] = a.v[32 * q + i], first.v[32 + 16 * q + i] = b.v[32 * q + i];
      second.v[16 * q + i] = a.v[32 * q + 16 + i], second.v[32 + 16 * q + i] = b.v[32 * q + 16 + i];
    }
  }
}

template <int B>
static inline Bytes unpack(const uint8_t* p) {
  Bytes out;
  for (int e = 0; e < 8; ++e) {
    uint64_t word = 0;
    std::memcpy(&word, p + e * B, B);
    for (int j = 0; j < 8; ++j) out.v[8 * e + j] = (uint8_t)((word >> (j * B)) & ((1u << B) - 1));
  }
  return out;
}

static inline void nibble_pair(const uint8_t* p, Bytes& low, Bytes& high) {
  for (int i = 0; i < 64; ++i) low.v[i] = p[i] & 0x0F, high.v[i] = p[i] >> 4;
}

static inline Bytes high_bits(Bytes low, Bytes plane, int j, int bit) {
  for (int lane = 0; lane < 16; ++lane) {
    uint32_t h;
    std::memcpy(&h, (const uint8_t*)&plane.v + 4 * lane, 4);
    const uint32_t moved = (j <= bit ? h << (bit - j) : h >> (j - bit)) & (0x01010101u << bit);
    for (int i = 0; i < 4; ++i) low.v[4 * lane + i] |= (uint8_t)(moved >> (8 * i));
  }
  return low;
}

#endif

// Lane i and i + 8 added, then halves pairwise: one fixed order (the same additions in every
// build: the vector ones add lane i to lane i + width, as the loop does).
static inline float hsum(Floats v) {
#if defined(__AVX512F__) || defined(__AVX2__)
#if defined(__AVX512F__)
  const __m256 eight = _mm256_add_ps(_mm512_castps512_ps256(v.v), _mm512_extractf32x8_ps(v.v, 1));
#else
  const __m256 eight = _mm256_add_ps(v.lo, v.hi);
#endif
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
#else
  float t[16];
  store_floats(t, v);
  for (int width = 8; width > 0; width /= 2)
    for (int i = 0; i < width; ++i) t[i] += t[i + width];
  return t[0];
#endif
}
