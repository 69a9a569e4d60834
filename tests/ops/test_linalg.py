"""The linear-algebra ops against torch.linalg: values and gradients on hypothesis-drawn batch
shapes and sizes (size-0 batches and 1x1 matrices among them), double gradients, broadcasting
in solve, the determinant's gradient at singular matrices, eigh up to eigenvector signs, and
the errors: shapes, dtypes, and singular or indefinite matrices eagerly and in lazy mode."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import ops
import tape
from tape.errors import DTypeError, ExecutionError, ShapeError
from tests.ops.linalg_helpers import GRAD_TOL, TOL, batches, dtypes, seeds, sizes

torch = pytest.importorskip("torch")


def _shifted(rng, shape):
    """M + n I: well conditioned."""
    return rng.standard_normal(shape) + shape[-1] * np.eye(shape[-1])


def _spd(rng, shape):
    m = rng.standard_normal(shape)
    a = m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])
    return (a + np.swapaxes(a, -1, -2)) / 2


def _ours(fn, arrays, dtype=np.float64):
    """fn's outputs (a list of arrays) and the gradients of sum(w * out) (float64 run)."""
    tape.reset_global_tape()
    variables = [tape.Variable(a.astype(dtype), requires_grad=True) for a in arrays]
    outs = fn(*variables)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    return variables, outs


def _compare(fn, torch_fn, arrays, dtype, grad_output=-1):
    """Values in ``dtype`` and float64 gradients of ``fn`` equal torch's ``torch_fn``."""
    _, outs = _ours(fn, arrays, dtype)
    expected = torch_fn(*[torch.tensor(a.astype(dtype).astype(np.float64)) for a in arrays])
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    rtol, atol = TOL[dtype]
    for out, want in zip(outs, expected, strict=True):
        assert out.dtype == np.dtype(dtype) == out.numpy().dtype
        assert out.shape == tuple(want.shape)
        np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=rtol, atol=atol)
    variables, outs = _ours(fn, arrays)
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    wanted = torch_fn(*tensors)
    wanted = list(wanted) if isinstance(wanted, tuple) else [wanted]
    weight = np.random.default_rng(0).standard_normal(outs[grad_output].shape)
    grads = tape.grad((outs[grad_output] * tape.Variable(weight)).sum(), variables)
    torch_grads = torch.autograd.grad(
        (wanted[grad_output] * torch.tensor(weight)).sum(), tensors, allow_unused=True
    )
    for got, want in zip(grads, torch_grads, strict=True):
        want = np.zeros(got.shape) if want is None else want.numpy()
        np.testing.assert_allclose(got.numpy(), want, rtol=GRAD_TOL[0], atol=GRAD_TOL[1])


# ---- values and gradients against torch ------------------------------------------------------

_SQUARE = {
    "inverse": (ops.inverse, torch.linalg.inv),
    "inv_alias": (ops.inv, torch.linalg.inv),
    "det": (ops.det, torch.linalg.det),
    "slogdet": (ops.slogdet, torch.linalg.slogdet),
    "trace": (ops.trace, lambda a: torch.diagonal(a, dim1=-2, dim2=-1).sum(-1)),
}


@pytest.mark.parametrize("name", sorted(_SQUARE))
@settings(max_examples=12, deadline=None)
@given(batch=batches, n=sizes, dtype=dtypes, seed=seeds)
def test_square_ops_match_torch(name, batch, n, dtype, seed):
    fn, torch_fn = _SQUARE[name]
    _compare(fn, torch_fn, [_shifted(np.random.default_rng(seed), batch + (n, n))], dtype)


@pytest.mark.parametrize("upper", [False, True])
@settings(max_examples=12, deadline=None)
@given(batch=batches, n=sizes, dtype=dtypes, seed=seeds)
def test_cholesky_matches_torch(upper, batch, n, dtype, seed):
    a = _spd(np.random.default_rng(seed), batch + (n, n))
    _compare(
        lambda x: ops.cholesky(x, upper=upper),
        lambda x: torch.linalg.cholesky(x, upper=upper),
        [a],
        dtype,
    )


