"""searchsorted, bucketize, cdist, kron and cross against PyTorch: values (and gradients of the
float ops) on hypothesis-generated shapes, including size-0 and size-1 axes and broadcast batch
dimensions; gradients by float64 finite differences; and the errors for inputs they refuse."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes

import ops
import tape
from tape.errors import AttrError, DTypeError, FluidError, ShapeError
from tape.testing import OpCase, check_double_grad, check_grad, gradcheck

torch = pytest.importorskip("torch")

_SETTINGS = settings(max_examples=25, deadline=None)
_SEEDS = st.integers(0, 2**31 - 1)
_PS = st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, math.inf])


def _grads(out, inputs, weight):
    return tape.grad((out * tape.Variable(weight)).sum(), inputs)


def _torch_grads(out, inputs, weight):
    return torch.autograd.grad((out * torch.from_numpy(weight)).sum(), inputs)


def _assert_grads_match(ours, theirs):
    for got, want in zip(ours, theirs, strict=True):
        got = np.zeros(want.shape) if got is None else got.numpy()
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)


# ---- searchsorted and bucketize ---------------------------------------------------------------


@st.composite
def _search_problem(draw, batched=True):
    """(sorted sequence, values): small integers (so values hit entries and entries repeat) as
    int64 or float64, the sequence 1-D or (when ``batched``) with the values' leading
    dimensions."""
    rng = np.random.default_rng(draw(_SEEDS))
    batch = draw(array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3))
    extent, count = draw(st.integers(0, 6)), draw(st.integers(0, 5))
    rows = batched and bool(batch) and draw(st.booleans())
    sequence = np.sort(rng.integers(-3, 4, (batch if rows else ()) + (extent,)), axis=-1)
    values = rng.integers(-4, 5, batch + (count,) if rows else batch)
    dtypes = draw(st.sampled_from([("int64", "int64"), ("float64", "float64"), ("int32", "f8")]))
    return sequence.astype(dtypes[0]), values.astype(dtypes[1])


@_SETTINGS
@given(_search_problem(), st.booleans(), st.booleans())
def test_searchsorted_matches_torch(problem, right, out_int32):
    sequence, values = problem
    got = ops.searchsorted(
        tape.Variable(sequence), tape.Variable(values), right=right, out_int32=out_int32
    )
    want = torch.searchsorted(
        torch.from_numpy(sequence), torch.from_numpy(values), right=right, out_int32=out_int32
    ).numpy()
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want)


@_SETTINGS
@given(_search_problem(), st.sampled_from(["left", "right"]))
def test_searchsorted_side_matches_torch(problem, side):
    sequence, values = problem
    got = ops.searchsorted(tape.Variable(sequence), tape.Variable(values), side=side)
    want = torch.searchsorted(torch.from_numpy(sequence), torch.from_numpy(values), side=side)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@_SETTINGS
@given(_search_problem(batched=False), st.booleans())
def test_bucketize_matches_torch(problem, right):
    boundaries, values = problem
    got = ops.bucketize(tape.Variable(values), tape.Variable(boundaries), right=right)
    want = torch.bucketize(torch.from_numpy(values), torch.from_numpy(boundaries), right=right)
    assert got.dtype == np.int64 and got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_searchsorted_rows_on_float_values_with_infinities():
    rng = np.random.default_rng(0)
    sequence = np.sort(rng.standard_normal((3, 2, 6)), axis=-1)
    values = rng.standard_normal((3, 2, 5))
    values[0, 0, :2] = [-np.inf, np.inf]
    values[1, 1, 0] = sequence[1, 1, 2]  # exactly an entry
    for right in (False, True):
        got = ops.searchsorted(tape.Variable(sequence), tape.Variable(values), right=right)
        want = torch.searchsorted(torch.from_numpy(sequence), torch.from_numpy(values), right=right)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_searchsorted_of_a_noncontiguous_sequence_and_values():
    rng = np.random.default_rng(1)
    sequence = np.sort(rng.standard_normal((6, 4)), axis=0).T  # rows sorted, strided
    values = rng.standard_normal((5, 4)).T
    assert not sequence.flags.c_contiguous and not values.flags.c_contiguous
    got = ops.searchsorted(tape.Variable(sequence), tape.Variable(values))
    want = torch.searchsorted(torch.from_numpy(sequence), torch.from_numpy(values))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_search_ops_are_not_differentiable():
    sequence = tape.Variable(np.array([0.0, 1.0, 2.0]), requires_grad=True)
    values = tape.Variable(np.array([0.5, 1.5]), requires_grad=True)
    assert not ops.searchsorted(sequence, values).requires_grad
    assert not ops.bucketize(values, sequence).requires_grad


def test_searchsorted_refuses_what_torch_refuses():
    sequence = tape.Variable(np.zeros((2, 3)))
    with pytest.raises(ShapeError) as info:
        ops.searchsorted(sequence, np.zeros((3, 1)))
    message = str(info.value)
    assert "op 'searchsorted'" in message and "same leading dimensions" in message
    assert "SortedSequence.shape=(2, 3), X.shape=(3, 1)" in message
    with pytest.raises(ShapeError, match=r"X.shape=\(2,\)"):  # a rank short of the sequence's
        ops.searchsorted(sequence, np.zeros(2))
    with pytest.raises(ShapeError, match="at least one axis"):
        ops.searchsorted(tape.Variable(np.array(1.0)), np.zeros(2))
    with pytest.raises(DTypeError, match="input X must hold real numbers") as info:
        ops.searchsorted(tape.Variable(np.zeros(3)), np.array([True]))
    assert "op 'searchsorted'" in str(info.value) and "bool" in str(info.value)
    with pytest.raises(AttrError, match="'side' and 'right' disagree"):
        ops.searchsorted(tape.Variable(np.zeros(3)), np.zeros(2), side="left", right=True)
    with pytest.raises(AttrError, match="one of"):
        ops.searchsorted(tape.Variable(np.zeros(3)), np.zeros(2), side="middle")


def test_bucketize_refuses_boundaries_of_other_ranks():
    for boundaries in (np.zeros((2, 2)), np.array(1.0)):
        with pytest.raises(ShapeError) as info:
            ops.bucketize(tape.Variable(np.zeros(3)), boundaries)
        message = str(info.value)
        assert "op 'bucketize'" in message and "one-dimensional" in message
        assert f"Boundaries.shape={boundaries.shape}" in message
    with pytest.raises(DTypeError, match="input Boundaries must hold real numbers"):
        ops.bucketize(tape.Variable(np.zeros(3)), np.array([1 + 2j]))


# ---- cdist ------------------------------------------------------------------------------------


@st.composite
def _cdist_shapes(draw):
    """Shapes (..., P, M) and (..., R, M) with mutually broadcastable batch dimensions."""
    batch = draw(mutually_broadcastable_shapes(num_shapes=2, max_dims=2, min_side=0, max_side=3))
    rows, cols, width = (draw(st.integers(0, 4)) for _ in range(3))
    first, second = batch.input_shapes
    return first + (rows, width), second + (cols, width)


def _torch_cdist(x1, x2, p):
    return torch.cdist(x1, x2, p=p, compute_mode="donot_use_mm_for_euclid_dist")


@_SETTINGS
@given(_cdist_shapes(), _PS, _SEEDS)
def test_cdist_values_and_gradients_match_torch(shapes, p, seed):
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal(s) for s in shapes)
    ta, tb = (torch.tensor(x, requires_grad=True) for x in (a, b))
    expected = _torch_cdist(ta, tb, p)
    tape.reset_global_tape()
    va, vb = (tape.Variable(x, requires_grad=True) for x in (a, b))
    out = ops.cdist(va, vb, p=p)
    assert out.shape == tuple(expected.shape) and out.dtype == np.float64
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    weight = rng.standard_normal(out.shape)
    _assert_grads_match(_grads(out, [va, vb], weight), _torch_grads(expected, [ta, tb], weight))


@_SETTINGS
@given(_cdist_shapes(), _PS, _SEEDS)
def test_cdist_in_float32_matches_torch(shapes, p, seed):
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    expected = _torch_cdist(torch.from_numpy(a), torch.from_numpy(b), p).numpy()
    got = ops.cdist(tape.Variable(a), tape.Variable(b), p=p)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.numpy(), expected, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("p", [0.5, 1.0, 1.5, 2.0, 3.0, math.inf])
def test_cdist_gradient_at_a_zero_distance_is_torchs(p):
    """Equal rows (and, for p < 1, an equal coordinate): PyTorch's gradient is 0 there, not NaN."""
    x2 = np.array([[1.0, -2.0, 0.5], [0.3, 0.7, -1.1]])
    x1 = np.array([[1.0, -2.0, 0.5], [0.3, 4.0, 2.0]])  # row 0 equals, row 1 shares one entry
    ta, tb = (torch.tensor(x, requires_grad=True) for x in (x1, x2))
    expected = _torch_cdist(ta, tb, p)
    va, vb = (tape.Variable(x, requires_grad=True) for x in (x1, x2))
    out = ops.cdist(va, vb, p=p)
    weight = np.random.default_rng(2).standard_normal(out.shape)
    ours = _grads(out, [va, vb], weight)
    assert all(np.isfinite(g.numpy()).all() for g in ours)
    _assert_grads_match(ours, _torch_grads(expected, [ta, tb], weight))


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
def test_cdist_gradient_matches_finite_differences_with_broadcast_batches(p):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 1, 3, 2)), rng.standard_normal((3, 2, 2))
    assert gradcheck(lambda x, y: ops.cdist(x, y, p=p), [a, b])


