"""Indexing a Variable, as a specification: ``var[index]`` means numpy's ``array[index]``.

Basic indices (ints, slices with any step, None, ...), integer arrays (lists, numpy arrays or
integer Variables, several at once, mixed with the rest) and boolean masks select the same
elements as numpy; the gradient of ``sum(w * x[index])`` is ``w`` scatter-added into zeros at the
selected positions (``np.add.at``), so repeated rows accumulate. ``x[index] = v`` is numpy's
assignment, recorded out of place. Out-of-range indices and unsupported forms fail at the user's
line with an ``IndexError`` saying what was expected.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ops
import tape
from tape.testing import gradcheck

BASIC_INDICES = [
    np.s_[1],
    np.s_[-1],
    np.s_[:, 1],
    np.s_[::-1],
    np.s_[1:3],
    np.s_[::2, ::-3],
    np.s_[-2:, 1:-1, ::-2],
    np.s_[2:0:-1],
    np.s_[5:100],
    np.s_[-100:2, :, 10:],
    np.s_[0, 0, 0],
    np.s_[..., 1],
    np.s_[1, ..., ::-2],
    np.s_[...],
    np.s_[None],
    np.s_[:, None, 2],
    np.s_[1, ..., None],
    np.s_[None, -1, None, :, ::4],
]

ARRAY_INDICES = [
    [0, 0, 2],
    [-1, 0],
    [],
    np.array([[1, 0], [2, 2]], dtype=np.int32),
    np.array(1, dtype=np.int64),
    np.array([2, 1, 2], dtype=np.uint8),
]


def _data(shape, dtype=np.float64):
    return np.arange(np.prod(shape), dtype=dtype).reshape(shape) * 0.5 - 3.0


def _numpy_grad(shape, index, weight):
    """d sum(weight * x[index]) / dx, by numpy: the weights scatter-added at the positions."""
    grad = np.zeros(shape)
    np.add.at(grad, index, weight)
    return grad


def _check(shape, index, variable_index=None):
    """Forward equals numpy's indexing; the gradient equals the numpy-computed one."""
    tape.reset_global_tape()
    array = _data(shape)
    x = tape.Variable(array, requires_grad=True, name="x")
    out = x[index if variable_index is None else variable_index]
    expected = array[index]
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)
    weight = np.random.default_rng(0).standard_normal(expected.shape)
    (grad,) = tape.grad((out * tape.Variable(weight)).sum(), [x])
    np.testing.assert_allclose(grad.numpy(), _numpy_grad(shape, index, weight), rtol=0, atol=0)


@pytest.mark.parametrize("index", BASIC_INDICES, ids=repr)
def test_basic_indexing_matches_numpy(index):
    _check((3, 4, 5), index)
    _check((3, 4, 5), index)  # (the second time from the ops remembered for this index)


def test_a_remembered_index_is_remembered_per_shape():
    _check((3, 4, 5), np.s_[:, 1:3])
    _check((2, 6), np.s_[:, 1:3])
    _check((3, 4, 5), np.s_[2, None])
    with pytest.raises(IndexError, match="index 2 is out of bounds for axis 0"):
        tape.Variable(np.zeros((2, 6)))[2, None]  # (the same index on another shape)


@pytest.mark.parametrize("lazy", [False, True])
def test_a_remembered_index_gives_each_dtype_its_own_and_the_shape_it_inferred(lazy):
    with tape.lazy(enabled=lazy):
        for dtype in (np.float64, np.float32, np.int32, np.float32):
            x = tape.Variable(np.arange(24).reshape(4, 6).astype(dtype))
            got = x[1:3, None, ::2]
            assert (got.shape, got.dtype) == ((2, 1, 3), np.dtype(dtype))
            np.testing.assert_array_equal(got.numpy(), x.numpy()[1:3, None, ::2])


@pytest.mark.parametrize("index", ARRAY_INDICES, ids=repr)
def test_integer_array_indexing_gathers_rows(index):
    _check((3, 4), index)


def test_integer_variable_index_gathers_and_gets_no_gradient():
    index = tape.Variable(np.array([[2, 0], [0, 0]]))
    _check((3, 2), np.array([[2, 0], [0, 0]]), variable_index=index)
    assert not index.requires_grad and index.grad() is None


def test_repeated_rows_accumulate_their_gradients():
    x = tape.Variable(np.ones((3, 2)), requires_grad=True)
    tape.backward(x[[0, 0, 2]].sum())
    np.testing.assert_array_equal(x.grad().numpy(), [[2, 2], [0, 0], [1, 1]])


def test_iterating_yields_the_rows():
    array = _data((3, 2))
    rows = list(tape.Variable(array))
    assert len(rows) == 3
    for row, expected in zip(rows, array, strict=True):
        np.testing.assert_array_equal(row.numpy(), expected)