@settings(max_examples=25, deadline=None)
@given(
    shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=3),
    n=sizes,
    k=st.integers(0, 3),
    form=st.sampled_from(["matrix", "vector", "batched_vector"]),
    dtype=dtypes,
    seed=seeds,
)
def test_solve_matches_torch_with_broadcast_batches(shapes, n, k, form, dtype, seed):
    (a_batch, b_batch), _ = shapes
    rng = np.random.default_rng(seed)
    a = _shifted(rng, a_batch + (n, n))
    if form == "matrix":
        b = rng.standard_normal(b_batch + (n, k))
    elif form == "vector":
        b = rng.standard_normal((n,))
    else:  # B.shape == A.shape[:-1]: a batch of vectors, torch's rule
        b = rng.standard_normal(a_batch + (n,))
    _compare(ops.solve, torch.linalg.solve, [a, b], dtype)


@pytest.mark.parametrize("unitriangular", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("upper", [True, False])
@settings(max_examples=8, deadline=None)
@given(
    shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=3),
    n=sizes,
    k=st.integers(0, 3),
    dtype=dtypes,
    seed=seeds,
)
def test_solve_triangular_matches_torch(upper, left, unitriangular, shapes, n, k, dtype, seed):
    (a_batch, b_batch), _ = shapes
    rng = np.random.default_rng(seed)
    a = _shifted(rng, a_batch + (n, n))
    b = rng.standard_normal(b_batch + ((n, k) if left else (k, n)))
    flags = {"upper": upper, "left": left, "unitriangular": unitriangular}
    _compare(
        lambda x, y: ops.solve_triangular(x, y, **flags),
        lambda x, y: torch.linalg.solve_triangular(x, y, **flags),
        [a, b],
        dtype,
    )


def test_trace_of_a_matrix_is_torch_trace_and_keeps_integers_as_torch():
    x = np.arange(12).reshape(3, 4).astype(np.int32)
    got = ops.trace(tape.Variable(x))
    want = torch.trace(torch.tensor(x))
    assert got.dtype == np.int64 and want.dtype == torch.int64
    assert got.item() == want.item()
    _compare(ops.trace, torch.trace, [x.astype(np.float64)], "float64")


def test_slogdet_gives_torchs_namedtuple_and_signs():
    a = _shifted(np.random.default_rng(3), (4, 3, 3))[..., ::-1, :].copy()  # det < 0
    result = ops.slogdet(tape.Variable(a))
    want = torch.linalg.slogdet(torch.tensor(a))
    sign, logabsdet = result
    assert result.sign is sign and result.logabsdet is logabsdet
    np.testing.assert_array_equal(sign.numpy(), want.sign.numpy())
    np.testing.assert_allclose(logabsdet.numpy(), want.logabsdet.numpy(), rtol=1e-12)


_DOUBLE = {
    "inverse": (ops.inverse, torch.linalg.inv, _shifted),
    "det": (ops.det, torch.linalg.det, _shifted),
    "slogdet": (lambda a: ops.slogdet(a).logabsdet, lambda a: torch.linalg.slogdet(a)[1], _shifted),
    "cholesky": (ops.cholesky, torch.linalg.cholesky, _spd),
    "solve": (
        lambda a: ops.solve(a, a[..., 0]),
        lambda a: torch.linalg.solve(a, a[..., 0]),
        _shifted,
    ),
    "solve_triangular": (
        lambda a: ops.solve_triangular(a, a, upper=True),
        lambda a: torch.linalg.solve_triangular(a, a, upper=True),
        _shifted,
    ),
}


