"""The activations of issue 10 against torch.nn.functional: values, gradients and double
gradients on random inputs; values and gradients on every kink and at |x| = 1000 (where an
unstable formula overflows); gelu's tanh approximation; prelu and glu shapes (hypothesis);
dtypes and errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes

import ops
import tape
from tests.ops.torch_compare import assert_matches_torch

torch = pytest.importorskip("torch")
F = torch.nn.functional

# Kinks (0, +-1, +-3, 6) and far-out points; the random inputs keep 0.05 away from every kink.
_EDGES = np.array([-1000.0, -50.0, -6.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0, 50.0, 1000.0])
_KINKS = (-3.0, -1.0, 0.0, 1.0, 3.0, 6.0)


def _random(seed=0, shape=(4, 6)):
    x = np.random.default_rng(seed).uniform(-5.0, 7.0, shape)
    for kink in _KINKS:
        near = np.abs(x - kink) < 0.05
        x[near] = kink + 0.1
    return x


UNARY = [
    ("silu", ops.silu, F.silu),
    ("swish", ops.swish, F.silu),
    ("mish", ops.mish, F.mish),
    ("selu", ops.selu, F.selu),
    ("celu", ops.celu, F.celu),
    # PyTorch's celu backward scales by 1.0 / alpha.toFloat() in float32: alphas that are exact
    # in float32 compare to 1e-10 (0.4 would differ by 1e-7).
    ("celu_alpha", lambda x: ops.celu(x, alpha=0.5), lambda x: F.celu(x, alpha=0.5)),
    ("celu_negative_alpha", lambda x: ops.celu(x, alpha=-2.0), lambda x: F.celu(x, alpha=-2.0)),
    ("softsign", ops.softsign, F.softsign),
    ("hardswish", ops.hardswish, F.hardswish),
    ("hardsigmoid", ops.hardsigmoid, F.hardsigmoid),
    ("hardtanh", ops.hardtanh, F.hardtanh),
    (
        "hardtanh_bounds",
        lambda x: ops.hardtanh(x, min_val=-3.0, max_val=6.0),
        lambda x: F.hardtanh(x, -3.0, 6.0),
    ),
    ("relu6", ops.relu6, F.relu6),
    ("logsigmoid", ops.logsigmoid, F.logsigmoid),
    ("quick_gelu", ops.quick_gelu, lambda x: x * torch.sigmoid(1.702 * x)),
    (
        "gelu_tanh",
        lambda x: ops.gelu(x, approximate=True),
        lambda x: F.gelu(x, approximate="tanh"),
    ),
]
_IDS = [name for name, *_ in UNARY]


def _rtol(name):
    # PyTorch's hardsigmoid backward multiplies by 1.0f / 6.0f (a float32 constant) in float64.
    return 1e-7 if name == "hardsigmoid" else 1e-10


@pytest.mark.parametrize("name, op, torch_fn", UNARY, ids=_IDS)
def test_activations_match_torch_to_second_order(name, op, torch_fn):
    # PyTorch cannot differentiate hardsigmoid's backward; ours is zero there (the sweep checks).
    double = name != "hardsigmoid"
    x = _random() if not name.startswith("celu_negative") else _random() / 4
    assert_matches_torch(torch, op, torch_fn, [x], double=double, rtol=_rtol(name), label=name)


@pytest.mark.parametrize("name, op, torch_fn", UNARY, ids=_IDS)
def test_activations_match_torch_on_kinks_and_far_out(name, op, torch_fn):
    with np.errstate(all="ignore"):
        assert_matches_torch(
            torch, op, torch_fn, [_EDGES], double=False, rtol=_rtol(name), label=name
        )
    tape.reset_global_tape()
    x = tape.Variable(_EDGES, requires_grad=True)
    (gx,) = tape.grad(op(x).sum(), [x])
    assert np.all(np.isfinite(op(x).numpy())) and np.all(np.isfinite(gx.numpy()))


@pytest.mark.parametrize("name, op, torch_fn", UNARY, ids=_IDS)
def test_activations_keep_float32(name, op, torch_fn):
    x32 = _random(1).astype(np.float32)
    tape.reset_global_tape()
    x = tape.Variable(x32, requires_grad=True)
    out = op(x)
    (gx,) = tape.grad(out.sum(), [x])
    assert out.dtype == np.float32 and gx.dtype == np.float32
    xt = torch.from_numpy(x32).requires_grad_()
    torch_fn(xt).sum().backward()
    np.testing.assert_allclose(out.numpy(), torch_fn(torch.from_numpy(x32)).numpy(), 2e-6, 2e-6)
    np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=2e-5, atol=2e-6, err_msg=name)


def test_logsigmoid_mish_and_silu_stay_exact_where_naive_formulas_fail():
    x = np.array([-800.0, -40.0, 40.0, 800.0])
    got = ops.logsigmoid(tape.Variable(x)).numpy()
    np.testing.assert_allclose(got, [-800.0, -40.0, -np.exp(-40.0), 0.0], rtol=1e-15)
    np.testing.assert_allclose(ops.mish(tape.Variable(x)).numpy()[2:], [40.0, 800.0], rtol=1e-15)
    np.testing.assert_allclose(ops.silu(tape.Variable(x)).numpy()[2:], [40.0, 800.0], rtol=1e-15)


@pytest.mark.parametrize(
    "x_shape, w_shape",
    [((2, 3, 4), (3,)), ((2, 3, 2, 2), (1,)), ((5,), (1,)), ((2, 3), ()), ((), (1,))],
)
def test_prelu_matches_torch_to_second_order(x_shape, w_shape):
    rng = np.random.default_rng(5)
    x = rng.uniform(0.1, 2.0, x_shape) * rng.choice([-1.0, 1.0], x_shape)
    weight = rng.uniform(-0.5, 0.5, w_shape)
    assert_matches_torch(torch, ops.prelu, F.prelu, [x, weight], label=f"{x_shape} {w_shape}")


def test_prelu_slope_at_zero_is_the_weight_as_in_torch():
    x, weight = np.array([[-2.0, 0.0, 0.0, 3.0]]), np.array([0.25])
    assert_matches_torch(torch, ops.prelu, F.prelu, [x, weight], double=False, label="zero")


@pytest.mark.parametrize("shape, dim", [((3, 6), -1), ((4, 3), 0), ((2, 4, 3), 1), ((2,), 0)])
def test_glu_matches_torch_to_second_order(shape, dim):
    x = np.random.default_rng(6).standard_normal(shape) * 2
    assert_matches_torch(
        torch, lambda v: ops.glu(v, dim=dim), lambda v: F.glu(v, dim), [x], label=f"{shape}"
    )


@settings(max_examples=20, deadline=None)
@given(shape=array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=4), data=st.data())
def test_glu_halves_any_even_axis_like_torch(shape, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    shape = list(shape)
    shape[dim] *= 2
    x = np.random.default_rng(len(shape)).standard_normal(shape)
    assert_matches_torch(
        torch, lambda v: ops.glu(v, dim=dim), lambda v: F.glu(v, dim), [x], double=False
    )


@settings(max_examples=20, deadline=None)
@given(
    batch=st.integers(0, 3),
    channels=st.integers(1, 4),
    spatial=array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3),
    shared=st.booleans(),
)
def test_prelu_broadcasts_per_channel_like_torch(batch, channels, spatial, shared):
    shape = (batch, channels) + tuple(spatial)
    rng = np.random.default_rng(channels)
    x, weight = rng.standard_normal(shape), rng.uniform(0.0, 0.5, 1 if shared else channels)
    assert_matches_torch(torch, ops.prelu, F.prelu, [x, weight], double=False)


def test_errors_name_the_op_and_say_what_was_expected():
    x = tape.Variable(np.ones((2, 3)))
    with pytest.raises(tape.AttrError, match="op 'hardtanh'.*'min_val' is greater than"):
        ops.hardtanh(x, min_val=2.0, max_val=1.0)
    with pytest.raises(tape.AttrError, match="(?s)op 'celu'.*expected: alpha != 0"):
        ops.celu(x, alpha=0.0)
    with pytest.raises(tape.ShapeError, match="op 'prelu'.*one per channel") as info:
        ops.prelu(x, tape.Variable(np.ones(2)))
    assert "Weight.shape == (1,) or (3,)" in str(info.value)
    with pytest.raises(tape.ShapeError, match="op 'glu'.*extent along dim -1 must be even"):
        ops.glu(x)
    with pytest.raises(tape.ShapeError, match="op 'glu'.*a 0-d X cannot be halved"):
        ops.glu(tape.Variable(np.array(1.0)))
    with pytest.raises(tape.ShapeError, match="op 'glu'.*dim 2 is out of range"):
        ops.glu(x, dim=2)
    with pytest.raises(tape.DTypeError, match="op 'silu'.*input X must be real floating point"):
        ops.silu(tape.Variable(np.array([1, 2])))
    with pytest.raises(tape.DTypeError, match="op 'prelu'.*input Weight must be real floating"):
        ops.prelu(x, tape.Variable(np.array([1])))


def test_mixed_dtype_prelu_gives_each_input_its_own_gradient_dtype():
    tape.reset_global_tape()
    x = tape.Variable(np.array([[-1.0, 2.0]], np.float32), requires_grad=True)
    weight = tape.Variable(np.array([0.25]), requires_grad=True)
    out = ops.prelu(x, weight)
    gx, gw = tape.grad(out.sum(), [x, weight])
    assert (out.dtype, gx.dtype, gw.dtype) == (np.float64, np.float32, np.float64)


def test_lazy_mode_gives_the_eager_values_and_gradients():
    x0 = _random(2)
    w0 = np.linspace(0.1, 0.6, 6)

    def run():
        tape.reset_global_tape()
        x = tape.Variable(x0, requires_grad=True)
        w = tape.Variable(w0, requires_grad=True)
        y = ops.mish(ops.hardswish(x)) + ops.logsigmoid(ops.celu(x, alpha=0.5))
        y = ops.glu(ops.prelu(ops.relu6(y) - ops.hardtanh(x), w), dim=1)
        return [y.numpy()] + [g.numpy() for g in tape.grad((y * y).sum(), [x, w])]

    eager = run()
    with tape.lazy():
        lazy = run()
    for got, want in zip(lazy, eager):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "name, attrs",
    [
        ("silu_grad", {"beta": 1.702}),
        ("mish_grad", {}),
        ("celu_grad", {"alpha": 0.5}),
        ("hardtanh_grad", {}),
        ("hardswish_grad", {}),
    ],
)
def test_gradient_ops_promote_mixed_inputs_and_compute_in_the_wider_dtype(name, attrs):
    op = ops.REGISTRY[name]
    x, gout = _random(3).astype(np.float32), np.random.default_rng(4).standard_normal((4, 6))
    reference = op(tape.Variable(x.astype(np.float64)), tape.Variable(gout), **attrs)
    tape.reset_global_tape()
    xv = tape.Variable(x, requires_grad=True)
    gv = tape.Variable(gout, requires_grad=True)
    out = op(xv, gv, **attrs)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out.numpy(), reference.numpy(), rtol=1e-13, atol=0)
    grads = tape.grad((out * out).sum(), [xv, gv])
    assert [g.dtype for g in grads if g is not None] == [
        v.dtype for v, g in zip((xv, gv), grads) if g is not None
    ]
    with pytest.raises(tape.DTypeError, match=f"op '{name}'.*input X must be real floating"):
        op(tape.Variable(np.ones((4, 6), np.int32)), gv)
