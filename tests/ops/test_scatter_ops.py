"""Indexing along an axis against PyTorch: take_along_dim and ``x.gather`` (torch.gather,
including an index shorter than X), the scatter family on random shapes and indices (values and
gradients, every reduction, with and without X's own values), masked_fill, masked_select and
index_select; and the errors they raise."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ops
import tape


def _grads(out, xs, weight):
    return tape.grad((out * tape.Variable(weight)).sum(), xs)


def _torch_grads(out, ts, weight):
    return torch.autograd.grad((out * torch.tensor(weight)).sum(), ts, allow_unused=True)


@st.composite
def _scatter_problem(draw):
    """X, Index, Src shapes by torch's rules (Index fits inside Src, and X off the axis)."""
    ndim = draw(st.integers(1, 3))
    axis = draw(st.integers(-ndim, ndim - 1))
    x_shape = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    index_shape = tuple(draw(st.integers(0 if d == axis % ndim else 1, 4)) for d in range(ndim))
    index_shape = tuple(
        n if d == axis % ndim else min(n, x_shape[d]) for d, n in enumerate(index_shape)
    )
    src_shape = tuple(n + draw(st.integers(0, 1)) for n in index_shape)
    n = x_shape[axis]
    index = draw(hnp.arrays(np.int64, index_shape, elements=st.integers(0, n - 1)))
    return x_shape, index, src_shape, axis


@settings(max_examples=120, deadline=None)
@given(
    _scatter_problem(),
    st.sampled_from(["sum", "prod", "mean", "amax", "amin"]),
    st.booleans(),
    st.integers(0, 2**31 - 1),
)
def test_scatter_reduce_matches_torch(problem, reduce, include_self, seed):
    x_shape, index, src_shape, axis = problem
    rng = np.random.default_rng(seed)
    x, src = rng.standard_normal(x_shape), rng.standard_normal(index.shape)
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(src, requires_grad=True)
    expected = tx.scatter_reduce(axis, torch.tensor(index), ts, reduce, include_self=include_self)
    tape.reset_global_tape()
    vx, vs = tape.Variable(x, requires_grad=True), tape.Variable(src, requires_grad=True)
    out = ops.scatter_reduce(vx, index, vs, axis=axis, reduce=reduce, include_self=include_self)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-12)
    weight = rng.standard_normal(x_shape)
    for got, want in zip(_grads(out, [vx, vs], weight), _torch_grads(expected, (tx, ts), weight)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


@settings(max_examples=80, deadline=None)
@given(_scatter_problem(), st.integers(0, 2**31 - 1))
def test_scatter_add_and_gather_match_torch_with_a_larger_src(problem, seed):
    x_shape, index, src_shape, axis = problem
    rng = np.random.default_rng(seed)
    x, src = rng.standard_normal(x_shape), rng.standard_normal(src_shape)
    used = tuple(slice(0, n) for n in index.shape)  # torch reads this block of Src
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(src[used], requires_grad=True)
    expected = tx.scatter_add(axis, torch.tensor(index), ts)
    vx, vs = tape.Variable(x, requires_grad=True), tape.Variable(src, requires_grad=True)
    out = vx.scatter_add(axis, index, vs)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-12)
    weight = rng.standard_normal(x_shape)
    gx, gs = _grads(out, [vx, vs], weight)
    # torch's own backward rejects a Src larger than Index; the unread block gets zeros
    want_x, want_s = _torch_grads(expected, (tx, ts), weight)
    padded = np.zeros(src_shape)
    padded[used] = want_s.numpy()
    np.testing.assert_allclose(gx.numpy(), want_x.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gs.numpy(), padded, rtol=1e-12, atol=1e-12)
    picked = vx.gather(axis, index)  # torch.gather: the index may be shorter than X
    wanted = torch.gather(tx, axis, torch.tensor(index))
    np.testing.assert_array_equal(picked.numpy(), wanted.detach().numpy())
    weight = rng.standard_normal(index.shape)
    (got,) = _grads(picked, [vx], weight)
    (want,) = _torch_grads(wanted, (tx,), weight)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_scatter_with_unique_positions_and_a_value_match_torch():
    x = np.random.default_rng(0).standard_normal((3, 4))
    index = np.array([[2, 0, 1, 0], [0, 2, 2, 1]])
    src = np.random.default_rng(1).standard_normal((2, 4))
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(src, requires_grad=True)
    vx, vs = tape.Variable(x, requires_grad=True), tape.Variable(src, requires_grad=True)
    out, expected = vx.scatter(0, index, vs), tx.scatter(0, torch.tensor(index), ts)
    np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
    weight = np.random.default_rng(2).standard_normal((3, 4))
    for got, want in zip(_grads(out, [vx, vs], weight), _torch_grads(expected, (tx, ts), weight)):
        np.testing.assert_allclose(got.numpy(), want.numpy())
    filled = vx.scatter(1, np.array([[3], [0], [1]]), value=-1.0)
    np.testing.assert_array_equal(
        filled.numpy(), torch.tensor(x).scatter(1, torch.tensor([[3], [0], [1]]), -1.0).numpy()
    )


