"""The sgemv shim (mlx_ssbd/platform/gemv.py): MLX matmuls that it serves give the same numbers as numpy,
for every layout of a one-row or one-column product and of a few rows by a transposed weight, and
it really serves them."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from mlx_ssbd.platform import backend, gemv

import mlx.core as mx
import numpy as np
import pytest


def products():
    """(name, lazy MLX result, numpy float64 reference) for one-row/one-column layouts."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((96, 40)).astype(np.float32)  # a weight, N x K
    x = rng.standard_normal((1, 40)).astype(np.float32)
    W, X = mx.array(w), mx.array(x)
    wide = mx.array(rng.standard_normal((40, 96 * 2)).astype(np.float32))[:, ::2]  # strided view
    batch = rng.standard_normal((3, 1, 40)).astype(np.float32)
    yield "row @ weight.T (a decode step)", X @ W.T, x.astype(np.float64) @ w.T
    yield "row @ contiguous K x N", X @ mx.array(w.T.copy()), x.astype(np.float64) @ w.T
    yield "weight @ column", W @ X.T, w.astype(np.float64) @ x.T
    yield "weight.T.T @ column (transposed A)", mx.array(w.T.copy()).T @ X.T, w.astype(np.float64) @ x.T
    yield "column.T given as a transposed view", (X.T).T @ W.T, x.astype(np.float64) @ w.T
    yield "row @ strided view", X @ wide, x.astype(np.float64) @ np.array(wide).astype(np.float64)
    yield "batched rows", mx.array(batch) @ W.T, batch.astype(np.float64) @ w.T
    yield "beta = 1: addmm", mx.addmm(mx.ones((1, 96)), X, W.T), 1.0 + x.astype(np.float64) @ w.T
    yield "3 rows (few-rows kernel)", mx.array(batch[:, 0]) @ W.T, batch[:, 0].astype(np.float64) @ w.T
    many = rng.standard_normal((9, 40)).astype(np.float32)
    for m in (2, 5, 8, 9):  # 9 rows: plain sgemm
        yield f"{m} rows @ weight.T", mx.array(many[:m]) @ W.T, many[:m].astype(np.float64) @ w.T
    odd = rng.standard_normal((98, 37)).astype(np.float32)  # N not a multiple of the 4-row blocks, K odd
    yield (
        "4 rows @ 98 x 37 weight.T",
        mx.array(many[:4, :37]) @ mx.array(odd).T,
        many[:4, :37].astype(np.float64) @ odd.T,
    )
    yield (
        "rows of a wider matrix (lda > K)",
        mx.array(many[:3])[:, :37] @ mx.array(odd).T,
        many[:3, :37].astype(np.float64) @ odd.T,
    )
    yield (
        "beta = 1 on 2 rows: addmm",
        mx.addmm(mx.ones((2, 96)), mx.array(many[:2]), W.T),
        1.0 + many[:2].astype(np.float64) @ w.T,
    )
    yield (
        "2 rows @ contiguous K x N (plain sgemm)",
        mx.array(many[:2]) @ mx.array(w.T.copy()),
        many[:2].astype(np.float64) @ w.T,
    )


@pytest.mark.parametrize(
    "name,result,reference", list(products()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_products_match_numpy(name, result, reference):
    np.testing.assert_allclose(np.array(result), reference, rtol=1e-4, atol=1e-4)


def test_the_shim_serves_one_row_products_where_it_is_installed():
    if backend.BLAS.name != "openblas":
        pytest.skip(f"the shim is used with OpenBLAS only; BLAS here: {backend.BLAS.name}")
    if not gemv.LIBRARY.is_file():
        pytest.skip(f"the shim is {gemv.NOT_BUILT}")
    assert backend.GEMV.active, backend.GEMV.note
    before = gemv.calls()
    x, w = mx.ones((1, 8)), mx.ones((16, 8))
    mx.eval(x @ w.T)
    assert gemv.calls() == before + 1
    mx.eval(mx.ones((2, 8)) @ w.T)  # two rows: the few-rows kernel
    assert gemv.calls() == before + 2
    mx.eval(mx.ones((9, 8)) @ w.T)  # nine rows: sgemm
    assert gemv.calls() == before + 2


def test_a_shim_built_without_openmp_keeps_the_few_rows_kernel_off(tmp_path):
    """A compiler without OpenMP still gives sgemv for one row; the few-rows kernel, which would run
    on one thread, stays off and the note says why."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or not backend.BLAS.path:
        pytest.skip("needs a C compiler and a BLAS library")
    library = tmp_path / "libmlx_ssbd_gemv.so"
    source = Path(gemv.__file__).with_name("native") / "gemv_shim.c"
    subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True, timeout=120
    )
    probe = (
        "import sys; from pathlib import Path; from mlx_ssbd.platform import gemv; "
        "gemv.LIBRARY = Path(sys.argv[1]); print(gemv.install(sys.argv[2]).note)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(library), backend.BLAS.path],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert out.strip() == "one-row fp32 products through sgemv, no few-rows kernel (built without OpenMP)"


@pytest.mark.parametrize(
    "value,note",
    [
        ("1", "no few-rows kernel (MLX_SSBD_FEW_ROWS=1)"),
        ("abc", "MLX_SSBD_FEW_ROWS='abc' is not a number: the default"),
    ],
)
def test_the_few_rows_setting_is_said_in_the_note(value, note):
    if backend.BLAS.name != "openblas" or not backend.GEMV.active:
        pytest.skip("the shim is not in use here")
    probe = "import mlx_ssbd; from mlx_ssbd.platform.info import backend_info; print(backend_info().gemv)"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "MLX_SSBD_FEW_ROWS": value},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert note in out
