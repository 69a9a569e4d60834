"""Matrix decompositions on the last two axes, as torch.linalg: svdvals, svd, qr and pinv, and
matrix_power composed from matmul and inverse; every gradient is built from registered ops, so
it can be differentiated again where it is defined.

Leading axes are a batch (``(..., m, n)``); float32 and float64 only, integer input refused
(``ops.linalg``'s checks). Kernels call ``xp.linalg`` (numpy or cupy). Singular vectors and QR
factors are given a fixed sign convention (stated per op), so that results are reproducible
whichever LAPACK computed them; torch leaves the signs to LAPACK, so its factors may differ from
these by signs.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ops.compose import add, div, mul, neg, sub
from ops.linalg import (
    MAIN_DIAGONAL,
    inverse,
    matrix_product,
    require_linalg_float,
    require_matrix,
    require_square,
    solve_triangular,
    swap_last,
    transposed,
    unsqueezed,
)
from ops.registry import Attr, register
from tape.errors import GraphError
from tape.tape import apply

SVD = namedtuple("SVD", ["U", "S", "Vh"])
QR = namedtuple("QR", ["Q", "R"])


def _peak_signs(xp, columns):
    """The sign (+1 or -1) of each column's largest-magnitude entry, shaped (..., 1, columns)."""
    if columns.shape[-2] == 0:  # no entries (an m = 0 or n = 0 matrix): nothing to flip
        return xp.ones((*columns.shape[:-2], 1, columns.shape[-1]), dtype=columns.dtype)
    peaks = xp.argmax(xp.abs(columns), axis=-2)[..., None, :]
    signs = xp.sign(xp.take_along_axis(columns, peaks, axis=-2))
    return xp.where(signs == 0, 1, signs).astype(columns.dtype)


# ---- matrix_power (a function of registered ops) --------------------------------------------


def matrix_power(a, n):
    """A^n for each square matrix of A (..., m, m) and an integer n (torch.linalg.matrix_power):
    the identity for n = 0, inverse(A)^|n| for n < 0 (a singular A is inverse's
    ExecutionError).

    A function, not an op: it records O(log |n|) matmuls by repeated squaring (and one
    inverse), so its gradient, sum_k (A^T)^k dOut (A^T)^(n-1-k) for n > 0 and
    -B^T dB B^T through B = A^{-1} for n < 0, comes from matmul's and inverse's, to any order,
    without a kernel of its own; the recording costs a few microseconds per matmul.

    >>> import numpy as np, tape
    >>> from ops.decompositions import matrix_power
    >>> matrix_power(tape.Variable(np.array([[1.0, 1.0], [0.0, 1.0]])), 3).numpy()
    array([[1., 3.],
           [0., 1.]])
    """
    from ops.fill import fill_ones_like
    from ops.reduce import reduce_sum
    from ops.triangular import diagonal_grad

    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"matrix_power: n must be an int, got {type(n).__name__}")
    require_square(a)
    require_linalg_float(("A", a))
    if n == 0:  # the identity in A's shape and dtype, on the tape with a zero gradient (torch)
        row = apply(reduce_sum, (a,), {**reduce_sum.defaults, "axis": (-1,)})
        return apply(diagonal_grad, (a, apply(fill_ones_like, (row,), {})), MAIN_DIAGONAL)
    base = apply(inverse, (a,), {}) if n < 0 else a
    result, n = None, abs(int(n))
    while True:  # binary exponentiation: base^n = product of base^(2^bit) over n's set bits
        if n & 1:
            result = base if result is None else matrix_product(result, base)
        n >>= 1
        if not n:
            return result
        base = matrix_product(base, base)


# ---- svdvals --------------------------------------------------------------------------------


def _infer_svdvals(attrs, a):
    require_matrix(a)
    return (*a.shape[:-2], min(a.shape[-2:])), require_linalg_float(("A", a))


@register("svdvals", inputs=("A",), infer=_infer_svdvals)
def svdvals(xp, attrs, a):
    """Out = the singular values of each matrix of A (..., m, n), descending, (..., k) with
    k = min(m, n) (torch.linalg.svdvals).

    dA = U diag(dOut) V^T from the reduced SVD A = U diag(S) V^T: each u_i v_i^T is unique
    even where singular values repeat (its signs cancel), so this gradient is always finite.
    Its own gradient goes through svd's vectors, finite only for distinct singular values.

    >>> import numpy as np, tape, ops
    >>> ops.svdvals(tape.Variable(np.array([[0.0, 2.0], [3.0, 0.0]]))).numpy()
    array([3., 2.])
    """
    return xp.linalg.svd(a, compute_uv=False)


