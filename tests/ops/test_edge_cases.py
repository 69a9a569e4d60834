"""Edge-case values and gradients against PyTorch: zero bases and exponents of pow, NaN and
infinity through relu, maximum, minimum and clip, clip with min > max, and sign's gradient.

Each named case is a plain test; hypothesis then draws arrays of special values (NaN, +-inf,
+-0, small integers) and broadcastable shapes and compares every value and gradient with torch.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ops
import tape

nan, inf = float("nan"), float("inf")
# numpy warns about the special values fed here (log(0), inf * 0, ...); PyTorch does not.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _ours(fn, arrays, gout):
    """fn's value and the gradients of <gout, fn(*arrays)> (zeros where none reached)."""
    tape.reset_global_tape()
    variables = [tape.Variable(np.asarray(a, np.float64), requires_grad=True) for a in arrays]
    out = fn(*variables)
    grads = tape.grad(out, variables, grad=tape.Variable(np.asarray(gout, np.float64)))
    return out.numpy(), [
        np.zeros(v.shape) if g is None else g.numpy() for g, v in zip(grads, variables)
    ]


def _torch(fn, arrays, gout):
    tensors = [torch.tensor(np.asarray(a, np.float64), requires_grad=True) for a in arrays]
    out = fn(*tensors)
    out.backward(torch.tensor(np.asarray(gout, np.float64)))
    return out.detach().numpy(), [t.grad.numpy() for t in tensors]


def _compare(ours, theirs, arrays, gout):
    """Values and gradients equal torch's bit for bit, except where an input was broadcast: its
    gradient sums several terms, which torch and numpy add in different orders, so there its
    special values (NaN, +-inf) match exactly and its finite ones within the rounding of that
    sum (``_reduction_bound``)."""
    (value, grads), (want, want_grads) = _ours(ours, arrays, gout), _torch(theirs, arrays, gout)
    np.testing.assert_array_equal(value, want, err_msg=f"values at {arrays}")
    for i, (g, w) in enumerate(zip(grads, want_grads, strict=True)):
        where = f"gradient {i} at {arrays}, upstream {gout}"
        if np.shape(arrays[i]) == np.shape(value):
            np.testing.assert_array_equal(g, w, err_msg=where)
            continue
        finite = np.isfinite(w)
        np.testing.assert_array_equal(np.where(finite, 0.0, g), np.where(finite, 0.0, w), where)
        bound = _reduction_bound(theirs, arrays, gout, i)
        assert np.all(np.abs(g - w)[finite] <= bound[finite]), (where, g, w, bound)


def _reduction_bound(fn, arrays, gout, i):
    """How far two orders of adding the terms of input ``i``'s gradient (it was broadcast) can
    differ: each of the n additions per element rounds by at most an ulp of a partial sum,
    which is at most the sum of the terms' magnitudes."""
    shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
    full = [np.broadcast_to(np.asarray(a, np.float64), shape).copy() for a in arrays]
    _, terms = _torch(fn, full, gout)
    magnitude = np.abs(np.nan_to_num(terms[i], posinf=0.0, neginf=0.0))
    lead = len(shape) - np.ndim(arrays[i])
    axes = tuple(range(lead)) + tuple(
        lead + k for k, n in enumerate(np.shape(arrays[i])) if n == 1 and shape[lead + k] != 1
    )
    total = magnitude.sum(axis=axes).reshape(np.shape(arrays[i]))
    count = magnitude.size // max(np.size(arrays[i]), 1)
    return count * np.finfo(np.float64).eps * total


# ---- the named cases ---------------------------------------------------------------------------


def test_gradient_of_x_to_the_zero_at_zero_is_zero():
    x, y = np.array([0.0, -0.0, 2.0]), np.array([0.0, 0.0, 0.0])
    _compare(ops.elementwise_pow, torch.pow, [x, y], np.ones(3))
    assert _ours(ops.elementwise_pow, [x, y], np.ones(3))[1][0].tolist() == [0.0, 0.0, 0.0]


def test_gradient_of_zero_to_a_negative_power_wrt_the_exponent_is_minus_inf():
    x, y = np.zeros(4), np.array([-1.0, -0.5, 0.0, 2.0])
    _compare(ops.elementwise_pow, torch.pow, [x, y], np.ones(4))
    assert _ours(ops.elementwise_pow, [x, y], np.ones(4))[1][1].tolist() == [-inf, -inf, 0, 0]


def test_pow_rules_hold_under_paddle_axis_broadcasting():
    x, y = np.zeros((2, 3)), np.array([0.0, -1.0])
    value, (gx, gy) = _ours(lambda a, b: ops.elementwise_pow(a, b, axis=0), [x, y], np.ones((2, 3)))
    want, (want_gx, want_gy) = _torch(torch.pow, [x, y[:, None]], np.ones((2, 3)))
    np.testing.assert_array_equal(value, want)
    np.testing.assert_array_equal(gx, want_gx)
    np.testing.assert_array_equal(gy, want_gy.reshape(2))


