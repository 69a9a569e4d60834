"""Optimizer updates as one compiled pass (ops/fusion_backends/update_loops.py): SGD, momentum,
Nesterov momentum, Adam and AdamW give numpy's passes bit for bit, special values and a reused
gradient buffer included, so eager mode may use them; numpy's passes run wherever a loop does
not apply or is not compiled yet."""

import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import optim
import tape
from ops import fused
from ops.fusion_backends import compile_process, numba_loops, update_loops
from ops.registry import REGISTRY
from tests.ops.loop_helpers import compile_now, isolated

pytestmark = pytest.mark.skipif(not numba_loops.available(), reason="numba is not installed")

KINDS = tuple(update_loops.UPDATES)
SIZE = max(update_loops.MIN_ELEMENTS.values())  # (large enough for every loop)


@pytest.fixture(autouse=True)
def own_loops(tmp_path, monkeypatch):
    """Each test: its own kernel cache, compile process and loops."""
    yield from isolated(tmp_path, monkeypatch, update_loops)


def _compile(dtype, kinds=KINDS):
    """The loops of ``dtype`` compiled into this test's cache, as the compile process does."""
    for kind in kinds:
        for in_place in (False, True):
            update_loops.loop(kind, dtype, in_place)  # (made: its arguments are its own)
            found = update_loops._LOOPS[(kind, np.dtype(dtype).str, in_place)]
            compile_now(found.source, found.arguments)
            assert found.ready() is not None


def _rate(dtype, rate):
    return np.array([rate], dtype)


def _powers(beta1, beta2):
    """Adam's inputs after its state: the rate, and the beta powers at step 3 in float64, as
    the optimizer holds them."""
    return lambda state, dtype, rate: [
        *state,
        _rate(dtype, rate),
        np.array(beta1**3),
        np.array(beta2**3),
    ]


def _rmsprop(moment, centered):
    """RMSProp's inputs after the gradient: MeanSquare, Moment?, MeanGrad?, the rate."""

    def inputs(state, dtype, rate):
        mean_square, *rest = state
        return [
            mean_square,
            rest.pop(0) if moment else None,
            rest.pop(0) if centered else None,
            _rate(dtype, rate),
        ]

    return inputs


def _plain_rate(state, dtype, rate):
    return [*state, _rate(dtype, rate)]


# Per case: (op type, attributes, the update's kind in UPDATES, its state as (name, whether it
# is a mean of squares: non-negative), and its inputs after the gradient from its state)
SQUARES, SIGNED = True, False
OPS = {
    "sgd": ("sgd", {}, "sgd", (), _plain_rate),
    "momentum": ("momentum", {"mu": 0.9}, "momentum", (SIGNED,), _plain_rate),
    "nesterov": (
        "momentum",
        {"mu": 0.8, "use_nesterov": True},
        "nesterov",
        (SIGNED,),
        _plain_rate,
    ),
    "adam": (
        "adam",
        {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8},
        "adam",
        (SIGNED, SQUARES),
        _powers(0.9, 0.999),
    ),
    "adamw": (
        "adamw",
        {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6, "coeff": 0.05},
        "adam",
        (SIGNED, SQUARES),
        _powers(0.8, 0.99),
    ),
    "adagrad": ("adagrad", {"epsilon": 1e-10}, "adagrad", (SQUARES,), _plain_rate),
    "rmsprop": ("rmsprop", {"decay": 0.99}, "rmsprop", (SQUARES,), _rmsprop(False, False)),
    "rmsprop_momentum": (
        "rmsprop",
        {"decay": 0.9, "momentum": 0.8, "epsilon": 1e-6},
        "rmsprop_momentum",
        (SQUARES, SIGNED),
        _rmsprop(True, False),
    ),
    "rmsprop_centered": (
        "rmsprop",
        {"decay": 0.95, "centered": True},
        "rmsprop_centered",
        (SQUARES, SIGNED),
        _rmsprop(False, True),
    ),
    "rmsprop_centered_momentum": (
        "rmsprop",
        {"decay": 0.9, "momentum": 0.5, "centered": True},
        "rmsprop_centered_momentum",
        (SQUARES, SIGNED, SIGNED),
        _rmsprop(True, True),
    ),
}


def test_every_update_loop_is_tested():
    assert {kind for _, _, kind, _, _ in OPS.values()} == set(KINDS)


def _state(rng, shape, dtype, name):
    """A parameter, a gradient over many magnitudes and the update's state."""
    param = rng.standard_normal(shape).astype(dtype)
    grad = (rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 8, shape)).astype(dtype)
    state = [  # (means of squares above the signed means' squares: RMSProp's centered root)
        (
            np.abs(rng.standard_normal(shape)) + 1.0
            if squares
            else rng.standard_normal(shape) * 0.1
        ).astype(dtype)
        for squares in OPS[name][3]
    ]
    return param, grad, state


