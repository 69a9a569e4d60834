"""Unary elementwise math ops (sign, abs, square, scale, exp, log, sqrt, trigonometry, clip, cast).

Activations live in ``ops.activation`` and erf in ``ops.special``. Where a gradient is cheaper as
one dedicated op (clip reads X) it is a ``*_grad`` op that is itself differentiable, so gradients
of gradients work; the other gradients are compositions of registered ops. Scalars in kernels are
Python floats, so float32 stays float32.
"""

from __future__ import annotations

import math

import numpy as np

from ops import buffers, intra_op
from ops.broadcast_views import broadcast_source
from ops.compose import NO_ATTRS as _NO_ATTRS
from ops.compose import NUMPY_AXIS as _NUMPY
from ops.compose import mul as _mul
from ops.compose import scale as _scale
from ops.elementwise import elementwise_div
from ops.infer import float_same as _float_same
from ops.infer import same_as_gradient as _infer_grad
from ops.infer import same_as_input
from ops.registry import REGISTRY, Attr, register
from ops.xp import promote
from tape.errors import AttrError, DTypeError
from tape.tape import apply

# ---- sign, negation, absolute value, square, scale ----------------------------------------------


@register("neg", inputs=("X",), infer=same_as_input, elementwise=True, no_need_buffer=("X",))
def neg(xp, attrs, x):
    """Out = -X.  dX = -dOut.

    X broadcast from fewer elements (a sum's gradient, ones broadcast to its input's shape) is
    negated where it came from and broadcast again: a subtraction's gradient costs no pass over
    its operand's size (4M float32: 1.3-3 ms a step)."""
    source = broadcast_source(x)
    if source is not None:
        return xp.broadcast_to(xp.negative(source), x.shape)
    if x.nbytes >= buffers.MIN_BYTES and x.dtype.kind == "f":  # (a reused buffer: no page faults)
        return intra_op.ufunc(xp.negative, buffers.like(x), x)
    return -x


@neg.gradient
def _(g):
    return (apply(neg, (g.gouts[0],), _NO_ATTRS),)


@register("sign", inputs=("X",), infer=same_as_input, elementwise=True, no_need_buffer=("X",))
def sign(xp, attrs, x):
    """Out = -1, 0 or 1 as X is negative, zero or positive.  dX = 0 (piecewise constant; zeros,
    as in PyTorch, rather than no gradient at all)."""
    return xp.sign(x)


@sign.gradient
def _(g):
    return (apply(REGISTRY["fill_zeros_like"], (g.gouts[0],), _NO_ATTRS),)


@register("abs", inputs=("X",), infer=same_as_input, elementwise=True)
def abs(xp, attrs, x):  # noqa: A001  (the public name, as in numpy and PyTorch)
    """Out = |X|.  dX = dOut * sign(X) (0 at X = 0, as in PyTorch)."""
    return xp.abs(x)


@abs.gradient
def _(g):
    return (_mul(g.gouts[0], apply(sign, g.inputs, _NO_ATTRS)),)


@register("square", inputs=("X",), infer=same_as_input, elementwise=True)
def square(xp, attrs, x):
    """Out = X * X.  dX = dOut * 2X."""
    return xp.square(x)


@square.gradient
def _(g):
    return (_mul(g.gouts[0], _scale(g.inputs[0], 2.0)),)


@register(
    "scale",
    inputs=("X",),
    attrs={
        "scale": Attr("float", 1.0),
        "bias": Attr("float", 0.0),
        "bias_after_scale": Attr("bool", True),
    },
    infer=same_as_input,
    elementwise=True,
    no_need_buffer=("X",),
)
def scale(xp, attrs, x):
    """Out = scale * X + bias, or scale * (X + bias) when not ``bias_after_scale`` (Paddle).

    dX = scale * dOut. Integer inputs keep their dtype (the result is truncated, as in Paddle).
    """
    factor, bias = attrs["scale"], attrs["bias"]
    if attrs["bias_after_scale"]:
        out = x * factor + bias if bias else x * factor
    else:
        out = (x + bias) * factor if bias else x * factor
    return out if out.dtype == x.dtype else out.astype(x.dtype)


@scale.gradient
def _(g):
    return (_scale(g.gouts[0], g.attrs["scale"]),)


# ---- exponentials, logarithms, roots, trigonometry -----------------------------------------------


@register("exp", inputs=("X",), infer=_float_same, elementwise=True, no_need_buffer=("X",))
def exp(xp, attrs, x):
    """Out = e ** X.  dX = dOut * Out."""
    return xp.exp(x)


@exp.gradient
def _(g):
    return (_mul(g.gouts[0], g.outputs[0]),)