@svdvals.gradient
def _(g):
    (a,), (gout,) = g.inputs, g.gouts
    u, _, vh = apply(svd, (a,), {"full_matrices": False})
    return (matrix_product(mul(u, unsqueezed(gout, -2)), vh),)


# ---- svd ------------------------------------------------------------------------------------


def _infer_svd(attrs, a):
    require_matrix(a)
    dtype = require_linalg_float(("A", a))
    *batch, m, n = a.shape
    k = min(m, n)
    rows, cols = (m, n) if attrs["full_matrices"] else (k, k)
    return ((*batch, m, rows), dtype), ((*batch, k), dtype), ((*batch, cols, n), dtype)


@register(
    "svd",
    inputs=("A",),
    outputs=("U", "S", "Vh"),
    attrs={"full_matrices": Attr("bool", True)},
    infer=_infer_svd,
    no_need_buffer=("A",),
    returns=lambda results: SVD(*results),
)
def svd(xp, attrs, a):
    """(U, S, Vh) with A = U[..., :, :k] diag(S) Vh[..., :k, :] for each matrix of A
    (..., m, n), S descending, k = min(m, n) (torch.linalg.svd; a namedtuple ``(U, S, Vh)``).
    U is (..., m, m) and Vh (..., n, n) if ``full_matrices``, else (..., m, k) and (..., k, n).
    Signs: each column of U has its largest-magnitude entry positive, the first k rows of Vh
    flipped with their columns of U (the further rows signed by their own largest entry); the
    further columns of U and rows of Vh are LAPACK's orthonormal basis of the complement.

    dA is PyTorch's ``svd_backward`` (real case), on the reduced factors: with
    J = skew(U^T dU) S, K = S skew(V^T dV), skew(X) = X - X^T and E[i, j] = S[j]^2 - S[i]^2,
    G = (J + K) / E off the diagonal plus diag(dS), and dA = U G V^T, plus
    (I - U U^T) dU S^{-1} V^T when m > n (or U S^{-1} dVh (I - V V^T) when m < n). As in torch,
    the extra columns of a full U and rows of a full Vh get no gradient (they are not unique:
    dU[..., :, k:] and dVh[..., k:, :] are ignored). Through U and Vh the gradient is NaN or
    Inf where two singular values are equal (E = 0; torch's is not finite either), or where
    one is 0 for m != n; through S alone it is U diag(dS) V^T, always finite.

    >>> import numpy as np, tape, ops
    >>> ops.svd(tape.Variable(np.array([[0.0, 2.0], [3.0, 0.0]]))).S.numpy()
    array([3., 2.])
    """
    u, s, vh = xp.linalg.svd(a, full_matrices=attrs["full_matrices"])
    k = s.shape[-1]
    u_signs = _peak_signs(xp, u)  # (..., 1, U's columns)
    v_signs = xp.concatenate(
        [u_signs[..., :k], _peak_signs(xp, swap_last(vh[..., k:, :]))], axis=-1
    )
    return u * u_signs, s, vh * swap_last(v_signs)


def _leading(var, axis, k):
    """var's first k entries along ``axis`` (recorded)."""
    from ops.select import slice as slice_op

    axis = axis % len(var.shape)
    cut = {**slice_op.defaults, "axes": (axis,), "starts": (0,), "ends": (k,)}
    return apply(slice_op, (var,), cut)


def _add(x, y):
    """x + y, or the one of them that is not None (a gradient's terms, some absent)."""
    if x is None or y is None:
        return y if x is None else x
    return add(x, y)


def _skew(x):
    return sub(x, transposed(x))


def svd_gradient(u, s, vh, gu, gs, gvh):
    """PyTorch's svd_backward (real case) on reduced factors U (..., m, k), S, Vh (..., k, n)
    and their gradients (None where none reached), from registered ops."""
    from ops.fill import fill_ones_like
    from ops.triangular import diagonal_grad

    m, n = u.shape[-2], vh.shape[-1]
    if gu is None and gvh is None:
        return None if gs is None else matrix_product(mul(u, unsqueezed(gs, -2)), vh)
    inner = None
    if gu is not None:
        inner = mul(_skew(matrix_product(u, gu, transpose_x=True)), unsqueezed(s, -2))
    if gvh is not None:
        skew = _skew(matrix_product(vh, gvh, transpose_y=True))
        inner = _add(inner, mul(unsqueezed(s, -1), skew))
    squares = mul(s, s)
    gaps = sub(unsqueezed(squares, -2), unsqueezed(squares, -1))  # E[i, j] = S[j]^2 - S[i]^2
    # E + I: the diagonal (where inner is 0) divides by 1
    ones = apply(diagonal_grad, (gaps, apply(fill_ones_like, (s,), {})), MAIN_DIAGONAL)
    inner = div(inner, _add(gaps, ones))
    if gs is not None:
        inner = _add(inner, apply(diagonal_grad, (inner, gs), MAIN_DIAGONAL))
    if m > n and gu is not None:  # [U G + (I - U U^T) dU S^{-1}] V^T
        scaled = div(gu, unsqueezed(s, -2))
        projected = sub(scaled, matrix_product(u, matrix_product(u, scaled, transpose_x=True)))
        return matrix_product(_add(matrix_product(u, inner), projected), vh)
    if m < n and gvh is not None:  # U [G V^T + S^{-1} dVh (I - V V^T)]
        scaled = div(gvh, unsqueezed(s, -1))
        projected = sub(scaled, matrix_product(matrix_product(scaled, vh, transpose_y=True), vh))
        return matrix_product(u, _add(matrix_product(inner, vh), projected))
    return matrix_product(u, matrix_product(inner, vh))


