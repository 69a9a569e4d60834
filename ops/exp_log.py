"""Exponentials, logarithms and powers beyond exp/log/sqrt: exp2, expm1, log2, log10, log1p,
rsqrt, reciprocal.

expm1 and log1p are the accurate forms near 0 (exp(x) - 1 and log(1 + x) lose every digit
there). Gradients are compositions of registered ops with PyTorch's formulas; those that read
only Out let X's buffer go early. Inputs must be real floating point.
"""

from __future__ import annotations

import math

from ops.compose import NO_ATTRS as _NO_ATTRS
from ops.compose import NUMPY_AXIS as _NUMPY
from ops.compose import mul as _mul
from ops.compose import scale as _scale
from ops.elementwise import elementwise_div
from ops.infer import real_float_same as _real_float_same
from ops.registry import register
from ops.unary import square
from tape.tape import apply

_UNARY = dict(inputs=("X",), infer=_real_float_same, elementwise=True)
_FROM_OUT = dict(no_need_buffer=("X",), **_UNARY)
_LN2 = math.log(2.0)
_LN10 = math.log(10.0)


def _div(x, y):
    return apply(elementwise_div, (x, y), _NUMPY)


@register("exp2", **_FROM_OUT)
def exp2(xp, attrs, x):
    """Out = 2 ** X.  dX = dOut * Out * ln 2."""
    return xp.exp2(x)


@exp2.gradient
def _(g):
    return (_mul(g.gouts[0], _scale(g.outputs[0], _LN2)),)


@register("expm1", **_FROM_OUT)
def expm1(xp, attrs, x):
    """Out = exp(X) - 1, accurate for small X.  dX = dOut * (Out + 1)."""
    return xp.expm1(x)


@expm1.gradient
def _(g):
    return (_mul(g.gouts[0], _scale(g.outputs[0], 1.0, 1.0)),)


@register("log2", **_UNARY)
def log2(xp, attrs, x):
    """Out = log2(X).  dX = dOut / (X ln 2)."""
    return xp.log2(x)


@log2.gradient
def _(g):
    return (_div(g.gouts[0], _scale(g.inputs[0], _LN2)),)


@register("log10", **_UNARY)
def log10(xp, attrs, x):
    """Out = log10(X).  dX = dOut / (X ln 10)."""
    return xp.log10(x)


@log10.gradient
def _(g):
    return (_div(g.gouts[0], _scale(g.inputs[0], _LN10)),)


@register("log1p", **_UNARY)
def log1p(xp, attrs, x):
    """Out = log(1 + X), accurate for small X.  dX = dOut / (1 + X)."""
    return xp.log1p(x)


@log1p.gradient
def _(g):
    return (_div(g.gouts[0], _scale(g.inputs[0], 1.0, 1.0)),)


@register("rsqrt", **_FROM_OUT)
def rsqrt(xp, attrs, x):
    """Out = 1 / sqrt(X).  dX = -dOut * Out^3 / 2."""
    return xp.reciprocal(xp.sqrt(x))


@rsqrt.gradient
def _(g):
    (out,) = g.outputs
    return (_mul(g.gouts[0], _scale(_mul(out, apply(square, (out,), _NO_ATTRS)), -0.5)),)


@register("reciprocal", **_FROM_OUT)
def reciprocal(xp, attrs, x):
    """Out = 1 / X.  dX = -dOut * Out^2."""
    return xp.reciprocal(x)


@reciprocal.gradient
def _(g):
    return (_mul(g.gouts[0], _scale(apply(square, g.outputs, _NO_ATTRS), -1.0)),)
