// 5-bit codes in the order a band reads them (qmm_bands.h), one row's block of 32 codes at a time.
//
// MLX packs a row's 5-bit codes as one little-endian bit stream (code k at bits 5k..5k+4), so a
// block of 32 is 5 words whose codes straddle them. A band takes the block as
//
//   words 0-3  the codes' low 4 bits, packed as 4-bit codes are (code k in nibble k), which
//              a band splits into 8 vectors as it does 4-bit codes: vector j (0..7), byte i of a
//              lane, holds code nibble_code(j, i) = 8 (j / 2) + 2 i + j % 2;
//   word 4     their high bits: bit 8 i + j is that of the code vector j's byte i holds,
//
// so that adding a vector's high bits is two vector operations (a shift of 4 - j bits, a mask and
// an or: high_bits in qmm_simd.h) and every byte stays in its lane. The same 160 bits, another
// order: ``band_block5(in, out, true)`` is the inverse.
#pragma once

#include <cstdint>

namespace mlx_ssbd {

// The code (0..31) of a block that byte i (0..3) of a band's vector j (0..7) holds.
constexpr int nibble_code(int j, int i) { return 8 * (j / 2) + 2 * i + j % 2; }

// One row's block of 32 5-bit codes, 5 words: MLX's order `in` to a band's `out`, or back.
inline void band_block5(const uint32_t* in, uint32_t* out, bool inverse = false) {
  uint8_t codes[32];
  if (!inverse) {
    for (int k = 0; k < 32; ++k) {
      const int bit = 5 * k, word = bit / 32;
      const uint64_t window = in[word] | (word + 1 < 5 ? (uint64_t)in[word + 1] << 32 : 0);
      codes[k] = (uint8_t)((window >> (bit % 32)) & 31);
    }
    for (int w = 0; w < 5; ++w) out[w] = 0;
    for (int k = 0; k < 32; ++k) out[k / 8] |= (uint32_t)(codes[k] & 15) << (4 * (k % 8));
    for (int j = 0; j < 8; ++j)
      for (int i = 0; i < 4; ++i) out[4] |= (uint32_t)(codes[nibble_code(j, i)] >> 4) << (8 * i + j);
    return;
  }
  for (int k = 0; k < 32; ++k) codes[k] = (uint8_t)((in[k / 8] >> (4 * (k % 8))) & 15);
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 4; ++i) codes[nibble_code(j, i)] |= (uint8_t)(((in[4] >> (8 * i + j)) & 1) << 4);
  for (int w = 0; w < 5; ++w) out[w] = 0;
  for (int k = 0; k < 32; ++k) {
    const int bit = 5 * k, word = bit / 32, shift = bit % 32;
    out[word] |= (uint32_t)codes[k] << shift;
    if (shift > 27) out[word + 1] |= (uint32_t)codes[k] >> (32 - shift);
  }
}

}  // namespace mlx_ssbd