@register("log", inputs=("X",), infer=_float_same, elementwise=True)
def log(xp, attrs, x):
    """Out = ln(X).  dX = dOut / X."""
    return xp.log(x)


@log.gradient
def _(g):
    return (apply(elementwise_div, (g.gouts[0], g.inputs[0]), _NUMPY),)


@register("sqrt", inputs=("X",), infer=_float_same, elementwise=True, no_need_buffer=("X",))
def sqrt(xp, attrs, x):
    """Out = sqrt(X).  dX = dOut / (2 * Out)."""
    return xp.sqrt(x)


@sqrt.gradient
def _(g):
    return (apply(elementwise_div, (_scale(g.gouts[0], 0.5), g.outputs[0]), _NUMPY),)


@register("sin", inputs=("X",), infer=_float_same, elementwise=True)
def sin(xp, attrs, x):
    """Out = sin(X).  dX = dOut * cos(X)."""
    return xp.sin(x)


@sin.gradient
def _(g):
    return (_mul(g.gouts[0], apply(cos, g.inputs, _NO_ATTRS)),)


@register("cos", inputs=("X",), infer=_float_same, elementwise=True)
def cos(xp, attrs, x):
    """Out = cos(X).  dX = -dOut * sin(X)."""
    return xp.cos(x)


@cos.gradient
def _(g):
    return (_mul(g.gouts[0], apply(neg, (apply(sin, g.inputs, _NO_ATTRS),), _NO_ATTRS)),)


_CLIP_ATTRS = {"min": Attr("float", None), "max": Attr("float", None)}


def _infer_clip(attrs, x):
    low, high = attrs["min"], attrs["max"]
    if low is None and high is None:
        raise AttrError(
            None, "attributes 'min' and 'max' are both None", expected="at least one bound"
        )
    if x.dtype.kind not in "iuf":
        raise DTypeError(
            None,
            "input X must hold real numbers",
            expected="an integer or floating-point dtype",
            actual=str(x.dtype),
        )
    return x.shape, x.dtype


@register("clip", inputs=("X",), attrs=_CLIP_ATTRS, infer=_infer_clip, elementwise=True)
def clip(xp, attrs, x):
    """Out = min(max(X, min), max); a bound that is None is not applied. With min > max every
    element is max (as PyTorch and numpy).

    dX = dOut where min <= X <= max, else 0 (bounds included, as in PyTorch) ('clip_grad').
    """
    low, high = attrs["min"], attrs["max"]
    if x.dtype.kind in "iu":
        # An integer lies in [low, high] exactly when it lies in [ceil(low), floor(high)],
        # clamped to the dtype's range so numpy accepts the bounds.
        info = np.iinfo(x.dtype)
        low = None if low is None else min(max(math.ceil(low), info.min), info.max)
        high = None if high is None else max(min(math.floor(high), info.max), info.min)
    return xp.clip(x, low, high)


@clip.gradient
def _(g):
    return (apply(clip_grad, (g.inputs[0], g.gouts[0]), g.attrs),)


@register(
    "clip_grad", inputs=("X", "Out@GRAD"), attrs=_CLIP_ATTRS, infer=_infer_grad, elementwise=True
)
def clip_grad(xp, attrs, x, gout):
    """X@GRAD = Out@GRAD where min <= X <= max, else 0 (also for an infinite Out@GRAD or NaN X).

    d(Out@GRAD) = clip_grad(X, dX@GRAD);  dX = 0 (piecewise constant in X).
    """
    low, high = attrs["min"], attrs["max"]
    x, gout = promote(x, gout)
    inside = None if low is None else x >= low
    if high is not None:
        inside = x <= high if inside is None else inside & (x <= high)
    return gout.copy() if inside is None else xp.where(inside, gout, 0)


@clip_grad.gradient
def _(g):
    return None, apply(clip_grad, (g.inputs[0], g.gouts[0]), g.attrs)


# ---- dtype conversion ------------------------------------------------------------------------


def _infer_cast(attrs, x):
    return x.shape, np.dtype(attrs["out_dtype"])


@register(
    "cast",
    inputs=("X",),
    attrs={"out_dtype": Attr("dtype", required=True)},
    infer=_infer_cast,
    elementwise=True,
    no_need_buffer=("X",),
)
def cast(xp, attrs, x):
    """Out = X converted to ``out_dtype``.  dX = dOut cast back to X's dtype (floats only).

    Out is always a new buffer, even for X's own dtype: an in-place update of X (an optimizer
    step) must never show through Out, nor may a buffer reuse of a dead X overwrite it.
    """
    return x.astype(attrs["out_dtype"])


@cast.gradient
def _(g):
    x = g.inputs[0]
    if x.dtype.kind not in "fc":
        return (None,)
    return (apply(cast, (g.gouts[0],), {"out_dtype": x.dtype.name}),)