def test_float32_stays_float32():
    x = tape.Variable(_data((4, 3), np.float32), requires_grad=True)
    out = x[::-2, None, 1] + x[[3, 3]][:, None, 0]
    assert out.dtype == np.float32
    (grad,) = tape.grad(out.sum(), [x])
    assert grad.dtype == np.float32


def test_gradients_of_composed_indexing_match_finite_differences():
    def fn(x):
        return x[::-1, 1:] * x[[0, 2, 2]][:, None, -1] + x[..., None, 0][::-2][[1, 0, 0]]

    assert gradcheck(fn, [_data((3, 3))])


def test_second_derivatives_flow_through_indexing():
    x = tape.Variable(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    y = (x[::-1] * x[[0, 0, 1]]).sum()
    (grad,) = tape.grad(y, [x], create_graph=True)
    (hess_row,) = tape.grad(grad[0], [x])
    # y = x2*x0 + x1*x0 + x0*x1 = x0*x2 + 2*x0*x1, so dy/dx0 = x2 + 2*x1 and its gradient is
    # (0, 2, 1).
    np.testing.assert_allclose(grad.numpy(), [3.0 + 4.0, 2.0, 1.0])
    np.testing.assert_allclose(hess_row.numpy(), [0.0, 2.0, 1.0])


@st.composite
def _basic_index(draw, shape):
    """A random valid basic index for ``shape``: per axis a slice or an in-range int, with
    ``None`` inserted anywhere and trailing axes sometimes folded into ``...``."""
    items = []
    for dim in shape:
        if dim and draw(st.booleans()):
            items.append(draw(st.integers(-dim, dim - 1)))
            continue
        bound = st.none() | st.integers(-dim - 2, dim + 2)
        step = st.none() | st.integers(-3, 3).filter(bool)
        items.append(slice(draw(bound), draw(bound), draw(step)))
    if items and draw(st.booleans()):
        items = items[: draw(st.integers(0, len(items)))] + [Ellipsis]
    for _ in range(draw(st.integers(0, 2))):
        items.insert(draw(st.integers(0, len(items))), None)
    return tuple(items)


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_random_basic_indices_match_numpy(data):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
    _check(shape, data.draw(_basic_index(shape)))


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_integer_arrays_match_numpy(data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4))
    index = data.draw(
        hnp.arrays(
            np.int64,
            hnp.array_shapes(min_dims=0, max_dims=2, min_side=0),
            elements=st.integers(-shape[0], shape[0] - 1),
        )
    )
    _check(shape, index)


def _error(index, shape=(3, 4)):
    x = tape.Variable(np.zeros(shape), name="x")
    with pytest.raises(IndexError) as info:
        x[index]
    assert isinstance(info.value, tape.IndexingError)
    assert "recorded at: test_indexing.py:" in str(info.value)
    return str(info.value)


def test_out_of_range_int_names_axis_shape_and_bounds():
    message = _error(3)
    assert "index 3 is out of bounds for axis 0 of variable 'x' with shape (3, 4)" in message
    assert "expected: an int with -3 <= index < 3" in message
    assert "index -5 is out of bounds for axis 1" in _error(np.s_[:, -5])


def test_out_of_range_array_index_is_caught_when_recorded():
    message = _error([0, 3])
    assert "op 'gather'" in message
    assert "index 3 is out of range for axis 0 of extent 3" in message
    assert "expected: -3 <= Index < 3" in message
    assert "index -4 is out of range" in _error(np.array([-4, 0]))


@pytest.mark.parametrize(
    "index, text",
    [
        ((0, 0, 0), "too many indices\n  expected: at most 2 (the variable's dimensions)"),
        ((..., 0, ...), "an index can only have a single ellipsis"),
        (np.s_[::0], "slice step cannot be zero"),
        (np.array([True, False]), "a boolean index must match the axes it covers"),
        (True, "boolean indices are not supported"),
        (
            [0.5],
            "index arrays must hold integers\n  expected: an integer dtype (or bool, as a mask)\n"
            "  actual:   float64",
        ),
        ("a", "unsupported index 'a' (str)"),
    ],
)
def test_unsupported_indices_say_why(index, text):
    assert text in _error(index)


def test_float_variable_index_is_a_dtype_error():
    x = tape.Variable(np.zeros((3, 4)))
    with pytest.raises(TypeError, match="input Index must hold integers"):
        x[tape.Variable(np.array([0.0, 1.0]))]


def test_backward_of_a_slice_of_a_0d_array():
    # Slicing a 0-d array selects the whole of it; its gradient used to crash writing into
    # ``zeros[()]``, which numpy returns as a scalar copy rather than a view.
    x = tape.Variable(np.float32(2.0), requires_grad=True)
    y = ops.slice(x, axes=[], starts=[], ends=[])
    assert y.shape == () and y.numpy() == np.float32(2.0)
    tape.backward(y * 3.0)
    assert x.grad().dtype == np.float32
    np.testing.assert_array_equal(x.grad().numpy(), np.float32(3.0))
