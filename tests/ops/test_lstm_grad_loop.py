"""The LSTM step's gradient as one compiled loop for non-exact lazy plans
(ops/fusion_backends/lstm_grad_loop.py): numpy's ``lstm_cell_grad`` kernel within rounding, special
values included; compiled in the compile process and loaded from the kernel cache, never in the
program; numpy's passes wherever it does not apply or is not compiled yet."""

import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ops import fused
from ops.fusion_backends import compile_process, compiled_loop, lstm_grad_loop, numba_loops
from ops.registry import REGISTRY
from tape.testing import assert_within_rounding
from tests.ops.loop_helpers import compile_now, isolated

pytestmark = pytest.mark.skipif(not numba_loops.available(), reason="numba is not installed")

CELL, GRAD = REGISTRY["lstm_cell"], REGISTRY["lstm_cell_grad"]
FAST = dict(GRAD.defaults, fast_exp=True)
# vecmath's float32 tanh is within 1 ulp of the correctly rounded value. Through 1 - tanh(C)^2
# near saturation a few ulps of 1 become an absolute error, times the incoming gradient and the
# state: so the absolute tolerance is ~8 float32 ulps of the largest finite value of the array
# compared, and the relative one ~80 ulps.
RTOL, ULPS = 1e-5, 8
WAIT_SECONDS = 120  # (a compile takes ~1 s; the child also imports numba first)


@pytest.fixture(autouse=True)
def own_loops(tmp_path, monkeypatch):
    """Each test: its own kernel cache, compile process and LSTM loop."""
    yield from isolated(tmp_path, monkeypatch, lstm_grad_loop)


def _compiled():
    """The loop compiled into this test's cache, as the compile process does it, then loaded
    the way the program loads it."""
    compile_now(lstm_grad_loop.BACKWARD, lstm_grad_loop.ARGUMENTS)
    assert lstm_grad_loop.loop().ready() is not None


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
        assert_within_rounding(g, w, RTOL, ULPS)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.integers(1, 9),
    hidden=st.integers(1, 40),
    scale=st.sampled_from([1e-3, 1.0, 5.0, 30.0]),
    seed=st.integers(0, 2**31),
)
def test_the_loop_gives_numpys_kernel_within_rounding(rows, hidden, scale, seed):
    _compiled()  # (cached after the first example: the same file, loaded)
    grad = _grad_inputs(np.random.default_rng(seed), rows, hidden, scale)
    _assert_close(lstm_grad_loop.backward(*grad), GRAD.kernel(np, GRAD.defaults, *grad))


def test_special_values_give_what_numpys_kernel_gives():
    _compiled()
    inf, nan = np.inf, np.nan
    gates, c, cout, g_hout, g_cout = _grad_inputs(np.random.default_rng(4), 4, 3)
    cout[0, 0], cout[1, 1] = inf, -inf  # tanh +-1: no state gradient through h
    g_hout[2, 0] = nan  # NaN where it reaches
    c[3, 2], g_cout[3, 1] = inf, -inf  # infinite products
    with np.errstate(invalid="ignore", over="ignore"):
        want = GRAD.kernel(np, GRAD.defaults, gates, c, cout, g_hout, g_cout)
        got = lstm_grad_loop.backward(gates, c, cout, g_hout, g_cout)
    _assert_close(got, want)


def test_the_op_with_fast_exp_matches_numpy_within_rounding_once_loaded():
    grad = _grad_inputs(np.random.default_rng(1), 16, 32)
    for _ in range(compiled_loop.Loop.SUBMIT_CALLS):  # (asked of the compile process after
        GRAD.kernel(np, FAST, *grad)  # as many calls as a fused kernel; numpy meanwhile)
    deadline = time.monotonic() + WAIT_SECONDS
    while lstm_grad_loop.backward(*grad) is None:
        assert time.monotonic() < deadline, "the gradient's loop was never loaded"
        time.sleep(0.02)
    _assert_close(GRAD.kernel(np, FAST, *grad), GRAD.kernel(np, GRAD.defaults, *grad))
    assert lstm_grad_loop._LOOPS["backward"].spent is None  # moved: settled


