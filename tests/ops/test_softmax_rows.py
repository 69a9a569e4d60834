"""The row softmax of non-exact lazy plans (ops/fusion_backends/softmax_rows.py): numpy's
softmax cross-entropy within rounding, special values included; compiled in the compile
process and loaded from the kernel cache, never in the program; numpy's passes wherever it does
not apply or is not compiled yet."""

import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ops import fused
from ops.fusion_backends import compile_process, compiled_loop, numba_loops, softmax_rows
from ops.registry import REGISTRY
from tests.ops.loop_helpers import compile_now, isolated

pytestmark = pytest.mark.skipif(not numba_loops.available(), reason="numba is not installed")

SWCE = REGISTRY["softmax_with_cross_entropy"]
FAST = dict(SWCE.defaults, fast_exp=True)
TOL = {np.float32: dict(rtol=2e-6, atol=1e-30), np.float64: dict(rtol=1e-13, atol=1e-300)}
WAIT_SECONDS = 120  # (a compile takes ~0.6 s; the child also imports numba first)


@pytest.fixture(autouse=True)
def own_loops(tmp_path, monkeypatch):
    """Each test: its own kernel cache, compile process and row loops."""
    yield from isolated(tmp_path, monkeypatch, softmax_rows)


def _compiled(dtype):
    """The row kernel of ``dtype`` compiled into this test's cache, as the compile process
    does it, then loaded the way the program loads it."""
    array = compiled_loop.array(np.dtype(dtype), 2)
    compile_now(softmax_rows.source(dtype), [array] * 4)
    loops = softmax_rows.loop(dtype).ready()
    assert loops is not None
    return loops


def _rows(loops, x):
    shift = x.max(axis=1, keepdims=True)
    prob, total = np.empty_like(x), np.empty_like(shift)
    loops(x, shift, prob, total)
    return prob, shift, total


def _numpy_softmax(x):
    shift = x.max(axis=1, keepdims=True)
    e = np.exp(x - shift)
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.integers(1, 9),
    cols=st.integers(1, 300),
    scale=st.sampled_from([1e-3, 1.0, 30.0]),
    seed=st.integers(0, 2**31),
)
def test_the_loop_gives_numpys_softmax_within_rounding(dtype, rows, cols, scale, seed):
    loops = _compiled(dtype)  # (cached after the first example: the same file, loaded)
    x = (np.random.default_rng(seed).standard_normal((rows, cols)) * scale).astype(dtype)
    prob, shift, total = _rows(loops, x)
    np.testing.assert_allclose(prob, _numpy_softmax(x), **TOL[dtype])
    np.testing.assert_array_equal(shift, x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(total, np.exp(x - shift).sum(axis=1, keepdims=True), **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_special_values_give_what_numpys_kernel_gives(dtype):
    loops = _compiled(dtype)
    inf, nan = np.inf, np.nan
    x = np.array(
        [
            [0.0, -inf, 1.0, -inf],  # exp(-inf) = 0 beside finite values
            [-inf, -inf, -inf, -inf],  # only -inf: NaN
            [0.0, inf, 1.0, 2.0],  # +inf: NaN
            [0.0, nan, 1.0, 2.0],  # NaN: NaN
            [1e30, -1e30, 0.0, 1e30],  # (float32: huge but finite)
        ],
        dtype,
    )
    with np.errstate(invalid="ignore"):
        want, _ = SWCE.kernel(np, SWCE.defaults, x, np.zeros((5, 1), np.int64))
    prob, _, _ = _rows(loops, x)
    np.testing.assert_array_equal(np.isnan(prob), np.isnan(want))
    np.testing.assert_array_equal(prob == 0, want == 0)
    np.testing.assert_allclose(prob, want, equal_nan=True, **TOL[dtype])


def _wait_until_loaded(x):
    deadline = time.monotonic() + WAIT_SECONDS
    while softmax_rows.rows(x) is None:
        assert time.monotonic() < deadline, "the row kernel was never loaded"
        time.sleep(0.02)


def test_the_op_with_fast_exp_matches_numpy_within_rounding_ignored_labels_included():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((64, 1024)) * 4).astype(np.float32)
    label = rng.integers(0, 1024, (64, 1))
    label[::7] = -100  # ignore_index: loss 0
    assert softmax_rows.rows(x) is None  # asked of the compile process, numpy meanwhile
    _wait_until_loaded(x)
    want_prob, want_loss = SWCE.kernel(np, SWCE.defaults, x, label)
    prob, loss = SWCE.kernel(np, FAST, x, label)
    np.testing.assert_allclose(prob, want_prob, **TOL[np.float32])
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5, atol=1e-6)
    assert (loss[::7] == 0).all()
    assert prob.dtype == loss.dtype == np.float32
    assert softmax_rows._LOOPS[np.dtype(np.float32)].spent is None  # moved: settled


