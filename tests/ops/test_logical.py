"""Logical and bitwise ops, shifts, the non-finite tests and the Python operators
``% // & | ^ ~ << >>`` against PyTorch and Python: results, dtypes, reflected forms, errors,
and broadcasting (hypothesis)."""

import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays, mutually_broadcastable_shapes

import ops
import tape

torch = pytest.importorskip("torch")

_INTS = np.array([[12, -7, 0, 255], [1, -1, 6, -128]], np.int64)
_OTHER = np.array([10, 3, -1, 15], np.int64)
_COUNTS = np.array([[0, 1, 31, 32], [33, 63, 64, 70]], np.int64)


def _torch(array):
    return torch.from_numpy(np.ascontiguousarray(array))


@pytest.mark.parametrize(
    "name", ["bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or", "logical_xor"]
)
def test_binary_bit_and_truth_ops_match_torch(name):
    for x, y in [(_INTS, _OTHER), (_INTS > 0, _OTHER > 0), (_INTS.astype(np.uint8), np.uint8(6))]:
        out = ops.REGISTRY[name](tape.Variable(x), tape.Variable(np.asarray(y)))
        expected = getattr(torch, name)(_torch(x), _torch(np.asarray(y))).numpy()
        assert out.dtype == expected.dtype
        np.testing.assert_array_equal(out.numpy(), expected)


def test_logical_ops_take_floats_as_truth_values_like_torch():
    x, y = np.array([0.0, -0.0, 1.5, np.nan]), np.array([2.0, 0.0, 0.0, 1.0])
    for name in ("logical_and", "logical_or", "logical_xor"):
        out = ops.REGISTRY[name](tape.Variable(x), tape.Variable(y)).numpy()
        np.testing.assert_array_equal(out, getattr(torch, name)(_torch(x), _torch(y)).numpy())
    np.testing.assert_array_equal(
        ops.logical_not(tape.Variable(x)).numpy(), torch.logical_not(_torch(x)).numpy()
    )


@pytest.mark.parametrize("name", ["bitwise_left_shift", "bitwise_right_shift"])
def test_shifts_match_torch_including_counts_past_the_bit_width(name):
    x = np.array([[1, -1, 5, -8], [3, -3, 1 << 40, -(1 << 40)]], np.int64)
    for counts in (_COUNTS, np.array(3, np.int64)):
        out = ops.REGISTRY[name](tape.Variable(x), tape.Variable(counts))
        expected = getattr(torch, name)(_torch(x), _torch(counts)).numpy()
        np.testing.assert_array_equal(out.numpy(), expected)


def test_bitwise_not_is_twos_complement_on_integers_and_not_on_bools():
    np.testing.assert_array_equal(ops.bitwise_not(tape.Variable(_INTS)).numpy(), ~_INTS)
    np.testing.assert_array_equal(
        ops.bitwise_not(tape.Variable(np.array([True, False]))).numpy(), [False, True]
    )


def test_nonfinite_tests_match_torch_for_floats_and_integers():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -1e308, 5e-324])
    for name in ("isnan", "isinf", "isfinite"):
        for data in (x, x.astype(np.float32), np.array([1, -2], np.int32)):
            out = ops.REGISTRY[name](tape.Variable(data))
            assert out.dtype == np.bool_
            expected = getattr(torch, name)(_torch(data)).numpy()
            np.testing.assert_array_equal(out.numpy(), expected, err_msg=name)


# ---- Python operators ----------------------------------------------------------------------------

_OPERATORS = [
    (operator.mod, "remainder"),
    (operator.floordiv, "floor_divide"),
    (operator.and_, "bitwise_and"),
    (operator.or_, "bitwise_or"),
    (operator.xor, "bitwise_xor"),
    (operator.lshift, "bitwise_left_shift"),
    (operator.rshift, "bitwise_right_shift"),
]


@pytest.mark.parametrize("fn, op_type", _OPERATORS, ids=[o for _, o in _OPERATORS])
def test_python_operators_record_their_op_and_agree_with_python(fn, op_type):
    a, b = np.array([7, -7, 9, -9, 1], np.int64), np.array([2, 3, -4, -5, 3], np.int64)
    if "shift" in op_type:
        b = np.abs(b)  # Python refuses negative shift counts
    with tape.lazy():  # lazy mode records every op, so the recorded type can be read back
        recorded = tape.reset_global_tape()
        out = fn(tape.Variable(a), tape.Variable(b))
        assert [op.type for op in recorded._pending_ops] == [op_type]
    expected = [fn(int(p), int(q)) for p, q in zip(a, b)]
    np.testing.assert_array_equal(out.numpy(), expected)
    reflected = fn(5, tape.Variable(b))  # int.__op__(Variable) is NotImplemented: __r<op>__
    np.testing.assert_array_equal(reflected.numpy(), [fn(5, int(q)) for q in b])
    on_left = fn(tape.Variable(a), 3)
    np.testing.assert_array_equal(on_left.numpy(), [fn(int(p), 3) for p in a])
    assert out.dtype == reflected.dtype == on_left.dtype == np.int64


