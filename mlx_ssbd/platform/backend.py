"""Backend policy: which BLAS MLX uses on Linux, which device, which compute dtype.

Contract: this module must be imported before anything imports ``mlx.core`` (``mlx_ssbd/__init__``
imports it first). On Linux, MLX's CPU wheel links the slow reference BLAS; loading an optimized
BLAS with ``RTLD_GLOBAL`` before ``mlx.core`` loads makes fp32 matmuls 30-40x faster. Everything
CPU-specific lives here and nowhere else:

* BLAS: ``$MLX_SSBD_BLAS`` (a library path; ``openblas`` or ``mkl`` to pick one; ``none`` to
  skip), else Debian's OpenBLAS when installed, else MKL from pip (a dependency on x86-64 Linux,
  so ``pip install`` alone brings a fast BLAS), else a warning naming the reference BLAS.
  With OpenBLAS, one-row products (decode steps) go through its sgemv (``gemv``: 2.5x faster
  than the sgemm MLX calls; ``MLX_SSBD_GEMV=0`` turns it off) where ``pip install`` built the
  shim; importing never compiles or writes anything.
* BLAS threads beside the quantized kernel: OpenBLAS's pthread build keeps its idle workers
  spinning after each product, and on the same cores they starve the kernel's threads (a
  decode step of the default model took 1.5-2x as long: ``benchmarks/engine/blas_threads.py``).
  While a model's quantized layers run through the kernel, OpenBLAS (then only attention's small
  products) runs on one thread (``quiet_blas_workers``); MKL's workers are left alone (their spin-wait: below).
* idle threads beside other work: the CPU kernel's products run on a thread pool of its own
  (``native/pool.h``: its workers spin a few milliseconds after a product, then sleep, and the
  caller never waits for a worker the OS has not scheduled), which the settings below do not
  touch. The OpenMP runtimes spin-wait between parallel regions (GNU libgomp, which the sgemv shim
  and the kernel's timed rates use, about 300,000 spins by default; Intel's libiomp5 behind MKL,
  200 ms), and on a machine doing other work (OBS, a browser, Whisper) spinning threads take the
  cores the working ones need. Before any OpenMP runtime loads, mlx-ssbd sets
  ``GOMP_SPINCOUNT=1000`` and ``KMP_BLOCKTIME=0`` (``THREAD_WAITS``): an idle libgomp thread
  spins for some tens of microseconds at most, then sleeps. OpenBLAS's pthread workers do the same
  after each product (yielding in a loop for 2^28 cycles, about 0.1 s, by default): where they run
  (fp32 models, ``--weights dense``) ``OPENBLAS_THREAD_TIMEOUT=16`` sends them to sleep after some
  tens of microseconds. A user's own ``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT``, ``KMP_BLOCKTIME`` or
  ``OPENBLAS_THREAD_TIMEOUT`` is kept (``thread_waits``). ``benchmarks/engine/busy_machine.py``
  measures a decode step beside busy processes under each policy.
* dtype: fp32 activations and floating parameters on the CPU (only fp32 uses BLAS there; MLX's
  bf16/fp16 matmuls cost grows with the number of tokens, which defeats one-pass verification);
  quantized layers stay quantized and run through mlx-ssbd's own kernel (``quantized``); the
  model's own dtype on a GPU.
* on a GPU: model calls on a dedicated generation stream, decode steps pipelined (the next one
  dispatched before the current token reaches the host), and on Metal the wired memory limit
  raised to the recommended working set, all as mlx-lm does; on the CPU none of these.

``info.backend_info()`` reports what was chosen, for ``doctor`` and benchmark reports.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import sys
import sysconfig
import warnings
from dataclasses import dataclass

from . import gemv

BLAS_ENV = "MLX_SSBD_BLAS"
# How long an idle thread spins before it sleeps (module docstring): GNU's OpenMP in spins, Intel's
# in ms, OpenBLAS's pthread workers in powers of two of CPU cycles (2^16: some tens of microseconds).
THREAD_WAITS = {"GOMP_SPINCOUNT": "1000", "KMP_BLOCKTIME": "0", "OPENBLAS_THREAD_TIMEOUT": "16"}
WAIT_POLICY_ENV = "OMP_WAIT_POLICY"
THREAD_WAIT_NAMES = (WAIT_POLICY_ENV, *THREAD_WAITS)  # every variable that says how threads wait

OPENBLAS_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3",
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
)


@dataclass(frozen=True)
class BlasChoice:
    """The BLAS library loaded for MLX (Linux only)."""

    name: str  # "openblas", "mkl", "custom", "reference", "accelerate", "none"
    path: str | None
    note: str = ""


def _mkl_candidates() -> list[str]:
    roots = {sys.prefix, sysconfig.get_config_var("prefix") or sys.prefix}
    found: list[str] = []
    for root in roots:
        found += sorted(glob.glob(os.path.join(root, "lib", "libmkl_rt.so*")))
    return found


GEMV = gemv.GemvChoice(False, "used with OpenBLAS only")


def _load_global(path: str, with_gemv: bool = False) -> bool:
    global GEMV
    try:
        ctypes.CDLL(path)  # loadable at all? (local: the sgemv shim must enter the global scope first)
    except OSError:
        return False
    if with_gemv:
        GEMV = gemv.install(path)
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    return True


def _choose_blas() -> BlasChoice:
    if sys.platform == "darwin":
        return BlasChoice("accelerate", None, "MLX uses Accelerate/Metal on macOS")
    if not sys.platform.startswith("linux"):
        return BlasChoice("none", None, f"no BLAS policy for {sys.platform}")
    if "mlx.core" in sys.modules:
        warnings.warn(
            "mlx.core was imported before mlx_ssbd, so no optimized BLAS could be loaded "
            "(fp32 matmuls may be 30-40x slower): import mlx_ssbd first",
            stacklevel=2,
        )
        return BlasChoice("unknown", None, "mlx.core was imported before mlx_ssbd; BLAS not changed")

    override = os.environ.get(BLAS_ENV, "").strip()
    if override.lower() == "none":
        return BlasChoice("reference", None, f"{BLAS_ENV}=none: optimized BLAS disabled")
    kinds = {"openblas": _openblas_candidates, "mkl": _mkl_candidates}
    if override and override.lower() not in kinds:
        if _load_global(override):
            return BlasChoice("custom", override, f"from {BLAS_ENV}")
        warnings.warn(f"{BLAS_ENV}={override!r} could not be loaded; trying the defaults", stacklevel=2)
    order = [override.lower()] if override.lower() in kinds else list(kinds)
    for kind in order:
        for path in kinds[kind]():
            if _load_global(path, with_gemv=kind == "openblas"):
                return BlasChoice(kind, path, f"from {BLAS_ENV}" if override else "")
    warnings.warn(
        "No optimized BLAS found: MLX will use the reference BLAS (fp32 matmuls 30-40x slower). "
        "On x86-64 `pip install mkl` (a dependency of mlx-ssbd there); elsewhere install Debian's "
        f"libopenblas0-pthread, or set {BLAS_ENV}=/path/to/libblas.so.",
        stacklevel=2,
    )
    return BlasChoice("reference", None, "no optimized BLAS found")


def _openblas_candidates() -> list[str]:
    return [path for path in OPENBLAS_CANDIDATES if os.path.exists(path)]


def _set_thread_waits() -> dict[str, str]:
    """Short spin-waits for the OpenMP runtimes and OpenBLAS (module docstring), before any loads;
    nothing where the user chose a wait policy. Returns what was set."""
    if WAIT_POLICY_ENV in os.environ:
        return {}
    chosen = {name: value for name, value in THREAD_WAITS.items() if name not in os.environ}
    os.environ.update(chosen)
    return chosen


THREAD_WAITS_SET = _set_thread_waits()
BLAS = _choose_blas()


def thread_waits() -> str:
    """How idle OpenMP and OpenBLAS threads wait, for ``doctor`` and reports."""
    names = [name for name in THREAD_WAIT_NAMES if name in os.environ]
    return ", ".join(
        f"{name}={os.environ[name]}" + ("" if name in THREAD_WAITS_SET else " (yours)") for name in names
    )


import mlx.core as mx  # noqa: E402  (must follow the BLAS load above)

_OPENBLAS: dict = {}  # the loaded OpenBLAS and its thread count as it started


def _openblas():
    """The OpenBLAS library MLX uses (loaded once), or None with any other BLAS."""
    if BLAS.name != "openblas" or BLAS.path is None:
        return None
    if "lib" not in _OPENBLAS:
        lib = ctypes.CDLL(BLAS.path)
        _OPENBLAS.update(lib=lib, default=lib.openblas_get_num_threads())
    return _OPENBLAS["lib"]


def quiet_blas_workers(quiet: bool) -> None:
    """One OpenBLAS thread while ``quiet`` (a model runs its quantized layers through the CPU
    kernel), else OpenBLAS's own default; nothing with any other BLAS."""
    lib = _openblas()
    if lib is not None:
        lib.openblas_set_num_threads(1 if quiet else _OPENBLAS["default"])


