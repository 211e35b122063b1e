// Python bindings: mlx_ssbd.platform._qmm (built by pip install; see CMakeLists.txt).
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include "attention.h"
#include "layers.h"
#include "logits.h"
#include "op_clock.h"
#include "pool.h"
#include "qmm.h"
#include "silu.h"

namespace nb = nanobind;
using namespace nb::literals;

NB_MODULE(_qmm, m) {
  m.doc() = "mlx-ssbd's CPU kernels: quantized matrix products, SwiGLU, RoPE, RMSNorm, attention and logit statistics (an MLX extension)";
  m.def("quantized_matmul", &mlx_ssbd::quantized_matmul, "x"_a, "w"_a, "scales"_a, "biases"_a,
        "group_size"_a, "bits"_a, nb::kw_only(), "bias"_a = nb::none(), "banded"_a = false, "stream"_a = nb::none(),
        "x @ dequantize(w, scales, biases).T (+ bias, a linear layer's own) on the CPU, in fp32; "
        "x's dtype out.");
  m.def("band_codes", &mlx_ssbd::band_codes, "w"_a, "bits"_a, nb::kw_only(), "inverse"_a = false,
        "5 or 6-bit codes [N, K * bits / 32] (MLX's layout) with each row's blocks of 32 in the order a band "
        "reads them, or with inverse back; 4-bit and 8-bit codes as they are. Computed at once.");
  m.def("silu_mul", &mlx_ssbd::silu_mul, "gate"_a, "up"_a, nb::kw_only(), "stream"_a = nb::none(),
        "silu(gate) * up on the CPU, 16 lanes at a time (the SwiGLU of an MLP).");
  m.def("rope", &mlx_ssbd::rope, "x"_a, "dims"_a, nb::kw_only(), "traditional"_a, "inv_freqs"_a,
        "scale"_a, "offset"_a, "stream"_a = nb::none(),
        "mx.fast.rope (forward) for fp32 x on the CPU as one operation, given inverse frequencies.");
  m.def("rms_norm", &mlx_ssbd::rms_norm, "x"_a, "weight"_a, "eps"_a, nb::kw_only(), "stream"_a = nb::none(),
        "mx.fast.rms_norm for fp32 x on the CPU as one operation.");
  m.def("attention", &mlx_ssbd::attention, "q"_a, "k"_a, "v"_a, nb::kw_only(), "scale"_a,
        "mask_mode"_a = "", "mask"_a = nb::none(), "stream"_a = nb::none(),
        "mx.fast.scaled_dot_product_attention for fp32 q, k, v on the CPU as one operation.");
  m.def("logit_stats", &mlx_ssbd::logit_stats, "logits"_a, "rows"_a, nb::kw_only(), "sums"_a = true,
        "stream"_a = nb::none(),
        "For rows `rows` of fp32 logits [N, V] on the CPU: [largest logit, sum of exp(logit - largest) "
        "(0 unless sums), first index of the largest (uint32)], each [len(rows)].");
  m.def("in_cache_rate", &mlx_ssbd::in_cache_rate, "bits"_a, "seconds"_a = 0.3,
        "Multiply-adds per second of the products' own tiles on operands already in L1, every thread at "
        "once: the ceiling the quantized products reach against (0 for an unknown width).");
  m.def("int8_peak_rate", &mlx_ssbd::int8_peak_rate, "seconds"_a = 0.3, "scaled"_a = false,
        "Multiply-adds per second of this CPU's widest int8 multiply-add instruction alone, on operands in "
        "registers, every thread at once: the peak no int8 product beats (0 where the build times none). "
        "scaled: beside the fp32 work each block of a band costs a row (a conversion, a multiplication, "
        "two fmas): the most a product in this format reaches (0 where the build times none).");
  m.def("simd_path", &mlx_ssbd::simd_path, "The build of the kernels this process runs: avx512, avxvnni, avx2, neon or generic.");
  m.attr("mlx_version") = MLX_SSBD_BUILT_AGAINST_MLX;
  m.attr("openmp") = MLX_SSBD_OPENMP;
  m.def("threads", &mlx_ssbd::pool_size, "The threads a product runs on, the caller's included.");
  m.def("op_timing", &mlx_ssbd::set_op_timing, "on"_a,
        "Start (clearing the sums) or stop timing the extension's operations by kind (off by default).");
  m.def(
      "op_times",
      []() {
        const auto times = mlx_ssbd::op_times();
        std::map<std::string, std::pair<double, int64_t>> out;
        for (int k = 0; k < mlx_ssbd::kOpKinds; ++k)
          out[mlx_ssbd::kOpKindNames[k]] = {times.seconds[k], times.calls[k]};
        return out;
      },
      "{kind: (seconds, calls)} of the extension's operations since op_timing(True), each timed on MLX's "
      "stream thread as it ran.");
  m.def(
      "loop_times",
      []() {
        const auto times = mlx_ssbd::loop_times();
        return std::map<std::string, double>{{"wall_s", times.wall_seconds}, {"cpu_s", times.cpu_seconds}};
      },
      "Since op_timing(True), summed over the threads that ran pieces of the kernel's parallel loops: "
      "{'wall_s': the time they spent in them, 'cpu_s': the CPU time they had meanwhile} (the difference: "
      "their core ran something else).");
}
