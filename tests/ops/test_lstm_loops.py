"""The LSTM step's and its gradient's compiled loops for non-exact lazy plans
(ops/fusion_backends/lstm_loops.py): numpy's ``lstm_cell`` and ``lstm_cell_grad`` kernels within
rounding, special values included; compiled in the compile process and loaded from the kernel
cache, never in the program; numpy's passes wherever they do not apply or are not compiled yet."""

import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ops import fused
from ops.fusion_backends import compile_process, compiled_loop, lstm_loops, numba_loops
from ops.registry import REGISTRY
from tests.ops.loop_helpers import compile_now, isolated

pytestmark = pytest.mark.skipif(not numba_loops.available(), reason="numba is not installed")

CELL, GRAD = REGISTRY["lstm_cell"], REGISTRY["lstm_cell_grad"]
FAST_CELL, FAST_GRAD = dict(CELL.defaults, fast_exp=True), dict(GRAD.defaults, fast_exp=True)
# vecmath's float32 exp and tanh are within 1 ulp of the correctly rounded value, numpy's exp
# within 2. Through 1 - tanh(C)^2 near saturation a few ulps of 1 become an absolute error,
# times the incoming gradient and the state: so the absolute tolerance is ~8 float32 ulps of
# the largest finite value of the array compared, and the relative one ~80 ulps.
RTOL, ULPS = 1e-5, 8 * np.finfo(np.float32).eps
WAIT_SECONDS = 120  # (a compile takes ~1 s; the child also imports numba first)


@pytest.fixture(autouse=True)
def own_loops(tmp_path, monkeypatch):
    """Each test: its own kernel cache, compile process and LSTM loops."""
    yield from isolated(tmp_path, monkeypatch, lstm_loops)


def _compiled():
    """Both loops compiled into this test's cache, as the compile process does it, then
    loaded the way the program loads them."""
    for kind in lstm_loops.SOURCES:
        compile_now(lstm_loops.SOURCES[kind], lstm_loops._make(kind).arguments)
    assert all(lstm_loops.loop(kind).ready() is not None for kind in lstm_loops.SOURCES)


def _step_inputs(rng, rows, hidden, scale=1.0):
    shape = (rows, 4 * hidden)
    gi, gh = (rng.standard_normal(shape) * scale for _ in range(2))
    c = rng.standard_normal((rows, hidden)) * scale
    bias_ih, bias_hh = (rng.standard_normal(4 * hidden) for _ in range(2))
    return [a.astype(np.float32) for a in (gi, gh, c, bias_ih, bias_hh)]


def _grad_inputs(rng, rows, hidden, scale=1.0):
    _, cout, gates = CELL.kernel(np, CELL.defaults, *_step_inputs(rng, rows, hidden, scale))
    c, g_hout, g_cout = (
        rng.standard_normal((rows, hidden)).astype(np.float32) * scale for _ in range(3)
    )
    return [gates, c, cout, g_hout, g_cout]


def _assert_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype == np.float32 and g.shape == w.shape
        finite = np.abs(w[np.isfinite(w)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ULPS * scale, equal_nan=True)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.integers(1, 9),
    hidden=st.integers(1, 40),
    scale=st.sampled_from([1e-3, 1.0, 5.0, 30.0]),
    seed=st.integers(0, 2**31),
)
def test_the_loops_give_numpys_kernels_within_rounding(rows, hidden, scale, seed):
    _compiled()  # (cached after the first example: the same files, loaded)
    rng = np.random.default_rng(seed)
    step = _step_inputs(rng, rows, hidden, scale)
    _assert_close(lstm_loops.forward(*step), CELL.kernel(np, CELL.defaults, *step))
    grad = _grad_inputs(rng, rows, hidden, scale)
    _assert_close(lstm_loops.backward(*grad), GRAD.kernel(np, GRAD.defaults, *grad))


def test_special_values_give_what_numpys_kernels_give():
    _compiled()
    inf, nan = np.inf, np.nan
    gi, gh, c, bias_ih, bias_hh = _step_inputs(np.random.default_rng(3), 4, 3)
    gi[0, :] = inf  # saturated gates: sigmoid 1, tanh 1
    gi[1, :] = -inf  # sigmoid 0, tanh -1
    gi[2, 5] = nan  # one NaN gate: NaN where it reaches
    c[3, 1] = inf  # an infinite state
    with np.errstate(invalid="ignore", over="ignore"):
        want = CELL.kernel(np, CELL.defaults, gi, gh, c, bias_ih, bias_hh)
        got = lstm_loops.forward(gi, gh, c, bias_ih, bias_hh)
    _assert_close(got, want)
    gates, c, cout, g_hout, g_cout = _grad_inputs(np.random.default_rng(4), 3, 2)
    cout[0, 0], cout[1, 1], g_hout[2, 0] = inf, -inf, nan
    with np.errstate(invalid="ignore", over="ignore"):
        want = GRAD.kernel(np, GRAD.defaults, gates, c, cout, g_hout, g_cout)
        got = lstm_loops.backward(gates, c, cout, g_hout, g_cout)
    _assert_close(got, want)


def _wait_until_loaded(step):
    deadline = time.monotonic() + WAIT_SECONDS
    while lstm_loops.forward(*step) is None:
        assert time.monotonic() < deadline, "the step's loop was never loaded"
        time.sleep(0.02)


