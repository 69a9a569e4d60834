"""The reductions, scans and order statistics against PyTorch on hypothesis-drawn shapes, axes
(negative too), keepdim, size-0 and size-1 axes and 0-d arrays: values, indices and gradients."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ops
import tape

_SETTINGS = settings(max_examples=30, deadline=None)
_SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


@st.composite
def _case(draw, distinct=False, nonempty_axis=False, ties=False):
    """(x, axis, keepdim): float64 x (distinct values, or small integers with ties) and an axis
    in [-ndim, ndim) (-1 or 0 for a 0-d x)."""
    shape = draw(_SHAPES)
    ndim = len(shape)
    axis = draw(st.integers(-max(ndim, 1), max(ndim, 1) - 1))
    if nonempty_axis and ndim and shape[axis] == 0:
        shape = shape[: axis % ndim] + (1,) + shape[axis % ndim + 1 :]
    size = int(np.prod(shape))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    if ties:
        x = rng.integers(-2, 3, size).astype(np.float64)
    elif distinct:
        x = rng.permutation(size) * 0.5 - 0.25 * size + rng.uniform(0, 0.1, size)
    else:
        x = rng.standard_normal(size)
    return x.reshape(shape), axis, draw(st.booleans())


def _compare(ours, theirs, exact=False):
    ours = ours if isinstance(ours, (tuple, list)) else (ours,)
    theirs = theirs if isinstance(theirs, (tuple, list)) else (theirs,)
    assert len(ours) == len(theirs)
    for got, expected in zip(ours, theirs):
        expected = expected.detach().numpy()
        assert got.shape == expected.shape
        if exact or got.dtype.kind in "biu":
            np.testing.assert_array_equal(got.numpy(), expected)
        else:
            np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10, atol=1e-12)


def _check(x, ours, theirs, grad=True):
    """Values (and indices) of ``ours(Variable)`` and ``theirs(tensor)`` agree, and so do the
    gradients of a random weighting of their first outputs."""
    tape.reset_global_tape()
    variable = tape.Variable(x, requires_grad=True)
    tensor = torch.tensor(x, requires_grad=True)
    got, expected = ours(variable), theirs(tensor)
    _compare(got, expected)
    if not grad:
        return
    first, reference = (got[0], expected[0]) if isinstance(got, tuple) else (got, expected)
    if first.size == 0 or x.size == 0:
        return
    weights = np.random.default_rng(1).standard_normal(first.shape)
    (gx,) = tape.grad((first * tape.Variable(weights)).sum(), [variable])
    (tgx,) = torch.autograd.grad(
        (reference * torch.tensor(weights)).sum(), [tensor], allow_unused=True
    )
    gx = np.zeros(x.shape) if gx is None else gx.numpy()  # none reached X (norm with p = 0)
    tgx = np.zeros(x.shape) if tgx is None else tgx.numpy()
    np.testing.assert_allclose(gx, tgx, rtol=1e-9, atol=1e-12)


@_SETTINGS
@given(_case())
def test_prod(case):
    x, axis, keepdim = case
    _check(x, lambda v: ops.prod(v, axis=axis, keepdim=keepdim), lambda t: t.prod(axis, keepdim))


@_SETTINGS
@given(_case(), st.sampled_from([0, 1, 2.5]), st.sampled_from(["var", "std"]))
def test_var_and_std(case, correction, op):
    x, axis, keepdim = case
    count = x.shape[axis] if x.ndim else 1
    if count - correction <= 0 or (op == "std" and x.size == 0):
        return  # PyTorch's degenerate gradients are inf/nan (the values are checked below)
    _check(
        x,
        lambda v: ops.REGISTRY[op](v, axis=axis, correction=correction, keepdim=keepdim),
        lambda t: getattr(torch, op)(t, axis, correction=correction, keepdim=keepdim),
    )


@_SETTINGS
@given(_case(), st.sampled_from(["var_mean", "std_mean"]))
def test_var_mean_and_std_mean_over_several_axes(case, op):
    x, _, keepdim = case
    axes = list(range(x.ndim))[::2] or None
    count = int(np.prod([x.shape[a] for a in axes])) if axes else x.size
    if count < 2:
        return
    tape.reset_global_tape()
    got = ops.REGISTRY[op](tape.Variable(x), axis=axes, keepdim=keepdim)
    _compare(tuple(got), getattr(torch, op)(torch.tensor(x), axes, keepdim=keepdim))


@_SETTINGS
@given(_case(nonempty_axis=True), st.sampled_from([2, 1, 3, 1.5, 0.5, 0, -1, np.inf, -np.inf]))
def test_norm(case, p):
    x, axis, keepdim = case
    _check(
        x,
        lambda v: ops.norm(v, p=p, axis=axis, keepdim=keepdim),
        lambda t: torch.linalg.vector_norm(t, p, axis, keepdim),
    )


@_SETTINGS
@given(_case(), st.sampled_from(["cumsum", "cumprod", "logcumsumexp"]))
def test_sum_product_and_log_sum_exp_scans(case, op):
    x, axis, _ = case
    _check(x, lambda v: ops.REGISTRY[op](v, axis=axis), lambda t: getattr(torch, op)(t, axis))


@_SETTINGS
@given(_case(ties=True), st.sampled_from(["cummax", "cummin"]))
def test_running_extremes_with_ties(case, op):
    # Ties take the last index in PyTorch, deterministically; gradients follow the indices.
    x, axis, _ = case
    _check(
        x, lambda v: tuple(ops.REGISTRY[op](v, axis=axis)), lambda t: getattr(torch, op)(t, axis)
    )


@_SETTINGS
@given(_case(ties=True), st.booleans())
def test_sort_and_argsort_with_ties(case, descending):
    x, axis, _ = case
    _check(
        x,
        lambda v: tuple(ops.sort(v, axis=axis, descending=descending)),
        lambda t: torch.sort(t, dim=axis, descending=descending, stable=True),
    )
    tape.reset_global_tape()
    _compare(
        ops.argsort(tape.Variable(x), axis=axis, descending=descending),
        torch.argsort(torch.tensor(x), dim=axis, descending=descending, stable=True),
    )


@_SETTINGS
@given(_case(distinct=True), st.booleans(), st.data())
def test_topk(case, largest, data):
    x, axis, _ = case
    k = data.draw(st.integers(0, x.shape[axis] if x.ndim else 1))
    _check(
        x,
        lambda v: tuple(ops.topk(v, k=k, axis=axis, largest=largest)),
        lambda t: torch.topk(t, k, dim=axis, largest=largest),
    )


@_SETTINGS
@given(_case(distinct=True, nonempty_axis=True), st.data())
def test_kthvalue(case, data):
    x, axis, keepdim = case
    k = data.draw(st.integers(1, x.shape[axis] if x.ndim else 1))
    _check(
        x,
        lambda v: tuple(ops.kthvalue(v, k=k, axis=axis, keepdim=keepdim)),
        lambda t: torch.kthvalue(t, k, dim=axis, keepdim=keepdim),
    )


@_SETTINGS
@given(_case(ties=True, nonempty_axis=True))
def test_median_along_an_axis_with_ties(case):
    # PyTorch's index among tied medians is the one a stable sort puts in the middle.
    x, axis, keepdim = case
    _check(
        x,
        lambda v: tuple(ops.median(v, axis=axis, keepdim=keepdim)),
        lambda t: torch.median(t, dim=axis, keepdim=keepdim),
    )


@_SETTINGS
@given(_case(distinct=True))
def test_median_of_all_elements(case):
    x = case[0]
    if x.size == 0:
        return
    _check(x, lambda v: v.median(), torch.median)


@_SETTINGS
@given(_case(ties=True, nonempty_axis=True), st.sampled_from(["argmax", "argmin"]))
def test_argmax_and_argmin_take_the_first_of_ties(case, op):
    x, axis, keepdim = case
    tape.reset_global_tape()
    _compare(
        ops.REGISTRY[op](tape.Variable(x), axis=axis, keepdim=keepdim),
        getattr(torch, op)(torch.tensor(x), dim=axis, keepdim=keepdim),
    )
    if x.size:
        _compare(ops.REGISTRY[op](tape.Variable(x)), getattr(torch, op)(torch.tensor(x)))


@_SETTINGS
@given(_case(ties=True), st.sampled_from(["any", "all"]))
def test_any_and_all(case, op):
    x, axis, keepdim = case
    tape.reset_global_tape()
    _compare(
        ops.REGISTRY[op](tape.Variable(x), axis=axis, keepdim=keepdim),
        getattr(torch, op)(torch.tensor(x), dim=axis, keepdim=keepdim),
    )


@_SETTINGS
@given(
    hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
    st.integers(0, 2**16),
    st.sampled_from([1e-5, 1e-2]),
    st.booleans(),
)
def test_isclose_broadcasts(shapes, seed, rtol, equal_nan):
    rng = np.random.default_rng(seed)
    x_shape, y_shape = shapes.input_shapes
    x = rng.choice([0.0, 1.0, 1.001, np.nan, np.inf], x_shape)
    y = rng.choice([0.0, 1.0, 1.001, np.nan, np.inf], y_shape)
    tape.reset_global_tape()
    got = ops.isclose(tape.Variable(x), tape.Variable(y), rtol=rtol, equal_nan=equal_nan)
    tx, ty = torch.broadcast_tensors(torch.tensor(x), torch.tensor(y))
    _compare(got, torch.isclose(tx, ty, rtol=rtol, equal_nan=equal_nan))
    expected = torch.allclose(tx, ty, rtol=rtol, equal_nan=equal_nan)
    assert tape.Variable(x).allclose(tape.Variable(y), rtol=rtol, equal_nan=equal_nan) is expected


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float32_stays_float32(dtype):
    tape.reset_global_tape()
    x = tape.Variable(np.linspace(0.5, 2.0, 12, dtype=dtype).reshape(3, 4), requires_grad=True)
    outputs = [
        ops.prod(x, axis=1),
        ops.var(x),
        ops.std_mean(x, axis=0).std,
        ops.norm(x, p=3),
        ops.cumprod(x, axis=1),
        ops.logcumsumexp(x, axis=0),
        ops.cummax(x, axis=1).values,
        ops.sort(x).values,
        ops.topk(x, k=2).values,
        ops.median(x, axis=1).values,
    ]
    for out in outputs:
        assert out.dtype == dtype
        (gx,) = tape.grad(out.sum(), [x], create_graph=True)
        assert gx.dtype == dtype
