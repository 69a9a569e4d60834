"""Selecting along one axis with an index array of the same rank: ``take_along_dim`` (PyTorch's
name; numpy's ``take_along_axis``) and its gradient op, plus the index helpers the scatter ops
(``ops.scattering``) share.

``ops.gather`` keeps Paddle's meaning (``np.take``: whole slices picked by an index of any shape,
which is torch.index_select for a 1-d index). PyTorch's element-wise ``torch.gather(x, dim, idx)``
is ``ops.take_along_dim(x, idx, axis=dim)``: Out[i][j] = X[Index[i][j]][j] for axis 0. Where
torch.gather lets the index be shorter than X on another axis (reading X's leading block),
take_along_dim broadcasts X and Index against each other on the other axes instead, as
torch.take_along_dim does; slice X first for torch.gather's reading.
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from ops.infer import normalize_axis, result_dtype
from ops.registry import Attr, register
from tape.errors import DTypeError, IndexingError, ShapeError
from tape.tape import apply


def check_index(index, x_shape, axis):
    """Index holds integers, and (when its values are known) ones in [-n, n) for X's axis."""
    if index.dtype.kind not in "iu":
        raise DTypeError(
            None,
            "input Index must hold integers",
            expected="an integer dtype",
            actual=str(index.dtype),
        )
    known = getattr(index, "_value", None)
    n = x_shape[axis] if x_shape else 1
    if known is not None and known.size:
        low, high = int(known.min()), int(known.max())
        if low < -n or high >= n:
            raise IndexingError(
                None,
                f"index {high if high >= n else low} is out of range for axis {axis} of extent {n}",
                expected=f"-{n} <= Index < {n}",
                actual=f"Index values in [{low}, {high}], X.shape={x_shape}",
            )


def _broadcast_except(x_shape, index_shape, axis):
    """The shape X and Index broadcast to on every axis but ``axis`` (Index's extent there)."""
    if len(x_shape) != len(index_shape):
        raise ShapeError(
            None,
            "X and Index must have the same number of axes",
            actual=f"X.shape={x_shape}, Index.shape={index_shape}",
        )
    shape = list(index_shape)
    for d, (a, b) in enumerate(zip(x_shape, index_shape)):
        if d != axis:
            if a != b and 1 not in (a, b):
                raise ShapeError(
                    None,
                    f"X and Index cannot be broadcast together on axis {d}",
                    expected="equal extents, or 1, on every axis but 'axis'",
                    actual=f"X.shape={x_shape}, Index.shape={index_shape}, axis={axis}",
                )
            shape[d] = b if a == 1 else a
    return tuple(shape)


def _layout(attrs, x, index):
    """(axis, X's shape, Index's shape) after flattening both when ``axis`` is None."""
    if attrs["axis"] is None:
        return 0, (math.prod(x.shape),), (math.prod(index.shape),)
    if not x.shape:
        raise ShapeError(None, "a 0-d X has no axis to take along", actual=f"axis={attrs['axis']}")
    return normalize_axis(None, attrs["axis"], len(x.shape)), x.shape, index.shape


def _infer_take(attrs, x, index):
    axis, x_shape, index_shape = _layout(attrs, x, index)
    check_index(index, x_shape, axis)
    return _broadcast_except(x_shape, index_shape, axis), x.dtype


_AXIS = {"axis": Attr("int", None)}


@register(
    "take_along_dim",
    inputs=("X", "Index"),
    attrs=_AXIS,
    infer=_infer_take,
    no_need_buffer=("X",),
)
def take_along_dim(xp, attrs, x, index):
    """Out[..., j, ...] = X[..., Index[..., j, ...], ...] along ``axis`` (torch.take_along_dim,
    np.take_along_axis; torch.gather when Index has X's extents on the other axes). X and
    Index broadcast on the other axes; without an axis both are flattened. Negative indices
    count from the end.

    dX = take_along_dim_grad(X, Index, dOut): dOut scatter-added at the indices (repeats add).

    >>> import numpy as np, tape, ops
    >>> x = tape.Variable(np.array([[10, 11, 12], [20, 21, 22]]))
    >>> ops.take_along_dim(x, np.array([[2], [0]]), axis=1).numpy()
    array([[12],
           [20]])
    """
    axis, x_shape, index_shape = _layout(attrs, x, index)
    shape = _broadcast_except(x_shape, index_shape, axis)
    x = xp.broadcast_to(x.reshape(x_shape), shape[:axis] + (x_shape[axis],) + shape[axis + 1 :])
    return xp.take_along_axis(x, xp.broadcast_to(index.reshape(index_shape), shape), axis)


