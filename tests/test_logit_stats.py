"""Row statistics of logits (``platform.logit_stats``): the native extension's one operation against
MLX's own max, argmax and exp (vocabularies of every size modulo the lanes, ties, rows far below
the top, rows chosen in any order), and the MLX fallback that GPUs and builds without the
extension take."""

from mlx_ssbd.platform import extension
from mlx_ssbd.platform import logit_stats as stats_module
from mlx_ssbd.platform.logit_stats import logit_stats

import mlx.core as mx
import numpy as np
import pytest

KERNEL = extension.kernel()
needs_kernel = pytest.mark.skipif(
    KERNEL is None, reason=f"native extension not available: {extension.kernel_status()}"
)


def expected(logits: np.ndarray, rows: list[int]):
    picked = logits[rows].astype(np.float64)
    largest = picked.max(-1)
    return largest, np.exp(picked - largest[:, None]).sum(-1), picked.argmax(-1)


def check(got, logits: np.ndarray, rows: list[int]):
    largest, total, best = (np.array(a) for a in got)
    want_largest, want_total, want_best = expected(logits, rows)
    assert np.array_equal(largest, want_largest.astype(np.float32))
    assert np.array_equal(best, want_best) and best.dtype == np.uint32
    assert np.allclose(total, want_total, rtol=3e-5, atol=0)


@pytest.fixture(params=["kernel", "mlx"])
def path(request, monkeypatch):
    if request.param == "kernel" and KERNEL is None:
        pytest.skip(f"native extension not available: {extension.kernel_status()}")
    if request.param == "mlx":
        monkeypatch.setattr(stats_module, "kernel", lambda: None)
    return request.param


@pytest.mark.parametrize("vocab", [1, 15, 16, 17, 262, 5003])
def test_statistics_of_rows_in_any_order(path, vocab):
    rng = np.random.default_rng(vocab)
    logits = (rng.normal(size=(6, vocab)) * 4).astype(np.float32)
    rows = [5, 0, 3, 3, 1]
    check(logit_stats(mx.array(logits), mx.array(rows)), logits, rows)


def test_ties_go_to_the_first_index_and_far_values_add_nothing(path):
    logits = np.zeros((4, 40), dtype=np.float32)
    logits[0, [7, 23, 39]] = 3.0  # a tie at the top, in different lanes and blocks
    logits[1, [2, 18]] = 5.0  # the same lane of two blocks
    logits[2, :] = -1e4
    logits[2, 38] = 10.0  # the tail past the whole lanes; the rest 87+ below it
    logits[3, :] = -np.inf
    logits[3, 11] = 0.0
    largest, total, best = (np.array(a) for a in logit_stats(mx.array(logits), mx.array([0, 1, 2, 3])))
    assert best.tolist() == [7, 2, 38, 11]
    assert largest.tolist() == [3.0, 5.0, 10.0, 0.0]
    assert total[2] == 1.0 and total[3] == 1.0
    assert total[0] == pytest.approx(3 + 37 * np.exp(-3.0), rel=1e-6)


def test_without_sums_the_totals_are_zeros(path):
    logits = np.random.default_rng(1).normal(size=(3, 50)).astype(np.float32)
    largest, total, best = logit_stats(mx.array(logits), mx.array([2, 0]), sums=False)
    assert np.array(total).tolist() == [0.0, 0.0]
    assert np.array(best).tolist() == [int(logits[2].argmax()), int(logits[0].argmax())]


@needs_kernel
def test_the_kernel_reads_strided_logits_and_refuses_bad_input():
    logits = mx.random.normal((20, 48), key=mx.random.key(3))
    view = logits[::2, 5:]  # neither rows nor columns contiguous
    check(KERNEL.logit_stats(view, mx.array([9, 0, 4])), np.array(view), [9, 0, 4])
    largest, total, best = KERNEL.logit_stats(logits, mx.array([20, -1]))
    assert np.isnan(np.array(largest)).all() and np.isnan(np.array(total)).all()
    with pytest.raises(ValueError, match="fp32"):
        KERNEL.logit_stats(logits.astype(mx.float16), mx.array([0]))
    with pytest.raises(ValueError, match="fp32"):
        KERNEL.logit_stats(logits[0], mx.array([0]))
    with pytest.raises(ValueError, match="integer"):
        KERNEL.logit_stats(logits, mx.array([0.0]))


def test_other_dtypes_are_read_as_fp32(path):
    logits = mx.random.normal((3, 33), key=mx.random.key(4)).astype(mx.bfloat16)
    check(logit_stats(logits, mx.array([1, 2])), np.array(logits.astype(mx.float32)), [1, 2])
