// Python bindings: mlx_ssbd.platform._qmm (built by pip install; see CMakeLists.txt).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>

#include "qmm.h"

namespace nb = nanobind;
using namespace nb::literals;

NB_MODULE(_qmm, m) {
  m.doc() = "mlx-ssbd's CPU kernel for quantized matrix products (an MLX extension)";
  m.def("quantized_matmul", &mlx_ssbd::quantized_matmul, "x"_a, "w"_a, "scales"_a, "biases"_a,
        "group_size"_a, "bits"_a, nb::kw_only(), "stream"_a = nb::none(),
        "x @ dequantize(w, scales, biases).T on the CPU, in fp32; x's dtype out.");
  m.def("simd_path", &mlx_ssbd::simd_path, "The kernel this CPU runs: avx2, neon or generic.");
  m.attr("mlx_version") = MLX_SSBD_BUILT_AGAINST_MLX;
  m.attr("openmp") = MLX_SSBD_OPENMP;
}
