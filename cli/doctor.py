"""``mlx-ssbd doctor``: MLX version, device, BLAS with a matmul probe, dtype policy, the CPU kernel
with a probe of its products against the CPU's int8 peak, models, speech."""

from __future__ import annotations

import time

from mlx_ssbd import backend_info
from mlx_ssbd.asr.recognizer import asr_cards, asr_status
from mlx_ssbd.models.registry import cards, is_prepared, models_home

import click


def matmul_probe(seconds: float = 1.0, n: int = 1024) -> float:
    """fp32 GFLOP/s of an n x n matmul, repeated for about ``seconds``."""
    import mlx.core as mx

    a = mx.random.normal((n, n))
    b = mx.random.normal((n, n))
    mx.eval(a @ b)  # warm up
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        mx.eval(a @ b)
        runs += 1
    return 2 * n**3 * runs / (time.perf_counter() - start) / 1e9


def kernel_probe() -> str | None:
    """The CPU kernel's 4-bit products in cache against this CPU's int8 peak (its widest int8
    multiply-add instruction alone) and, where timed, against the bound the weights' format sets
    (that instruction beside the fp32 work of a scale and a bias per 32 codes), about two seconds;
    None without the kernel."""
    from mlx_ssbd.evaluation.passes import int8_peak, kernel_ceiling
    from mlx_ssbd.platform.extension import kernel

    ours = kernel()
    if ours is None:
        return None
    ceiling, peak = kernel_ceiling(ours, 4, tries=2), int8_peak(ours, tries=2)  # the better of two
    line = f"4-bit products {ceiling / 1e9:.0f} GMAC/s in cache"
    if peak is None:
        return line + " (this build times no int8 peak)"
    line += f", {ceiling / peak:.0%} of this CPU's int8 peak ({peak / 1e9:.0f} GMAC/s)"
    scaled = int8_peak(ours, tries=2, scaled=True)
    return line + (
        f", {ceiling / scaled:.0%} of what a scale and a bias per 32 codes allow ({scaled / 1e9:.0f})"
        if scaled
        else ""
    )


@click.command(short_help="Check the backend, the CPU kernel, models and speech.")
def doctor():
    """Check the backend: MLX, device, BLAS speed, dtype policy, prepared models, speech recognition."""
    info = backend_info()
    click.echo(f"mlx            {info.mlx_version}")
    click.echo(f"platform       {info.platform}")
    click.echo(f"device         {info.device}")
    click.echo(
        f"blas           {info.blas}"
        + (f" ({info.blas_path})" if info.blas_path else "")
        + (f" - {info.blas_note}" if info.blas_note else "")
    )
    click.echo(f"gemv           {info.gemv}")
    gflops = matmul_probe()
    verdict = "ok" if gflops > 20 else "slow: install libopenblas0-pthread or set MLX_SSBD_BLAS"
    click.echo(f"matmul probe   {gflops:.1f} GFLOP/s fp32 (1024x1024, 1 s) - {verdict}")
    click.echo(f"compute dtype  {info.compute_dtype}")
    click.echo(f"quantized      {info.quantized_kernel}")
    if (probe := kernel_probe()) is not None:
        click.echo(f"kernel probe   {probe}")
    click.echo(f"weights        {info.weights}")
    click.echo(f"thread waits   {info.thread_waits}")
    click.echo(f"models home    {models_home()}")
    for card in cards().values():
        state = "prepared" if is_prepared(card) else ("not prepared" if card.on_pypi else "hub only")
        click.echo(f"  {card.name:<22} {state}")
    for name in asr_cards():
        click.echo(f"speech (asr)   {asr_status(name)}")