def test_until_the_loop_is_compiled_fast_exp_is_numpys_kernel_bit_for_bit(monkeypatch):
    monkeypatch.setenv("FLUIDTAPE_COMPILE_PROCESS", "0")  # (no compile: never loaded)
    x = np.random.default_rng(2).standard_normal((64, 1024)).astype(np.float32)
    label = np.arange(64).reshape(-1, 1)
    for got, want in zip(
        SWCE.kernel(np, FAST, x, label), SWCE.kernel(np, SWCE.defaults, x, label), strict=True
    ):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "x",
    [
        np.zeros((8, 16), np.float32),  # below MIN_ELEMENTS
        np.zeros((64, 1024), np.float16),
        np.zeros((64, 1024), np.int32),
        np.zeros((4, 64, 256), np.float32),
        np.zeros((1024, 64), np.float32).T,  # not C-contiguous
    ],
    ids=["small", "float16", "int", "3-d", "transposed"],
)
def test_rows_does_not_apply_to(x):
    assert softmax_rows.rows(x) is None
    assert not softmax_rows._LOOPS  # (nothing asked of the compile process)


def test_a_read_only_array_keeps_numpys_passes():
    _compiled(np.float32)
    x = np.zeros((64, 1024), np.float32)
    x.flags.writeable = False
    assert softmax_rows.rows(x) is None
    assert softmax_rows.rows(x.copy()) is not None  # (the same array, writeable: the loop)


def test_under_errstate_raise_numpys_passes_run_and_raise():
    _compiled(np.float32)
    x = np.zeros((64, 1024), np.float32)
    x[3] = -np.inf  # (a row of -inf only: NaN, an invalid operation)
    assert softmax_rows.rows(x.copy()) is not None  # (the loop, without the error state)
    with np.errstate(invalid="raise"):
        assert softmax_rows.rows(x) is None
        with pytest.raises(FloatingPointError):
            SWCE.kernel(np, FAST, x, np.zeros((64, 1), np.int64))


def test_a_backend_other_than_auto_or_numba_keeps_numpys_passes():
    x = np.zeros((64, 1024), np.float32)
    with fused.backend("reference"):
        assert not compiled_loop.usable()
        assert softmax_rows.rows(x) is None


def test_without_numba_imported_the_row_loop_is_asked_for_after_64_calls(monkeypatch):
    """As a fused kernel: loading it imports numba (~100 MiB for good), which a few calls do
    not pay for; a loop that may move counts as unsettled meanwhile."""
    monkeypatch.delitem(sys.modules, "numba", raising=False)  # (imported or not)
    x = np.zeros((64, 1024), np.float32)
    for _ in range(compiled_loop.Loop.SUBMIT_CALLS - 1):
        assert softmax_rows.rows(x) is None
    (waiting,) = softmax_rows._LOOPS.values()
    assert waiting.key is None and fused.unsettled()
    assert softmax_rows.rows(x) is None  # (the 64th: asked of the compile process)
    assert compile_process.state(waiting.key) in (compile_process.PENDING, compile_process.READY)