@take_along_dim.gradient
def _(g):
    x, index = g.inputs
    return apply(take_along_dim_grad, (x, index, g.gouts[0]), g.attrs), None


def _infer_take_grad(attrs, x, index, gout):
    shape, _ = _infer_take(attrs, x, index)
    if gout.shape != shape:
        raise ShapeError(
            None,
            "Out@GRAD does not have take_along_dim's shape",
            expected=str(shape),
            actual=str(gout.shape),
        )
    return x.shape, result_dtype(x, gout)


def positions(xp, index, axis):
    """The full index tuple addressing, for every element of ``index``, the position with
    ``axis`` replaced by that element's value (an open mesh elsewhere)."""
    ndim = index.ndim
    mesh = tuple(
        index if d == axis else xp.arange(n).reshape((n,) + (1,) * (ndim - d - 1))
        for d, n in enumerate(index.shape)
    )
    return mesh


@register(
    "take_along_dim_grad",
    inputs=("X", "Index", "Out@GRAD"),
    attrs=_AXIS,
    infer=_infer_take_grad,
    no_need_buffer=("X",),
)
def take_along_dim_grad(xp, attrs, x, index, gout):
    """Out = Out@GRAD added into zeros of X's shape at the positions take_along_dim read (summed
    over axes where X was broadcast; X's values are unused).

    d(Out@GRAD) = take_along_dim(dOut, Index); X and Index get none.
    """
    axis, x_shape, index_shape = _layout(attrs, x, index)
    shape = _broadcast_except(x_shape, index_shape, axis)
    full = xp.zeros(
        shape[:axis] + (x_shape[axis],) + shape[axis + 1 :],
        dtype=np.result_type(x.dtype, gout.dtype),
    )
    xp.add.at(full, positions(xp, xp.broadcast_to(index.reshape(index_shape), shape), axis), gout)
    broadcast = tuple(d for d, (a, b) in enumerate(zip(x_shape, full.shape)) if a != b)
    if broadcast:
        full = full.sum(axis=broadcast, keepdims=True)
    return full.reshape(x.shape)


@take_along_dim_grad.gradient
def _(g):
    from ops.select import _to_input

    _, index, gout = g.inputs
    return None, None, _to_input(apply(take_along_dim, (g.gouts[0], index), g.attrs), gout)


def pick(values, index, axis):
    """``values`` read at ``index`` along ``axis`` over Index's own extent (torch.gather's
    reading: Index may be shorter than ``values`` on the other axes), as ops."""
    from ops.select import slice as slice_op

    cut = [d for d in range(len(index.shape)) if d != axis and index.shape[d] != values.shape[d]]
    if cut:
        attrs = {"axes": cut, "starts": [0] * len(cut), "ends": [index.shape[d] for d in cut]}
        values = apply(slice_op, (values,), dict(slice_op.defaults, **attrs))
    return apply(take_along_dim, (values, index), {"axis": axis})


def fit_to(grad, shape):
    """A gradient of Index's shape fitted to a source of ``shape``: summed for a 0-d source,
    zero-padded at the end of each axis for a larger one."""
    from ops.padding import pad
    from ops.reduce import reduce_sum

    if grad.shape == tuple(shape):
        return grad
    if not shape:
        return apply(reduce_sum, (grad,), {"axis": None, "keepdim": False})
    pads = []
    for n, m in zip(reversed(shape), reversed(grad.shape)):
        pads += [0, n - m]
    return apply(pad, (grad,), dict(pad.defaults, pad=pads))


def window(shape):
    """The slices selecting the leading block of ``shape`` (a source restricted to Index)."""
    return tuple(builtins.slice(0, n) for n in shape)
