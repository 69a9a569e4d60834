"""Cases for the linear-algebra ops (ops/linalg.py, ops/determinant.py): well-conditioned
inputs (M + n I, and M M^T + n I for cholesky), batches that broadcast, 1x1 matrices and
size-0 batches, singular matrices for det and cofactor; float64 references from numpy's own
routines or, where those are the kernel's, from their definitions (minors, substitution)."""

import dataclasses
import itertools

import numpy as np

from tape.testing import OpCase


def _shifted(shape, permute=False):
    """M + n I for standard-normal M (..., n, n): well conditioned; rows reversed (the sign of
    the determinant flipped for n = 2, 3) if ``permute``."""

    def make(rng, dtype):
        n = shape[-1]
        a = rng.standard_normal(shape) + n * np.eye(n)
        return (a[..., ::-1, :] if permute else a).astype(dtype)

    return make


def _spd(shape):
    """M M^T + n I: symmetric positive definite (exactly symmetric)."""

    def make(rng, dtype):
        m = rng.standard_normal(shape)
        a = m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])
        return ((a + np.swapaxes(a, -1, -2)) / 2).astype(dtype)

    return make


def _spectrum(shape):
    """Q diag(1, 2, ..., n) Q^T for a random orthogonal Q: symmetric, eigenvalues 1 apart."""

    def make(rng, dtype):
        q, _ = np.linalg.qr(rng.standard_normal(shape))
        a = (q * np.arange(1.0, shape[-1] + 1)[..., None, :]) @ np.swapaxes(q, -1, -2)
        return ((a + np.swapaxes(a, -1, -2)) / 2).astype(dtype)

    return make


def _fixed(array):
    return lambda rng, dtype: np.asarray(array, dtype=dtype)


def _f64(*arrays):
    return [np.asarray(a, dtype=np.float64) for a in arrays]


# ---- references ----------------------------------------------------------------------------


def _inverse(a):
    return np.linalg.inv(_f64(a)[0])


def _det(a):
    return np.linalg.det(_f64(a)[0])


def _slogdet(a):
    sign, logabsdet = np.linalg.slogdet(_f64(a)[0])
    return sign, logabsdet


def _cofactor(a):
    """C[i, j] = (-1)^(i + j) det(A without row i and column j), per matrix (the definition)."""
    (a,) = _f64(a)
    n = a.shape[-1]
    out = np.zeros(a.shape)
    for i, j in itertools.product(range(n), range(n)):
        minor = np.delete(np.delete(a, i, axis=-2), j, axis=-1)
        out[..., i, j] = (-1) ** (i + j) * (np.linalg.det(minor) if n > 1 else 1.0)
    return out


def _solve(a, b):
    a, b = _f64(a, b)
    if b.ndim == 1 or b.shape == a.shape[:-1]:
        return np.linalg.solve(a, b[..., None])[..., 0]
    return np.linalg.solve(a, b)


def _cholesky(a, upper=False):
    lower = np.linalg.cholesky(_f64(a)[0])
    return np.swapaxes(lower, -1, -2) if upper else lower


def _substitute(t, b, upper):
    """X with T X = B for one triangular T (n, n) and B (n, k), by substitution."""
    n = t.shape[0]
    x = np.zeros(b.shape)
    for i in reversed(range(n)) if upper else range(n):
        done = slice(i + 1, n) if upper else slice(0, i)
        x[i] = (b[i] - t[i, done] @ x[done]) / t[i, i]
    return x