@svd.gradient
def _(g):
    (u, s, vh), (gu, gs, gvh) = g.outputs, g.gouts
    if g.attrs["full_matrices"]:  # as torch: only the first k columns of U and rows of Vh
        k = s.shape[-1]
        u, vh = _leading(u, -1, k), _leading(vh, -2, k)
        gu = None if gu is None else _leading(gu, -1, k)
        gvh = None if gvh is None else _leading(gvh, -2, k)
    return (svd_gradient(u, s, vh, gu, gs, gvh),)


# ---- qr -------------------------------------------------------------------------------------


def _infer_qr(attrs, a):
    require_matrix(a)
    dtype = require_linalg_float(("A", a))
    *batch, m, n = a.shape
    k = min(m, n)
    mode = attrs["mode"]
    if mode == "r":
        return ((0,), dtype), ((*batch, k, n), dtype)
    rows = m if mode == "complete" else k
    return ((*batch, m, rows), dtype), ((*batch, rows, n), dtype)


@register(
    "qr",
    inputs=("A",),
    outputs=("Q", "R"),
    attrs={"mode": Attr("str", "reduced", choices=("reduced", "complete", "r"))},
    infer=_infer_qr,
    returns=lambda results: QR(*results),
)
def qr(xp, attrs, a):
    """(Q, R) with A = Q R, Q with orthonormal columns and R upper triangular, for each matrix
    of A (..., m, n), k = min(m, n) (torch.linalg.qr; a namedtuple ``(Q, R)``). ``mode``:
    'reduced' Q (..., m, k), R (..., k, n); 'complete' Q (..., m, m), R (..., m, n); 'r' R only
    and an empty Q of shape (0,), as torch. Signs: R's diagonal is made non-negative (Q's
    columns flipped with R's rows), which makes the factors of a full-rank A unique; torch's
    may differ from these by signs.

    For m >= n, dA = (dQ + Q copyltu(M)) R^{-T} with M = R dR^T - dQ^T Q and
    copyltu(M) = tril(M) + tril(M, -1)^T (PyTorch's linalg_qr_backward); mode 'r' recomputes
    Q for it (torch refuses). It needs R invertible: a rank-deficient A is solve_triangular's
    ExecutionError. As torch, there is no gradient for mode 'complete' with m > n; unlike
    torch, none for m < n either (both a GraphError).

    >>> import numpy as np, tape, ops
    >>> ops.qr(tape.Variable(np.array([[0.0, 2.0], [3.0, 1.0]]))).R.numpy()
    array([[3., 1.],
           [0., 2.]])
    """
    mode = attrs["mode"]
    if mode == "r":
        r = xp.linalg.qr(a, mode="r")
        q = None
    else:
        q, r = xp.linalg.qr(a, mode=mode)
    k = min(a.shape[-2:])
    diagonal = xp.diagonal(r, axis1=-2, axis2=-1)[..., :k]
    signs = xp.where(diagonal < 0, -1, 1).astype(r.dtype)
    rows = xp.concatenate([signs, xp.ones((*signs.shape[:-1], r.shape[-2] - k), r.dtype)], -1)
    r = xp.triu(r * rows[..., :, None])  # triu: zeros below, not the -0.0 of a flip
    if q is None:
        return xp.zeros((0,), dtype=r.dtype), r
    return q * rows[..., None, :], r


