"""Neural-network ops: softmax and log-softmax (with differentiable gradient ops) and one-hot.

The losses built on them live in ``ops.loss``.

Kernels are written for few array passes (the softmax cross-entropy step of an MLP must cost no
more than careful hand-written numpy): intermediates are updated in place and the gradient ops
read the saved Softmax instead of recomputing it.
"""

from __future__ import annotations

import numpy as np

from ops.compose import mul as _mul
from ops.compose import neg as _neg
from ops.compose import sub as _sub
from ops.compose import sum_keep as _sum_keep
from ops.infer import normalize_axis, require_float, result_dtype
from ops.registry import REGISTRY, Attr, register
from ops.xp import promote
from tape.errors import DTypeError, ShapeError
from tape.tape import apply


def _infer_float_axis(attrs, x, *rest):
    require_float(None, x, "X")
    normalize_axis(None, attrs["axis"], len(x.shape))
    return x.shape, x.dtype


def _infer_axis_grad(attrs, out, gout):
    if out.shape != gout.shape:
        raise ShapeError(
            None, "Out@GRAD must have Out's shape", expected=str(out.shape), actual=str(gout.shape)
        )
    shape, _ = _infer_float_axis(attrs, gout)
    return shape, result_dtype(out, gout)


_AXIS = {"axis": Attr("int", -1)}


@register("softmax", inputs=("X",), attrs=_AXIS, infer=_infer_float_axis, no_need_buffer=("X",))
def softmax(xp, attrs, x):
    """Out = exp(X - max) / sum(exp(X - max)) along ``axis`` (shifted by the max for stability).

    dX = Out * (dOut - sum(dOut * Out, axis)), by the op ``softmax_grad`` (reads Out only).
    """
    if x.size == 0:
        return x.copy()
    if x.ndim == 0:  # axis 0 or -1 of a scalar: one element along it
        return softmax.kernel(xp, attrs, x.reshape(1)).reshape(())
    out = x - x.max(axis=attrs["axis"], keepdims=True)
    xp.exp(out, out=out)
    out /= out.sum(axis=attrs["axis"], keepdims=True)
    return out


@softmax.gradient
def _(g):
    return (apply(softmax_grad, (g.outputs[0], g.gouts[0]), g.attrs),)


@register("softmax_grad", inputs=("Out", "Out@GRAD"), attrs=_AXIS, infer=_infer_axis_grad)
def softmax_grad(xp, attrs, out, gout):
    """X@GRAD = Out * (G - sum(G * Out, axis)) with G = Out@GRAD.

    Its gradient along H (the gradient of X@GRAD): dG = softmax_grad(Out, H) and
    dOut = H * (G - sum(G * Out)) - sum(H * Out) * G.
    """
    out, gout = promote(out, gout)
    if out.ndim == 0:
        return softmax_grad.kernel(xp, attrs, out.reshape(1), gout.reshape(1)).reshape(())
    gx = out * gout
    total = gx.sum(axis=attrs["axis"], keepdims=True)
    xp.subtract(gout, total, out=gx)
    gx *= out
    return gx


@softmax_grad.gradient
def _(g):
    (out, gout), (hess,) = g.inputs, g.gouts
    axis = g.attrs["axis"]
    d_out = d_gout = None
    if g.needs(0):
        centered = _sub(gout, _sum_keep(_mul(gout, out), axis))
        d_out = _sub(_mul(hess, centered), _mul(_sum_keep(_mul(hess, out), axis), gout))
    if g.needs(1):
        d_gout = apply(softmax_grad, (out, hess), g.attrs)
    return d_out, d_gout


@register("log_softmax", inputs=("X",), attrs=_AXIS, infer=_infer_float_axis, no_need_buffer=("X",))
def log_softmax(xp, attrs, x):
    """Out = X - max - log(sum(exp(X - max))) along ``axis``.

    dX = dOut - exp(Out) * sum(dOut, axis), by the op ``log_softmax_grad`` (reads Out only).
    """
    if x.size == 0:
        return x.copy()
    if x.ndim == 0:
        return log_softmax.kernel(xp, attrs, x.reshape(1)).reshape(())
    out = x - x.max(axis=attrs["axis"], keepdims=True)
    out -= xp.log(xp.exp(out).sum(axis=attrs["axis"], keepdims=True))
    return out


@log_softmax.gradient
def _(g):
    return (apply(log_softmax_grad, (g.outputs[0], g.gouts[0]), g.attrs),)


@register("log_softmax_grad", inputs=("Out", "Out@GRAD"), attrs=_AXIS, infer=_infer_axis_grad)
def log_softmax_grad(xp, attrs, out, gout):
    """X@GRAD = G - exp(Out) * sum(G, axis) with G = Out@GRAD.

    Its gradient along H: dG = H - sum(H * exp(Out), axis), dOut = -H * exp(Out) * sum(G, axis).
    """
    out, gout = promote(out, gout)
    if out.ndim == 0:
        return log_softmax_grad.kernel(xp, attrs, out.reshape(1), gout.reshape(1)).reshape(())
    gx = xp.exp(out)
    gx *= gout.sum(axis=attrs["axis"], keepdims=True)
    return xp.subtract(gout, gx, out=gx)


@log_softmax_grad.gradient
def _(g):
    (out, gout), (hess,) = g.inputs, g.gouts
    axis = g.attrs["axis"]
    prob = apply(REGISTRY["exp"], (out,), {})
    d_out = d_gout = None
    if g.needs(0):
        d_out = _neg(_mul(_mul(hess, prob), _sum_keep(gout, axis)))
    if g.needs(1):
        d_gout = _sub(hess, _sum_keep(_mul(hess, prob), axis))
    return d_out, d_gout


def _infer_one_hot(attrs, x):
    if x.dtype.kind not in "iu":
        raise DTypeError(
            None,
            "input X must hold integer class indices",
            expected="an integer dtype",
            actual=str(x.dtype),
        )
    return tuple(x.shape) + (attrs["depth"],), np.dtype(attrs["dtype"])


@register(
    "one_hot",
    inputs=("X",),
    attrs={
        "depth": Attr("int", required=True, check=lambda v: v >= 1, rule=">= 1"),
        "dtype": Attr("dtype", "float32"),
    },
    infer=_infer_one_hot,
    differentiable=False,
)
def one_hot(xp, attrs, x):
    """Out[..., k] = 1 where X[...] == k, else 0; a new last axis of size ``depth`` (as PyTorch's
    one_hot and Paddle's one_hot_v2). Indices outside [0, depth) are an error. Not differentiable.
    """
    depth = attrs["depth"]
    check_classes(xp, x, depth)
    out = xp.zeros(x.shape + (depth,), dtype=attrs["dtype"])
    xp.put_along_axis(out, x[..., None], 1, axis=-1)
    return out


def check_classes(xp, index, classes):
    """Raises when an integer class index lies outside [0, classes) (seen only at run time)."""
    if index.size and (int(index.min()) < 0 or int(index.max()) >= classes):
        bad = index[(index < 0) | (index >= classes)].reshape(-1)[0]
        raise ValueError(f"class index {int(bad)} is outside [0, {classes})")
