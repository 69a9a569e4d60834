"""Broadcasting of the binary elementwise ops: values, dtypes and gradients against numpy.

Shapes come from hypothesis (0 to 4 dimensions, sides 0 to 4, so size-0 and size-1 axes and 0-d
inputs occur). The gradient of each input must be numpy's reduction of the broadcast gradient
(summed over the axes broadcasting added), in that input's own dtype.
"""

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes

import ops
import tape
from tape import Variable

SHAPES = mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=0, max_side=4)
FLOATS = st.sampled_from([np.float32, np.float64])
SEEDS = st.integers(0, 2**32 - 1)


def _ties(x, y):
    return 0.5 * (x == y)


# op -> (numpy function, d out / dX, d out / dY), the derivatives on broadcast float64 arrays.
BINARY = {
    "elementwise_add": (np.add, lambda x, y: np.ones_like(x), lambda x, y: np.ones_like(y)),
    "elementwise_sub": (np.subtract, lambda x, y: np.ones_like(x), lambda x, y: -np.ones_like(y)),
    "elementwise_mul": (np.multiply, lambda x, y: y, lambda x, y: x),
    "elementwise_div": (np.divide, lambda x, y: 1 / y, lambda x, y: -x / y**2),
    "elementwise_pow": (np.power, lambda x, y: y * x ** (y - 1), lambda x, y: x**y * np.log(x)),
    "elementwise_max": (
        np.maximum,
        lambda x, y: (x > y) + _ties(x, y),
        lambda x, y: (y > x) + _ties(x, y),
    ),
    "elementwise_min": (
        np.minimum,
        lambda x, y: (x < y) + _ties(x, y),
        lambda x, y: (y < x) + _ties(x, y),
    ),
}


def unbroadcast(g, shape):
    """``g`` summed over the axes that broadcasting added or stretched to reach g's shape."""
    g = g.sum(axis=tuple(range(g.ndim - len(shape))))
    stretched = tuple(i for i, side in enumerate(shape) if side == 1 and g.shape[i] != 1)
    return g.sum(axis=stretched, keepdims=True).reshape(shape)


def _inputs(op, shapes, dtypes, seed):
    """X and Y for ``op``: positive bases for pow, divisors away from zero."""
    rng = np.random.default_rng(seed)
    x_shape, y_shape = shapes.input_shapes
    x = rng.uniform(0.5, 2.0, x_shape) if op == "elementwise_pow" else rng.standard_normal(x_shape)
    y = rng.standard_normal(y_shape)
    if op == "elementwise_div":
        y = rng.uniform(0.5, 2.0, y_shape) * rng.choice([-1.0, 1.0], y_shape)
    return x.astype(dtypes[0]), y.astype(dtypes[1]), rng


def _assert_sum_close(got, expected, magnitude, low_precision):
    """got ~ expected, allowing rounding relative to the summed magnitudes of the terms."""
    rtol, scale = (1e-4, 1e-5) if low_precision else (1e-10, 1e-13)
    np.testing.assert_array_less(
        np.abs(got - expected), rtol * np.abs(expected) + scale * magnitude + 1e-30
    )


@pytest.mark.parametrize("op", sorted(BINARY))
@settings(max_examples=30, deadline=None)
@given(shapes=SHAPES, dtypes=st.tuples(FLOATS, FLOATS), seed=SEEDS)
def test_binary_op_matches_numpy_in_value_dtype_and_gradient(op, shapes, dtypes, seed):
    numpy_fn, dx_local, dy_local = BINARY[op]
    x, y, rng = _inputs(op, shapes, dtypes, seed)
    tape.reset_global_tape()
    vx, vy = Variable(x, requires_grad=True), Variable(y, requires_grad=True)
    out = ops.REGISTRY[op](vx, vy)

    expected = numpy_fn(x, y)
    assert out.shape == expected.shape == shapes.result_shape
    assert out.dtype == expected.dtype
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=0)

    gout = rng.standard_normal(expected.shape).astype(expected.dtype)
    gx, gy = tape.grad(out, [vx, vy], grad=gout)
    xb, yb = np.broadcast_arrays(x.astype(np.float64), y.astype(np.float64))
    low_precision = np.float32 in dtypes
    for got, var, local in ((gx, x, dx_local(xb, yb)), (gy, y, dy_local(xb, yb))):
        assert got.shape == var.shape and got.dtype == var.dtype
        terms = gout.astype(np.float64) * local
        _assert_sum_close(
            got.numpy().astype(np.float64),
            unbroadcast(terms, var.shape),
            unbroadcast(np.abs(terms), var.shape),
            low_precision,
        )