def test_the_ops_with_fast_exp_match_numpy_within_rounding_once_loaded():
    rng = np.random.default_rng(1)
    step = _step_inputs(rng, 16, 32)
    for _ in range(compiled_loop.Loop.SUBMIT_CALLS):  # (asked of the compile process after
        CELL.kernel(np, FAST_CELL, *step)  # as many calls as a fused kernel, numpy meanwhile)
    _wait_until_loaded(step)
    _assert_close(CELL.kernel(np, FAST_CELL, *step), CELL.kernel(np, CELL.defaults, *step))
    assert lstm_loops._LOOPS["forward"].spent is None  # moved: settled
    grad = _grad_inputs(rng, 16, 32)
    deadline = time.monotonic() + WAIT_SECONDS
    while lstm_loops.backward(*grad) is None:
        assert time.monotonic() < deadline, "the gradient's loop was never loaded"
        time.sleep(0.02)
    _assert_close(GRAD.kernel(np, FAST_GRAD, *grad), GRAD.kernel(np, GRAD.defaults, *grad))


def test_until_the_loops_are_compiled_fast_exp_is_numpys_kernel_bit_for_bit(monkeypatch):
    monkeypatch.setenv("FLUIDTAPE_COMPILE_PROCESS", "0")  # (no compile: never loaded)
    rng = np.random.default_rng(2)
    for defn, fast, inputs in (
        (CELL, FAST_CELL, _step_inputs(rng, 8, 16)),
        (GRAD, FAST_GRAD, _grad_inputs(rng, 8, 16)),
    ):
        for got, want in zip(
            defn.kernel(np, fast, *inputs), defn.kernel(np, defn.defaults, *inputs), strict=True
        ):
            np.testing.assert_array_equal(got, want)


def test_an_f_ordered_projection_is_copied_not_refused():
    """``h @ W_hh.T`` may come F-ordered (``ops.matmul.product``)."""
    _compiled()
    gi, gh, c, bias_ih, bias_hh = _step_inputs(np.random.default_rng(6), 16, 8)
    got = lstm_loops.forward(gi, np.asfortranarray(gh), c, bias_ih, bias_hh)
    _assert_close(got, CELL.kernel(np, CELL.defaults, gi, gh, c, bias_ih, bias_hh))


def _read_only(array):
    array = array.copy()
    array.flags.writeable = False
    return array


def _step_not_for_the_loop(case):
    gi, gh, c, bias_ih, bias_hh = _step_inputs(np.random.default_rng(7), 4, 3)
    return {
        "float64": [a.astype(np.float64) for a in (gi, gh, c, bias_ih, bias_hh)],
        "mixed dtypes": [gi, gh, c.astype(np.float64), bias_ih, bias_hh],
        "no bias": [gi, gh, c, None, bias_hh],
        "one example (1-D)": [gi[0], gh[0], c[0], bias_ih, bias_hh],
        "3-D": [gi[None], gh[None], c[None], bias_ih, bias_hh],
        "read-only state": [gi, gh, _read_only(c), bias_ih, bias_hh],
    }[case]


@pytest.mark.parametrize(
    "case",
    ["float64", "mixed dtypes", "no bias", "one example (1-D)", "3-D", "read-only state"],
)
def test_the_step_loop_does_not_apply_to(case):
    _compiled()
    step = _step_not_for_the_loop(case)
    assert lstm_loops.forward(*step) is None
    for got, want in zip(  # (the op's kernel: numpy's, bit for bit)
        CELL.kernel(np, FAST_CELL, *step), CELL.kernel(np, CELL.defaults, *step), strict=True
    ):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("absent", ["Hout@GRAD", "Cout@GRAD"])
def test_the_gradient_loop_leaves_an_absent_output_gradient_to_numpy(absent):
    _compiled()
    grad = _grad_inputs(np.random.default_rng(8), 4, 3)
    grad[3 if absent == "Hout@GRAD" else 4] = None
    assert lstm_loops.backward(*grad) is None
    _assert_close(GRAD.kernel(np, FAST_GRAD, *grad), GRAD.kernel(np, GRAD.defaults, *grad))


def test_under_errstate_raise_numpys_passes_run_and_raise():
    _compiled()
    gi, gh, c, bias_ih, bias_hh = _step_inputs(np.random.default_rng(9), 4, 3)
    c[0, 0] = np.inf  # f * inf + ...: fine; 0 * inf below is invalid
    gi[0, 3] = -np.inf  # (gate f of unit 0: sigmoid 0, and 0 * inf = NaN)
    with np.errstate(all="raise"):
        assert lstm_loops.forward(gi, gh, c, bias_ih, bias_hh) is None
        with pytest.raises(FloatingPointError):
            CELL.kernel(np, FAST_CELL, gi, gh, c, bias_ih, bias_hh)


def test_a_backend_other_than_auto_or_numba_keeps_numpys_passes():
    step = _step_inputs(np.random.default_rng(10), 4, 3)
    with fused.backend("reference"):
        assert not compiled_loop.usable()
        assert lstm_loops.forward(*step) is None


def test_without_numba_imported_the_loop_is_asked_for_after_64_calls(monkeypatch):
    """As a fused kernel: loading it imports numba (~100 MiB for good), which a few calls do
    not pay for; a loop that may move counts as unsettled meanwhile."""
    monkeypatch.delitem(sys.modules, "numba")
    step = _step_inputs(np.random.default_rng(11), 4, 3)
    for _ in range(compiled_loop.Loop.SUBMIT_CALLS - 1):
        assert lstm_loops.forward(*step) is None
    (waiting,) = lstm_loops._LOOPS.values()
    assert waiting.key is None and fused.unsettled()
    assert lstm_loops.forward(*step) is None  # (the 64th: asked of the compile process)
    assert compile_process.state(waiting.key) in (compile_process.PENDING, compile_process.READY)
