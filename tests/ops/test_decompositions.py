"""The decompositions against torch.linalg: matrix_power, svdvals, svd, qr and pinv, values and
float64 gradients on hypothesis-drawn batch shapes and sizes (size-0 batches, 1x1, tall and wide
matrices among them), factors up to torch's signs, double gradients, the gradients at repeated
singular values and through a full U's extra columns, and the errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ops
import tape
from ops.decompositions import matrix_power
from tape.errors import DTypeError, ExecutionError, GraphError, ShapeError
from tests.ops.linalg_helpers import GRAD_TOL, TOL, batches, dtypes, seeds, sizes

torch = pytest.importorskip("torch")


def _separated(rng, shape):
    """Q1 diag(k + 1, ..., 2) Q2^T: singular values 1 apart and at least 2 (stable gradients
    through the singular vectors and QR's R^{-1})."""
    *batch, m, n = shape
    k = min(m, n)
    left, _ = np.linalg.qr(rng.standard_normal((*batch, m, m)))
    right, _ = np.linalg.qr(rng.standard_normal((*batch, n, n)))
    return (left[..., :, :k] * np.arange(k + 1.0, 1.0, -1.0)) @ np.swapaxes(
        right[..., :, :k], -1, -2
    )


def _shifted(rng, shape):
    return rng.standard_normal(shape) + shape[-1] * np.eye(shape[-1])


def _grads(fn, a, weights):
    """The float64 gradient of sum_i sum(weights[i] * fn(A)[i]) (None where none reached)."""
    tape.reset_global_tape()
    x = tape.Variable(a, requires_grad=True)
    outs = fn(x)
    loss = None
    for out, weight in zip(outs, weights):
        if weight is not None:
            term = (out * tape.Variable(weight)).sum()
            loss = term if loss is None else loss + term
    (grad,) = tape.grad(loss, [x])
    return np.zeros(a.shape) if grad is None else grad.numpy()


def _torch_grads(fn, a, weights):
    t = torch.tensor(a, requires_grad=True)
    loss = sum((out * torch.tensor(w)).sum() for out, w in zip(fn(t), weights) if w is not None)
    (grad,) = torch.autograd.grad(loss, t, allow_unused=True)
    return np.zeros(a.shape) if grad is None else grad.numpy()


def _close(got, want, tol):
    np.testing.assert_allclose(got, want, rtol=tol[0], atol=tol[1])


def _column_signs(ours, theirs):
    """+-1 per column: torch's factor times these is ours (signs are LAPACK's in torch)."""
    return np.where((ours * theirs).sum(axis=-2, keepdims=True) < 0, -1.0, 1.0)


# ---- matrix_power ---------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(batch=batches, size=sizes, n=st.integers(-3, 6), dtype=dtypes, seed=seeds)
def test_matrix_power_matches_torch(batch, size, n, dtype, seed):
    rng = np.random.default_rng(seed)
    a = _shifted(rng, batch + (size, size)) / size  # powers of modest size
    out = matrix_power(tape.Variable(a.astype(dtype)), n)
    want = torch.linalg.matrix_power(torch.tensor(a.astype(dtype).astype(np.float64)), n)
    assert out.dtype == np.dtype(dtype) and out.shape == tuple(want.shape)
    _close(out.numpy(), want.numpy(), TOL[dtype])
    weight = rng.standard_normal(out.shape)
    got = _grads(lambda x: (matrix_power(x, n),), a, [weight])
    _close(got, _torch_grads(lambda t: (torch.linalg.matrix_power(t, n),), a, [weight]), GRAD_TOL)


def test_matrix_power_double_gradient_matches_torch():
    rng = np.random.default_rng(1)
    a = _shifted(rng, (2, 3, 3)) / 3
    for n in (3, -2):
        _double(
            lambda x, n=n: matrix_power(x, n), lambda t, n=n: torch.linalg.matrix_power(t, n), a
        )


def test_matrix_power_errors():
    with pytest.raises(ShapeError, match=r"square matrix(?s:.)*A.shape=\(2, 3\)"):
        matrix_power(tape.Variable(np.ones((2, 3))), 2)
    with pytest.raises(DTypeError, match="float32 or float64"):
        matrix_power(tape.Variable(np.eye(2, dtype=np.int64)), 2)
    with pytest.raises(TypeError, match="n must be an int, got float"):
        matrix_power(tape.Variable(np.eye(2)), 2.0)
    with pytest.raises(ExecutionError, match="op 'inverse'.*singular"):
        matrix_power(tape.Variable(np.ones((2, 2))), -1).numpy()


# ---- svdvals and svd ------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(batch=batches, m=sizes, n=sizes, dtype=dtypes, seed=seeds)
def test_svdvals_matches_torch(batch, m, n, dtype, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(batch + (m, n))
    out = ops.svdvals(tape.Variable(a.astype(dtype)))
    want = torch.linalg.svdvals(torch.tensor(a.astype(dtype).astype(np.float64)))
    assert out.dtype == np.dtype(dtype) and out.shape == tuple(want.shape)
    _close(out.numpy(), want.numpy(), TOL[dtype])
    weight = [rng.standard_normal(out.shape)]
    got = _grads(lambda x: (ops.svdvals(x),), a, weight)
    _close(got, _torch_grads(lambda t: (torch.linalg.svdvals(t),), a, weight), GRAD_TOL)


def _svd_weights(rng, u, s, vh, k, full):
    """Random weights on U, S and Vh; for full factors only on their first k columns / rows
    (the others get no gradient, as in torch)."""
    wu, ws, wv = (rng.standard_normal(x.shape) for x in (u, s, vh))
    if full:
        wu[..., :, k:], wv[..., k:, :] = 0.0, 0.0
    return wu, ws, wv


@pytest.mark.parametrize("full_matrices", [False, True])
@settings(max_examples=20, deadline=None)
@given(batch=batches, m=sizes, n=sizes, dtype=dtypes, seed=seeds)
def test_svd_matches_torch_up_to_signs(full_matrices, batch, m, n, dtype, seed):
    rng = np.random.default_rng(seed)
    a = _separated(rng, batch + (m, n))
    u, s, vh = ops.svd(tape.Variable(a.astype(dtype)), full_matrices=full_matrices)
    want = torch.linalg.svd(torch.tensor(a.astype(dtype).astype(np.float64)), full_matrices)
    k, tol = min(m, n), TOL[dtype]
    for got, expected in zip((u, s, vh), want):
        assert got.dtype == np.dtype(dtype) and got.shape == tuple(expected.shape)
    _close(s.numpy(), want.S.numpy(), tol)
    signs = _column_signs(u.numpy()[..., :k], want.U.numpy()[..., :k])
    _close(u.numpy()[..., :k], want.U.numpy()[..., :k] * signs, tol)
    _close(vh.numpy()[..., :k, :], want.Vh.numpy()[..., :k, :] * np.swapaxes(signs, -1, -2), tol)
    peaks = np.take_along_axis(u.numpy(), np.abs(u.numpy()).argmax(-2)[..., None, :], -2)
    assert (peaks > 0).all()  # the sign convention
    for factor in (u.numpy(), np.swapaxes(vh.numpy(), -1, -2)):  # orthonormal columns
        gram = np.swapaxes(factor, -1, -2) @ factor
        _close(gram, np.broadcast_to(np.eye(factor.shape[-1]), gram.shape), (0, 1e-5))
    # gradients (float64) through all three outputs; torch's vectors are ours times ``signs``
    u, s, vh = (x.numpy() for x in ops.svd(tape.Variable(a), full_matrices=full_matrices))
    signs = _column_signs(u[..., :k], torch.linalg.svd(torch.tensor(a), False).U.numpy())
    wu, ws, wv = _svd_weights(rng, u, s, vh, k, full_matrices)
    got = _grads(lambda x: ops.svd(x, full_matrices=full_matrices), a, [wu, ws, wv])
    torch_wu, torch_wv = wu.copy(), wv.copy()
    torch_wu[..., :, :k] *= signs
    torch_wv[..., :k, :] *= np.swapaxes(signs, -1, -2)
    want = _torch_grads(lambda t: torch.linalg.svd(t, full_matrices), a, [torch_wu, ws, torch_wv])
    _close(got, want, GRAD_TOL)


def test_svd_of_a_full_u_ignores_the_extra_columns_gradient_as_torch():
    """The columns U[..., :, k:] of a tall A (and rows Vh[..., k:, :] of a wide one) are any
    orthonormal basis of the complement: like torch, the gradient ignores dU there."""
    rng = np.random.default_rng(2)
    for shape in [(4, 2), (2, 5)]:
        a = _separated(rng, shape)
        u, s, vh = ops.svd(tape.Variable(a))
        wu, ws, wv = (rng.standard_normal(x.shape) for x in (u, s, vh))
        k = min(shape)
        clipped_u, clipped_v = wu.copy(), wv.copy()
        clipped_u[:, k:], clipped_v[k:, :] = 0.0, 0.0
        got = _grads(ops.svd, a, [wu, ws, wv])
        np.testing.assert_array_equal(got, _grads(ops.svd, a, [clipped_u, ws, clipped_v]))
        t = torch.tensor(a, requires_grad=True)
        tu, ts, tvh = torch.linalg.svd(t)
        loss = (tu * torch.tensor(wu)).sum() + (tvh * torch.tensor(wv)).sum()
        (full,) = torch.autograd.grad(loss, t)
        t = torch.tensor(a, requires_grad=True)
        tu, ts, tvh = torch.linalg.svd(t)
        loss = (tu * torch.tensor(clipped_u)).sum() + (tvh * torch.tensor(clipped_v)).sum()
        (clipped,) = torch.autograd.grad(loss, t)
        np.testing.assert_allclose(full.numpy(), clipped.numpy(), rtol=1e-12, atol=1e-14)


def test_svd_at_repeated_singular_values():
    """Through S alone the gradient U diag(dS) V^T is finite (svdvals too, equal to torch's);
    through the vectors it is not finite (E = 0 off the diagonal), as torch's."""
    a = np.diag([2.0, 2.0, 5.0])[:, ::-1].copy()
    for fn in (ops.svdvals, lambda x: ops.svd(x).S):
        tape.reset_global_tape()
        x = tape.Variable(a, requires_grad=True)
        (grad,) = tape.grad(fn(x).sum(), [x])
        t = torch.tensor(a, requires_grad=True)
        (want,) = torch.autograd.grad(torch.linalg.svdvals(t).sum(), t)
        assert np.isfinite(grad.numpy()).all()
        np.testing.assert_allclose(grad.numpy(), want.numpy(), atol=1e-14)
    x = tape.Variable(a, requires_grad=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        (grad,) = tape.grad(ops.svd(x).U.sum(), [x])
    assert not np.isfinite(grad.numpy()).all()
    t = torch.tensor(a, requires_grad=True)
    (want,) = torch.autograd.grad(torch.linalg.svd(t).U.sum(), t)
    assert not torch.isfinite(want).all()


# ---- qr -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
@settings(max_examples=20, deadline=None)
@given(batch=batches, m=sizes, n=sizes, dtype=dtypes, seed=seeds)
def test_qr_matches_torch_up_to_signs(mode, batch, m, n, dtype, seed):
    rng = np.random.default_rng(seed)
    a = _separated(rng, batch + (m, n))
    q, r = ops.qr(tape.Variable(a.astype(dtype)), mode=mode)
    tq, tr = (x.numpy() for x in torch.linalg.qr(torch.tensor(a.astype(np.float64)), mode=mode))
    assert q.shape == tq.shape and r.shape == tr.shape and r.dtype == np.dtype(dtype)
    k, tol = min(m, n), TOL[dtype]
    diagonal = np.diagonal(tr, axis1=-2, axis2=-1)
    signs = np.concatenate(
        [np.where(diagonal < 0, -1.0, 1.0), np.ones(batch + (r.shape[-2] - k,))], -1
    )
    _close(r.numpy(), tr * signs[..., :, None], tol)
    assert (np.diagonal(r.numpy(), axis1=-2, axis2=-1) >= 0).all()  # the sign convention
    if mode != "r":
        _close(q.numpy()[..., :k], tq[..., :k] * signs[..., None, :k], tol)
    if m < n or (mode == "complete" and m > n):
        return  # no gradient (test_qr_gradient_refusals)
    q, r = (x.numpy() for x in ops.qr(tape.Variable(a), mode=mode))
    wq = None if mode == "r" else rng.standard_normal(q.shape)
    wr = rng.standard_normal(r.shape)
    got = _grads(lambda x: ops.qr(x, mode=mode), a, [wq, wr])
    torch_wq = None if wq is None else wq * signs[..., None, :]
    want = _torch_grads(lambda t: torch.linalg.qr(t), a, [torch_wq, wr * signs[..., :, None]])
    _close(got, want, GRAD_TOL)


def test_qr_gradient_refusals():
    """No gradient for m < n, nor for mode 'complete' with m > n (torch's refusal too)."""
    for shape, mode in [((2, 3), "reduced"), ((4, 2), "complete")]:
        tape.reset_global_tape()
        x = tape.Variable(_separated(np.random.default_rng(0), shape), requires_grad=True)
        with pytest.raises(GraphError) as info:
            tape.grad(ops.qr(x, mode=mode).R.sum(), [x])
        message = str(info.value)
        assert "op 'qr'" in message and "no gradient" in message
        assert f"A.shape={shape}, mode={mode!r}" in message


def test_qr_gradient_at_a_rank_deficient_matrix_is_an_execution_error():
    """R^{-T} does not exist where R's diagonal has a 0 (here exactly: a zero column); where
    rounding leaves a tiny diagonal entry instead, the gradient is huge (torch's as well)."""
    x = tape.Variable(np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 0.0]]), requires_grad=True)
    with pytest.raises(ExecutionError, match="op 'solve_triangular'.*singular"):
        tape.grad(ops.qr(x).Q.sum(), [x])