def test_cdist_of_transposed_views():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((4, 3)).T, rng.standard_normal((4, 5)).T  # (3, 4), (5, 4) views
    expected = _torch_cdist(torch.from_numpy(a), torch.from_numpy(b), 2.0).numpy()
    np.testing.assert_allclose(ops.cdist(tape.Variable(a), b).numpy(), expected, rtol=1e-12)


def test_cdist_mixed_float_dtypes_promote_and_keep_gradient_dtypes():
    a = tape.Variable(np.ones((2, 3), np.float32), requires_grad=True)
    b = tape.Variable(np.zeros((4, 3)), requires_grad=True)
    out = ops.cdist(a, b)
    assert out.dtype == np.float64
    ga, gb = tape.grad(out.sum(), [a, b])
    assert ga.dtype == np.float32 and gb.dtype == np.float64


def test_cdist_refuses_what_torch_refuses():
    cases = [
        ((np.zeros(3), np.zeros((2, 3))), ShapeError, "at least two axes"),
        ((np.zeros((2, 3)), np.zeros((2, 4))), ShapeError, "3 != 4"),
        ((np.zeros((2, 2, 3)), np.zeros((3, 2, 3))), ShapeError, "batch dimensions"),
        ((np.zeros((2, 3), np.int64), np.zeros((2, 3))), DTypeError, "floating point"),
    ]
    for (x1, x2), kind, text in cases:
        with pytest.raises(kind, match=text) as info:
            ops.cdist(tape.Variable(x1), x2)
        assert "op 'cdist'" in str(info.value)
        if kind is ShapeError:
            assert f"X1.shape={x1.shape}, X2.shape={x2.shape}" in str(info.value)
    with pytest.raises(AttrError, match=">= 0"):
        ops.cdist(tape.Variable(np.zeros((2, 3))), np.zeros((2, 3)), p=-1.0)