def _solve_triangular(a, b, upper, left=True, unitriangular=False):
    a, b = _f64(a, b)
    t = np.triu(a) if upper else np.tril(a)
    if unitriangular:
        t[..., np.arange(t.shape[-1]), np.arange(t.shape[-1])] = 1.0
    if not left:  # X T = B is T^T X^T = B^T
        t, b, upper = np.swapaxes(t, -1, -2), np.swapaxes(b, -1, -2), not upper
    batch = np.broadcast_shapes(t.shape[:-2], b.shape[:-2])
    t = np.broadcast_to(t, batch + t.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    x = np.zeros(b.shape)
    for index in np.ndindex(*batch):
        x[index] = _substitute(t[index], b[index], upper)
    return x if left else np.swapaxes(x, -1, -2)


def _eigh(a, UPLO="L"):
    """numpy's eigh, each eigenvector signed so that its largest-magnitude entry is positive
    (the op's stated convention)."""
    values, vectors = np.linalg.eigh(_f64(a)[0])
    peaks = np.take_along_axis(vectors, np.abs(vectors).argmax(axis=-2)[..., None, :], axis=-2)
    return values, vectors * np.sign(peaks)


def _trace(x):
    x = np.asarray(x)
    dtype = np.float64 if x.dtype.kind == "f" else np.int64
    return np.diagonal(x, axis1=-2, axis2=-1).sum(axis=-1, dtype=dtype)


# ---- cases ---------------------------------------------------------------------------------


def _square_cases(op, reference, double_grad=True):
    return [
        OpCase(op, {"A": _shifted((3, 3))}, reference=reference, double_grad=double_grad),
        OpCase(
            op,
            {"A": _shifted((2, 2, 3, 3))},
            reference=reference,
            double_grad=double_grad,
            name="batched",
        ),
        OpCase(
            op, {"A": _shifted((1, 1))}, reference=reference, double_grad=double_grad, name="1x1"
        ),
        OpCase(op, {"A": _shifted((0, 3, 3))}, reference=reference, name="size0_batch"),
    ]


_SINGULAR = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]  # rank 2
_RANK_ONE = [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [-1.0, -2.0, -3.0]]

INVERSE_CASES = _square_cases("inverse", _inverse)

DET_CASES = _square_cases("det", _det) + [
    OpCase("det", {"A": _shifted((2, 3, 3), permute=True)}, reference=_det, name="negative"),
    # det is a polynomial: at singular matrices its gradient is the cofactor matrix still
    OpCase("det", {"A": _fixed(_SINGULAR)}, reference=_det, name="singular"),
    OpCase("det", {"A": _fixed(_RANK_ONE)}, reference=_det, name="rank_one"),
]

COFACTOR_CASES = _square_cases("cofactor", _cofactor) + [
    # its gradient goes through inverse(A): forward only at singular matrices
    OpCase("cofactor", {"A": _fixed(_SINGULAR)}, reference=_cofactor, grad=False, name="singular"),
    OpCase("cofactor", {"A": _fixed(_RANK_ONE)}, reference=_cofactor, grad=False, name="rank_one"),
    OpCase(
        "cofactor",
        {"A": _fixed(np.zeros((2, 2, 2)))},
        reference=_cofactor,
        grad=False,
        name="zero",
    ),
]

SLOGDET_CASES = _square_cases("slogdet", _slogdet) + [
    OpCase(
        "slogdet",
        {"A": _shifted((2, 3, 3), permute=True)},
        reference=_slogdet,
        double_grad=True,
        name="negative",
    ),
    OpCase(
        "slogdet",
        {"A": _fixed(_SINGULAR)},
        reference=_slogdet,
        grad=False,  # log|det| is -inf there
        name="singular",
    ),
]


def _solve_case(a, b, name, double_grad=True):
    return OpCase(
        "solve",
        {"A": _shifted(a), "B": b},
        reference=_solve,
        double_grad=double_grad,
        name=name,
    )


SOLVE_CASES = [
    _solve_case((3, 3), (3, 2), ""),
    _solve_case((3, 3), (3,), "vector"),
    _solve_case((2, 3, 3), (2, 3), "vector_batched"),
    _solve_case((2, 3, 3), (3,), "vector_broadcast"),
    _solve_case((2, 3, 3), (2, 3, 4), "batched"),
    _solve_case((2, 1, 3, 3), (4, 3, 1), "broadcast_batches"),
    _solve_case((3, 3), (2, 3, 2), "broadcast_a"),
    _solve_case((3, 3, 3), (3, 3), "vector_square_b"),  # B.shape == A.shape[:-1]: vectors
    _solve_case((1, 1), (1, 1), "1x1"),
    _solve_case((0, 3, 3), (0, 3, 2), "size0_batch", double_grad=False),
    _solve_case((3, 3), (3, 0), "size0_columns", double_grad=False),
]


