"""Cases for the decompositions (ops/decompositions.py): matrices U diag(s) V^T with distinct,
well-separated singular values (so that the singular vectors' and QR's gradients are finite and
stable), square, tall, wide, 1x1 and size-0 batches; float64 references from definitions where
they are short (singular values from eigvalsh(A^T A), R from the Cholesky factor of A^T A) and
from numpy's routines with the ops' sign conventions otherwise."""

import dataclasses

import numpy as np

from tape.testing import OpCase


def _separated(shape):
    """Q1 diag(k + 1, k, ..., 2) Q2^T for random orthogonal Q1 (m, m), Q2 (n, n): singular
    values 1 apart and at least 2."""

    def make(rng, dtype):
        *batch, m, n = shape
        k = min(m, n)
        left, _ = np.linalg.qr(rng.standard_normal((*batch, m, m)))
        right, _ = np.linalg.qr(rng.standard_normal((*batch, n, n)))
        values = np.arange(k + 1.0, 1.0, -1.0)
        return ((left[..., :, :k] * values) @ np.swapaxes(right[..., :, :k], -1, -2)).astype(dtype)

    return make


def _peak_signs(columns):
    peaks = np.take_along_axis(columns, np.abs(columns).argmax(axis=-2)[..., None, :], axis=-2)
    return np.where(peaks < 0, -1.0, 1.0)


def _svdvals(a):
    """The square roots of the eigenvalues of A^T A (or A A^T, the smaller), descending."""
    a = np.asarray(a, dtype=np.float64)
    gram = a.swapaxes(-1, -2) @ a if a.shape[-2] >= a.shape[-1] else a @ a.swapaxes(-1, -2)
    return np.sqrt(np.clip(np.linalg.eigvalsh(gram), 0, None))[..., ::-1]


def _svd(a, full_matrices=True):
    """numpy's SVD with the op's signs: U's columns peak positive, Vh's rows flipped with them."""
    u, s, vh = np.linalg.svd(np.asarray(a, dtype=np.float64), full_matrices=full_matrices)
    k = s.shape[-1]
    u_signs = _peak_signs(u)
    rest = _peak_signs(np.swapaxes(vh[..., k:, :], -1, -2))
    v_signs = np.concatenate([u_signs[..., :k], rest], axis=-1)
    return u * u_signs, s, vh * np.swapaxes(v_signs, -1, -2)


def _qr(a, mode="reduced"):
    """For m >= n and modes 'reduced' and 'r': R = L^T for the Cholesky factor L of A^T A (the
    unique R with a positive diagonal) and Q = A R^{-1}; otherwise numpy's QR with R's diagonal
    made non-negative."""
    a = np.asarray(a, dtype=np.float64)
    m, n = a.shape[-2:]
    if m >= n and mode != "complete":
        r = np.swapaxes(np.linalg.cholesky(np.swapaxes(a, -1, -2) @ a), -1, -2)
        q = np.swapaxes(np.linalg.solve(np.swapaxes(r, -1, -2), np.swapaxes(a, -1, -2)), -1, -2)
        return (np.zeros((0,)) if mode == "r" else q), r
    q, r = np.linalg.qr(a, mode=mode)
    k = min(m, n)
    signs = np.where(np.diagonal(r, axis1=-2, axis2=-1)[..., :k] < 0, -1.0, 1.0)
    rows = np.concatenate([signs, np.ones((*signs.shape[:-1], r.shape[-2] - k))], axis=-1)
    return q * rows[..., None, :], r * rows[..., :, None]


def _case(op, shape, reference, name, attrs=None, grad=True):
    return OpCase(
        op,
        {"A": _separated(shape)},
        attrs or {},
        reference=reference,
        grad=grad,
        double_grad=grad and shape[0] != 0,
        name=name,
    )