# ---- kron -------------------------------------------------------------------------------------


@_SETTINGS
@given(
    array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3),
    array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3),
    _SEEDS,
)
def test_kron_values_and_gradients_match_torch(x_shape, y_shape, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(x_shape), rng.standard_normal(y_shape)
    ta, tb = (torch.tensor(x, requires_grad=True) for x in (a, b))
    expected = torch.kron(ta, tb)
    tape.reset_global_tape()
    va, vb = (tape.Variable(x, requires_grad=True) for x in (a, b))
    out = ops.kron(va, vb)
    assert out.shape == tuple(expected.shape)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-12, atol=0)
    weight = rng.standard_normal(out.shape)
    _assert_grads_match(_grads(out, [va, vb], weight), _torch_grads(expected, [ta, tb], weight))


def test_kron_of_integers_and_of_float32_matches_torch():
    x, y = np.array([[1, -2], [3, 0]], np.int32), np.array([2, 5, -1], np.int64)
    got = ops.kron(tape.Variable(x), tape.Variable(y))
    want = torch.kron(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got.numpy(), want)
    a, b = (np.random.default_rng(5).standard_normal(s).astype(np.float32) for s in [(2, 3), (3,)])
    got = ops.kron(tape.Variable(a), tape.Variable(b))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.numpy(), torch.kron(torch.tensor(a), torch.tensor(b)).numpy())


