// The quantized-product primitive for MLX's CPU backend, and the kernels behind it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"
#include "mlx/primitives.h"

namespace mlx_ssbd {

namespace mx = mlx::core;

struct QmmParams {
  const float* x;
  const uint32_t* w;
  const void* scales;  // fp32, fp16 or bf16 (scale_type), biases the same
  const void* biases;
  const float* bias;    // the layer's own bias [N], added to every row, or null
  float* out;
  int M, N, K, group, bits;
  int scale_type;  // 0: fp32, 1: fp16, 2: bf16
  bool banded;     // w, scales and biases in bands of 16 rows (repack_bands), 4, 5, 6 and 8 bits only
};

bool qmm_generic(const QmmParams& p);
double qmm_generic_in_cache(int bits, double seconds);
double qmm_generic_int8_peak(double seconds, bool scaled);
#if defined(__x86_64__) || defined(_M_X64)
bool qmm_avx2(const QmmParams& p);
bool qmm_avx512(const QmmParams& p);
double qmm_avx2_in_cache(int bits, double seconds);
double qmm_avx2_int8_peak(double seconds, bool scaled);
double qmm_avx512_in_cache(int bits, double seconds);
double qmm_avx512_int8_peak(double seconds, bool scaled);
#if MLX_SSBD_AVXVNNI
bool qmm_avxvnni(const QmmParams& p);
double qmm_avxvnni_in_cache(int bits, double seconds);
double qmm_avxvnni_int8_peak(double seconds, bool scaled);
#endif
#endif

// The stream ``s`` names, which must be on the CPU (else invalid_argument naming ``op``).
mx::Stream cpu_stream(mx::StreamOrDevice s, const char* op);

// Calls ``visit(row, offset, index)`` for every row of an array of ``shape`` and ``strides`` (a row:
// every axis but the last fixed), in row-major order: ``offset`` is the row's first element, in
// elements, and ``index`` its index in every axis but the last.
template <class Visit>
void for_each_row(const mx::Shape& shape, const mx::Strides& strides, Visit visit) {
  const int last = static_cast<int>(shape.size()) - 1;
  int64_t rows = 1;
  for (int d = 0; d < last; ++d) rows *= shape[d];
  std::vector<int64_t> index(last > 0 ? last : 0, 0);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t offset = 0;
    for (int d = 0; d < last; ++d) offset += index[d] * strides[d];
    visit(row, offset, index);
    for (int d = last - 1; d >= 0 && ++index[d] == shape[d]; --d) index[d] = 0;
  }
}

// ``a`` as a kernel reads it: an evaluated row-contiguous array (a parameter) as it is, anything
// else through a Contiguous node (which only shares the buffer when it already is contiguous).
mx::array row_contiguous(const mx::array& a, mx::Stream s);

// ``a`` (fp32) as a row-major array: itself when it is one, else a copy made by a task on
// ``encoder`` (to be called from eval_cpu, before the task that reads it is dispatched).
mx::array row_major(const mx::array& a, mx::cpu::CommandEncoder& encoder);

// The products' ceiling in the build this CPU runs, for `bits`-bit codes: multiply-adds per second
// of the kernel's own tiles on operands already in L1, every thread at once, measured for about
// `seconds` (qmm_rates.h, in_cache_rate); 0 for a width the kernel does not know.
double in_cache_rate(int bits, double seconds);

// The int8 peak of this CPU: multiply-adds per second of its widest int8 multiply-add instruction
// alone (AVX-512 VNNI's dpbusd, or on the AVX2 builds maddubs) on operands in registers, every thread
// at once, measured for about `seconds` (qmm_rates.h, int8_peak_rate); 0 in the portable build.
// `scaled`: beside a band's fp32 work per block and row, on AVX-512 only (else 0).
double int8_peak_rate(double seconds, bool scaled);

// Which kernel this CPU runs: "avx512", "avxvnni", "avx2", "neon" or "generic".
std::string simd_path();

// x[..., K] @ dequantize(w, scales, biases)[N, K]^T on the CPU, x quantized to int8 per block of 32
// (qmm_kernel.h); the result has x's dtype. Scales and biases are read as stored (fp32, fp16 or
// bf16). Same contract as mx::quantized_matmul(..., transpose=true, mode="affine"). With `bias`
// (a linear layer's own, [N]) the result is that product plus bias, as one fp32 addition per
// element: the same bits as adding it afterwards, one operation fewer in the graph. `banded`: w,
// scales and biases are repacked in bands of 16 rows (mlx_ssbd/platform/quantized.py,
// repack_bands; 4, 5, 6 and 8-bit codes, N a multiple of 16; 5 and 6-bit codes first put in a
// band's order by band_codes), the layout the products read.
mx::array quantized_matmul(
    const mx::array& x,
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits,
    const std::optional<mx::array>& bias = std::nullopt,
    bool banded = false,
    mx::StreamOrDevice s = {});

// 5 or 6-bit codes [N, K * bits / 32] (uint32, MLX's layout) with each row's blocks of 32 in the
// order a band reads them (band_codes.h), or with `inverse` back; 4-bit and 8-bit codes as they are.
// Computed at once (weights are repacked at load, not in a graph).
mx::array band_codes(const mx::array& w, int bits, bool inverse = false);

class QuantizedMatmulCpu : public mx::Primitive {
 public:
  QuantizedMatmulCpu(mx::Stream stream, int group_size, int bits, bool banded)
      : mx::Primitive(stream), group_size_(group_size), bits_(bits), banded_(banded) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;

  const char* name() const override {
    return "MlxSsbdQuantizedMatmulCpu";
  }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  int group_size_;
  int bits_;
  bool banded_;
};

}  // namespace mlx_ssbd
