// benchmarks/engine/kernel_ab.py's timing: two builds of the kernel (namespaces va and vb, one per
// revision) on the same products, taken in turn, each reading weights from memory.
//
//   ab M N K BITS REPS
//
// Random codes, fp16 scales and biases (group 32, in bands for 4 and 8 bits: the timing does not
// depend on the values) in enough copies that the copies outweigh the CPU's last-level cache; each
// repetition times va, then vb, each on a copy the other did not just read. Prints one JSON line:
// the median and the lowest seconds of each side, and whether their outputs on one copy have the
// same bits.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace mlx_ssbd {
#define MLX_SSBD_SIDE(NS)                                                                                   \
  namespace NS {                                                                                            \
  bool product(const float* x, const uint32_t* w, const void* scales, const void* biases, float* out, int M, \
               int N, int K, int group, int bits, bool banded);                                             \
  }
MLX_SSBD_SIDE(va)
MLX_SSBD_SIDE(vb)
}  // namespace mlx_ssbd

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: ab M N K BITS REPS\n");
    return 2;
  }
  const int M = std::atoi(argv[1]), N = std::atoi(argv[2]), K = std::atoi(argv[3]), bits = std::atoi(argv[4]);
  const int reps = std::atoi(argv[5]), group = 32, groups = K / group;
  const bool banded = (bits == 4 || bits == 8) && N % 16 == 0;
  const size_t words = (size_t)N * K * bits / 32, scales = (size_t)N * groups;
  const size_t bytes = words * 4 + scales * 4;
  const int copies = std::max<int>(4, (int)((256u << 20) / bytes) + 1);  // 256 MB: past any L3 here
  std::mt19937 rng(1);
  std::vector<uint32_t> w(words * copies);
  for (auto& v : w) v = rng();
  std::vector<uint16_t> scale(scales * copies), bias(scales * copies);
  for (auto& v : scale) v = 0x2000 + (rng() & 0x3ff);  // fp16 in [2**-7, 2**-6)
  for (auto& v : bias) v = 0xa000 + (rng() & 0x3ff);   // and its negative
  std::vector<float> x((size_t)M * K), out[2] = {std::vector<float>((size_t)M * N), std::vector<float>((size_t)M * N)};
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  std::vector<double> seconds[2];
  for (int r = -2; r < reps; ++r) {  // two unrecorded rounds first
    for (int side = 0; side < 2; ++side) {
      // Each side reads every other copy, the two sides swapping them each round (no side keeps
      // the same copies: their memory may differ).
      const size_t c = (size_t)((r + 2) * 2 + (side ^ (r & 1))) % copies;
      const auto start = std::chrono::steady_clock::now();
      const bool ok = (side ? mlx_ssbd::vb::product : mlx_ssbd::va::product)(
          x.data(), w.data() + c * words, scale.data() + c * scales, bias.data() + c * scales, out[side].data(), M, N,
          K, group, bits, banded);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!ok) {
        std::fprintf(stderr, "no product for %d bits\n", bits);
        return 1;
      }
      if (r >= 0) seconds[side].push_back(s);
    }
  }
  for (int side = 0; side < 2; ++side)  // both on the first copy: the bits compared
    (side ? mlx_ssbd::vb::product : mlx_ssbd::va::product)(x.data(), w.data(), scale.data(), bias.data(),
                                                            out[side].data(), M, N, K, group, bits, banded);
  const bool same = out[0] == out[1];
  for (auto& s : seconds) std::sort(s.begin(), s.end());
  std::printf("{\"before_s\": %.7f, \"after_s\": %.7f, \"before_min_s\": %.7f, \"after_min_s\": %.7f, \"same_bits\": %s}\n",
              seconds[0][reps / 2], seconds[1][reps / 2], seconds[0][0], seconds[1][0], same ? "true" : "false");
}