def blas_threads() -> int | None:
    """OpenBLAS's thread count now (None with any other BLAS), for reports."""
    lib = _openblas()
    return None if lib is None else lib.openblas_get_num_threads()


def is_gpu() -> bool:
    """True when MLX's default device is a GPU (Metal or CUDA)."""
    return mx.default_device().type == mx.DeviceType.gpu


def compute_dtype(model_dtype: mx.Dtype | None = None) -> mx.Dtype:
    """The dtype of a model's floating parameters and activations: fp32 on CPU, the model's own
    dtype on GPU (quantized weights are never recast)."""
    if is_gpu():
        return model_dtype if model_dtype is not None else mx.float16
    return mx.float32


def call_tokens() -> int | None:
    """The fixed cost of one model call, in tokens fed (``engine.batch``): on a CPU a call costs
    in proportion to every token its rows feed, padding included, plus a fixed part (reading the
    weights), so rows whose feeds differ much in width are cheaper in separate calls; on a GPU a
    wider call costs little more than a narrow one: None, one call. The CPU's 4 is a compromise
    for a cost that is not linear: a call of up to 4 tokens costs about one decode step, and past 8
    tokens each one adds about a seventh of a step (the default model's 16-token pass: 2.0-2.8
    decode steps; ``benchmarks/engine/verify_cost.py``), so that a call padded by more than a few
    tokens a row is split."""
    return None if is_gpu() else 4