@pytest.mark.parametrize("name", sorted(_DOUBLE))
def test_double_gradients_match_torch(name):
    fn, torch_fn, make = _DOUBLE[name]
    rng = np.random.default_rng(5)
    a = make(rng, (2, 3, 3))
    direction = rng.standard_normal(a.shape)
    tape.reset_global_tape()
    x = tape.Variable(a, requires_grad=True)
    out = fn(x)
    w = tape.Variable(rng.standard_normal(out.shape))
    (first,) = tape.grad((out * w).sum(), [x], create_graph=True)
    (second,) = tape.grad((first * tape.Variable(direction)).sum(), [x])
    t = torch.tensor(a, requires_grad=True)
    t_out = torch_fn(t)
    t_w = torch.tensor(w.numpy())
    (t_first,) = torch.autograd.grad((t_out * t_w).sum(), t, create_graph=True)
    (t_second,) = torch.autograd.grad((t_first * torch.tensor(direction)).sum(), t)
    np.testing.assert_allclose(first.numpy(), t_first.detach().numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(second.numpy(), t_second.numpy(), rtol=1e-8, atol=1e-10)


def _spectrum(rng, shape):
    """Q diag(1, ..., n) Q^T: symmetric with eigenvalues 1 apart (a stable eigenvector
    gradient)."""
    q, _ = np.linalg.qr(rng.standard_normal(shape))
    a = (q * np.arange(1.0, shape[-1] + 1)[..., None, :]) @ np.swapaxes(q, -1, -2)
    return (a + np.swapaxes(a, -1, -2)) / 2


@settings(max_examples=20, deadline=None)
@given(batch=batches, n=sizes, dtype=dtypes, seed=seeds)
def test_eigh_matches_torch_up_to_eigenvector_signs(batch, n, dtype, seed):
    rng = np.random.default_rng(seed)
    a = _spectrum(rng, batch + (n, n))
    values, vectors = ops.eigh(tape.Variable(a.astype(dtype)))
    want_values, want_vectors = torch.linalg.eigh(torch.tensor(a.astype(dtype).astype(np.float64)))
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(values.numpy(), want_values.numpy(), rtol=rtol, atol=atol)
    signs = np.sign((vectors.numpy() * want_vectors.numpy()).sum(axis=-2, keepdims=True))
    np.testing.assert_allclose(vectors.numpy(), want_vectors.numpy() * signs, rtol=rtol, atol=atol)
    peaks = np.take_along_axis(
        vectors.numpy(), np.abs(vectors.numpy()).argmax(axis=-2)[..., None, :], axis=-2
    )
    assert (peaks > 0).all()  # the sign convention
    # gradients (float64): torch's eigenvectors are ours times ``signs``
    tape.reset_global_tape()
    x = tape.Variable(a, requires_grad=True)
    values, vectors = ops.eigh(x)
    w_values, w_vectors = rng.standard_normal(values.shape), rng.standard_normal(vectors.shape)
    loss = (values * tape.Variable(w_values)).sum() + (vectors * tape.Variable(w_vectors)).sum()
    (got,) = tape.grad(loss, [x])
    t = torch.tensor(a, requires_grad=True)
    t_values, t_vectors = torch.linalg.eigh(t)
    signs = np.sign((vectors.numpy() * t_vectors.detach().numpy()).sum(axis=-2, keepdims=True))
    t_loss = (t_values * torch.tensor(w_values)).sum()
    t_loss = t_loss + (t_vectors * torch.tensor(w_vectors * signs)).sum()
    (want,) = torch.autograd.grad(t_loss, t)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-8, atol=1e-10)