def test_kron_refuses_booleans():
    with pytest.raises(DTypeError, match="input Y must hold real numbers") as info:
        ops.kron(tape.Variable(np.zeros(2)), np.array([True, False]))
    assert "op 'kron'" in str(info.value) and "bool" in str(info.value)


# ---- cross ------------------------------------------------------------------------------------


@st.composite
def _cross_shapes(draw):
    """Two shapes broadcasting together, both of extent 3 at ``axis`` of the broadcast shape,
    their ranks sometimes differing (leading 1s dropped)."""
    shapes = draw(mutually_broadcastable_shapes(num_shapes=2, max_dims=2, min_side=0, max_side=3))
    ndim = max(len(s) for s in shapes.input_shapes) + 1
    at = draw(st.integers(0, ndim - 1))

    def with_three(shape):
        padded = (1,) * (ndim - 1 - len(shape)) + shape
        full = padded[:at] + (3,) + padded[at:]
        lead = draw(st.integers(0, at))
        while lead and any(n != 1 for n in full[:lead]):
            lead -= 1
        return full[lead:]

    first, second = shapes.input_shapes
    return with_three(first), with_three(second), at - ndim


@_SETTINGS
@given(_cross_shapes(), _SEEDS)
def test_cross_values_and_gradients_match_torch(problem, seed):
    x_shape, y_shape, axis = problem
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(x_shape), rng.standard_normal(y_shape)
    ndim = max(a.ndim, b.ndim)
    ta, tb = (torch.tensor(x, requires_grad=True) for x in (a, b))
    # torch.linalg.cross wants equal ranks: leading 1s, which numpy broadcasting implies
    expected = torch.linalg.cross(
        ta.reshape((1,) * (ndim - a.ndim) + a.shape),
        tb.reshape((1,) * (ndim - b.ndim) + b.shape),
        dim=axis,
    )
    tape.reset_global_tape()
    va, vb = (tape.Variable(x, requires_grad=True) for x in (a, b))
    out = ops.cross(va, vb, axis=axis)
    assert out.shape == tuple(expected.shape)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-12, atol=1e-15)
    weight = rng.standard_normal(out.shape)
    _assert_grads_match(_grads(out, [va, vb], weight), _torch_grads(expected, [ta, tb], weight))


def test_cross_gradient_and_its_gradient_match_finite_differences():
    case = OpCase(
        "cross",
        {"X": (2, 1, 3), "Y": (4, 3)},
        reference=lambda x, y, axis=-1: np.cross(x, y, axis=axis),
    )
    check_grad(case)
    check_double_grad(case)


def test_cross_of_integers_matches_torch():
    x, y = np.array([[1, 2, 3], [0, -1, 4]]), np.array([[4, 5, 6], [2, 2, 2]])
    got = ops.cross(tape.Variable(x), tape.Variable(y))
    assert got.dtype == np.int64
    want = torch.linalg.cross(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    np.testing.assert_array_equal(got.numpy(), want)


def test_cross_refuses_vectors_that_are_not_3_long():
    with pytest.raises(ShapeError) as info:
        ops.cross(tape.Variable(np.zeros((3, 2))), np.zeros((3, 2)))
    message = str(info.value)
    assert "op 'cross'" in message and "extent 3 along axis -1" in message
    assert "2 and 2 (X.shape=(3, 2), Y.shape=(3, 2))" in message
    with pytest.raises(ShapeError, match="3 and 1"):  # Y has no such axis: broadcasting adds 1
        ops.cross(tape.Variable(np.zeros((3, 2))), np.zeros(2), axis=0)
    with pytest.raises(ShapeError, match="cannot be broadcast together"):
        ops.cross(tape.Variable(np.zeros((2, 3))), np.zeros((4, 3)))
    with pytest.raises(ShapeError, match="at least one axis"):
        ops.cross(tape.Variable(np.array(1.0)), np.array(2.0))
    with pytest.raises(IndexError, match="axis 2 is out of range"):
        ops.cross(tape.Variable(np.zeros((2, 3))), np.zeros((2, 3)), axis=2)


def test_errors_are_raised_when_recorded_in_lazy_mode_too():
    with tape.lazy(True):
        with pytest.raises(FluidError, match="op 'cdist'"):
            ops.cdist(tape.Variable(np.zeros((2, 3))), np.zeros((2, 4)))
        with pytest.raises(FluidError, match="op 'cross'"):
            ops.cross(tape.Variable(np.zeros((2, 2))), np.zeros((2, 2)))