def test_sign_has_a_zero_gradient_instead_of_raising():
    x = np.array([-2.0, 0.0, 3.0])
    _compare(ops.sign, torch.sign, [x], np.ones(3))
    tape.reset_global_tape()
    v = tape.Variable(x, requires_grad=True)
    tape.backward(ops.sign(v).sum())
    np.testing.assert_array_equal(v.grad().numpy(), np.zeros(3))


def test_clip_with_min_above_max_gives_max():
    x = np.array([0.0, 1.5, 3.0, -inf, nan])
    _compare(
        lambda v: ops.clip(v, min=2.0, max=1.0), lambda t: torch.clamp(t, 2.0, 1.0), [x], np.ones(5)
    )
    ints = ops.clip(tape.Variable(np.arange(5)), min=3, max=1).numpy()
    np.testing.assert_array_equal(ints, torch.clamp(torch.arange(5), 3, 1).numpy())


def test_clip_gives_zero_outside_even_for_an_infinite_upstream_gradient():
    x = np.array([-3.0, 0.0, 3.0, nan])
    _compare(
        lambda v: ops.clip(v, min=-1.0, max=1.0),
        lambda t: torch.clamp(t, -1.0, 1.0),
        [x],
        np.array([inf, inf, -inf, inf]),
    )


def test_relu_propagates_nan_in_its_gradient():
    x = np.array([nan, -1.0, 0.0, 2.0])
    _compare(ops.relu, torch.relu, [x], np.ones(4))
    assert _ours(ops.relu, [x], np.ones(4))[1][0].tolist() == [1.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize(
    "ours, theirs",
    [(ops.elementwise_max, torch.maximum), (ops.elementwise_min, torch.minimum)],
    ids=["max", "min"],
)
def test_maximum_and_minimum_gradients_at_nan_ties_and_infinite_upstream(ours, theirs):
    x = np.array([nan, 1.0, 2.0, nan, 3.0, -1.0])
    y = np.array([1.0, nan, 2.0, nan, -1.0, 3.0])
    _compare(ours, theirs, [x, y], np.ones(6))
    _compare(ours, theirs, [x, y], np.array([inf, -inf, inf, nan, inf, inf]))


# ---- special values and shapes drawn by hypothesis -------------------------------------------

_SPECIAL = st.sampled_from([nan, inf, -inf, 0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -2.5])
_FINITE = st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -2.5])
_EXPONENT = st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -2.5, 3.0])


def _arrays(shape, elements=_SPECIAL):
    return hnp.arrays(np.float64, shape, elements=elements)


@settings(max_examples=60, deadline=None)
@given(st.data(), hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_side=3))
def test_maximum_and_minimum_match_torch(data, shapes):
    x, y = data.draw(_arrays(shapes.input_shapes[0])), data.draw(_arrays(shapes.input_shapes[1]))
    gout = data.draw(_arrays(shapes.result_shape))
    _compare(ops.elementwise_max, torch.maximum, [x, y], gout)
    _compare(ops.elementwise_min, torch.minimum, [x, y], gout)


@settings(max_examples=60, deadline=None)
@given(st.data(), hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_side=3))
def test_pow_matches_torch(data, shapes):
    bases = st.sampled_from([0.0, -0.0, 0.5, 1.0, 2.0, inf, -1.0, nan])
    x = data.draw(_arrays(shapes.input_shapes[0], bases))
    y = data.draw(_arrays(shapes.input_shapes[1], _EXPONENT))
    gout = data.draw(_arrays(shapes.result_shape, _FINITE))
    _compare(ops.elementwise_pow, torch.pow, [x, y], gout)


@settings(max_examples=60, deadline=None)
@given(st.data(), hnp.array_shapes(min_dims=0, max_side=4), _FINITE, _FINITE)
def test_clip_matches_torch(data, shape, low, high):
    x, gout = data.draw(_arrays(shape)), data.draw(_arrays(shape))
    _compare(
        lambda v: ops.clip(v, min=low, max=high), lambda t: torch.clamp(t, low, high), [x], gout
    )


@settings(max_examples=60, deadline=None)
@given(st.data(), hnp.array_shapes(min_dims=0, max_side=4))
def test_relu_and_sign_match_torch(data, shape):
    """relu's upstream gradient is finite here: for an infinite one at an inactive unit it gives
    NaN where PyTorch gives 0, a documented cost choice (ops.activation.relu_grad)."""
    x, gout = data.draw(_arrays(shape)), data.draw(_arrays(shape, _FINITE))
    _compare(ops.relu, torch.relu, [x], gout)
    finite = data.draw(_arrays(shape, _FINITE))
    _compare(ops.sign, torch.sign, [finite], data.draw(_arrays(shape)))
