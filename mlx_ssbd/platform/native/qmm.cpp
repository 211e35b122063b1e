// The primitive: checks and shapes on construction, the kernel on evaluation.
#include "qmm.h"

#include <cstdlib>
#include <stdexcept>
#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#endif
#include <vector>

#include "band_codes.h"
#include "lanes.h"
#include "op_clock.h"
#include "pool.h"
#include "mlx/backend/cpu/encoder.h"

namespace mlx_ssbd {

#if defined(__x86_64__) || defined(_M_X64)
// AVX-VNNI (CPUID leaf 7, subleaf 1, EAX bit 4): not every compiler's __builtin_cpu_supports knows it.
static bool cpu_has_avxvnni() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 4));
}
#endif

// The widest path the CPU has; $MLX_SSBD_QMM_SIMD (avxvnni, avx2 or generic) asks for a narrower
// one, for comparisons and tests.
std::string simd_path() {
  const char* wanted = std::getenv("MLX_SSBD_QMM_SIMD");
  const std::string ask = wanted ? wanted : "";
  if (ask == "generic") return "generic";
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  const bool narrower = ask == "avxvnni" || ask == "avx2";
  if (!narrower && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi"))
    return "avx512";
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")))
    return "generic";
#if MLX_SSBD_AVXVNNI
  if (ask != "avx2" && cpu_has_avxvnni()) return "avxvnni";
#endif
  return "avx2";
#elif defined(__ARM_NEON)
  return "neon";
#else
  return "generic";
#endif
}

// The build every kernel runs, chosen once: the products' (simd_path()), and the small
// operations' (lane_target(): AVX-VNNI adds nothing to them, so they run as built for AVX2).
enum class KernelBuild { avx512, avxvnni, avx2, generic };

static KernelBuild kernel_build() {
  static const KernelBuild build = [] {
    const std::string path = simd_path();
    if (path == "avx512") return KernelBuild::avx512;
    if (path == "avxvnni") return KernelBuild::avxvnni;
    return path == "avx2" ? KernelBuild::avx2 : KernelBuild::generic;
  }();
  return build;
}

LaneTarget lane_target() {
  switch (kernel_build()) {
    case KernelBuild::avx512: return LaneTarget::avx512;
    case KernelBuild::avxvnni:
    case KernelBuild::avx2: return LaneTarget::avx2;
    default: return LaneTarget::baseline;
  }
}

static bool run_kernel(const QmmParams& p) {
  switch (kernel_build()) {
#if defined(__x86_64__) || defined(_M_X64)
    case KernelBuild::avx512: return qmm_avx512(p);
#if MLX_SSBD_AVXVNNI
    case KernelBuild::avxvnni: return qmm_avxvnni(p);
#endif
    case KernelBuild::avx2: return qmm_avx2(p);
#endif
    default: return qmm_generic(p);
  }
}

double in_cache_rate(int bits, double seconds) {
  switch (kernel_build()) {
#if defined(__x86_64__) || defined(_M_X64)
    case KernelBuild::avx512: return qmm_avx512_in_cache(bits, seconds);
#if MLX_SSBD_AVXVNNI
    case KernelBuild::avxvnni: return qmm_avxvnni_in_cache(bits, seconds);
#endif
    case KernelBuild::avx2: return qmm_avx2_in_cache(bits, seconds);
#endif
    default: return qmm_generic_in_cache(bits, seconds);
  }
}

double int8_peak_rate(double seconds, bool scaled) {
  switch (kernel_build()) {
#if defined(__x86_64__) || defined(_M_X64)
    case KernelBuild::avx512: return qmm_avx512_int8_peak(seconds, scaled);
#if MLX_SSBD_AVXVNNI
    case KernelBuild::avxvnni: return qmm_avxvnni_int8_peak(seconds, scaled);
#endif
    case KernelBuild::avx2: return qmm_avx2_int8_peak(seconds, scaled);
#endif
    default: return qmm_generic_int8_peak(seconds, scaled);
  }
}

static bool supported_bits(int bits) {
  return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
}

mx::Stream cpu_stream(mx::StreamOrDevice s, const char* op) {
  auto stream = mx::to_stream(s);
  if (stream.device != mx::Device::cpu) {
    throw std::invalid_argument(std::string("[mlx_ssbd.") + op + "] runs on the CPU only");
  }
  return stream;
}

mx::array row_contiguous(const mx::array& a, mx::Stream s) {
  return a.is_available() && a.flags().row_contiguous ? a : mx::contiguous(a, false, s);
}

mx::array quantized_matmul(
    const mx::array& x,
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits,
    const std::optional<mx::array>& bias,
    bool banded,
    mx::StreamOrDevice s) {
  if (!supported_bits(bits)) {
    throw std::invalid_argument("[mlx_ssbd.quantized_matmul] bits must be 2, 3, 4, 5, 6 or 8");
  }
  if (group_size != 32 && group_size != 64 && group_size != 128) {
    throw std::invalid_argument("[mlx_ssbd.quantized_matmul] group_size must be 32, 64 or 128");
  }
  if (w.dtype() != mx::uint32 || w.ndim() != 2 || scales.ndim() != 2 || biases.ndim() != 2) {
    throw std::invalid_argument("[mlx_ssbd.quantized_matmul] w must be a 2-D uint32 array with 2-D scales and biases");
  }
  if (x.ndim() < 1) {
    throw std::invalid_argument("[mlx_ssbd.quantized_matmul] x must have at least one dimension");
  }
  const int N = w.shape(0);
  const int K = w.shape(1) * 32 / bits;
  if (x.shape(-1) != K || K % group_size != 0 || scales.shape(0) != N ||
      scales.shape(1) != K / group_size || biases.shape() != scales.shape()) {
    throw std::invalid_argument(
        "[mlx_ssbd.quantized_matmul] shapes do not match: x's last dimension must be "
        "w.shape[1] * 32 / bits and scales/biases must be [N, K / group_size]");
  }
  if (banded && (!banded_width(bits) || N % 16 != 0)) {
    throw std::invalid_argument(
        "[mlx_ssbd.quantized_matmul] banded weights have 4, 5, 6 or 8 bits and a multiple of 16 rows");
  }
  if (bias && (bias->ndim() != 1 || bias->shape(0) != N)) {
    throw std::invalid_argument("[mlx_ssbd.quantized_matmul] bias must be 1-D with w.shape[0] elements");
  }
  auto stream = cpu_stream(s, "quantized_matmul");
  auto out_dtype = mx::issubdtype(x.dtype(), mx::floating) ? x.dtype() : mx::float32;
  // x, computed anew for every product, is not made contiguous here: eval_cpu copies it only when
  // it is strided, which saves every product a node in the graph.
  auto x32 = mx::astype(x, mx::float32, stream);
  // Scales and biases as stored when both are fp32, fp16 or bf16 (fp16 halves the bytes a decode
  // step reads beside the codes); anything else as fp32.
  const bool as_stored = scales.dtype() == biases.dtype() &&
      (scales.dtype() == mx::float32 || scales.dtype() == mx::float16 || scales.dtype() == mx::bfloat16);
  const auto scale_dtype = as_stored ? scales.dtype() : mx::float32;
  auto s32 = row_contiguous(mx::astype(scales, scale_dtype, stream), stream);
  auto b32 = row_contiguous(mx::astype(biases, scale_dtype, stream), stream);
  auto wc = row_contiguous(w, stream);
  auto shape = x.shape();
  shape.back() = N;
  std::vector<mx::array> inputs{x32, wc, s32, b32};
  if (bias) inputs.push_back(row_contiguous(mx::astype(*bias, mx::float32, stream), stream));
  auto out = mx::array(
      shape, mx::float32, std::make_shared<QuantizedMatmulCpu>(stream, group_size, bits, banded), std::move(inputs));
  return out_dtype == mx::float32 ? out : mx::astype(out, out_dtype, stream);
}

mx::array band_codes(const mx::array& w, int bits, bool inverse) {
  if (w.dtype() != mx::uint32 || w.ndim() != 2 || !banded_width(bits) ||
      (has_planes(bits) && w.shape(1) % bits != 0)) {
    throw std::invalid_argument(
        "[mlx_ssbd.band_codes] codes must be a 2-D uint32 array of 4, 5, 6 or 8 bits (whole blocks of 32)");
  }
  if (!has_planes(bits)) return w;
  mx::array in = mx::contiguous(w);
  in.eval();
  const uint32_t* from = in.data<uint32_t>();
  std::vector<uint32_t> out(in.size());
  const int64_t blocks = (int64_t)out.size() / bits;
  auto order = bits == 5 ? &band_block<5> : &band_block<6>;
  parallel_for(blocks, split_grain(blocks, blocks > 4096),
               [&](int64_t i) { order(from + bits * i, out.data() + bits * i, inverse); });
  return mx::array(out.begin(), w.shape(), mx::uint32);
}

mx::array row_major(const mx::array& a, mx::cpu::CommandEncoder& encoder) {
  if (a.flags().row_contiguous) return a;
  mx::array copy(a.shape(), mx::float32, nullptr, {});
  copy.set_data(mx::allocator::malloc(copy.nbytes()));
  encoder.add_temporary(copy);
  encoder.set_input_array(a);
  encoder.set_output_array(copy);
  encoder.dispatch([src = a.data<float>(), dst = copy.data<float>(), shape = a.shape(), strides = a.strides()]() {
    const int64_t width = shape.back(), step = strides.back();
    for_each_row(shape, strides, [&](int64_t row, int64_t offset, const std::vector<int64_t>&) {
      for (int64_t k = 0; k < width; ++k) dst[row * width + k] = src[offset + k * step];
    });
  });
  return copy;
}

void QuantizedMatmulCpu::eval_cpu(
    const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  const mx::array x = row_major(inputs[0], encoder);
  auto& w = inputs[1];
  auto& scales = inputs[2];
  auto& biases = inputs[3];
  auto& out = outputs[0];
  out.set_data(mx::allocator::malloc(out.nbytes()));
  const float* bias = inputs.size() > 4 ? inputs[4].data<float>() : nullptr;
  if (inputs.size() > 4) encoder.set_input_array(inputs[4]);
  encoder.set_input_array(x);
  encoder.set_input_array(w);
  encoder.set_input_array(scales);
  encoder.set_input_array(biases);
  encoder.set_output_array(out);
  const int N = w.shape(0);
  const int K = x.shape(-1);
  const int M = K == 0 ? 0 : static_cast<int>(x.size() / K);
  const int scale_type = scales.dtype() == mx::float16 ? 1 : scales.dtype() == mx::bfloat16 ? 2 : 0;
  QmmParams p{x.data<float>(), w.data<uint32_t>(), scales.data<void>(), biases.data<void>(),
              bias, out.data<float>(), M, N, K, group_size_, bits_, scale_type, banded_};
  encoder.dispatch([p]() {
    OpTimer timer(p.bits == 4 ? OpKind::product4 : p.bits == 8 ? OpKind::product8 : OpKind::product_other);
    if (p.M == 0 || p.N == 0) return;
    if (!run_kernel(p)) throw std::runtime_error("[mlx_ssbd.quantized_matmul] unsupported bits");
  });
}

void QuantizedMatmulCpu::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  throw std::runtime_error("[mlx_ssbd.quantized_matmul] has no GPU implementation: use mx.quantized_matmul");
}

bool QuantizedMatmulCpu::is_equivalent(const mx::Primitive& other) const {
  auto& o = static_cast<const QuantizedMatmulCpu&>(other);
  return group_size_ == o.group_size_ && bits_ == o.bits_ && banded_ == o.banded_;
}

std::vector<mx::Shape> QuantizedMatmulCpu::output_shapes(const std::vector<mx::array>& inputs) {
  auto shape = inputs[0].shape();
  shape.back() = inputs[1].shape(0);
  return {shape};
}

}  // namespace mlx_ssbd
