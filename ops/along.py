"""Picking entries along an axis by index, and its gradient: what sort, topk, kthvalue, median,
cummax and cummin differentiate through.

``pick_along`` is numpy's take_along_axis (PyTorch's ``gather(input, dim, index)`` with an index of
the input's shape off the axis); ``pick_along_grad`` adds a gradient back at those indices.
Each is the other's gradient, so both differentiate any number of times.
"""

from __future__ import annotations

import math

import numpy as np

from ops.infer import normalize_axis, result_dtype
from ops.registry import Attr, register
from tape.errors import DTypeError, ShapeError
from tape.tape import apply

_AXIS = {"axis": Attr("int", -1)}


def _check_indices(x, indices, axis_attr):
    """Indices must be integers shaped like X off the axis (any extent along it)."""
    if indices.dtype.kind not in "iu":
        raise DTypeError(
            None,
            "input Indices must hold integers",
            expected="an integer dtype",
            actual=str(indices.dtype),
        )
    axis = normalize_axis(None, axis_attr, len(x.shape))
    off_axis = [k for k in range(len(x.shape)) if k != axis]
    if len(indices.shape) != len(x.shape) or any(indices.shape[k] != x.shape[k] for k in off_axis):
        raise ShapeError(
            None,
            "Indices must have X's shape except along the axis",
            expected=f"{len(x.shape)} dimensions, equal to X.shape={x.shape} off axis {axis}",
            actual=f"Indices.shape={indices.shape}",
        )


def _infer_pick(attrs, x, indices):
    _check_indices(x, indices, attrs["axis"])
    return indices.shape, x.dtype


@register(
    "pick_along", inputs=("X", "Indices"), attrs=_AXIS, infer=_infer_pick, no_need_buffer=("X",)
)
def pick_along(xp, attrs, x, indices):
    """Out[..., k, ...] = X[..., Indices[..., k, ...], ...] along ``axis`` (numpy's
    take_along_axis); Indices has X's shape off the axis.

    dX = pick_along_grad(X, Indices, dOut): dOut added at the indices (repeats accumulate).
    """
    if x.ndim == 0:
        return x.copy()
    return xp.take_along_axis(x, indices, axis=attrs["axis"])


@pick_along.gradient
def _(g):
    x, indices = g.inputs
    return apply(pick_along_grad, (x, indices, g.gouts[0]), g.attrs), None


def _infer_pick_grad(attrs, x, indices, gout):
    _check_indices(x, indices, attrs["axis"])
    if gout.shape != indices.shape:
        raise ShapeError(
            None,
            "Out@GRAD must have the shape of Indices",
            expected=str(indices.shape),
            actual=str(gout.shape),
        )
    return x.shape, result_dtype(x, gout)


@register(
    "pick_along_grad",
    inputs=("X", "Indices", "Out@GRAD"),
    attrs=_AXIS,
    infer=_infer_pick_grad,
    no_need_buffer=("X",),
)
def pick_along_grad(xp, attrs, x, indices, gout):
    """Out = zeros of X's shape with Out@GRAD added at Indices along ``axis`` (X's values are
    unused; repeated indices accumulate).

    d(Out@GRAD) = pick_along(dOut, Indices); X and Indices get none.
    """
    dtype = np.result_type(x.dtype, gout.dtype)  # the dtype rule (ops.infer)
    if x.ndim == 0:
        return gout.astype(dtype)
    if indices.size == 0:
        return xp.zeros(x.shape, dtype=dtype)
    # One bincount over flat positions: deterministic, and the same call on numpy and cupy.
    flat = _flat_positions(xp, x.shape, indices, attrs["axis"] % x.ndim)
    summed = xp.bincount(flat.reshape(-1), weights=gout.reshape(-1), minlength=math.prod(x.shape))
    return summed.astype(dtype, copy=False).reshape(x.shape)


@pick_along_grad.gradient
def _(g):
    _, indices, _ = g.inputs
    return None, None, apply(pick_along, (g.gouts[0], indices), g.attrs)


def _flat_positions(xp, shape, indices, axis):
    """The C-order flat position in an array of ``shape`` of each entry Indices points at."""
    strides = [math.prod(shape[k + 1 :]) for k in range(len(shape))]
    flat = xp.where(indices < 0, indices + shape[axis], indices).astype(np.int64) * strides[axis]
    for k, extent in enumerate(shape):
        if k != axis:
            along = [1] * len(shape)
            along[k] = extent
            flat = flat + xp.arange(extent, dtype=np.int64).reshape(along) * strides[k]
    return flat


def arange_along(xp, shape, axis):
    """0, 1, ..., shape[axis] - 1 (int64) shaped to broadcast along ``axis`` of ``shape``."""
    along = [1] * len(shape)
    along[axis] = shape[axis]
    return xp.arange(shape[axis], dtype=np.int64).reshape(along)


def pick(x, indices, axis):
    """Records ``pick_along`` (for gradient makers)."""
    return apply(pick_along, (x, indices), {"axis": axis})


def scatter_back(x, indices, gout, axis):
    """Records ``pick_along_grad``: dOut added at Indices in zeros of X's shape."""
    return apply(pick_along_grad, (x, indices, gout), {"axis": axis})