# ---- pinv -----------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(batch=batches, m=sizes, n=sizes, dtype=dtypes, seed=seeds)
def test_pinv_matches_torch(batch, m, n, dtype, seed):
    rng = np.random.default_rng(seed)
    a = _separated(rng, batch + (m, n))
    out = ops.pinv(tape.Variable(a.astype(dtype)))
    want = torch.linalg.pinv(torch.tensor(a.astype(dtype).astype(np.float64)))
    assert out.dtype == np.dtype(dtype) and out.shape == tuple(want.shape)
    _close(out.numpy(), want.numpy(), TOL[dtype])
    weight = [rng.standard_normal(out.shape)]
    got = _grads(lambda x: (ops.pinv(x),), a, weight)
    _close(got, _torch_grads(lambda t: (torch.linalg.pinv(t),), a, weight), GRAD_TOL)


@pytest.mark.parametrize(
    "tolerances", [{}, {"atol": 2.5}, {"rtol": 0.6}, {"atol": 0.5, "rtol": 0.9}], ids=str
)
def test_pinv_tolerances_and_rank_deficient_matrices_as_torch(tolerances):
    """torch's cutoff max(atol, rtol * max(S)), its default rtol eps * max(m, n) (a float32
    rank-deficient A keeps no rounding-sized singular value), and its gradient formula where
    singular values are cut off."""
    rng = np.random.default_rng(4)
    for a in [_separated(rng, (2, 3, 4)), np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)]:
        out = ops.pinv(tape.Variable(a), **tolerances)
        want = torch.linalg.pinv(torch.tensor(a), **tolerances)
        _close(out.numpy(), want.numpy(), TOL[a.dtype.name])
    a = _separated(rng, (2, 3, 4))
    weight = [rng.standard_normal((2, 4, 3))]
    got = _grads(lambda x: (ops.pinv(x, **tolerances),), a, weight)
    want = _torch_grads(lambda t: (torch.linalg.pinv(t, **tolerances),), a, weight)
    _close(got, want, GRAD_TOL)