# A Python scalar never promotes an array (numpy 2's weak scalars); arrays promote as in numpy.
MIXED = {
    "x * 2.0": (lambda x: x * 2.0, 2.0),
    "2.0 - x": (lambda x: 2.0 - x, -1.0),
    "x ** 2": (lambda x: x**2, None),
    "x / 4": (lambda x: x / 4, 0.25),
    "1 + x": (lambda x: 1 + x, 1.0),
    "float32 array + x": (lambda x: np.full(x.shape, 3.0, np.float32) + x, 1.0),
    "float64 array + x": (lambda x: np.full(x.shape, 3.0, np.float64) + x, 1.0),
    "x - float64 array": (lambda x: x - np.full(x.shape, 3.0, np.float64), 1.0),
    "float64 array * x": (lambda x: np.full(x.shape, 3.0, np.float64) * x, 3.0),
    "np.float64(2) * x": (lambda x: np.float64(2.0) * x, 2.0),
}


@pytest.mark.parametrize("expression", sorted(MIXED))
@settings(max_examples=10, deadline=None)
@given(shape=array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3), dtype=FLOATS, seed=SEEDS)
def test_scalars_and_arrays_mix_with_variables_like_numpy(expression, shape, dtype, seed):
    fn, slope = MIXED[expression]
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    tape.reset_global_tape()
    var = Variable(x, requires_grad=True)
    out = fn(var)
    expected = fn(x)
    assert isinstance(out, Variable)
    assert out.dtype == expected.dtype, f"{expression}: {out.dtype} != numpy's {expected.dtype}"
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
    (grad,) = tape.grad(out.sum(), [var])
    assert grad.dtype == x.dtype, f"{expression}: the gradient of a {x.dtype} input is {grad.dtype}"
    local = 2 * x.astype(np.float64) if slope is None else np.full(shape, slope)
    np.testing.assert_allclose(grad.numpy(), local, rtol=1e-6)


def test_float32_stays_float32_through_a_chain_with_scalars():
    tape.reset_global_tape()
    x = Variable(np.linspace(0.5, 2.0, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    y = (2.0 * x - 1) ** 2 / 3.0 + np.float32(0.5)
    assert y.dtype == np.float32
    tape.backward(y.sum())
    assert x.grad().dtype == np.float32


@pytest.mark.parametrize(
    "op, x_share", [("elementwise_max", [0.5, 0.0, 1.0]), ("elementwise_min", [0.5, 1.0, 0.0])]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ties_split_the_gradient_evenly(op, x_share, dtype):
    tape.reset_global_tape()
    x = Variable(np.array([1.0, 2.0, 3.0], dtype), requires_grad=True)
    y = Variable(np.array([1.0, 5.0, 0.0], dtype), requires_grad=True)
    gx, gy = tape.grad(ops.REGISTRY[op](x, y), [x, y], grad=np.array([2.0, 4.0, 8.0], dtype))
    np.testing.assert_array_equal(gx.numpy(), np.array([2.0, 4.0, 8.0]) * x_share)
    np.testing.assert_array_equal(gy.numpy(), np.array([2.0, 4.0, 8.0]) * (1 - np.array(x_share)))
    assert gx.dtype == gy.dtype == dtype


def test_ties_with_a_broadcast_scalar_add_up_its_shares():
    tape.reset_global_tape()
    x = Variable(np.array([[1.0, 2.0], [2.0, 3.0]]), requires_grad=True)
    y = Variable(np.array(2.0), requires_grad=True)
    gx, gy = tape.grad(ops.maximum(x, y).sum(), [x, y])
    np.testing.assert_array_equal(gx.numpy(), [[0.0, 0.5], [0.5, 1.0]])
    assert gy.shape == () and gy.numpy() == 1.0 + 0.5 + 0.5


def _line_after_this():
    return inspect.currentframe().f_back.f_lineno + 1


def test_non_broadcastable_shapes_name_the_op_the_shapes_and_the_users_line():
    x = Variable(np.ones((2, 3), np.float32))
    y = Variable(np.ones((4,), np.float32))
    with pytest.raises(tape.ShapeError) as info:
        line = _line_after_this()
        x + y
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert message.startswith("op 'elementwise_add'")
    assert "inputs X and Y cannot be broadcast together" in message
    assert "X.shape=(2, 3), Y.shape=(4,)" in message
    assert f"recorded at: test_broadcasting.py:{line} in " in message


@pytest.mark.parametrize("op", sorted(BINARY) + ["less_than", "equal"])
def test_every_binary_op_reports_non_broadcastable_shapes(op):
    x = Variable(np.ones((3, 1, 5)))
    y = Variable(np.ones((2, 4)))
    with pytest.raises(tape.ShapeError) as info:
        line = _line_after_this()
        ops.REGISTRY[op](x, y)
    message = str(info.value)
    assert message.startswith(f"op '{op}'")
    assert "X.shape=(3, 1, 5), Y.shape=(2, 4)" in message
    assert f"test_broadcasting.py:{line}" in message


def test_paddle_axis_mismatch_names_both_shapes():
    x = Variable(np.ones((2, 3, 4)))
    y = Variable(np.ones((4,)))
    with pytest.raises(tape.ShapeError) as info:
        line = _line_after_this()
        ops.elementwise_add(x, y, axis=1)
    message = str(info.value)
    assert "Y does not match X's dimensions at 'axis'" in message
    assert "X.shape=(2, 3, 4), Y.shape=(4,)" in message
    assert f"test_broadcasting.py:{line}" in message
