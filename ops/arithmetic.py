"""Binary arithmetic beyond + - * / **: remainder, fmod, floor_divide, copysign and lerp.

All broadcast with numpy's rules (PyTorch's; there is no Paddle ``axis`` here) and promote with
numpy's: the output dtype is ``np.result_type`` of the inputs. ``remainder`` and
``floor_divide`` follow Python's ``%`` and ``//`` (the result of ``%`` has the divisor's sign,
as in PyTorch); ``fmod`` is C's (the dividend's sign). Integer division by zero raises
ZeroDivisionError, as in PyTorch, instead of numpy's silent 0.
"""

from __future__ import annotations

import numpy as np

from ops.compose import NO_ATTRS as _NO_ATTRS
from ops.compose import NUMPY_AXIS as _NUMPY
from ops.compose import mul as _mul
from ops.compose import neg as _neg
from ops.compose import scale as _scale
from ops.compose import sub as _sub
from ops.elementwise import elementwise_div, grad_x
from ops.fill import fill_zeros_like
from ops.infer import broadcast_shapes, result_dtype
from ops.registry import register
from ops.xp import promote
from tape.errors import DTypeError
from tape.tape import apply


def _require(var, slot, kinds, what):
    if var.dtype.kind not in kinds:
        raise DTypeError(None, f"input {slot} must be {what}", expected=what, actual=str(var.dtype))


def infer_float_pair(attrs, x, y):
    """X and Y real floating point; their broadcast shape and promoted dtype."""
    _require(x, "X", "f", "real floating point")
    _require(y, "Y", "f", "real floating point")
    return broadcast_shapes(None, x.shape, y.shape), result_dtype(x, y)


def _infer_division(attrs, x, y):
    """X and Y integers or real floats (not bool, as in PyTorch); broadcast, promoted."""
    _require(x, "X", "iuf", "an integer or real floating-point number")
    _require(y, "Y", "iuf", "an integer or real floating-point number")
    return broadcast_shapes(None, x.shape, y.shape), result_dtype(x, y)


def _integer_divisor(xp, x, y):
    """Raises for an integer division by zero (numpy would warn and return 0)."""
    if x.dtype.kind in "iu" and y.dtype.kind in "iu" and bool((y == 0).any()):
        raise ZeroDivisionError("integer division by zero (input Y has a zero)")


def _zeros_for(g, index):
    return apply(fill_zeros_like, (g.inputs[index],), _NO_ATTRS) if g.needs(index) else None


# ---- division with rounding --------------------------------------------------------------------

_DIVISION = dict(inputs=("X", "Y"), infer=_infer_division, elementwise=True)


@register("remainder", **_DIVISION)
def remainder(xp, attrs, x, y):
    """Out = X - floor(X / Y) * Y: Python's ``%``, with the sign of Y (PyTorch's remainder).

    dX = dOut, dY = -dOut * floor(X / Y).
    """
    _integer_divisor(xp, x, y)
    return xp.remainder(x, y)


@remainder.gradient
def _(g):
    x, y = g.inputs
    (gout,) = g.gouts
    gx = grad_x(gout, x) if g.needs(0) else None
    gy = None
    if g.needs(1):
        quotient = apply(floor_divide, (x, y), _NO_ATTRS)
        gy = grad_x(_neg(_mul(gout, quotient)), y)
    return gx, gy


@register("fmod", **_DIVISION)
def fmod(xp, attrs, x, y):
    """Out = X - trunc(X / Y) * Y: C's fmod, with the sign of X.

    dX = dOut, dY = -dOut * trunc(X / Y).
    """
    _integer_divisor(xp, x, y)
    return xp.fmod(x, y)


@fmod.gradient
def _(g):
    from ops.rounding import trunc

    x, y = g.inputs
    (gout,) = g.gouts
    gx = grad_x(gout, x) if g.needs(0) else None
    gy = None
    if g.needs(1):
        quotient = apply(trunc, (apply(elementwise_div, (x, y), _NUMPY),), _NO_ATTRS)
        gy = grad_x(_neg(_mul(gout, quotient)), y)
    return gx, gy


@register("floor_divide", no_need_buffer=("X", "Y"), **_DIVISION)
def floor_divide(xp, attrs, x, y):
    """Out = floor(X / Y): Python's ``//`` (integers stay integers).

    Piecewise constant: dX = dY = 0 (PyTorch has no gradient for it; zeros, as for floor).
    """
    _integer_divisor(xp, x, y)
    return xp.floor_divide(x, y)


@floor_divide.gradient
def _(g):
    return _zeros_for(g, 0), _zeros_for(g, 1)


# ---- sign transfer and interpolation -----------------------------------------------------------


@register("copysign", inputs=("X", "Y"), infer=infer_float_pair, elementwise=True)
def copysign(xp, attrs, x, y):
    """Out = |X| with the sign of Y (including the sign of -0.0 and of NaNs).

    dX = dOut * sign(X) * sign(Out) (0 at X = 0, as in PyTorch); dY = 0.
    """
    return xp.copysign(x, y)


@copysign.gradient
def _(g):
    from ops.unary import sign

    gx = None
    if g.needs(0):
        (x,), (out,) = g.inputs[:1], g.outputs
        direction = _mul(apply(sign, (x,), _NO_ATTRS), apply(sign, (out,), _NO_ATTRS))
        gx = grad_x(_mul(g.gouts[0], direction), x)
    return gx, _zeros_for(g, 1)


def _infer_lerp(attrs, x, end, weight):
    for var, slot in ((x, "X"), (end, "End"), (weight, "Weight")):
        _require(var, slot, "f", "real floating point")
    shape = broadcast_shapes(None, x.shape, end.shape, "X", "End")
    shape = broadcast_shapes(None, shape, weight.shape, "X and End", "Weight")
    return shape, np.result_type(x.dtype, end.dtype, weight.dtype)


@register("lerp", inputs=("X", "End", "Weight"), infer=_infer_lerp, elementwise=True)
def lerp(xp, attrs, x, end, weight):
    """Out = X + Weight * (End - X), all three broadcast (PyTorch's lerp; Weight may be a number).

    Computed as End - (End - X) * (1 - Weight) where |Weight| >= 0.5, as PyTorch does, so that
    Weight = 1 gives End exactly.  dX = dOut * (1 - Weight), dEnd = dOut * Weight,
    dWeight = dOut * (End - X).
    """
    x, end, weight = promote(x, end, weight)
    diff = end - x
    near_start = xp.abs(weight) < 0.5
    return xp.where(near_start, x + weight * diff, end - diff * (1.0 - weight))


@lerp.gradient
def _(g):
    x, end, weight = g.inputs
    (gout,) = g.gouts
    gx = grad_x(_mul(gout, _scale(weight, -1.0, 1.0)), x) if g.needs(0) else None
    gend = grad_x(_mul(gout, weight), end) if g.needs(1) else None
    gweight = grad_x(_mul(gout, _sub(end, x)), weight) if g.needs(2) else None
    return gx, gend, gweight