# ---- double gradients, sizes, errors --------------------------------------------------------


def _double(fn, torch_fn, a):
    rng = np.random.default_rng(7)
    direction = rng.standard_normal(a.shape)
    tape.reset_global_tape()
    x = tape.Variable(a, requires_grad=True)
    outs = fn(x)
    outs = outs if isinstance(outs, tuple) else (outs,)
    weights = [rng.standard_normal(out.shape) for out in outs]
    loss = sum(
        ((out * tape.Variable(w)).sum() for out, w in zip(outs[1:], weights[1:])),
        (outs[0] * tape.Variable(weights[0])).sum(),
    )
    (first,) = tape.grad(loss, [x], create_graph=True)
    (second,) = tape.grad((first * tape.Variable(direction)).sum(), [x])
    t = torch.tensor(a, requires_grad=True)
    t_outs = torch_fn(t)
    t_outs = t_outs if isinstance(t_outs, tuple) else (t_outs,)
    t_loss = sum((o * torch.tensor(w)).sum() for o, w in zip(t_outs, weights))
    (t_first,) = torch.autograd.grad(t_loss, t, create_graph=True)
    (t_second,) = torch.autograd.grad((t_first * torch.tensor(direction)).sum(), t)
    _close(first.numpy(), t_first.detach().numpy(), GRAD_TOL)
    _close(second.numpy(), t_second.numpy(), GRAD_TOL)


