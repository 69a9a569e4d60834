"""The elementwise math ops against PyTorch: values, gradients and double gradients inside each
domain, values and gradients at the edges (poles, signed zeros, infinities, NaN), integer
semantics, dtypes, errors, and broadcasting (hypothesis)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import ops
import tape
from tests.ops.torch_compare import assert_matches_torch

torch = pytest.importorskip("torch")

_RNG = np.random.default_rng(0)


def _uniform(low, high, shape=(3, 4)):
    return _RNG.uniform(low, high, shape)


_OFF_INTEGERS = np.array([-2.7, -1.2, -0.4, 0.3, 1.6, 2.9, 3.45])
_NON_FINITE = [np.inf, -np.inf, np.nan]

# (name, our op, torch function, interior input, edge input)
UNARY = [
    ("tan", ops.tan, torch.tan, _uniform(-1.4, 1.4), [0.0, -0.0, *_NON_FINITE]),
    ("asin", ops.asin, torch.asin, _uniform(-0.95, 0.95), [-1.0, 1.0, 1.5, -2.0, 0.0]),
    ("acos", ops.acos, torch.acos, _uniform(-0.95, 0.95), [-1.0, 1.0, 1.5, -2.0, 0.0]),
    ("atan", ops.atan, torch.atan, _uniform(-5, 5), [1e300, -1e300, *_NON_FINITE]),
    ("sinh", ops.sinh, torch.sinh, _uniform(-3, 3), [800.0, -800.0, 0.0, *_NON_FINITE]),
    ("cosh", ops.cosh, torch.cosh, _uniform(-3, 3), [800.0, -800.0, 0.0, *_NON_FINITE]),
    ("asinh", ops.asinh, torch.asinh, _uniform(-5, 5), [1e200, -1e200, 0.0, *_NON_FINITE]),
    ("acosh", ops.acosh, torch.acosh, _uniform(1.05, 4), [1.0, 0.5, 1e200, np.inf, np.nan]),
    ("atanh", ops.atanh, torch.atanh, _uniform(-0.95, 0.95), [-1.0, 1.0, 2.0, 0.0]),
    ("exp2", ops.exp2, torch.exp2, _uniform(-4, 4), [2000.0, -2000.0, *_NON_FINITE]),
    ("expm1", ops.expm1, torch.expm1, _uniform(-3, 3), [1e-20, -1e-20, -1000.0, 800.0]),
    ("log2", ops.log2, torch.log2, _uniform(0.1, 8), [0.0, -1.0, np.inf, np.nan]),
    ("log10", ops.log10, torch.log10, _uniform(0.1, 8), [0.0, -1.0, np.inf, np.nan]),
    ("log1p", ops.log1p, torch.log1p, _uniform(-0.9, 3), [-1.0, -2.0, 1e-20, np.inf]),
    ("rsqrt", ops.rsqrt, torch.rsqrt, _uniform(0.1, 5), [0.0, -1.0, np.inf, 1e-300]),
    ("reciprocal", ops.reciprocal, torch.reciprocal, _uniform(0.3, 3), [0.0, -0.0, np.inf]),
    ("floor", ops.floor, torch.floor, _OFF_INTEGERS, [-1.0, 0.5, -0.5, -0.0, *_NON_FINITE]),
    ("ceil", ops.ceil, torch.ceil, _OFF_INTEGERS, [-1.0, 0.5, -0.5, -0.0, *_NON_FINITE]),
    ("round", ops.round, torch.round, _OFF_INTEGERS, [0.5, 1.5, 2.5, -0.5, -2.5, *_NON_FINITE]),
    ("trunc", ops.trunc, torch.trunc, _OFF_INTEGERS, [-1.0, 0.5, -0.5, -0.0, *_NON_FINITE]),
    ("frac", ops.frac, torch.frac, _OFF_INTEGERS, [-1.5, 2.0, -0.0, *_NON_FINITE]),
    ("nan_to_num", ops.nan_to_num, torch.nan_to_num, _uniform(-3, 3), [1.0, *_NON_FINITE]),
]
_IDS = [name for name, *_ in UNARY]


@pytest.mark.parametrize("name, op, torch_fn, interior, edges", UNARY, ids=_IDS)
def test_unary_ops_match_torch_to_second_order_inside_their_domain(
    name, op, torch_fn, interior, edges
):
    assert_matches_torch(torch, op, torch_fn, [interior], label=name)


@pytest.mark.parametrize("name, op, torch_fn, interior, edges", UNARY, ids=_IDS)
def test_unary_ops_match_torch_at_the_edges_of_their_domain(name, op, torch_fn, interior, edges):
    with np.errstate(all="ignore"):
        assert_matches_torch(torch, op, torch_fn, [np.array(edges)], double=False, label=name)


@pytest.mark.parametrize("name, op, torch_fn, interior, edges", UNARY, ids=_IDS)
def test_unary_ops_keep_float32_in_values_and_gradients(name, op, torch_fn, interior, edges):
    x32 = interior.astype(np.float32)
    tape.reset_global_tape()
    x = tape.Variable(x32, requires_grad=True)
    out = op(x)
    (gx,) = tape.grad(out.sum(), [x])
    assert out.dtype == np.float32 and gx.dtype == np.float32
    expected = torch_fn(torch.from_numpy(x32)).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=3e-6, atol=1e-6, err_msg=name)


def test_round_with_decimals_matches_torch():
    x = np.array([1.23456, -9.87654, 0.125, 0.135, 1234.5678, -1250.0])
    for decimals in (-2, -1, 1, 2, 3):
        assert_matches_torch(
            torch,
            lambda v, d=decimals: ops.round(v, decimals=d),
            lambda v, d=decimals: torch.round(v, decimals=d),
            [x],
            label=f"decimals={decimals}",
        )


def test_nan_to_num_replacements_and_its_gradient_match_torch():
    x = np.array([np.nan, np.inf, -np.inf, -2.0, 3.0])
    assert_matches_torch(
        torch,
        lambda v: ops.nan_to_num(v, nan=1.0, posinf=9.0, neginf=-9.0),
        lambda v: torch.nan_to_num(v, nan=1.0, posinf=9.0, neginf=-9.0),
        [x],
        label="nan_to_num",
    )
    out = ops.nan_to_num(tape.Variable(x.astype(np.float32))).numpy()
    assert out[1] == np.finfo(np.float32).max and out[2] == np.finfo(np.float32).min


# ---- binary ops ----------------------------------------------------------------------------------


def _dividend_divisor(shape=(3, 4)):
    y = _RNG.uniform(0.5, 2.0, shape) * _RNG.choice([-1.0, 1.0], shape)
    return y * (_RNG.integers(-3, 3, shape) + _RNG.uniform(0.1, 0.9, shape)), y


BINARY = [
    ("atan2", ops.atan2, torch.atan2, (_RNG.standard_normal((3, 4)), _RNG.standard_normal(4))),
    ("remainder", ops.remainder, torch.remainder, _dividend_divisor()),
    ("fmod", ops.fmod, torch.fmod, _dividend_divisor()),
    (
        "copysign",
        ops.copysign,
        torch.copysign,
        (_uniform(0.2, 2) * np.sign(_RNG.standard_normal((3, 4))), _RNG.standard_normal(4)),
    ),
    ("lerp", ops.lerp, torch.lerp, (_uniform(-2, 2), _uniform(-2, 2), _uniform(-0.5, 1.5))),
    (
        "lerp_broadcast",
        ops.lerp,
        torch.lerp,
        (_uniform(-2, 2, (2, 1, 4)), _uniform(-2, 2, (3, 1)), _uniform(0, 1, (4,))),
    ),
]


@pytest.mark.parametrize("name, op, torch_fn, inputs", BINARY, ids=[b[0] for b in BINARY])
def test_binary_ops_match_torch_to_second_order(name, op, torch_fn, inputs):
    assert_matches_torch(torch, op, torch_fn, list(inputs), label=name)


def test_atan2_gradients_at_the_origin_are_zero_as_in_torch():
    x = np.array([0.0, -0.0, 0.0, -0.0, 1e-200, 0.0, 2.0])
    y = np.array([0.0, 0.0, -0.0, -0.0, 0.0, 1e-200, -0.0])
    assert_matches_torch(torch, ops.atan2, torch.atan2, [x, y], double=False, label="origin")
    tape.reset_global_tape()
    xv, yv = tape.Variable(x[:4], requires_grad=True), tape.Variable(y[:4], requires_grad=True)
    gx, gy = tape.grad(ops.atan2(xv, yv).sum(), [xv, yv])
    assert np.all(gx.numpy() == 0) and np.all(gy.numpy() == 0)
    np.testing.assert_array_equal(
        ops.atan2(tape.Variable(x[:4]), tape.Variable(y[:4])).numpy(),
        [0.0, -0.0, math.pi, -math.pi],
    )


def test_remainder_fmod_and_floor_divide_edges_match_torch():
    x = np.array([5.0, -5.0, 5.0, -5.0, 0.0, 1e300, np.inf, 3.0, -3.0, 7.5])
    y = np.array([3.0, 3.0, -3.0, -3.0, 2.0, 7.0, 2.0, np.inf, np.inf, 0.0])
    with np.errstate(all="ignore"):
        for op, torch_fn in ((ops.remainder, torch.remainder), (ops.fmod, torch.fmod)):
            assert_matches_torch(torch, op, torch_fn, [x, y], double=False, label=op.type)
        got = ops.floor_divide(tape.Variable(x), tape.Variable(y)).numpy()
    want = torch.floor_divide(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    np.testing.assert_array_equal(got, want)


def test_floor_divide_has_zero_gradients_where_torch_has_none():
    tape.reset_global_tape()
    x, y = (
        tape.Variable(np.array([5.5, -2.5]), requires_grad=True),
        tape.Variable(np.array([2.0, 0.7]), requires_grad=True),
    )
    gx, gy = tape.grad((x // y).sum(), [x, y])
    np.testing.assert_array_equal(gx.numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(gy.numpy(), [0.0, 0.0])


def test_copysign_passes_no_gradient_at_zero_and_none_to_the_sign_source():
    x = np.array([0.0, -0.0, 2.0, -2.0, 3.0])
    y = np.array([-1.0, 1.0, -0.0, 0.0, np.nan])
    assert_matches_torch(torch, ops.copysign, torch.copysign, [x, y], double=False, label="zeros")


def test_lerp_takes_a_python_number_as_weight_like_torch():
    x, end = _uniform(-2, 2), _uniform(-2, 2)
    for weight in (0.0, 0.3, 0.5, 1.0, 1.7):
        assert_matches_torch(
            torch,
            lambda a, b, w=weight: ops.lerp(a, b, w),
            lambda a, b, w=weight: torch.lerp(a, b, w),
            [x, end],
            label=f"weight={weight}",
        )
    out = ops.lerp(tape.Variable(x.astype(np.float32)), tape.Variable(end.astype(np.float32)), 1.0)
    assert out.dtype == np.float32 and np.array_equal(out.numpy(), end.astype(np.float32))


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_integer_remainder_fmod_floor_divide_match_torch_for_every_sign(dtype):
    x = np.array([7, -7, 7, -7, 6, 0, -1, 100], dtype)
    y = np.array([3, 3, -3, -3, -3, 5, 4, -7], dtype)
    for op, torch_fn in [
        (ops.remainder, torch.remainder),
        (ops.fmod, torch.fmod),
        (ops.floor_divide, torch.floor_divide),
    ]:
        out = op(tape.Variable(x), tape.Variable(y))
        assert out.dtype == dtype
        expected = torch_fn(torch.from_numpy(x), torch.from_numpy(y)).numpy()
        np.testing.assert_array_equal(out.numpy(), expected, err_msg=op.type)


@pytest.mark.parametrize("op", [ops.remainder, ops.fmod, ops.floor_divide], ids=lambda o: o.type)
def test_integer_division_by_zero_raises_as_in_torch(op):
    x, y = tape.Variable(np.array([5, 6], np.int32)), tape.Variable(np.array([2, 0], np.int32))
    with pytest.raises(RuntimeError, match="integer division by zero") as info:
        op(x, y)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert f"op '{op.type}'" in str(info.value)


def test_dtypes_follow_numpy_promotion_and_python_numbers_never_promote():
    f32 = tape.Variable(np.array([5.5, -2.5], np.float32))
    i32 = tape.Variable(np.array([5, -3], np.int32))
    i8 = tape.Variable(np.array([5, -3], np.int8))
    assert ops.remainder(f32, 2.0).dtype == np.float32
    assert (f32 % 2).dtype == np.float32 and (f32 // 2).dtype == np.float32
    assert (i8 % 2).dtype == np.int8 and (i8 // i32).dtype == np.int32
    assert (i32 % 2.5).dtype == np.float64  # an integer array and a float: numpy's float64
    assert ops.atan2(f32, tape.Variable(np.ones(2))).dtype == np.float64
    assert ops.lerp(f32, f32, 0.5).dtype == np.float32


def test_mixed_float32_and_float64_gradients_keep_each_inputs_dtype():
    tape.reset_global_tape()
    a = tape.Variable(np.array([1.5, -2.5], np.float32), requires_grad=True)
    b = tape.Variable(np.array([0.7, 1.9]), requires_grad=True)
    w = tape.Variable(np.array([0.25, 0.75], np.float32), requires_grad=True)
    for out in (ops.atan2(a, b), ops.remainder(a, b), ops.fmod(b, a), ops.copysign(a, b)):
        assert out.dtype == np.float64
        ga, gb = tape.grad(out.sum(), [a, b])
        assert ga.dtype == np.float32 and gb.dtype == np.float64
    grads = tape.grad(ops.lerp(a, b, w).sum(), [a, b, w])
    assert [g.dtype for g in grads] == [np.float32, np.float64, np.float32]
    # Computed in float64 from the start: the float32 inputs are widened before any arithmetic.
    end = tape.Variable(np.array([0.1, 1e-3], np.float32))
    wide = [tape.Variable(v.numpy().astype(np.float64)) for v in (a, end, b)]
    np.testing.assert_array_equal(ops.lerp(a, end, b).numpy(), ops.lerp(*wide).numpy())


def test_errors_name_the_op_the_input_and_the_dtypes():
    ints = tape.Variable(np.array([1, 2], np.int64))
    flags = tape.Variable(np.array([True, False]))
    floats = tape.Variable(np.array([1.0, 2.0]))
    with pytest.raises(tape.DTypeError, match="op 'tan'.*input X must be real floating point"):
        ops.tan(ints)
    with pytest.raises(
        tape.DTypeError, match="op 'remainder'.*input X must be an integer or real floating-point"
    ):
        flags % flags
    with pytest.raises(tape.DTypeError, match="op 'round'.*'decimals' needs floating-point"):
        ops.round(ints, decimals=1)
    with pytest.raises(tape.DTypeError, match="op 'lerp'.*input Weight must be real floating"):
        ops.lerp(floats, floats, ints)
    with pytest.raises(tape.DTypeError, match="op 'copysign'.*input Y must be real floating"):
        ops.copysign(floats, ints)
    with pytest.raises(tape.ShapeError, match="op 'atan2'.*cannot be broadcast together") as info:
        ops.atan2(floats, tape.Variable(np.ones(3)))
    assert "X.shape=(2,), Y.shape=(3,)" in str(info.value)
    with pytest.raises(tape.DTypeError, match="op 'floor'.*input X must hold real numbers"):
        ops.floor(flags)
    with pytest.raises(tape.DTypeError, match="op 'frac'.*input X must be real floating point"):
        ops.frac(ints)


def test_rounding_keeps_integers_unchanged_and_in_a_new_buffer():
    data = np.array([3, -4, 7], np.int32)
    x = tape.Variable(data)
    for op in (ops.floor, ops.ceil, ops.round, ops.trunc):
        out = op(x)
        assert out.dtype == np.int32 and np.array_equal(out.numpy(), data)
        assert not np.shares_memory(out.numpy(), x.numpy())


def test_aliases_are_the_same_ops():
    assert ops.mod is ops.remainder and ops.fix is ops.trunc and ops.arctan2 is ops.atan2
    assert (ops.arcsin, ops.arccos, ops.arctan) == (ops.asin, ops.acos, ops.atan)
    assert (ops.arcsinh, ops.arccosh, ops.arctanh) == (ops.asinh, ops.acosh, ops.atanh)


def test_lazy_mode_gives_the_eager_values_and_gradients():
    x0 = np.array([0.3, -1.2, 2.5, 0.9])

    def run():
        tape.reset_global_tape()
        x = tape.Variable(x0, requires_grad=True)
        y = ops.atan2(ops.expm1(x), ops.cosh(x)) + ops.log1p(ops.reciprocal(ops.cosh(x)))
        y = ops.lerp(y, ops.remainder(x, 0.7), 0.25) + ops.floor(x) * ops.asinh(x)
        (gx,) = tape.grad(y.sum(), [x])
        return y.numpy(), gx.numpy()

    eager = run()
    with tape.lazy():
        lazy = run()
    np.testing.assert_array_equal(lazy[0], eager[0])
    np.testing.assert_array_equal(lazy[1], eager[1])


# ---- broadcasting (hypothesis): forward against numpy, gradients against torch -----------------

_SHAPES2 = mutually_broadcastable_shapes(
    num_shapes=2, min_dims=0, max_dims=3, min_side=0, max_side=3
)
_SHAPES3 = mutually_broadcastable_shapes(
    num_shapes=3, min_dims=0, max_dims=3, min_side=0, max_side=3
)


def _away_from_zero(rng, shape):
    return rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


@settings(max_examples=25, deadline=None)
@given(
    shapes=_SHAPES2,
    seed=st.integers(0, 2**16),
    name=st.sampled_from(["atan2", "remainder", "fmod", "copysign", "floor_divide"]),
)
def test_broadcast_binary_ops_match_numpy_and_torch(shapes, seed, name):
    rng = np.random.default_rng(seed)
    x_shape, y_shape = shapes.input_shapes
    x, y = rng.standard_normal(x_shape) * 3, _away_from_zero(rng, y_shape)
    op = ops.REGISTRY[name]
    numpy_fn = {"atan2": np.arctan2, "floor_divide": np.floor_divide}.get(name, getattr(np, name))
    out = op(tape.Variable(x), tape.Variable(y))
    assert out.shape == shapes.result_shape
    np.testing.assert_allclose(out.numpy(), numpy_fn(x, y), rtol=1e-12, atol=1e-12)
    if name != "floor_divide":
        assert_matches_torch(torch, op, getattr(torch, name), [x, y], double=False, label=name)


@settings(max_examples=15, deadline=None)
@given(shapes=_SHAPES3, seed=st.integers(0, 2**16))
def test_broadcast_lerp_matches_torch(shapes, seed):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(shape) for shape in shapes.input_shapes]
    assert_matches_torch(torch, ops.lerp, torch.lerp, arrays, label="lerp")