SVDVALS_CASES = [
    _case("svdvals", (3, 3), _svdvals, ""),
    _case("svdvals", (2, 4, 3), _svdvals, "batched_tall"),
    _case("svdvals", (3, 5), _svdvals, "wide"),
    _case("svdvals", (1, 1), _svdvals, "1x1"),
    _case("svdvals", (0, 3, 2), _svdvals, "size0_batch"),
]

_REDUCED = {"full_matrices": False}
SVD_CASES = [
    _case("svd", (3, 3), _svd, ""),
    _case("svd", (2, 4, 3), _svd, "reduced_batched_tall", _REDUCED),
    _case("svd", (3, 5), _svd, "reduced_wide", _REDUCED),
    _case("svd", (1, 1), _svd, "1x1"),
    _case("svd", (0, 3, 2), _svd, "size0_batch", _REDUCED),
    # full U (m, m) or Vh (n, n) of a non-square A: the extra columns (LAPACK's basis of the
    # complement) get no gradient, as in torch, so finite differences cannot check them
    _case("svd", (2, 4, 3), _svd, "full_tall", grad=False),
    _case("svd", (3, 5), _svd, "full_wide", grad=False),
]

QR_CASES = [
    _case("qr", (3, 3), _qr, ""),
    _case("qr", (2, 4, 3), _qr, "batched_tall"),
    _case("qr", (4, 2), _qr, "r", {"mode": "r"}),
    _case("qr", (3, 3), _qr, "complete_square", {"mode": "complete"}),
    _case("qr", (1, 1), _qr, "1x1"),
    _case("qr", (0, 3, 2), _qr, "size0_batch"),
    # no gradient (a GraphError): complete with m > n, as torch; m < n
    _case("qr", (4, 2), _qr, "complete_tall", {"mode": "complete"}, grad=False),
    _case("qr", (2, 3, 5), _qr, "wide", grad=False),
]


def _pinv(a, atol=None, rtol=None):
    """numpy's pinv with torch's default tolerance, eps * max(m, n) relative (in float64)."""
    a = np.asarray(a, dtype=np.float64)
    if rtol is None:
        rtol = np.finfo(np.float64).eps * max(a.shape[-2:]) if atol is None else 0.0
    cutoff = max(atol or 0.0, rtol * np.linalg.svd(a, compute_uv=False).max(initial=0.0))
    return np.linalg.pinv(a, rcond=0.0) if cutoff == 0 else _cut_pinv(a, cutoff)


def _cut_pinv(a, cutoff):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    inverted = np.where(s > cutoff, 1.0 / np.where(s > cutoff, s, 1.0), 0.0)
    return (np.swapaxes(vh, -1, -2) * inverted[..., None, :]) @ np.swapaxes(u, -1, -2)


_RANK_TWO = np.diag([3.0, 1.0, 0.0])[[2, 0, 1]]  # an exactly zero singular value

PINV_CASES = [
    _case("pinv", (3, 3), _pinv, ""),
    _case("pinv", (4, 3), _pinv, "tall"),
    _case("pinv", (2, 3, 5), _pinv, "batched_wide"),
    _case("pinv", (1, 1), _pinv, "1x1"),
    _case("pinv", (0, 3, 2), _pinv, "size0_batch"),
    # drops the singular value 2: the gradient (torch's formula) is not the truncation's
    _case("pinv", (3, 4), _pinv, "atol", {"atol": 2.5}, grad=False),
    # rank-deficient: the pseudo-inverse jumps there, so finite differences do not apply
    OpCase(
        "pinv",
        {"A": lambda rng, dtype: _RANK_TWO.astype(dtype)},
        reference=_pinv,
        grad=False,
        name="rank_deficient",
    ),
]

# Fresh inputs in the random-tape property tests: an earlier op's output would have repeated
# or zero singular values (non-finite vector gradients) or be rank-deficient (QR's gradient).
CASES = [
    dataclasses.replace(case, fresh_inputs=True)
    for case in SVDVALS_CASES + SVD_CASES + QR_CASES + PINV_CASES
]
