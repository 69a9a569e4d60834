"""Matrix-structure ops on the last two axes or a chosen pair: tril, triu, diagonal and the
gradient op diagonal_grad (a diagonal written into zeros); each gradient is one of these ops."""

from __future__ import annotations

import numpy as np

from ops.infer import normalize_axis, result_dtype
from ops.registry import Attr, register
from tape.errors import ShapeError
from tape.tape import apply


def _infer_triangle(attrs, x):
    if len(x.shape) < 2:
        raise ShapeError(
            None,
            "X must have at least 2 axes (a matrix, or a batch of them)",
            actual=f"X.shape={x.shape}",
        )
    return x.shape, x.dtype


_TRIANGLE_ATTRS = {"diagonal": Attr("int", 0)}


@register(
    "tril",
    inputs=("X",),
    attrs=_TRIANGLE_ATTRS,
    infer=_infer_triangle,
    no_need_buffer=("X",),
)
def tril(xp, attrs, x):
    """Out = X with the elements above diagonal ``diagonal`` of its last two axes set to 0
    (torch.tril: 0 is the main diagonal, positive above it).  dX = tril(dOut, diagonal).

    >>> import numpy as np, tape, ops
    >>> ops.tril(tape.Variable(np.ones((2, 3), np.float32))).numpy()
    array([[1., 0., 0.],
           [1., 1., 0.]], dtype=float32)
    """
    return xp.tril(x, k=attrs["diagonal"])


@tril.gradient
def _(g):
    return (apply(tril, (g.gouts[0],), g.attrs),)


@register(
    "triu",
    inputs=("X",),
    attrs=_TRIANGLE_ATTRS,
    infer=_infer_triangle,
    no_need_buffer=("X",),
)
def triu(xp, attrs, x):
    """Out = X with the elements below diagonal ``diagonal`` of its last two axes set to 0
    (torch.triu).  dX = triu(dOut, diagonal)."""
    return xp.triu(x, k=attrs["diagonal"])


@triu.gradient
def _(g):
    return (apply(triu, (g.gouts[0],), g.attrs),)


def _diagonal_layout(attrs, shape):
    """(axis1, axis2, length of the diagonal) for X's ``shape``, or a ShapeError."""
    ndim = len(shape)
    if ndim < 2:
        raise ShapeError(None, "X must have at least 2 axes", actual=f"X.shape={shape}")
    axis1 = normalize_axis(None, attrs["axis1"], ndim, "axis1")
    axis2 = normalize_axis(None, attrs["axis2"], ndim, "axis2")
    if axis1 == axis2:
        raise ShapeError(
            None,
            "axis1 and axis2 must be different axes",
            actual=f"axis1={attrs['axis1']}, axis2={attrs['axis2']}",
        )
    offset = attrs["offset"]
    rows, cols = shape[axis1], shape[axis2]
    length = max(0, min(rows + min(offset, 0), cols - max(offset, 0)))
    return axis1, axis2, length


def _infer_diagonal(attrs, x):
    axis1, axis2, length = _diagonal_layout(attrs, x.shape)
    rest = tuple(d for i, d in enumerate(x.shape) if i not in (axis1, axis2))
    return rest + (length,), x.dtype


_DIAGONAL_ATTRS = {"offset": Attr("int", 0), "axis1": Attr("int", 0), "axis2": Attr("int", 1)}


@register(
    "diagonal",
    inputs=("X",),
    attrs=_DIAGONAL_ATTRS,
    infer=_infer_diagonal,
    no_need_buffer=("X",),
)
def diagonal(xp, attrs, x):
    """Out = the diagonal ``offset`` (positive: above the main one) of the matrices spanned by
    ``axis1`` (rows) and ``axis2`` (columns), as a new last axis (torch.diagonal, np.diagonal).

    dX = diagonal_grad(X, dOut): dOut written on that diagonal of zeros.

    >>> import numpy as np, tape, ops
    >>> ops.diagonal(tape.Variable(np.arange(9).reshape(3, 3)), offset=1).numpy()
    array([1, 5])
    """
    out = xp.diagonal(x, offset=attrs["offset"], axis1=attrs["axis1"], axis2=attrs["axis2"])
    return out.copy()  # numpy's diagonal is a read-only view


@diagonal.gradient
def _(g):
    return (apply(diagonal_grad, (g.inputs[0], g.gouts[0]), g.attrs),)


def _infer_diagonal_grad(attrs, x, gout):
    shape, _ = _infer_diagonal(attrs, x)
    if gout.shape != shape:
        raise ShapeError(
            None,
            "Out@GRAD does not have the diagonal's shape",
            expected=str(shape),
            actual=str(gout.shape),
        )
    return x.shape, result_dtype(x, gout)


@register(
    "diagonal_grad",
    inputs=("X", "Out@GRAD"),
    attrs=_DIAGONAL_ATTRS,
    infer=_infer_diagonal_grad,
    no_need_buffer=("X",),
)
def diagonal_grad(xp, attrs, x, gout):
    """Out = zeros of X's shape with Out@GRAD written on diagonal ``offset`` of the
    (``axis1``, ``axis2``) matrices (X's values are unused).

    d(Out@GRAD) = diagonal(dOut); X gets none.
    """
    axis1, axis2, length = _diagonal_layout(attrs, x.shape)
    offset = attrs["offset"]
    gx = xp.zeros(x.shape, dtype=np.result_type(x.dtype, gout.dtype))
    # A view with the two axes last, so the diagonal is gx[..., rows, cols].
    matrices = xp.moveaxis(gx, (axis1, axis2), (-2, -1))
    steps = xp.arange(length)
    matrices[..., steps + max(-offset, 0), steps + max(offset, 0)] = gout
    return gx


@diagonal_grad.gradient
def _(g):
    from ops.select import _to_input

    return None, _to_input(apply(diagonal, (g.gouts[0],), g.attrs), g.inputs[1])
