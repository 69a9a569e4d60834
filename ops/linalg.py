"""Linear algebra on the last two axes, as torch.linalg: inverse, solve, solve_triangular,
cholesky and eigh (a matrix's scalar invariants, det, slogdet and trace, are in
``ops.determinant``); every gradient is built from registered ops, so it can be differentiated
again.

Leading axes are a batch (``(..., n, n)``); float32 and float64 only (numpy's linalg has no
float16 kernels), and integer input is refused, as for any float function (trace, a sum, keeps
integers). Kernels call ``xp.linalg`` (numpy or cupy). A singular matrix (inverse, solve,
solve_triangular) or one that is not positive definite (cholesky) fails in the kernel with a
``LinAlgError`` saying so, which reaches the user as the op's ``ExecutionError`` at the line
that recorded the op (eagerly, or when a lazy plan runs it). cupy's solvers do not check by
default: on a GPU such a matrix gives NaN or Inf instead.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ops.compose import add, div, mul, neg, sub
from ops.infer import broadcast_shapes, promoted
from ops.reduce import sum_to
from ops.registry import Attr, register
from tape.errors import DTypeError, ShapeError
from tape.tape import apply

Eigh = namedtuple("Eigh", ["eigenvalues", "eigenvectors"])


# ---- checks and helpers -----------------------------------------------------------------------


def require_linalg_float(*slots):
    """The promotion of (slot, Variable) pairs, each of which must be float32 or float64."""
    for slot, var in slots:
        if var.dtype.kind != "f" or var.dtype.itemsize < 4:
            raise DTypeError(
                None,
                f"input {slot} must be floating point (float32 or float64)",
                expected="float32 or float64",
                actual=f"{slot}.dtype={var.dtype}",
                hint="numpy's linalg has no float16 kernels" if var.dtype.kind == "f" else None,
            )
    return promoted(*(var for _, var in slots))


def require_matrix(var, slot="A"):
    """A matrix or a batch of them: at least two axes (any extents)."""
    if len(var.shape) < 2:
        raise ShapeError(
            None,
            f"input {slot} must be a matrix or a batch of them",
            expected=f"{slot}.shape == (..., m, n)",
            actual=f"{slot}.shape={tuple(var.shape)}",
        )


def require_square(var, slot="A"):
    shape = tuple(var.shape)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ShapeError(
            None,
            f"input {slot} must be a square matrix or a batch of them",
            expected=f"{slot}.shape == (..., n, n)",
            actual=f"{slot}.shape={shape}",
        )


def infer_square(attrs, a):
    require_square(a)
    return a.shape, require_linalg_float(("A", a))


# The main diagonal of the last two axes, as ``diagonal`` and ``diagonal_grad`` take it.
MAIN_DIAGONAL = {"offset": 0, "axis1": -2, "axis2": -1}


def swap_last(a):
    """The array with its last two axes swapped (a view)."""
    return a.swapaxes(-1, -2)


def transposed(var):
    """The Variable with its last two axes swapped (recorded: gradient makers use it)."""
    from ops.shape import transpose

    ndim = len(var.shape)
    return apply(transpose, (var,), {"perm": (*range(ndim - 2), ndim - 1, ndim - 2)})


def as_matrices(var):
    """The Variable reshaped to (..., 1, 1): one scalar per matrix of a batch."""
    from ops.shape import reshape

    return apply(reshape, (var,), {"shape": (*var.shape, 1, 1)})


def matrix_product(x, y, transpose_x=False, transpose_y=False):
    from ops.matmul import matmul

    return apply(matmul, (x, y), {"transpose_x": transpose_x, "transpose_y": transpose_y})


def _checked(what, solver, *arrays):
    """``solver(*arrays)``, its LinAlgError raised again saying what is wrong with the input."""
    try:
        return solver(*arrays)
    except np.linalg.LinAlgError as err:
        raise np.linalg.LinAlgError(f"{what} (numpy: {err})") from None


_SINGULAR = "input A is singular (not invertible; for a batch, at least one of its matrices)"


# ---- inverse ------------------------------------------------------------------------------


@register("inverse", inputs=("A",), infer=infer_square, no_need_buffer=("A",))
def inverse(xp, attrs, a):
    """Out = A^{-1} for each matrix of A (..., n, n) (torch.linalg.inv).
    dA = -Out^T dOut Out^T.  A singular A is an ExecutionError.

    >>> import numpy as np, tape, ops
    >>> ops.inverse(tape.Variable(np.array([[2.0, 0.0], [0.0, 4.0]]))).numpy()
    array([[0.5 , 0.  ],
           [0.  , 0.25]])
    """
    return _checked(_SINGULAR, xp.linalg.inv, a)


@inverse.gradient
def _(g):
    (out,), (gout,) = g.outputs, g.gouts
    return (
        neg(matrix_product(out, matrix_product(gout, out, transpose_y=True), transpose_x=True)),
    )


# ---- solve ----------------------------------------------------------------------------------


def _vector_rhs(a_shape, b_shape):
    """torch.linalg.solve's rule: B is a (batch of) vector(s) if 1-D or of shape A.shape[:-1]."""
    return len(b_shape) == 1 or tuple(b_shape) == tuple(a_shape[:-1])