def test_take_along_dim_broadcasts_like_torch():
    x = np.random.default_rng(3).standard_normal((3, 1, 4))
    index = np.array([[[1, 3]], [[0, 0]]]).reshape(2, 1, 2)[:1]
    index = np.broadcast_to(index, (1, 5, 2)).copy()
    tx = torch.tensor(x, requires_grad=True)
    expected = torch.take_along_dim(tx, torch.tensor(index), dim=2)
    vx = tape.Variable(x, requires_grad=True)
    out = ops.take_along_dim(vx, index, axis=2)
    np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
    weight = np.random.default_rng(4).standard_normal(out.shape)
    (got,) = _grads(out, [vx], weight)
    (want,) = _torch_grads(expected, (tx,), weight)
    np.testing.assert_allclose(got.numpy(), want.numpy())


def test_masked_fill_masked_select_and_index_select_match_torch():
    x = np.random.default_rng(5).standard_normal((3, 4))
    mask = x > 0.2
    tx = torch.tensor(x, requires_grad=True)
    vx = tape.Variable(x, requires_grad=True)
    pairs = [
        (vx.masked_fill(tape.Variable(mask[:1]), 7.0), tx.masked_fill(torch.tensor(mask[:1]), 7.0)),
        (vx.masked_select(mask), tx.masked_select(torch.tensor(mask))),
        (vx.index_select(1, np.array([3, 0, 3])), tx.index_select(1, torch.tensor([3, 0, 3]))),
        (ops.index_select(vx, [2, 2], axis=0), tx.index_select(0, torch.tensor([2, 2]))),
    ]
    for out, expected in pairs:
        np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
        weight = np.random.default_rng(6).standard_normal(out.shape)
        (got,) = _grads(out, [vx], weight)
        (want,) = _torch_grads(expected, (tx,), weight)
        np.testing.assert_allclose(got.numpy(), want.numpy())


def test_masked_fill_keeps_float32_and_a_variable_value_gets_the_gradient():
    x = tape.Variable(np.ones((2, 2), np.float32), requires_grad=True)
    value = tape.Variable(np.array(3.0), requires_grad=True)
    out = ops.masked_fill(x, np.array([True, False]), value)
    assert out.dtype == np.float32
    gx, gv = tape.grad(out.sum(), [x, value])
    np.testing.assert_array_equal(gx.numpy(), [[0.0, 1.0], [0.0, 1.0]])
    assert gv.dtype == np.float64 and float(gv.numpy()) == 2.0


def _error(fn, *args, **kwargs):
    with pytest.raises((ValueError, TypeError, IndexError)) as info:
        fn(*args, **kwargs)
    assert "recorded at: test_scatter_ops.py:" in str(info.value)
    return str(info.value)


def test_errors_name_the_op_and_the_problem():
    x = tape.Variable(np.zeros((3, 4)))
    index = np.array([[0, 1]])
    assert "index 3 is out of range for axis 0 of extent 3" in _error(
        ops.take_along_dim, x, np.array([[3]]), axis=0
    )
    assert "X and Index must have the same number of axes" in _error(
        ops.take_along_dim, x, np.array([0]), axis=0
    )
    assert "Index must have X's rank and fit inside Src" in _error(
        ops.scatter_add, x, np.array([[0, 1, 2, 0]]), tape.Variable(np.zeros((1, 2))), axis=0
    )
    assert "one of ['sum', 'prod', 'mean', 'amax', 'amin']" in _error(
        ops.scatter_reduce, x, index, tape.Variable(np.zeros((1, 2))), reduce="max"
    )
    assert "input Mask must be boolean" in _error(ops.masked_select, x, np.ones((3, 4)))
    assert "mask must broadcast to X's shape" in _error(
        ops.masked_fill, x, np.ones((2, 3, 4), bool), 0
    )
    assert "index must be 1-d" in _error(ops.index_select, x, np.zeros((1, 1), int))
    assert "index must be an integer array" in _error(ops.index_select, x, 0, np.array([1]))


def test_mixed_float_dtypes_promote_and_gradients_keep_each_inputs_dtype():
    x = tape.Variable(np.ones((2, 3), np.float32), requires_grad=True)
    src = tape.Variable(np.full((1, 3), 2.0), requires_grad=True)  # float64
    index = np.array([[1, 0, 1]])
    for out in (
        ops.scatter(x, index, src),
        ops.scatter_add(x, index, src),
        ops.scatter_reduce(x, index, src, reduce="prod"),
        ops.index_put(x, [np.array([0])], src),
    ):
        assert out.dtype == np.float64  # numpy's promotion, as every op
        gx, gs = tape.grad(out.sum(), [x, src])
        assert (gx.dtype, gs.dtype) == (np.float32, np.float64)
    y = x * 1.0
    y[0] = src[0]  # assignment keeps y's dtype, as numpy's
    assert y.dtype == np.float32
    gx, gs = tape.grad((y * y).sum(), [x, src])
    assert (gx.dtype, gs.dtype) == (np.float32, np.float64)
    np.testing.assert_allclose(gs.numpy(), [[4.0, 4.0, 4.0]])
