"""Trigonometric and hyperbolic ops beyond sin/cos: tan, asin, acos, atan, atan2, sinh, cosh,
asinh, acosh, atanh.

Every gradient is a composition of registered ops (so it can be differentiated again) and uses
PyTorch's formulas, including its values at the domain edges (asin'(1) = inf) and its choice
of 0 for both gradients of atan2 at the origin. Inputs must be real floating point.
"""

from __future__ import annotations

from ops.arithmetic import infer_float_pair
from ops.compose import NO_ATTRS as _NO_ATTRS
from ops.compose import NUMPY_AXIS as _NUMPY
from ops.compose import mul as _mul
from ops.compose import neg as _neg
from ops.compose import scale as _scale
from ops.elementwise import elementwise_add, elementwise_div, grad_x
from ops.infer import real_float_same as _real_float_same
from ops.registry import register
from ops.unary import sqrt, square
from tape.tape import apply

_UNARY = dict(inputs=("X",), infer=_real_float_same, elementwise=True)


def _div(x, y):
    return apply(elementwise_div, (x, y), _NUMPY)


def _square(x):
    return apply(square, (x,), _NO_ATTRS)


def _sqrt(x):
    return apply(sqrt, (x,), _NO_ATTRS)


# ---- circular functions ------------------------------------------------------------------------


@register("tan", no_need_buffer=("X",), **_UNARY)
def tan(xp, attrs, x):
    """Out = tan(X).  dX = dOut * (1 + Out^2)."""
    return xp.tan(x)


@tan.gradient
def _(g):
    return (_mul(g.gouts[0], _scale(_square(g.outputs[0]), 1.0, 1.0)),)


@register("asin", **_UNARY)
def asin(xp, attrs, x):
    """Out = arcsin(X) in [-pi/2, pi/2] (NaN outside [-1, 1]).  dX = dOut / sqrt(1 - X^2)."""
    return xp.arcsin(x)


@asin.gradient
def _(g):
    return (_div(g.gouts[0], _sqrt(_scale(_square(g.inputs[0]), -1.0, 1.0))),)


@register("acos", **_UNARY)
def acos(xp, attrs, x):
    """Out = arccos(X) in [0, pi] (NaN outside [-1, 1]).  dX = -dOut / sqrt(1 - X^2)."""
    return xp.arccos(x)


@acos.gradient
def _(g):
    return (_div(_neg(g.gouts[0]), _sqrt(_scale(_square(g.inputs[0]), -1.0, 1.0))),)


@register("atan", **_UNARY)
def atan(xp, attrs, x):
    """Out = arctan(X) in (-pi/2, pi/2).  dX = dOut / (1 + X^2)."""
    return xp.arctan(x)


@atan.gradient
def _(g):
    return (_div(g.gouts[0], _scale(_square(g.inputs[0]), 1.0, 1.0)),)


@register("atan2", inputs=("X", "Y"), infer=infer_float_pair, elementwise=True)
def atan2(xp, attrs, x, y):
    """Out = atan2(X, Y): the angle of the point (Y, X), in [-pi, pi] (PyTorch's and numpy's
    argument order: X is the ordinate). X and Y broadcast.

    With R = X^2 + Y^2: dX = dOut * Y / R, dY = -dOut * X / R, both 0 where R == 0 (PyTorch).
    """
    return xp.arctan2(x, y)


@atan2.gradient
def _(g):
    from ops.compare import equal
    from ops.unary import cast
    from tape.constants import constant

    x, y = g.inputs
    (gout,) = g.gouts
    radius = apply(elementwise_add, (_square(x), _square(y)), _NUMPY)
    # Where R == 0 both numerators are 0 too: dividing by 1 there gives PyTorch's zeros.
    at_origin = apply(equal, (radius, constant(0, radius)), _NUMPY)
    radius = apply(
        elementwise_add,
        (radius, apply(cast, (at_origin,), {"out_dtype": radius.dtype.name})),
        _NUMPY,
    )
    scaled = _div(gout, radius)
    gx = grad_x(_mul(scaled, y), x) if g.needs(0) else None
    gy = grad_x(_neg(_mul(scaled, x)), y) if g.needs(1) else None
    return gx, gy


# ---- hyperbolic functions ----------------------------------------------------------------------


@register("sinh", **_UNARY)
def sinh(xp, attrs, x):
    """Out = sinh(X).  dX = dOut * cosh(X)."""
    return xp.sinh(x)


@sinh.gradient
def _(g):
    return (_mul(g.gouts[0], apply(cosh, g.inputs, _NO_ATTRS)),)


@register("cosh", **_UNARY)
def cosh(xp, attrs, x):
    """Out = cosh(X).  dX = dOut * sinh(X)."""
    return xp.cosh(x)


@cosh.gradient
def _(g):
    return (_mul(g.gouts[0], apply(sinh, g.inputs, _NO_ATTRS)),)


@register("asinh", **_UNARY)
def asinh(xp, attrs, x):
    """Out = arsinh(X).  dX = dOut / sqrt(X^2 + 1)."""
    return xp.arcsinh(x)


@asinh.gradient
def _(g):
    return (_div(g.gouts[0], _sqrt(_scale(_square(g.inputs[0]), 1.0, 1.0))),)


@register("acosh", **_UNARY)
def acosh(xp, attrs, x):
    """Out = arcosh(X) (NaN below 1).  dX = dOut / sqrt(X^2 - 1)."""
    return xp.arccosh(x)


@acosh.gradient
def _(g):
    return (_div(g.gouts[0], _sqrt(_scale(_square(g.inputs[0]), 1.0, -1.0))),)


@register("atanh", **_UNARY)
def atanh(xp, attrs, x):
    """Out = artanh(X) (+-inf at +-1, NaN beyond).  dX = dOut / (1 - X^2)."""
    return xp.arctanh(x)


@atanh.gradient
def _(g):
    return (_div(g.gouts[0], _scale(_square(g.inputs[0]), -1.0, 1.0)),)