@qr.gradient
def _(g):
    from ops.triangular import tril

    (a,), (q, r), (gq, gr) = g.inputs, g.outputs, g.gouts
    m, n = a.shape[-2:]
    mode = g.attrs["mode"]
    if m < n or (mode == "complete" and m > n):
        raise GraphError(
            "qr",
            "no gradient for this QR decomposition",
            expected="m >= n, and mode 'reduced' or 'r' if m > n",
            actual=f"A.shape={tuple(a.shape)}, mode={mode!r}",
            hint="for m < n, take the QR of the first m columns, or differentiate through svd",
        )
    if mode == "r":
        q, gq = apply(qr, (a,), {"mode": "reduced"})[0], None
    product = None if gr is None else matrix_product(r, gr, transpose_y=True)  # R dR^T
    if gq is not None:
        product = _add(product, neg(matrix_product(gq, q, transpose_x=True)))
    if product is None:
        return (None,)
    lower = apply(tril, (product,), {"diagonal": 0})
    copied = _add(lower, transposed(apply(tril, (product,), {"diagonal": -1})))
    numerator = _add(gq, matrix_product(q, copied))
    # X R^T = numerator, R^T lower: solve X T = B with T the lower triangle of R^T
    right = {**solve_triangular.defaults, "upper": False, "left": False}
    return (apply(solve_triangular, (transposed(r), numerator), right),)


# ---- pinv -----------------------------------------------------------------------------------


def _infer_pinv(attrs, a):
    require_matrix(a)
    return (*a.shape[:-2], a.shape[-1], a.shape[-2]), require_linalg_float(("A", a))


_TOLERANCE = {
    "atol": Attr("float", None, check=lambda v: v >= 0, rule="atol >= 0"),
    "rtol": Attr("float", None, check=lambda v: v >= 0, rule="rtol >= 0"),
}


@register("pinv", inputs=("A",), attrs=_TOLERANCE, infer=_infer_pinv)
def pinv(xp, attrs, a):
    """Out = A^+, the Moore-Penrose pseudo-inverse (..., n, m) of each matrix of A (..., m, n)
    (torch.linalg.pinv): V diag(1 / S) U^T from the reduced SVD, singular values at most
    max(atol, rtol * max(S)) treated as 0. As torch, rtol defaults to eps * max(m, n) (eps of
    A's dtype) when neither tolerance is given, and to 0 when only atol is.

    dA is PyTorch's pinv_backward, from matmuls of A, Out and dOut (so it differentiates
    again): for m <= n, with K = dOut^T Out,
    dA = -(Out K)^T + K Out^T - A Out K Out^T + Out^T Out (dOut^T - K A) (m > n: the
    transposed counterpart). It is the true gradient where no singular value is cut off (a
    full-rank A) or those cut off are exactly 0 and stay so (perturbations within A's rank); the
    pseudo-inverse jumps where a singular value crosses the cutoff. Where nonzero singular
    values are cut off (a large atol or rtol), it is, as torch's, not the derivative of the
    truncated pseudo-inverse (that would go through the singular vectors).

    >>> import numpy as np, tape, ops
    >>> ops.pinv(tape.Variable(np.array([[2.0, 0.0], [0.0, 0.0]]))).numpy()
    array([[0.5, 0. ],
           [0. , 0. ]])
    """
    *batch, m, n = a.shape
    if a.size == 0:
        return xp.zeros((*batch, n, m), dtype=a.dtype)
    atol, rtol = attrs["atol"], attrs["rtol"]
    if rtol is None:
        rtol = float(np.finfo(a.dtype).eps) * max(m, n) if atol is None else 0.0
    u, s, vh = xp.linalg.svd(a, full_matrices=False)
    cutoff = xp.maximum(atol or 0.0, rtol * xp.max(s, axis=-1, keepdims=True))
    kept = s > cutoff
    inverted = xp.where(kept, 1.0 / xp.where(kept, s, 1.0), 0.0).astype(a.dtype)
    return (swap_last(vh) * inverted[..., None, :]) @ swap_last(u)


@pinv.gradient
def _(g):
    (a,), (out,), (gout,) = g.inputs, g.outputs, g.gouts
    m, n = a.shape[-2:]
    gout_t = transposed(gout)
    if m <= n:
        k = matrix_product(gout, out, transpose_x=True)  # dOut^T Out (m, m)
        k_out_t = matrix_product(k, out, transpose_y=True)
        terms = (
            neg(transposed(matrix_product(out, k))),
            k_out_t,
            neg(matrix_product(matrix_product(a, out), k_out_t)),
            matrix_product(
                matrix_product(out, out, transpose_x=True), sub(gout_t, matrix_product(k, a))
            ),
        )
    else:
        k = matrix_product(out, gout, transpose_y=True)  # Out dOut^T (n, n)
        out_t_k = matrix_product(out, k, transpose_x=True)
        terms = (
            neg(transposed(matrix_product(k, out))),
            matrix_product(
                matrix_product(sub(gout_t, matrix_product(a, k)), out),
                out,
                transpose_y=True,
            ),
            out_t_k,
            neg(matrix_product(matrix_product(out_t_k, out), a)),
        )
    total = None
    for term in terms:
        total = _add(total, term)
    return (total,)
