// 5-bit and 6-bit codes in the order a band reads them (qmm_bands.h), one row's block of 32 codes
// at a time.
//
// MLX packs a row's B-bit codes as one little-endian bit stream (code k at bits Bk..Bk+B-1), so a
// block of 32 is B words whose codes straddle them. A band takes the block as
//
//   words 0-3      the codes' low 4 bits, packed as 4-bit codes are (code k in nibble k), which a
//                  band splits into 8 vectors as it does 4-bit codes: vector j (0..7), byte i of
//                  a lane, holds code nibble_code(j, i) = 8 (j / 2) + 2 i + j % 2;
//   word 4 + p     (p < B - 4) bit 4 + p of the codes, a plane: its bit 8 i + j that of the code
//                  vector j's byte i holds,
//
// so that adding a plane to a vector is a shift, a mask and an or (high_bits in qmm_simd.h) and
// every byte stays in its lane. The same 32 B bits, another order: ``band_block<B>(in, out, true)``
// is the inverse.
#pragma once

#include <cstdint>

namespace mlx_ssbd {

// The widths a band takes as low nibbles and planes of their higher bits.
constexpr bool has_planes(int bits) { return bits == 5 || bits == 6; }

// The widths multiplied in bands (qmm_bands.h): 4-bit codes as nibbles, 5 and 6-bit ones as
// nibbles and planes, 8-bit ones as bytes.
constexpr bool banded_width(int bits) { return bits == 4 || has_planes(bits) || bits == 8; }

// The code (0..31) of a block that byte i (0..3) of a band's vector j (0..7) holds.
constexpr int nibble_code(int j, int i) { return 8 * (j / 2) + 2 * i + j % 2; }

// One row's block of 32 B-bit codes (B words): MLX's order `in` to a band's `out`, or back.
template <int B>
inline void band_block(const uint32_t* in, uint32_t* out, bool inverse = false) {
  static_assert(has_planes(B));
  uint8_t codes[32];
  if (!inverse) {
    for (int k = 0; k < 32; ++k) {
      const int bit = B * k, word = bit / 32;
      const uint64_t window = in[word] | (word + 1 < B ? (uint64_t)in[word + 1] << 32 : 0);
      codes[k] = (uint8_t)((window >> (bit % 32)) & ((1u << B) - 1));
    }
    for (int w = 0; w < B; ++w) out[w] = 0;
    for (int k = 0; k < 32; ++k) out[k / 8] |= (uint32_t)(codes[k] & 15) << (4 * (k % 8));
    for (int p = 0; p < B - 4; ++p)
      for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 4; ++i) out[4 + p] |= (uint32_t)((codes[nibble_code(j, i)] >> (4 + p)) & 1) << (8 * i + j);
    return;
  }
  for (int k = 0; k < 32; ++k) codes[k] = (uint8_t)((in[k / 8] >> (4 * (k % 8))) & 15);
  for (int p = 0; p < B - 4; ++p)
    for (int j = 0; j < 8; ++j)
      for (int i = 0; i < 4; ++i)
        codes[nibble_code(j, i)] |= (uint8_t)(((in[4 + p] >> (8 * i + j)) & 1) << (4 + p));
  for (int w = 0; w < B; ++w) out[w] = 0;
  for (int k = 0; k < 32; ++k) {
    const int bit = B * k, word = bit / 32, shift = bit % 32;
    out[word] |= (uint32_t)codes[k] << shift;
    if (shift > 32 - B) out[word + 1] |= (uint32_t)codes[k] >> (32 - shift);
  }
}

}  // namespace mlx_ssbd