def test_until_the_loop_is_compiled_fast_exp_is_numpys_kernel_bit_for_bit(monkeypatch):
    monkeypatch.setenv("FLUIDTAPE_COMPILE_PROCESS", "0")  # (no compile: never loaded)
    grad = _grad_inputs(np.random.default_rng(2), 8, 16)
    for _ in range(2 * compiled_loop.Loop.SUBMIT_CALLS):
        got = GRAD.kernel(np, FAST, *grad)
    for g, w in zip(got, GRAD.kernel(np, GRAD.defaults, *grad), strict=True):
        np.testing.assert_array_equal(g, w)


def _read_only(array):
    array = array.copy()
    array.flags.writeable = False
    return array


def _not_for_the_loop(case):
    grad = _grad_inputs(np.random.default_rng(7), 4, 3)
    gates, c, cout, g_hout, g_cout = grad
    return {
        "float64": [a.astype(np.float64) for a in grad],
        "mixed dtypes": [gates, c.astype(np.float64), cout, g_hout, g_cout],
        "no Hout@GRAD": [gates, c, cout, None, g_cout],
        "no Cout@GRAD": [gates, c, cout, g_hout, None],
        "one example (1-D)": [a[0] for a in grad],
        "3-D": [a[None] for a in grad],
        "read-only state": [gates, _read_only(c), cout, g_hout, g_cout],
    }[case]


@pytest.mark.parametrize(
    "case",
    [
        "float64",
        "mixed dtypes",
        "no Hout@GRAD",
        "no Cout@GRAD",
        "one example (1-D)",
        "3-D",
        "read-only state",
    ],
)
def test_the_loop_does_not_apply_to(case):
    _compiled()
    grad = _not_for_the_loop(case)
    assert lstm_grad_loop.backward(*grad) is None
    for got, want in zip(  # (the op's kernel: numpy's, bit for bit)
        GRAD.kernel(np, FAST, *grad), GRAD.kernel(np, GRAD.defaults, *grad), strict=True
    ):
        np.testing.assert_array_equal(got, want)


def test_f_ordered_inputs_are_copied_not_refused():
    """A small batch's gates and states come F-ordered from ``x @ W.T`` (``ops.matmul``)."""
    _compiled()
    grad = _grad_inputs(np.random.default_rng(6), 4, 8)
    got = lstm_grad_loop.backward(*[np.asfortranarray(a) for a in grad])
    _assert_close(got, GRAD.kernel(np, GRAD.defaults, *grad))


def test_under_errstate_raise_numpys_passes_run_and_raise():
    _compiled()
    gates, c, cout, g_hout, g_cout = _grad_inputs(np.random.default_rng(9), 4, 3)
    c[0, 0] = np.inf
    gates[0, 3 + 0] = 0.0  # (gate f of unit 0 is 0: (1 - f) f c = 0 * inf, invalid)
    with np.errstate(all="raise"):
        assert lstm_grad_loop.backward(gates, c, cout, g_hout, g_cout) is None
        with pytest.raises(FloatingPointError):
            GRAD.kernel(np, FAST, gates, c, cout, g_hout, g_cout)


def test_a_backend_other_than_auto_or_numba_keeps_numpys_passes():
    grad = _grad_inputs(np.random.default_rng(10), 4, 3)
    with fused.backend("reference"):
        assert not compiled_loop.usable()
        assert lstm_grad_loop.backward(*grad) is None


def test_without_numba_imported_the_loop_is_asked_for_after_64_calls(monkeypatch):
    """As a fused kernel: loading it imports numba (~100 MiB for good), which a few calls do
    not pay for; a loop that may move counts as unsettled meanwhile."""
    monkeypatch.delitem(sys.modules, "numba", raising=False)  # (imported or not)
    grad = _grad_inputs(np.random.default_rng(11), 4, 3)
    for _ in range(compiled_loop.Loop.SUBMIT_CALLS - 1):
        assert lstm_grad_loop.backward(*grad) is None
    (waiting,) = lstm_grad_loop._LOOPS.values()
    assert waiting.key is None and fused.unsettled()
    assert lstm_grad_loop.backward(*grad) is None  # (the 64th: asked of the compile process)
    assert compile_process.state(waiting.key) in (compile_process.PENDING, compile_process.READY)