def _cholesky_case(shape, name="", **attrs):
    return OpCase(
        "cholesky",
        {"A": _spd(shape)},
        attrs,
        reference=_cholesky,
        double_grad=shape[0] != 0,
        name=name,
    )


CHOLESKY_CASES = [
    _cholesky_case((3, 3)),
    _cholesky_case((2, 3, 3), "batched"),
    _cholesky_case((2, 3, 3), "upper", upper=True),
    _cholesky_case((1, 1), "1x1"),
    _cholesky_case((0, 3, 3), "size0_batch"),
]


def _triangular_case(a, b, name, **attrs):
    return OpCase(
        "solve_triangular",
        {"A": _shifted(a), "B": b},
        attrs,
        reference=_solve_triangular,
        double_grad=True,
        name=name,
    )


SOLVE_TRIANGULAR_CASES = [
    _triangular_case(
        (3, 3),
        (3, 2) if left else (2, 3),  # B (n, k) on the left, (k, n) on the right
        f"{'upper' if upper else 'lower'}_{'left' if left else 'right'}{'_unit' if unit else ''}",
        upper=upper,
        left=left,
        unitriangular=unit,
    )
    for upper, left, unit in itertools.product((True, False), repeat=3)
] + [
    _triangular_case((2, 1, 3, 3), (4, 3, 2), "broadcast_batches", upper=False),
    _triangular_case((3, 3), (2, 2, 3), "broadcast_a_right", upper=True, left=False),
    _triangular_case((1, 1), (1, 3), "1x1", upper=True),
    _triangular_case((0, 3, 3), (0, 3, 1), "size0_batch", upper=False),
]

EIGH_CASES = [
    OpCase("eigh", {"A": _spectrum((3, 3))}, reference=_eigh, double_grad=True),
    OpCase("eigh", {"A": _spectrum((2, 3, 3))}, reference=_eigh, double_grad=True, name="batched"),
    OpCase("eigh", {"A": _spectrum((3, 3))}, {"UPLO": "U"}, reference=_eigh, name="upper"),
    OpCase("eigh", {"A": _spectrum((1, 1))}, reference=_eigh, double_grad=True, name="1x1"),
    OpCase("eigh", {"A": _spectrum((0, 3, 3))}, reference=_eigh, name="size0_batch"),
]

TRACE_CASES = [
    OpCase("trace", {"X": (3, 3)}, reference=_trace, double_grad=True),
    OpCase("trace", {"X": (2, 3, 4)}, reference=_trace, double_grad=True, name="batched_wide"),
    OpCase("trace", {"X": (4, 2)}, reference=_trace, double_grad=True, name="tall"),
    OpCase("trace", {"X": (1, 1)}, reference=_trace, name="1x1"),
    OpCase("trace", {"X": (0, 2, 2)}, reference=_trace, name="size0_batch"),
    OpCase("trace", {"X": (2, 0, 3)}, reference=_trace, name="size0_rows"),
    OpCase(
        "trace",
        {"X": np.arange(12, dtype=np.int32).reshape(3, 4)},
        reference=_trace,
        grad=False,
        name="int",
    ),
]

# The random-tape property tests feed these ops fresh inputs (``OpCase.fresh_inputs``): an
# earlier op's output would often be singular, indefinite or non-finite, where the solvers,
# factorizations and SVDs fail (and slogdet's and cofactor's gradients invert A).
_WELL_CONDITIONED = (
    INVERSE_CASES
    + DET_CASES
    + COFACTOR_CASES
    + SLOGDET_CASES
    + SOLVE_CASES
    + CHOLESKY_CASES
    + SOLVE_TRIANGULAR_CASES
    + EIGH_CASES
)
CASES = [dataclasses.replace(case, fresh_inputs=True) for case in _WELL_CONDITIONED] + TRACE_CASES