def test_double_gradients_match_torch():
    """Sign-invariant functions of the factors (torch's signs are LAPACK's): singular values,
    U diag(S) U^T and Vh^T Vh-like products, and R^T R = A^T A."""
    rng = np.random.default_rng(3)
    for shape in [(3, 3), (2, 4, 3), (3, 5)]:
        a = _separated(rng, shape)
        _double(ops.svdvals, torch.linalg.svdvals, a)
        _double(ops.pinv, torch.linalg.pinv, a)

        def ours(x):
            u, s, vh = ops.svd(x, full_matrices=False)
            return ops.matmul(u * ops.unsqueeze(s, axes=(-2,)), u, transpose_y=True), ops.matmul(
                vh, vh * ops.unsqueeze(s, axes=(-1,)), transpose_x=True
            )

        def theirs(t):
            u, s, vh = torch.linalg.svd(t, full_matrices=False)
            return (u * s.unsqueeze(-2)) @ u.mT, vh.mT @ (vh * s.unsqueeze(-1))

        _double(ours, theirs, a)
        if shape[-2] >= shape[-1]:
            _double(
                lambda x: ops.abs(ops.qr(x).R),
                lambda t: torch.linalg.qr(t).R.abs(),
                a,
            )


def test_size0_batches_and_1x1_matrices():
    empty = tape.Variable(np.zeros((0, 3, 2)), requires_grad=True)
    assert ops.svdvals(empty).shape == (0, 2)
    assert [x.shape for x in ops.svd(empty)] == [(0, 3, 3), (0, 2), (0, 2, 2)]
    assert [x.shape for x in ops.qr(empty)] == [(0, 3, 2), (0, 2, 2)]
    (grad,) = tape.grad(ops.svd(empty, full_matrices=False).U.sum(), [empty])
    assert grad.shape == (0, 3, 2)
    one = tape.Variable(np.array([[-4.0]]))
    u, s, vh = ops.svd(one)
    assert (u.item(), s.item(), vh.item()) == (1.0, 4.0, -1.0)
    q, r = ops.qr(one)
    assert (q.item(), r.item()) == (-1.0, 4.0)
    assert ops.pinv(one).item() == -0.25 and ops.pinv(empty).shape == (0, 2, 3)
    assert matrix_power(one, 0).item() == 1.0 and matrix_power(one, -2).item() == 1 / 16


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (2, 0, 2)])
def test_matrices_with_no_entries_as_torch(shape):
    a = np.zeros(shape)
    for ours, theirs in [
        (ops.svd, torch.linalg.svd),
        (lambda x: (ops.svdvals(x),), lambda t: (torch.linalg.svdvals(t),)),
        (ops.qr, torch.linalg.qr),
        (lambda x: (ops.pinv(x),), lambda t: (torch.linalg.pinv(t),)),
    ]:
        for got, want in zip(ours(tape.Variable(a)), theirs(torch.tensor(a)), strict=True):
            assert got.shape == tuple(want.shape)
            np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize(
    "call",
    [ops.svdvals, ops.svd, ops.qr, lambda x: ops.qr(x, mode="r"), ops.pinv],
    ids=["svdvals", "svd", "qr", "qr_r", "pinv"],
)
def test_errors_name_the_op_input_and_shape(call):
    with pytest.raises(ShapeError) as info:
        call(tape.Variable(np.ones(3)))
    message = str(info.value)
    assert "must be a matrix" in message and "A.shape=(3,)" in message
    assert "(..., m, n)" in message and "test_decompositions.py" in message
    for dtype in ("int32", "bool", "float16"):
        with pytest.raises(DTypeError) as info:
            call(tape.Variable(np.eye(2).astype(dtype)))
        assert "float32 or float64" in str(info.value) and f"A.dtype={dtype}" in str(info.value)
    with pytest.raises(tape.AttrError, match="mode"):
        ops.qr(tape.Variable(np.eye(2)), mode="full")
    with pytest.raises(tape.AttrError, match="atol >= 0"):
        ops.pinv(tape.Variable(np.eye(2)), atol=-1.0)


def test_matrix_power_is_in_ops_and_a_variable_method_as_in_torch():
    a = np.array([[1.0, 2.0], [0.5, 1.0]])
    want = torch.linalg.matrix_power(torch.tensor(a), 3).numpy()
    np.testing.assert_allclose(ops.matrix_power(tape.Variable(a), 3).numpy(), want, rtol=1e-14)
    np.testing.assert_allclose(tape.Variable(a).matrix_power(3).numpy(), want, rtol=1e-14)
