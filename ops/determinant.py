"""A matrix's scalar invariants on the last two axes, as torch: det (its gradient the cofactor
matrix, exact at singular matrices too), slogdet and trace. The solvers and decompositions they
share checks with are in ``ops.linalg``.
"""

from __future__ import annotations

from collections import namedtuple

from ops.compose import mul, sub
from ops.linalg import (
    MAIN_DIAGONAL,
    as_matrices,
    infer_square,
    inverse,
    matrix_product,
    require_linalg_float,
    require_matrix,
    require_square,
    transposed,
    unsqueezed,
)
from ops.reduce import accumulated_dtype
from ops.registry import register
from tape.errors import DTypeError
from tape.tape import apply

SlogDet = namedtuple("SlogDet", ["sign", "logabsdet"])


# ---- det, its cofactor gradient, slogdet ----------------------------------------------------


def _infer_det(attrs, a):
    require_square(a)
    return a.shape[:-2], require_linalg_float(("A", a))


@register("det", inputs=("A",), infer=_infer_det)
def det(xp, attrs, a):
    """Out = det(A) for each matrix of A (..., n, n) (torch.linalg.det).

    dA = dOut * cofactor(A), the cofactor matrix (det(A) A^{-T} where A is invertible),
    computed from an SVD: exact at a singular A too, where it equals PyTorch's gradient under
    ``create_graph=True`` (its SVD path); PyTorch's first-order backward gives
    dOut * det(A) * A^{-T} from a perturbed LU there instead, zeros where det(A) is exactly 0.

    >>> import numpy as np, tape, ops
    >>> ops.det(tape.Variable(np.array([[1.0, 2.0], [3.0, 4.0]]))).numpy().round(12)
    np.float64(-2.0)
    """
    return xp.linalg.det(a)


@det.gradient
def _(g):
    (a,), (gout,) = g.inputs, g.gouts
    return (mul(as_matrices(gout), apply(cofactor, (a,), {})),)


@register("cofactor", inputs=("A",), infer=infer_square)
def cofactor(xp, attrs, a):
    """Out = the cofactor matrix of each matrix of A (the transposed adjugate: d det(A) / dA,
    det(A) A^{-T} where A is invertible), exact at singular matrices as well: from the SVD
    A = U S V^T, cofactor(A) = det(U) det(V^T) U diag(prod_{j != i} s_j) V^T.

    dA = tr(A^{-1} H) Out - Out (A^{-1} H)^T for H = dOut; it goes through inverse(A), so a
    second derivative at a singular A is inverse's singular-matrix error (or, where rounding
    hides the singularity, huge values).
    """
    n = a.shape[-1]
    if n == 0 or a.size == 0:
        return xp.zeros(a.shape, dtype=a.dtype)
    u, s, vh = xp.linalg.svd(a)
    ones = xp.ones(s.shape[:-1] + (1,), dtype=s.dtype)
    before = xp.cumprod(xp.concatenate([ones, s[..., :-1]], axis=-1), axis=-1)
    after = xp.flip(xp.cumprod(xp.concatenate([ones, xp.flip(s, -1)[..., :-1]], axis=-1), -1), -1)
    signs = xp.linalg.det(u) * xp.linalg.det(vh)
    return (u * (before * after)[..., None, :]) @ vh * signs[..., None, None]


@cofactor.gradient
def _(g):
    (a,), (out,), (gout,) = g.inputs, g.outputs, g.gouts
    solved = matrix_product(apply(inverse, (a,), {}), gout)  # A^{-1} H
    scaled = mul(as_matrices(apply(trace, (solved,), {})), out)
    corrected = matrix_product(out, solved, transpose_y=True)
    return (sub(scaled, corrected),)


def _infer_slogdet(attrs, a):
    shape, dtype = _infer_det(attrs, a)
    return (shape, dtype), (shape, dtype)


@register(
    "slogdet",
    inputs=("A",),
    outputs=("Sign", "LogAbsDet"),
    infer=_infer_slogdet,
    returns=lambda results: SlogDet(*results),
)
def slogdet(xp, attrs, a):
    """(Sign, LogAbsDet) with det(A) = Sign * exp(LogAbsDet) for each matrix of A (..., n, n)
    (torch.linalg.slogdet; a namedtuple ``(sign, logabsdet)``). A singular A gives (0, -inf).

    dA = dLogAbsDet * A^{-T} (Sign is piecewise constant: no gradient); at a singular A that is
    inverse's singular-matrix error.

    >>> import numpy as np, tape, ops
    >>> ops.slogdet(tape.Variable(np.array([[0.0, 2.0], [3.0, 0.0]]))).sign.numpy()
    array(-1.)
    """
    sign, logabsdet = xp.linalg.slogdet(a)
    return sign, logabsdet


@slogdet.gradient
def _(g):
    (a,), (_, glog) = g.inputs, g.gouts
    if glog is None:
        return (None,)
    return (mul(as_matrices(glog), transposed(apply(inverse, (a,), {}))),)


# ---- trace ----------------------------------------------------------------------------------


def _infer_trace(attrs, x):
    require_matrix(x, "X")
    if x.dtype.kind not in "iuf":
        raise DTypeError(
            None,
            "input X must be numeric",
            expected="an integer or float dtype",
            actual=str(x.dtype),
        )
    return x.shape[:-2], accumulated_dtype(x.dtype)


@register("trace", inputs=("X",), infer=_infer_trace, no_need_buffer=("X",))
def trace(xp, attrs, x):
    """Out = the sum of the main diagonal of each matrix of X (..., m, n) (torch.trace, batched
    over leading axes; integers accumulate in 64 bits as in a sum).  dX = dOut * I.

    >>> import numpy as np, tape, ops
    >>> ops.trace(tape.Variable(np.arange(9.0).reshape(3, 3))).numpy()
    array(12.)
    """
    return xp.trace(x, axis1=-2, axis2=-1, dtype=accumulated_dtype(x.dtype))


@trace.gradient
def _(g):
    from ops.shape import broadcast_to
    from ops.triangular import diagonal_grad

    (x,), (gout,) = g.inputs, g.gouts
    length = min(x.shape[-2:])
    diagonal = apply(broadcast_to, (unsqueezed(gout, -1),), {"shape": (*gout.shape, length)})
    return (apply(diagonal_grad, (x, diagonal), MAIN_DIAGONAL),)