def test_percent_and_floor_division_on_floats_match_torch_and_python():
    a = np.array([5.5, -5.5, 5.5, -5.5, 0.0, 7.0], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 0.5], np.float32)
    x, y = tape.Variable(a), tape.Variable(b)
    np.testing.assert_array_equal((x % y).numpy(), (_torch(a) % _torch(b)).numpy())
    np.testing.assert_array_equal((x // y).numpy(), (_torch(a) // _torch(b)).numpy())
    assert [float(v) for v in (x % 2).numpy()] == [float(p) % 2 for p in a]
    assert (x % 2).dtype == np.float32 and (7.0 // x).dtype == np.float32


def test_bool_operators_are_logical_like_torch():
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    x, y = tape.Variable(p), tape.Variable(q)
    for fn in (operator.and_, operator.or_, operator.xor):
        out = fn(x, y)
        assert out.dtype == np.bool_
        np.testing.assert_array_equal(out.numpy(), fn(_torch(p), _torch(q)).numpy())
    np.testing.assert_array_equal((~x).numpy(), (~_torch(p)).numpy())
    np.testing.assert_array_equal((x & True).numpy(), p)
    np.testing.assert_array_equal((x > 0.5).numpy(), p)  # comparisons are untouched


def test_operators_compose_into_masks():
    x = tape.Variable(np.array([-2.0, -0.5, 0.5, 2.0]))
    mask = (x > -1) & (x < 1) | (x == 2.0)
    np.testing.assert_array_equal(mask.numpy(), [False, True, True, True])
    np.testing.assert_array_equal((~mask).numpy(), [True, False, False, False])


def test_bitwise_ops_refuse_floats_and_shifts_refuse_bools():
    floats = tape.Variable(np.array([1.5]))
    ints = tape.Variable(np.array([1], np.int64))
    flags = tape.Variable(np.array([True]))
    with pytest.raises(tape.DTypeError, match="op 'bitwise_and'.*input X must have an integer or"):
        floats & ints
    with pytest.raises(tape.DTypeError, match="op 'bitwise_or'.*input Y must have an integer or"):
        ints | floats
    with pytest.raises(tape.DTypeError, match="(?s)op 'bitwise_not'.*actual:   float64"):
        _ = ~floats
    with pytest.raises(
        tape.DTypeError, match="op 'bitwise_left_shift'.*must have an integer dtype"
    ):
        flags << ints
    with pytest.raises(tape.DTypeError, match="no common integer dtype") as info:
        ints & tape.Variable(np.array([1], np.uint64))
    assert "X.dtype=int64, Y.dtype=uint64 -> float64" in str(info.value)
    with pytest.raises(tape.DTypeError, match="op 'isnan'.*input X must hold real numbers"):
        ops.isnan(tape.Variable(np.array([1j])))


def test_nothing_here_has_a_gradient():
    tape.reset_global_tape()
    x = tape.Variable(np.array([0.5, np.nan]), requires_grad=True)
    for out in (ops.isnan(x), ops.isfinite(x), ops.logical_not(x), ops.logical_and(x, x)):
        assert not out.requires_grad and out.dtype == np.bool_


def test_left_and_right_shift_aliases():
    assert ops.left_shift is ops.bitwise_left_shift and ops.right_shift is ops.bitwise_right_shift
    assert ops.invert is ops.bitwise_not


_INT_ELEMENTS = st.integers(-(2**31), 2**31 - 1)


@settings(max_examples=30, deadline=None)
@given(
    shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3),
    data=st.data(),
    fn=st.sampled_from(
        [operator.and_, operator.or_, operator.xor, operator.mod, operator.floordiv]
    ),
)
def test_operators_broadcast_like_numpy(shapes, data, fn):
    x_shape, y_shape = shapes.input_shapes
    x = data.draw(arrays(np.int64, x_shape, elements=_INT_ELEMENTS))
    y = data.draw(arrays(np.int64, y_shape, elements=_INT_ELEMENTS.filter(lambda v: v != 0)))
    out = fn(tape.Variable(x), tape.Variable(y))
    assert out.shape == shapes.result_shape and out.dtype == np.int64
    np.testing.assert_array_equal(out.numpy(), fn(x, y))
    np.testing.assert_array_equal(out.numpy(), fn(_torch(x), _torch(y)).numpy())
