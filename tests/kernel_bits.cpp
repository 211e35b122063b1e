// A digest of the quantized kernel's products on fixed pseudo-random inputs, so that builds for
// different CPUs can be compared bit for bit without MLX (tests/test_kernel_builds.py builds it
// for each x86-64 target this CPU runs and for aarch64, whose NEON build runs under QEMU).
//
// Compiled with -DQMM_NS=<namespace> and that target's flags, against mlx_ssbd/platform/native.
// Prints the namespace, the number of products and an FNV-1a digest of their outputs' bytes.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "qmm_kernel.h"

#define QMM_STR2(x) #x
#define QMM_STR(x) QMM_STR2(x)

using namespace mlx_ssbd::QMM_NS;

static uint64_t state = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32() {  // xorshift64*
  state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
  return (uint32_t)((state * 0x2545F4914F6CDD1Dull) >> 32);
}
static float uniform() { return (float)(next_u32() >> 8) * 0x1p-24f * 2.0f - 1.0f; }  // [-1, 1)

static uint64_t digest = 0xCBF29CE484222325ull;
static int products = 0;
static void absorb(const std::vector<float>& out) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(out.data());
  for (size_t i = 0; i < out.size() * sizeof(float); ++i) digest = (digest ^ bytes[i]) * 0x100000001B3ull;
  ++products;
}

// `count` scales (or biases) of about `size`, stored as `type` (fp16: as its bits, subnormals
// included when `size` is tiny; bf16: fp32's upper half).
static std::vector<uint8_t> stored(ScaleType type, size_t count, float size) {
  std::vector<uint8_t> bytes(count * (type == ScaleType::f32 ? 4 : 2));
  for (size_t i = 0; i < count; ++i) {
    const float value = size * uniform();
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    if (type == ScaleType::f32) {
      std::memcpy(bytes.data() + 4 * i, &value, 4);
    } else if (type == ScaleType::bf16) {
      const uint16_t upper = (uint16_t)(bits >> 16);
      std::memcpy(bytes.data() + 2 * i, &upper, 2);
    } else {  // fp16 by truncation: sign, exponent re-biased (or a subnormal), 10 bits of mantissa
      const uint32_t sign = (bits >> 16) & 0x8000;
      const int exponent = (int)((bits >> 23) & 0xFF) - 127 + 15;
      uint16_t half;
      if (exponent > 0)
        half = (uint16_t)(sign | (uint32_t)exponent << 10 | (bits & 0x7FFFFF) >> 13);
      else if (exponent > -10)
        half = (uint16_t)(sign | ((bits & 0x7FFFFF) | 0x800000) >> (14 - exponent));
      else
        half = (uint16_t)sign;
      std::memcpy(bytes.data() + 2 * i, &half, 2);
    }
  }
  return bytes;
}

// `a` ([rows, width] elements of `size` bytes) in bands of 16 rows, as repack_bands lays them out.
static std::vector<uint8_t> banded(const uint8_t* a, int rows, size_t width, size_t size) {
  std::vector<uint8_t> out((size_t)rows * width * size);
  for (int r = 0; r < rows; ++r)
    for (size_t j = 0; j < width; ++j)
      std::memcpy(out.data() + (((size_t)(r / 16) * width + j) * 16 + r % 16) * size, a + ((size_t)r * width + j) * size, size);
  return out;
}

int main() {
  const int M = 17;
  for (int N : {37, 48})  // 37: a last band of 5 rows; 48: whole bands, also repacked as bands
    for (int bits : {2, 3, 4, 5, 6, 8})
      for (int group : {32, 64, 128})
        for (ScaleType type : {ScaleType::f32, ScaleType::f16, ScaleType::bf16}) {
          const int K = group == 128 ? 1920 : 1728;  // 1728: a last quad of 2 blocks
          std::vector<uint32_t> w((size_t)N * K * bits / 32);
          for (auto& word : w) word = next_u32();
          const float size = type == ScaleType::f16 && group == 64 ? 0x1p-16f : 0.05f;  // fp16 subnormals
          const auto scales = stored(type, (size_t)N * K / group, size), biases = stored(type, (size_t)N * K / group, size);
          std::vector<float> x((size_t)M * K), bias(N);
          for (auto& v : x) v = 4.0f * uniform();
          for (auto& v : bias) v = uniform();
          const bool bands = N % 16 == 0 && bits >= 4;
          const size_t scale_size = type == ScaleType::f32 ? 4 : 2;
          std::vector<uint8_t> wb, sb, bb;
          if (bands) {
            std::vector<uint32_t> ordered = w;  // 5 and 6-bit codes: each block's bits in a band's order
            for (size_t d = 0; mlx_ssbd::has_planes(bits) && d < w.size(); d += bits)
              (bits == 5 ? mlx_ssbd::band_block<5> : mlx_ssbd::band_block<6>)(w.data() + d, ordered.data() + d, false);
            wb = banded(reinterpret_cast<const uint8_t*>(ordered.data()), N, (size_t)K * bits / 32, 4);
            sb = banded(scales.data(), N, K / group, scale_size), bb = banded(biases.data(), N, K / group, scale_size);
          }
          // all 17 rows, then 1, 2, 3, 4, 6, 7, 9, 12 and 16 of them (every tile shape and remainder)
          for (int rows : {M, 1, 2, 3, 4, 6, 7, 9, 12, 16}) {
            std::vector<float> out((size_t)rows * N);
            const float* layer_bias = rows % 2 ? bias.data() : nullptr;
            qmm_dispatch({x.data(), w.data(), scales.data(), biases.data(), layer_bias, out.data(), rows, N, K, group, bits},
                         type);
            absorb(out);
            if (bands) {  // the same bits from the repacked weight
              std::vector<float> again(out.size());
              qmm_dispatch({x.data(), reinterpret_cast<const uint32_t*>(wb.data()), sb.data(), bb.data(), layer_bias,
                            again.data(), rows, N, K, group, bits, true},
                           type);
              if (std::memcmp(again.data(), out.data(), out.size() * sizeof(float)) != 0) {
                std::printf("banded products differ: %d bits, group %d, %d rows\n", bits, group, rows);
                return 1;
              }
            }
          }
        }
  std::printf("%s %d %016llx\n", QMM_STR(QMM_NS), products, (unsigned long long)digest);
  return 0;
}