def test_eigh_at_repeated_eigenvalues():
    """The eigenvalues' gradient stays finite; the eigenvectors' is NaN (1 / 0 gaps), as
    PyTorch's is not finite either."""
    a = np.diag([2.0, 2.0, 5.0])
    x = tape.Variable(a, requires_grad=True)
    values, vectors = ops.eigh(x)
    np.testing.assert_array_equal(values.numpy(), [2.0, 2.0, 5.0])
    (grad,) = tape.grad(values.sum(), [x])
    np.testing.assert_allclose(grad.numpy(), np.eye(3), atol=1e-15)
    x = tape.Variable(a, requires_grad=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        (grad,) = tape.grad(ops.eigh(x).eigenvectors.sum(), [x])
    assert np.isnan(grad.numpy()).any()
    t = torch.tensor(a, requires_grad=True)
    (want,) = torch.autograd.grad(torch.linalg.eigh(t).eigenvectors.sum(), t)
    assert not torch.isfinite(want).all()


def test_eigh_decomposes_the_symmetric_part():
    a = _spectrum(np.random.default_rng(6), (3, 3))
    skew = np.triu(np.ones((3, 3)), 1)
    for uplo in ("L", "U"):
        values = ops.eigh(tape.Variable(a + skew - skew.T), UPLO=uplo).eigenvalues.numpy()
        np.testing.assert_allclose(values, [1.0, 2.0, 3.0], rtol=1e-12)


# ---- edge cases ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["inverse", "det", "slogdet", "trace"])
def test_non_contiguous_views_equal_contiguous_copies(name):
    fn, _ = _SQUARE[name]
    a = _shifted(np.random.default_rng(1), (2, 4, 4))
    views = [np.swapaxes(a, -1, -2), a[:, ::-1, ::-1], np.repeat(a, 2, axis=-1)[..., ::2]]
    for view in views:
        assert not view.flags.c_contiguous
        got = fn(tape.Variable(view))
        want = fn(tape.Variable(np.ascontiguousarray(view)))
        for g, w in zip(
            got if isinstance(got, tuple) else [got], want if isinstance(want, tuple) else [want]
        ):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-14)


def test_size0_batches_and_1x1_matrices():
    empty = tape.Variable(np.zeros((0, 3, 3)), requires_grad=True)
    assert ops.inverse(empty).shape == (0, 3, 3)
    assert ops.det(empty).shape == (0,)
    assert ops.solve(empty, tape.Variable(np.zeros((0, 3)))).shape == (0, 3)
    (grad,) = tape.grad(ops.det(empty).sum(), [empty])
    assert grad.shape == (0, 3, 3)
    one = np.array([[4.0]])
    assert ops.inverse(tape.Variable(one)).item() == 0.25
    assert ops.det(tape.Variable(one)).item() == 4.0
    assert ops.cholesky(tape.Variable(one)).item() == 2.0
    x = tape.Variable(one, requires_grad=True)
    (grad,) = tape.grad(ops.det(x), [x])
    assert grad.item() == 1.0  # the cofactor of a 1x1 matrix


def test_cholesky_factors_the_symmetric_part():
    """torch reads only the lower triangle; this op factors (A + A^T) / 2, equal for symmetric A
    (the only input where either result is a factor of A), and so has torch's symmetric
    gradient, which is also the true gradient of what it computes."""
    a = _spd(np.random.default_rng(2), (3, 3))
    skew = np.triu(np.ones((3, 3)), 1) * 0.1
    got = ops.cholesky(tape.Variable(a + skew - skew.T)).numpy()
    np.testing.assert_allclose(got, np.linalg.cholesky(a), rtol=1e-12)


def test_solve_triangular_reads_only_its_triangle():
    rng = np.random.default_rng(4)
    a, b = _shifted(rng, (3, 3)), rng.standard_normal((3, 2))
    noisy = a + np.tril(rng.standard_normal((3, 3)), -1)
    x = tape.Variable(noisy, requires_grad=True)
    out = ops.solve_triangular(x, tape.Variable(b), upper=True)
    np.testing.assert_allclose(out.numpy(), np.linalg.solve(np.triu(a), b), rtol=1e-12)
    (grad,) = tape.grad(out.sum(), [x])
    assert not np.tril(grad.numpy(), -1).any()


# ---- the determinant's gradient at singular matrices -----------------------------------------