WEIGHT_FORMATS = ("auto", "as-shipped", "dense")


def auto_weights() -> tuple[str, str]:
    """What ``weights="auto"`` loads on this backend, and why: (``"as-shipped"`` or ``"dense"``,
    a reason for ``doctor``). The CPU keeps the quantized weights as they ship (mlx-ssbd's kernel:
    a decode step several times faster than fp32); CUDA serves them dense in the model's float
    dtype (fp16 was 3.5x faster than MLX's 4-bit for a 64-row decode step on an H200), where
    they fit (``models.loading``); Metal keeps MLX's quantized kernels (dense is not measured on
    a Mac)."""
    if not is_gpu():
        return "as-shipped", "CPU: quantized layers through mlx-ssbd's kernel"
    metal = getattr(mx, "metal", None)
    if metal is not None and metal.is_available():
        return "as-shipped", "Metal: MLX's quantized kernels (dense not measured on a Mac)"
    return "dense", "CUDA: dense in the model's float dtype where it fits (faster for a batch)"


PIPELINE_ENV = "MLX_SSBD_PIPELINE"


def pipelined_decode() -> bool:
    """Dispatch decode step t+1 before token t reaches the host (``engine.update.Job.pipelined``)?

    On a GPU, yes, as mlx-lm does: building the next step's graph overlaps the running one. On the
    CPU, no: the step dispatched past a stop token is computed in full by the same cores, one
    wasted decode step per update. ``$MLX_SSBD_PIPELINE`` (1/0) overrides, for tests and timing.
    """
    value = os.environ.get(PIPELINE_ENV)
    return is_gpu() if value is None else value == "1"


_GENERATION_STREAMS: dict = {}


def generation_stream():
    """The stream model calls run on: on a GPU a dedicated one (thread-local), as mlx-lm's
    ``generation_stream``; on the CPU None (the default stream)."""
    if not is_gpu():
        return None
    if "stream" not in _GENERATION_STREAMS:
        device = mx.default_device()
        make = getattr(mx, "new_thread_local_stream", mx.new_stream)
        _GENERATION_STREAMS["stream"] = make(device)
    return _GENERATION_STREAMS["stream"]


def on_generation_stream():
    """A context in which model calls run on ``generation_stream()`` (on the CPU: nothing changes)."""
    stream = generation_stream()
    return mx.stream(stream) if stream is not None else contextlib.nullcontext()


def wire_memory() -> None:
    """On Metal, raise the wired memory limit to the recommended working set (as mlx-lm's
    ``wired_limit``), so the weights stay resident; elsewhere nothing."""
    metal = getattr(mx, "metal", None)
    if metal is None or not metal.is_available():
        return
    info = mx.device_info() if hasattr(mx, "device_info") else metal.device_info()
    mx.set_wired_limit(info["max_recommended_working_set_size"])