def _kernel(name, inputs, rate, reuse_grad):
    """The op's outputs from its kernel on copies of ``inputs`` (the parameter, the gradient and
    the state): the kernel may write into the gradient's buffer."""
    op_type, attrs, _, _, after = OPS[name]
    defn = REGISTRY[op_type]
    attrs = defn.check_attrs({**attrs, "reuse_grad": reuse_grad})
    param, grad, *state = [a.copy() for a in inputs]
    out = defn.kernel(np, attrs, param, grad, *after(state, param.dtype, rate))
    flat = []
    for value in out if isinstance(out, tuple) else (out,):
        flat += value if isinstance(value, list) else [value]  # (RMSProp's optional slots)
    return [np.asarray(a) for a in flat]


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    shape=st.sampled_from([(SIZE,), (512, 600), (8, 192, 200)]),
    rate=st.sampled_from([1e-3, 0.1, 3.0]),
    reuse_grad=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_every_update_gives_numpys_passes_bit_for_bit(name, dtype, shape, rate, reuse_grad, seed):
    rng = np.random.default_rng(seed)
    param, grad, state = _state(rng, shape, dtype, name)
    without = _kernel(name, [param, grad, *state], rate, reuse_grad)
    _compile(dtype, [OPS[name][2]])
    with_loop = _kernel(name, [param, grad, *state], rate, reuse_grad)
    assert len(with_loop) == len(without)
    for got, want in zip(with_loop, without, strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def _watch(monkeypatch):
    """The (kind, whether its loop ran) of every ``update_loops.run`` from now on."""
    ran = []
    real = update_loops.run

    def run(kind, *args):
        made = real(kind, *args)
        ran.append((kind, made is not None))
        return made

    monkeypatch.setattr(update_loops, "run", run)
    return ran


@pytest.mark.parametrize("name", list(OPS))
def test_the_kernel_runs_its_loop_where_it_applies(name, monkeypatch):
    """Not numpy's passes under another name: the op's kernel runs its compiled loop."""
    _compile(np.float32, [OPS[name][2]])
    ran = _watch(monkeypatch)
    rng = np.random.default_rng(0)
    param, grad, state = _state(rng, (SIZE,), np.float32, name)
    _kernel(name, [param, grad, *state], 0.1, False)
    assert ran == [(OPS[name][2], True)]


def _same_bits(got, want):
    """Equal bit for bit (NaNs where NaNs are: their payloads are the hardware's)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bits = np.dtype(f"u{want.itemsize}")
    np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits))


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("reuse_grad", [False, True])
def test_special_values_and_a_reused_gradient_buffer(name, reuse_grad):
    rng = np.random.default_rng(1)
    param, grad, state = _state(rng, (SIZE,), np.float32, name)
    grad[:5] = [np.nan, np.inf, -np.inf, 3e38, -0.0]
    param[5:8] = [np.inf, -0.0, 3e38]
    for array in state:
        array[8:11] = [0.0, np.inf, -1.0]  # (Adam: a zero root, an infinite one, a NaN one)
    with np.errstate(all="ignore"):
        without = _kernel(name, [param, grad, *state], 10.0, reuse_grad)
        _compile(np.float32, [OPS[name][2]])
        with_loop = _kernel(name, [param, grad, *state], 10.0, reuse_grad)
    assert not np.isfinite(without[0][:3]).any() and np.isfinite(without[0][12:]).all()
    for got, want in zip(with_loop, without, strict=True):
        _same_bits(got, want)


def test_a_reused_gradient_buffer_holds_the_new_parameter():
    _compile(np.float32, ["adam"])
    rng = np.random.default_rng(2)
    param, grad, (m1, m2) = _state(rng, (SIZE,), np.float32, "adam")
    want = _kernel("adam", [param, grad, m1, m2], 0.1, False)
    outs = (grad, np.empty_like(param), np.empty_like(param))
    constants = (1.0, 1.0 - 0.9, 0.999, 1.0 - 0.999, np.sqrt(1 - 0.999**3), 1e-8)
    constants += (0.1 / (1 - 0.9**3),)
    made = update_loops.run("adam", (param, grad, m1, m2), constants, True, lambda: outs)
    assert made is outs
    for got, expected in zip(made, want[:3], strict=True):
        _same_bits(got, expected)


def _trained(make, steps=3):
    """A large parameter after a few eager steps of the optimizer ``make()``."""
    w = tape.Variable(np.linspace(-1, 1, SIZE, dtype=np.float32), requires_grad=True)
    opt = make()
    for _ in range(steps):
        tape.backward(((w * w) * 0.5).sum())
        opt([w])
    return w.numpy()


@pytest.mark.parametrize(
    "make",
    [
        lambda: optim.SGD(lr=0.1),
        lambda: optim.Momentum(lr=0.1, momentum=0.9),
        lambda: optim.Momentum(lr=0.1, momentum=0.9, nesterov=True),
        lambda: optim.Adam(lr=0.01),
        lambda: optim.AdamW(lr=0.01, weight_decay=0.1),
        lambda: optim.Adagrad(lr=0.1),
        lambda: optim.RMSProp(lr=0.01),
        lambda: optim.RMSProp(lr=0.01, momentum=0.9, centered=True),
    ],
    ids=["sgd", "momentum", "nesterov", "adam", "adamw", "adagrad", "rmsprop", "centered"],
)
def test_an_eager_optimizer_is_unchanged_bit_for_bit(make, monkeypatch):
    without = _trained(make)
    _compile(np.float32)
    ran = _watch(monkeypatch)
    np.testing.assert_array_equal(_trained(make), without)
    assert ran and all(made for _, made in ran)  # (every step ran its loop)


@pytest.mark.parametrize(
    "param, grad",
    [
        (np.zeros(100, np.float32),) * 2,  # small
        (np.zeros(SIZE, np.float16),) * 2,
        (np.zeros(2 * SIZE, np.float32)[::2], np.zeros(SIZE, np.float32)),
        (np.zeros(SIZE, np.float32), np.zeros(SIZE, np.float64)),
        (np.zeros((512, SIZE // 512), np.float32), np.zeros(SIZE, np.float32)),
    ],
    ids=["small", "float16", "strided", "mixed dtypes", "shapes differ"],
)
def test_run_does_not_apply_to(param, grad):
    _compile(np.float32, ["sgd"])
    made = []
    assert update_loops.run("sgd", (param, grad), (0.1,), False, made.append) is None
    assert not made  # (no buffer asked for)


def test_an_output_other_than_promised_is_not_written():
    _compile(np.float32, ["sgd"])
    param, grad = np.ones(SIZE, np.float32), np.ones(SIZE, np.float32)
    strided = np.zeros(2 * SIZE, np.float32)[::2]
    assert update_loops.run("sgd", (param, grad), (0.1,), False, lambda: (strided,)) is None
    assert update_loops.run("sgd", (param, grad), (0.1,), True, lambda: (strided,)) is None
    assert not strided.any()


def test_where_numpy_is_asked_to_raise_its_passes_run_and_raise(monkeypatch):
    """The loops set no floating-point flags: under ``np.errstate(invalid="raise")`` the kernel
    keeps numpy's passes, which raise at the square root of a negative mean."""
    _compile(np.float32, ["rmsprop_centered"])
    ran = _watch(monkeypatch)
    rng = np.random.default_rng(4)
    param, grad, state = _state(rng, (SIZE,), np.float32, "rmsprop_centered")
    state[1][:] = 10.0  # (a mean gradient whose square exceeds the mean square)
    with np.errstate(invalid="raise"), pytest.raises(FloatingPointError):
        _kernel("rmsprop_centered", [param, grad, *state], 0.1, False)
    assert ran == [("rmsprop_centered", False)]
    with np.errstate(invalid="ignore"):
        _kernel("rmsprop_centered", [param, grad, *state], 0.1, False)
    assert ran[-1] == ("rmsprop_centered", True)


def test_until_a_loop_is_compiled_numpys_passes_run(monkeypatch):
    monkeypatch.setenv("FLUIDTAPE_COMPILE_PROCESS", "0")  # (never compiled, never loaded)
    param = grad = np.zeros(SIZE, np.float32)
    out = np.empty_like(param)
    assert update_loops.run("sgd", (param, grad), (0.1,), False, lambda: (out,)) is None


def test_a_process_that_has_not_imported_numba_keeps_numpys_passes(monkeypatch):
    """Importing numba costs ~100 MiB of resident code for good: an update loop never does it,
    nor starts the compile process."""
    _compile(np.float32, ["adam"])  # (on disk: only the import stands between it and the kernel)
    monkeypatch.setattr(update_loops, "_LOOPS", {})
    monkeypatch.delitem(sys.modules, "numba", raising=False)  # (imported or not)
    param = grad = np.zeros(SIZE, np.float32)
    outs = lambda: (np.empty_like(param),) * 3  # noqa: E731
    constants = (1.0, 0.1, 0.999, 0.001, 1.0, 1e-8, 0.1)
    assert update_loops.run("adam", (param, grad, param, param), constants, False, outs) is None
    (waiting,) = update_loops._LOOPS.values()
    assert waiting.loops is None and waiting.key is None  # (nothing loaded, nothing asked)
    assert compile_process._child == [None]
    assert not fused.unsettled()  # (a benchmark's warm-up does not wait for it)