def _adjugate_transposed(a):
    """The cofactor matrix from its definition (signed minors)."""
    n = a.shape[-1]
    return np.array(
        [
            [(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(a, i, 0), j, 1)) for j in range(n)]
            for i in range(n)
        ]
    )


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize(
    "matrix",
    [
        [[1.0, 2.0], [2.0, 4.0]],
        [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]],
        [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [-1.0, -2.0, -3.0]],
        np.zeros((3, 3)),
        np.diag([1.0, 2.0, 0.0]),
    ],
    ids=["rank1_2x2", "rank2", "rank1", "zero", "diagonal"],
)
def test_det_gradient_at_singular_matrices_is_the_cofactor_matrix(matrix, lazy):
    """Exact (det is a polynomial): the cofactor matrix, as PyTorch gives it under
    create_graph=True (its SVD path). PyTorch's first-order backward instead solves with a
    perturbed LU, giving dOut * det * A^{-T}: zeros wherever det(A) is exactly 0."""
    a = np.asarray(matrix, dtype=np.float64)
    with tape.lazy(lazy):
        tape.reset_global_tape()
        x = tape.Variable(a, requires_grad=True)
        (grad,) = tape.grad(ops.det(x) * 3.0, [x])
        got = grad.numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, 3.0 * _adjugate_transposed(a), atol=1e-12)
    t = torch.tensor(a, requires_grad=True)
    (want,) = torch.autograd.grad(torch.linalg.det(t) * 3.0, t, create_graph=True)
    np.testing.assert_allclose(got, want.detach().numpy(), atol=1e-12)


# ---- errors ---------------------------------------------------------------------------------


def _message(info):
    return str(info.value)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: ops.inverse(x),
        lambda x: ops.det(x),
        lambda x: ops.slogdet(x),
        lambda x: ops.cholesky(x),
        lambda x: ops.eigh(x),
    ],
    ids=["inverse", "det", "slogdet", "cholesky", "eigh"],
)
def test_non_square_input_is_a_shape_error_naming_op_and_shape(call):
    for shape in [(2, 3), (4, 2, 3), (3,)]:
        with pytest.raises(ShapeError) as info:
            call(tape.Variable(np.ones(shape)))
        message = _message(info)
        assert "square matrix" in message and f"A.shape={shape}" in message
        assert "(..., n, n)" in message and "test_linalg.py" in message


def test_trace_needs_a_matrix_of_numbers():
    with pytest.raises(ShapeError, match=r"op 'trace'.*\n.*\n.*X.shape=\(3,\)"):
        ops.trace(tape.Variable(np.ones(3)))
    with pytest.raises(DTypeError, match="op 'trace'.*must be numeric"):
        ops.trace(tape.Variable(np.ones((2, 2), bool)))


def test_solve_shape_mismatches_name_both_inputs():
    a = tape.Variable(np.eye(3))
    with pytest.raises(ShapeError) as info:
        ops.solve(a, tape.Variable(np.ones((4, 2))))
    message = _message(info)
    assert "op 'solve'" in message and "as many rows" in message
    assert "A.shape=(3, 3), B.shape=(4, 2)" in message
    with pytest.raises(ShapeError) as info:
        ops.solve(tape.Variable(np.ones((2, 3, 3))), tape.Variable(np.ones((4, 3, 1))))
    assert "cannot be broadcast" in _message(info) and "A.shape=(2,)" in _message(info)
    with pytest.raises(ShapeError, match="as many rows"):
        ops.solve(a, tape.Variable(np.array(1.0)))


def test_solve_triangular_shape_mismatches():
    a = tape.Variable(np.eye(3))
    with pytest.raises(
        ShapeError, match=r"op 'solve_triangular'.*B must be a matrix \(\.\.\., n, k\)"
    ):
        ops.solve_triangular(a, tape.Variable(np.ones(3)), upper=True)
    with pytest.raises(ShapeError, match=r"\(\.\.\., k, n\).*left=False"):
        ops.solve_triangular(a, tape.Variable(np.ones((3, 2))), upper=True, left=False)
    with pytest.raises(tape.AttrError, match="upper"):
        ops.solve_triangular(a, tape.Variable(np.ones((3, 2))))  # upper is required, as torch