def _infer_solve(attrs, a, b):
    require_square(a)
    dtype = require_linalg_float(("A", a), ("B", b))
    n, vector = a.shape[-1], _vector_rhs(a.shape, b.shape)
    rows = b.shape[-1] if vector else (b.shape[-2] if len(b.shape) >= 2 else None)
    if rows != n:
        raise ShapeError(
            None,
            "B must have as many rows as A has columns",
            expected="B.shape == (..., n) or (..., n, k) for A.shape == (..., n, n)",
            actual=f"A.shape={a.shape}, B.shape={b.shape}",
        )
    b_batch = b.shape[:-1] if vector else b.shape[:-2]
    batch = broadcast_shapes(None, tuple(a.shape[:-2]), tuple(b_batch), "A", "B")
    return batch + ((n,) if vector else (n, b.shape[-1])), dtype


def _broadcast_batches(xp, dtype, a, b):
    """A and B (a matrix right-hand side) cast to ``dtype`` with their batch axes broadcast."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = xp.broadcast_to(a.astype(dtype, copy=False), batch + a.shape[-2:])
    return a, xp.broadcast_to(b.astype(dtype, copy=False), batch + b.shape[-2:])


@register("solve", inputs=("A", "B"), infer=_infer_solve)
def solve(xp, attrs, a, b):
    """Out = X with A X = B (torch.linalg.solve): A (..., n, n), B (..., n, k), or a vector
    right-hand side B (n,) or A.shape[:-1] (torch's rule); batch axes broadcast.

    dB = solve(A^T, dOut) (summed over broadcast axes), dA = -dB X^T. A singular A is an
    ExecutionError.

    >>> import numpy as np, tape, ops
    >>> a = tape.Variable(np.array([[2.0, 0.0], [0.0, 4.0]]))
    >>> ops.solve(a, tape.Variable(np.array([1.0, 1.0]))).numpy()
    array([0.5 , 0.25])
    """
    vector = _vector_rhs(a.shape, b.shape)
    a, b = _broadcast_batches(
        xp, np.result_type(a.dtype, b.dtype), a, b[..., None] if vector else b
    )
    out = _checked(_SINGULAR, xp.linalg.solve, a, b)
    return out[..., 0].copy() if vector else out


@solve.gradient
def _(g):
    (a, b), (out,), (gout,) = g.inputs, g.outputs, g.gouts
    gb = apply(solve, (transposed(a), gout), {})
    ga = None
    if g.needs(0):
        if _vector_rhs(a.shape, b.shape):
            ga = mul(unsqueezed(gb, -1), unsqueezed(out, -2))
        else:
            ga = matrix_product(gb, out, transpose_y=True)
        ga = neg(sum_to(ga, tuple(a.shape)))
    return ga, (sum_to(gb, tuple(b.shape)) if g.needs(1) else None)


def unsqueezed(var, axis):
    from ops.shape import unsqueeze

    return apply(unsqueeze, (var,), {"axes": (axis,)})


# ---- cholesky -------------------------------------------------------------------------------


@register(
    "cholesky",
    inputs=("A",),
    attrs={"upper": Attr("bool", False)},
    infer=infer_square,
    no_need_buffer=("A",),
)
def cholesky(xp, attrs, a):
    """Out = L, lower triangular with A = L L^T, for each symmetric positive-definite matrix of
    A (..., n, n) (torch.linalg.cholesky); ``upper``: Out = L^T, with A = Out^T Out.

    The factor is that of (A + A^T) / 2, which is A for a symmetric A (bit for bit), so the
    gradient is the symmetric one PyTorch gives: with P = tril(L^T dL),
    dA = L^{-T} (P + tril(P, -1)^T) / 2 L^{-1} (two triangular solves). A matrix that is not
    positive definite is an ExecutionError.

    >>> import numpy as np, tape, ops
    >>> ops.cholesky(tape.Variable(np.array([[4.0, 2.0], [2.0, 2.0]]))).numpy()
    array([[2., 0.],
           [1., 1.]])
    """
    symmetric = (a + swap_last(a)) * 0.5
    what = "input A is not positive definite (for a batch, at least one of its matrices)"
    lower = _checked(what, xp.linalg.cholesky, symmetric)
    return swap_last(lower).copy() if attrs["upper"] else lower


@cholesky.gradient
def _(g):
    from ops.triangular import tril
    from ops.unary import scale

    (out,), (gout,) = g.outputs, g.gouts
    upper = g.attrs["upper"]
    lower, glower = (transposed(out), transposed(gout)) if upper else (out, gout)
    product = matrix_product(lower, glower, transpose_x=True)  # L^T dL
    halves = add(
        apply(tril, (product,), {"diagonal": 0}),
        transposed(apply(tril, (product,), {"diagonal": -1})),
    )
    middle = apply(scale, (halves,), {**scale.defaults, "scale": 0.5})
    defaults = solve_triangular.defaults
    left = apply(solve_triangular, (transposed(lower), middle), {**defaults, "upper": True})
    right = {**defaults, "upper": False, "left": False}
    return (apply(solve_triangular, (lower, left), right),)


# ---- solve_triangular -----------------------------------------------------------------------


def _infer_solve_triangular(attrs, a, b):
    require_square(a)
    dtype = require_linalg_float(("A", a), ("B", b))
    n, left = a.shape[-1], attrs["left"]
    if len(b.shape) < 2 or b.shape[-2 if left else -1] != n:
        side = "(..., n, k)" if left else "(..., k, n)"
        raise ShapeError(
            None,
            f"B must be a matrix {side} matching A (left={left})",
            expected=f"B.shape == {side} for A.shape == (..., n, n)",
            actual=f"A.shape={a.shape}, B.shape={b.shape}",
        )
    batch = broadcast_shapes(None, tuple(a.shape[:-2]), tuple(b.shape[:-2]), "A", "B")
    return batch + tuple(b.shape[-2:]), dtype


_TRIANGULAR = {
    "upper": Attr("bool", required=True),
    "left": Attr("bool", True),
    "unitriangular": Attr("bool", False),
}


def _triangle(xp, a, upper, unitriangular):
    """A's upper or lower triangle; with a unit diagonal if ``unitriangular``."""
    if not unitriangular:
        return xp.triu(a) if upper else xp.tril(a)
    strict = xp.triu(a, 1) if upper else xp.tril(a, -1)
    return strict + xp.eye(a.shape[-1], dtype=a.dtype)


@register("solve_triangular", inputs=("A", "B"), attrs=_TRIANGULAR, infer=_infer_solve_triangular)
def solve_triangular(xp, attrs, a, b):
    """Out = X with T X = B (``left``) or X T = B, for T the ``upper`` or lower triangle of A
    (..., n, n), with ones on its diagonal if ``unitriangular``; A's other elements are not
    read (torch.linalg.solve_triangular). B is (..., n, k) (left) or (..., k, n); batch axes
    broadcast.

    numpy has no triangular solver: this solves with xp.linalg.solve (an LU factorization) on
    the masked triangle, O(n^3) where a substitution is O(n^2). A zero on T's diagonal is an
    ExecutionError (PyTorch returns Inf or NaN instead).

    dB = solve_triangular(A^T, dOut) with the opposite triangle (same side); dT = -dB X^T
    (left) or -X^T dB, masked to the triangle read (without the diagonal if unitriangular).
    """
    upper, left = attrs["upper"], attrs["left"]
    dtype = np.result_type(a.dtype, b.dtype)
    triangle = _triangle(xp, a.astype(dtype, copy=False), upper, attrs["unitriangular"])
    if not left:  # X T = B is T^T X^T = B^T
        triangle, b = swap_last(triangle), swap_last(b)
    triangle, b = _broadcast_batches(xp, dtype, triangle, b)
    out = _checked(_SINGULAR.replace("A is", "A's triangle is"), xp.linalg.solve, triangle, b)
    return out if left else swap_last(out).copy()


@solve_triangular.gradient
def _(g):
    from ops.triangular import tril, triu

    (a, b), (out,), (gout,) = g.inputs, g.outputs, g.gouts
    upper, left, unit = g.attrs["upper"], g.attrs["left"], g.attrs["unitriangular"]
    gb = apply(solve_triangular, (transposed(a), gout), {**g.attrs, "upper": not upper})
    ga = None
    if g.needs(0):
        ga = (
            matrix_product(gb, out, transpose_y=True)
            if left
            else matrix_product(out, gb, transpose_x=True)
        )
        mask = triu if upper else tril
        offset = (1 if upper else -1) if unit else 0
        ga = neg(apply(mask, (sum_to(ga, tuple(a.shape)),), {"diagonal": offset}))
    return ga, (sum_to(gb, tuple(b.shape)) if g.needs(1) else None)


# ---- eigh -----------------------------------------------------------------------------------


def _infer_eigh(attrs, a):
    require_square(a)
    dtype = require_linalg_float(("A", a))
    return (a.shape[:-1], dtype), (a.shape, dtype)


@register(
    "eigh",
    inputs=("A",),
    outputs=("Eigenvalues", "Eigenvectors"),
    attrs={"UPLO": Attr("str", "L", choices=("L", "U"))},
    infer=_infer_eigh,
    no_need_buffer=("A",),
    returns=lambda results: Eigh(*results),
)
def eigh(xp, attrs, a):
    """(Eigenvalues, Eigenvectors) of each symmetric matrix of A (..., n, n), eigenvalues
    ascending, A = V diag(L) V^T with orthonormal columns V (torch.linalg.eigh; a namedtuple
    ``(eigenvalues, eigenvectors)``). As cholesky, it decomposes (A + A^T) / 2, which is A for
    a symmetric A whichever triangle ``UPLO`` names (accepted for torch's signature). Each
    eigenvector's sign is chosen so that its largest-magnitude entry is positive (torch leaves
    the sign to LAPACK: its columns may differ from these by a sign).

    dA = V (diag(dL) + F o (X - X^T) / 2) V^T with X = V^T dV and F[i, j] = 1 / (L[j] - L[i])
    off the diagonal (PyTorch's formula). Through the eigenvectors it is unstable where
    eigenvalues are close, and NaN where two are equal (PyTorch gives Inf or NaN there too);
    the eigenvalues' own gradient V diag(dL) V^T is always finite.

    >>> import numpy as np, tape, ops
    >>> ops.eigh(tape.Variable(np.array([[2.0, 1.0], [1.0, 2.0]]))).eigenvalues.numpy()
    array([1., 3.])
    """
    values, vectors = xp.linalg.eigh((a + swap_last(a)) * 0.5)
    peaks = xp.argmax(xp.abs(vectors), axis=-2)[..., None, :]
    return values, vectors * xp.sign(xp.take_along_axis(vectors, peaks, axis=-2))


@eigh.gradient
def _(g):
    from ops.fill import fill_ones_like
    from ops.triangular import diagonal_grad
    from ops.unary import scale

    (values, vectors), (gvalues, gvectors) = g.outputs, g.gouts
    inner = None
    if gvectors is not None:
        product = matrix_product(vectors, gvectors, transpose_x=True)  # X = V^T dV
        skew = apply(scale, (sub(product, transposed(product)),), {**scale.defaults, "scale": 0.5})
        gaps = sub(unsqueezed(values, -2), unsqueezed(values, -1))  # E[i, j] = L[j] - L[i]
        # F = E / (E^2 + I): 1 / E off the diagonal, 0 on it, and differentiable as such
        identity = apply(diagonal_grad, (gaps, apply(fill_ones_like, (values,), {})), MAIN_DIAGONAL)
        inner = mul(div(gaps, add(mul(gaps, gaps), identity)), skew)
    if gvalues is not None:
        placed = apply(diagonal_grad, (vectors, gvalues), MAIN_DIAGONAL)
        inner = placed if inner is None else add(inner, placed)
    if inner is None:
        return (None,)
    return (matrix_product(vectors, matrix_product(inner, vectors, transpose_y=True)),)
