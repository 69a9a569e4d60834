"""SGD's one-pass update (ops/fusion_backends/sgd_loop.py): numpy's two passes bit for bit,
special values and a reused gradient buffer included, so eager mode may use it; numpy's passes
wherever it does not apply or is not compiled yet."""

import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import optim
import tape
from ops import fused
from ops.fusion_backends import compile_process, compiled_loop, numba_loops, sgd_loop
from ops.registry import REGISTRY
from tests.ops.loop_helpers import compile_now, isolated

pytestmark = pytest.mark.skipif(not numba_loops.available(), reason="numba is not installed")

SGD = REGISTRY["sgd"]


@pytest.fixture(autouse=True)
def own_loops(tmp_path, monkeypatch):
    """Each test: its own kernel cache, compile process and loops."""
    yield from isolated(tmp_path, monkeypatch, sgd_loop)


def _compile(dtype):
    """The loops of ``dtype`` compiled into this test's cache, as the compile process does."""
    vector = compiled_loop.array(np.dtype(dtype), 1)
    for in_place, source in sgd_loop.SOURCES.items():
        arguments = [vector] * (3 if in_place else 4)
        compile_now(source, arguments)
        assert sgd_loop.loop(dtype, in_place).ready() is not None


def _numpy(param, grad, rate):
    step = np.multiply(grad, rate)
    return np.subtract(param, step, out=step)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    shape=st.sampled_from([(1 << 16,), (256, 300), (8, 96, 100)]),
    rate=st.sampled_from([1e-3, 0.1, 3.0, -0.5]),
    seed=st.integers(0, 2**31),
)
def test_the_loop_is_numpys_two_passes_bit_for_bit(dtype, shape, rate, seed):
    _compile(dtype)
    rng = np.random.default_rng(seed)
    param = rng.standard_normal(shape).astype(dtype)
    grad = (rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 8, shape)).astype(dtype)
    out = np.empty_like(param)
    assert sgd_loop.step(param, grad, rate, out) is out
    np.testing.assert_array_equal(out, _numpy(param, grad, rate))


def test_special_values_and_a_reused_gradient_buffer():
    _compile(np.float32)
    param = np.ones(1 << 16, np.float32)
    grad = np.zeros_like(param)
    grad[:4] = [np.nan, np.inf, -np.inf, 3e38]
    param[4] = np.inf
    want = _numpy(param, grad, 10.0)
    with np.errstate(over="ignore", invalid="ignore"):
        assert sgd_loop.step(param, grad, 10.0, grad) is grad  # (``reuse_grad``: in place)
    np.testing.assert_array_equal(grad, want)


@pytest.mark.parametrize("reuse_grad", [False, True])
def test_the_sgd_kernel_gives_the_same_bits_with_and_without_the_loop(reuse_grad):
    rng = np.random.default_rng(3)
    param = rng.standard_normal((512, 256)).astype(np.float32)
    grad = rng.standard_normal((512, 256)).astype(np.float32)
    lr = np.array([0.01], np.float32)
    attrs = SGD.check_attrs({"reuse_grad": reuse_grad})
    without = SGD.kernel(np, attrs, param, grad.copy(), lr)
    _compile(np.float32)
    with_loop = SGD.kernel(np, attrs, param, grad.copy(), lr)
    np.testing.assert_array_equal(with_loop, without)


def _trained():
    """A large parameter after three eager SGD steps."""
    w = tape.Variable(np.linspace(-1, 1, 1 << 17, dtype=np.float32), requires_grad=True)
    opt = optim.SGD(lr=0.1)
    for _ in range(3):
        tape.backward(((w * w) * 0.5).sum())
        opt([w])
    return w.numpy()


def test_an_eager_optimizer_step_is_unchanged_bit_for_bit():
    without = _trained()
    _compile(np.float32)
    zeros, out = np.zeros(1 << 17, np.float32), np.empty(1 << 17, np.float32)
    assert sgd_loop.step(zeros, zeros, 0.1, out) is out  # (the loop runs from now on)
    np.testing.assert_array_equal(_trained(), without)


@pytest.mark.parametrize(
    "param, grad, out",
    [
        (np.zeros(100, np.float32),) * 3,  # small
        (np.zeros(1 << 16, np.float16),) * 3,
        (
            np.zeros(1 << 17, np.float32)[::2],
            np.zeros(1 << 16, np.float32),
            np.zeros(1 << 16, np.float32),
        ),
        (
            np.zeros(1 << 16, np.float32),
            np.zeros(1 << 16, np.float64),
            np.zeros(1 << 16, np.float32),
        ),
        (
            np.zeros((256, 256), np.float32),
            np.zeros(1 << 16, np.float32),
            np.zeros((256, 256), np.float32),
        ),
    ],
    ids=["small", "float16", "strided", "mixed dtypes", "shapes differ"],
)
def test_step_does_not_apply_to(param, grad, out):
    _compile(np.float32)
    assert sgd_loop.step(param, grad, 0.1, out) is None


def test_until_the_loop_is_compiled_numpys_passes_run(monkeypatch):
    monkeypatch.setenv("FLUIDTAPE_COMPILE_PROCESS", "0")  # (never compiled, never loaded)
    param = grad = np.zeros(1 << 16, np.float32)
    assert sgd_loop.step(param, grad, 0.1, np.empty_like(param)) is None


def test_a_process_that_has_not_imported_numba_keeps_numpys_passes(monkeypatch):
    """Importing numba costs ~100 MiB of resident code for good: the SGD loop never does it,
    nor starts the compile process."""
    _compile(np.float32)  # (on disk: only the import stands between the loop and the kernel)
    monkeypatch.setattr(sgd_loop, "_LOOPS", {})
    monkeypatch.delitem(sys.modules, "numba")
    param = grad = np.zeros(1 << 16, np.float32)
    assert sgd_loop.step(param, grad, 0.1, np.empty_like(param)) is None
    (waiting,) = sgd_loop._LOOPS.values()
    assert waiting.loops is None and waiting.key is None  # (nothing loaded, nothing asked)
    assert compile_process._child == [None]
    assert not fused.unsettled()  # (a benchmark's warm-up does not wait for it)