@pytest.mark.parametrize("dtype", ["int32", "int64", "bool", "float16"])
def test_non_float_input_is_a_dtype_error(dtype):
    a = tape.Variable(np.eye(2).astype(dtype))
    calls = (ops.inverse, ops.det, ops.slogdet, ops.cholesky, ops.eigh, lambda x: ops.solve(x, x))
    for call in calls:
        with pytest.raises(DTypeError) as info:
            call(a)
        message = _message(info)
        assert "must be floating point (float32 or float64)" in message
        assert f"A.dtype={dtype}" in message and "test_linalg.py" in message
    with pytest.raises(DTypeError, match="input B must be floating point"):
        ops.solve(tape.Variable(np.eye(2)), tape.Variable(np.ones(2, dtype)))


def test_mixed_float_inputs_compute_in_float64():
    a = np.array([[3.0, 1.0], [1.0, 2.0]], np.float32)
    b = np.array([1.0, 1.0 / 3.0])
    out = ops.solve(tape.Variable(a), tape.Variable(b))
    assert out.dtype == np.float64
    np.testing.assert_allclose(out.numpy(), np.linalg.solve(a.astype(np.float64), b), rtol=1e-15)


_SINGULAR = np.array([[[2.0, 0.0], [0.0, 1.0]], [[1.0, 2.0], [2.0, 4.0]]])
_FAILURES = {
    "inverse": (lambda: ops.inverse(tape.Variable(_SINGULAR)), "singular"),
    "solve": (
        lambda: ops.solve(tape.Variable(_SINGULAR), tape.Variable(np.ones((2, 2)))),
        "singular",
    ),
    "solve_triangular": (
        lambda: ops.solve_triangular(
            tape.Variable(np.array([[1.0, 2.0], [0.0, 0.0]])),
            tape.Variable(np.ones((2, 1))),
            upper=True,
        ),
        "triangle is singular",
    ),
    "cholesky": (
        lambda: ops.cholesky(tape.Variable(np.array([[1.0, 2.0], [2.0, 1.0]]))),
        "not positive definite",
    ),
}


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("name", sorted(_FAILURES))
def test_singular_or_indefinite_matrices_are_execution_errors_at_the_users_line(name, lazy):
    record, words = _FAILURES[name]
    with tape.lazy(lazy):
        tape.reset_global_tape()
        with pytest.raises(ExecutionError) as info:
            record().numpy()
    message = _message(info)
    assert isinstance(info.value.__cause__, np.linalg.LinAlgError)
    assert f"op '{name}'" in message and words in message and "input A" in message
    assert "recorded at: test_linalg.py:" in message and "in <lambda>" in message


def test_slogdet_at_a_singular_matrix_gives_minus_inf_and_its_gradient_an_error():
    """log|det| is -inf at a singular matrix (as torch); its gradient A^{-T} does not exist:
    backward raises inverse's error (torch returns infinities)."""
    x = tape.Variable(np.array([[1.0, 2.0], [2.0, 4.0]]), requires_grad=True)
    sign, logabsdet = ops.slogdet(x)
    assert sign.item() == 0.0 and logabsdet.item() == -np.inf
    with pytest.raises(
        ExecutionError, match=r"(?s)op 'inverse'.*singular.*gradient of op 'slogdet'"
    ):
        tape.grad(logabsdet, [x])


def test_variable_methods_match_pytorchs_tensor_methods():
    """a.inverse(), a.det(), a.slogdet(), a.trace(), a.kron(b) and a.cross(b, dim) as torch's."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 3)) + 3 * np.eye(3)
    b = rng.standard_normal((2, 3))
    x, y = tape.Variable(a), tape.Variable(b)
    ta, tb = torch.tensor(a), torch.tensor(b)
    np.testing.assert_allclose(x.inverse().numpy(), ta.inverse().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.det().numpy(), ta.det().numpy(), rtol=1e-12)
    sign, logabsdet = x.slogdet()
    tsign, tlog = ta.slogdet()
    np.testing.assert_array_equal(sign.numpy(), tsign.numpy())
    np.testing.assert_allclose(logabsdet.numpy(), tlog.numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.trace().numpy(), ta.trace().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.kron(y).numpy(), ta.kron(tb).numpy(), rtol=1e-12)
    np.testing.assert_allclose(y.cross(x[:2], dim=1).numpy(), tb.cross(ta[:2], dim=1).numpy())
