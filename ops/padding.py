"""Padding: ``pad`` (torch.nn.functional.pad's constant, reflect, replicate and circular modes)
and its gradient op ``pad_grad``, each the other's adjoint, so both differentiate again.

Along each padded axis of extent n with pads (before, after), output position p (counted from
-before to n + after) reads X at: constant -- p if 0 <= p < n, else ``value``; reflect -- p
mirrored at the ends without repeating the edge (-1 -> 1, n -> n - 2); replicate -- p clamped to
[0, n - 1]; circular -- p wrapped around the window the negative pads leave (p mod n when
none crops). Negative pads crop, as in PyTorch.
"""

from __future__ import annotations

import builtins

import numpy as np

from ops.infer import result_dtype
from ops.registry import Attr, register
from tape.errors import AttrError, ShapeError
from tape.tape import apply

_MODES = ("constant", "reflect", "replicate", "circular")


def _pairs(pad, ndim):
    """{axis: (before, after)} from PyTorch's pad tuple (last axis first)."""
    return {ndim - 1 - k: (pad[2 * k], pad[2 * k + 1]) for k in range(len(pad) // 2)}


def _check_axis(mode, axis, n, before, after):
    """PyTorch's limits on the pads of a non-constant mode, as a message (None when valid)."""
    if mode == "constant" or before == after == 0:
        return None
    if n == 0:
        return f"axis {axis} has extent 0: nothing to {mode}"
    if mode == "reflect" and max(before, after) >= n:
        return f"reflect pads must be smaller than the extent {n} of axis {axis}"
    width = n + min(before, 0) + min(after, 0)
    if mode == "circular" and max(before, after) > width:
        return f"circular pads cannot exceed the extent {width} of axis {axis} (wrapping twice)"
    return None


def _infer_pad(attrs, x):
    pad, mode, ndim = attrs["pad"], attrs["mode"], len(x.shape)
    if len(pad) % 2 or len(pad) // 2 > ndim:
        raise AttrError(
            None,
            "attribute 'pad' must hold (before, after) pairs for at most every axis, last first",
            expected=f"an even number of ints, at most {2 * ndim} (X.shape={x.shape})",
            actual=f"pad={pad}",
        )
    shape = list(x.shape)
    for axis, (before, after) in _pairs(pad, ndim).items():
        n = x.shape[axis]
        problem = _check_axis(mode, axis, n, before, after)
        if problem is None and n + before + after < 0:
            problem = f"the pads of axis {axis} crop more than its extent {n}"
        if problem:
            raise ShapeError(None, problem, actual=f"X.shape={x.shape}, pad={pad}, mode='{mode}'")
        shape[axis] = n + before + after
    return tuple(shape), x.dtype


_PAD_ATTRS = {
    "pad": Attr("ints", required=True),
    "mode": Attr("str", "constant", choices=_MODES),
    "value": Attr("float", 0.0),
}


def _source(xp, mode, n, before, after):
    """The X position each output position along one axis reads (non-constant modes)."""
    p = xp.arange(-before, n + after)
    if mode == "replicate":
        return xp.clip(p, 0, n - 1)
    if mode == "circular":  # wraps around the window left after cropping, as PyTorch does
        first, width = max(-before, 0), n + min(before, 0) + min(after, 0)
        return first + (p + min(before, 0)) % width if width else p
    period = 2 * (n - 1)  # reflect: fold into [0, 2(n-1)), then mirror the upper half
    if period == 0:
        return xp.zeros_like(p)
    p = p % period
    return xp.where(p < n, p, period - p)


def _windows(x_shape, pad):
    """For constant mode: the slices of X and of Out that hold the same elements."""
    src, dst = [builtins.slice(None)] * len(x_shape), [builtins.slice(None)] * len(x_shape)
    for axis, (before, after) in _pairs(pad, len(x_shape)).items():
        n = x_shape[axis]
        src[axis] = builtins.slice(max(-before, 0), max(n + min(after, 0), max(-before, 0)))
        width = src[axis].stop - src[axis].start
        dst[axis] = builtins.slice(max(before, 0), max(before, 0) + width)
    return tuple(src), tuple(dst)


@register("pad", inputs=("X",), attrs=_PAD_ATTRS, infer=_infer_pad, no_need_buffer=("X",))
def pad(xp, attrs, x):
    """Out = X padded as torch.nn.functional.pad: ``pad`` = (before, after) per axis, last axis
    first; ``mode`` constant (with ``value``), reflect, replicate or circular (see the module
    docstring).  dX = pad_grad(X, dOut): each output position's gradient added to the X position
    it read (constant padding reads none).

    >>> import numpy as np, tape, ops
    >>> x = tape.Variable(np.array([[1.0, 2.0, 3.0]], np.float32))
    >>> ops.pad(x, pad=[2, 1], mode="reflect").numpy()
    array([[3., 2., 1., 2., 3., 2.]], dtype=float32)
    """
    mode = attrs["mode"]
    if mode == "constant":
        shape, _ = _infer_pad(attrs, x)
        out = xp.full(shape, attrs["value"], dtype=x.dtype)
        src, dst = _windows(x.shape, attrs["pad"])
        out[dst + (Ellipsis,)] = x[src + (Ellipsis,)]
        return out
    for axis, (before, after) in _pairs(attrs["pad"], x.ndim).items():
        if before or after:
            x = xp.take(x, _source(xp, mode, x.shape[axis], before, after), axis=axis)
    return x


@pad.gradient
def _(g):
    return (apply(pad_grad, (g.inputs[0], g.gouts[0]), g.attrs),)


def _infer_pad_grad(attrs, x, gout):
    shape, _ = _infer_pad(attrs, x)
    if gout.shape != shape:
        raise ShapeError(
            None,
            "Out@GRAD does not have the padded shape",
            expected=f"{shape} (X.shape={x.shape} padded by {attrs['pad']})",
            actual=str(gout.shape),
        )
    return x.shape, result_dtype(x, gout)


@register(
    "pad_grad",
    inputs=("X", "Out@GRAD"),
    attrs=_PAD_ATTRS,
    infer=_infer_pad_grad,
    no_need_buffer=("X",),
)
def pad_grad(xp, attrs, x, gout):
    """Out = Out@GRAD folded back onto X's shape: each element added to the X position its
    output position read (X's values are unused; ``value`` plays no part).

    d(Out@GRAD) = pad(dOut) with value 0 (pad_grad is the adjoint of the linear part of pad).
    """
    mode, dtype = attrs["mode"], np.result_type(x.dtype, gout.dtype)
    if mode == "constant":
        gx = xp.zeros(x.shape, dtype=dtype)
        src, dst = _windows(x.shape, attrs["pad"])
        gx[src + (Ellipsis,)] = gout[dst + (Ellipsis,)]
        return gx
    for axis, (before, after) in _pairs(attrs["pad"], x.ndim).items():
        if before or after:
            n = x.shape[axis]
            shape = gout.shape[:axis] + (n,) + gout.shape[axis + 1 :]
            folded = xp.zeros(shape, dtype=dtype)
            index = (builtins.slice(None),) * axis + (_source(xp, mode, n, before, after),)
            xp.add.at(folded, index, gout)
            gout = folded
    return gout.astype(dtype, copy=False)


@pad_grad.gradient
def _(g):
    from ops.select import _to_input

    return None, _to_input(apply(pad, (g.gouts[0],), dict(g.attrs, value=0.0)), g.inputs[1])
