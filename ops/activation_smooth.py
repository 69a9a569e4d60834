"""Smooth activations: silu (swish), quick_gelu, mish, logsigmoid, softsign, selu and celu.

Each is computed in a form that neither overflows nor loses digits at large |X| (softplus as
max(X, 0) + log1p(exp(-|X|)), expm1 only of min(X, 0)). silu, quick_gelu, mish and celu have a
dedicated ``*_grad`` op that is itself differentiable (its gradient is composed from registered
ops); logsigmoid, softsign and selu compose their gradients from existing ops.
"""

from __future__ import annotations

from ops.activation import _sigmoid as _sigmoid_array
from ops.activation import elu_grad, relu_grad, sigmoid, sigmoid_grad, softplus, tanh
from ops.compose import NO_ATTRS as _NO_ATTRS
from ops.compose import NUMPY_AXIS as _NUMPY
from ops.compose import mul as _mul
from ops.compose import neg as _neg
from ops.compose import scale as _scale
from ops.compose import sub as _sub
from ops.elementwise import elementwise_div, grad_x
from ops.infer import real_float_same as _real_float_same
from ops.infer import result_dtype, same_as_gradient
from ops.registry import Attr, register
from ops.unary import abs as _abs_op
from ops.unary import square
from ops.xp import promote
from tape.errors import DTypeError
from tape.tape import apply

_UNARY = dict(inputs=("X",), infer=_real_float_same, elementwise=True)


def infer_float_grad(attrs, x, gout):
    """For the ``*_grad`` ops here: X and Out@GRAD real floats of one shape; the output has
    their promoted dtype (the kernels compute in it)."""
    same_as_gradient(attrs, x, gout)
    for var, slot in ((x, "X"), (gout, "Out@GRAD")):
        if var.dtype.kind != "f":
            raise DTypeError(
                None,
                f"input {slot} must be real floating point",
                expected="float16, float32 or float64",
                actual=str(var.dtype),
            )
    return gout.shape, result_dtype(x, gout)


def in_dtypes(g, gx, ggout):
    """The gradients of a ``*_grad`` op's X and Out@GRAD, each in its input's dtype."""
    x, gout = g.inputs
    return (None if gx is None else grad_x(gx, x)), (None if ggout is None else grad_x(ggout, gout))


_GRAD = dict(inputs=("X", "Out@GRAD"), infer=infer_float_grad, elementwise=True)
_QUICK_GELU_BETA = 1.702


def _softplus_array(xp, x):
    """log(1 + exp(X)) without overflow."""
    return xp.maximum(x, 0.0) + xp.log1p(xp.exp(-xp.abs(x)))


# ---- silu and quick_gelu: X * sigmoid(beta X) --------------------------------------------------


@register("silu", **_UNARY)
def silu(xp, attrs, x):
    """Out = X * sigmoid(X) (swish).  dX = dOut * s (1 + X (1 - s)), s = sigmoid(X)."""
    return _times(xp, x, _sigmoid_array(xp, x))


def _times(xp, x, s):
    """``x * s`` into ``s``, a temporary of the kernel's own (see ``ops.activation._sigmoid``)."""
    return xp.multiply(x, s, out=s) if s.shape and s.shape == x.shape else x * s


@silu.gradient
def _(g):
    return (apply(silu_grad, (g.inputs[0], g.gouts[0]), {"beta": 1.0}),)


@register("quick_gelu", **_UNARY)
def quick_gelu(xp, attrs, x):
    """Out = X * sigmoid(1.702 X), the sigmoid approximation of gelu (CLIP's QuickGELU).

    dX = dOut * (s + 1.702 X s (1 - s)), s = sigmoid(1.702 X) ('silu_grad' with beta = 1.702).
    """
    return _times(xp, x, _sigmoid_array(xp, x * _QUICK_GELU_BETA))


@quick_gelu.gradient
def _(g):
    return (apply(silu_grad, (g.inputs[0], g.gouts[0]), {"beta": _QUICK_GELU_BETA}),)


@register("silu_grad", attrs={"beta": Attr("float", 1.0)}, **_GRAD)
def silu_grad(xp, attrs, x, gout):
    """X@GRAD = Out@GRAD * (s + beta X s (1 - s)), s = sigmoid(beta X): the gradient of
    X * sigmoid(beta X).

    d(Out@GRAD) = silu_grad(X, dX@GRAD);  dX = dX@GRAD * Out@GRAD * f''(X), with
    f'' = beta s (1 - s) (2 + beta X (1 - 2 s)).
    """
    x, gout = promote(x, gout)
    beta = attrs["beta"]
    bx = x * beta if beta != 1.0 else x
    s = _sigmoid_array(xp, bx)
    if not s.shape or gout.shape != s.shape:
        return gout * (s * (1.0 + bx * (1.0 - s)))
    t = xp.subtract(1.0, s)  # (the formula's ufuncs in order, in one buffer)
    xp.multiply(bx, t, out=t)
    xp.add(1.0, t, out=t)
    xp.multiply(s, t, out=t)
    return xp.multiply(gout, t, out=t)


@silu_grad.gradient
def _(g):
    x, gout = g.inputs
    (ggx,) = g.gouts
    beta = g.attrs["beta"]
    gx = ggout = None
    if g.needs(0):
        bx = _scale(x, beta)
        s = apply(sigmoid, (bx,), _NO_ATTRS)
        shape = _scale(_mul(bx, _scale(s, -2.0, 1.0)), 1.0, 2.0)
        curvature = apply(sigmoid_grad, (s, _mul(_mul(ggx, gout), shape)), _NO_ATTRS)
        gx = _scale(curvature, beta)
    if g.needs(1):
        ggout = apply(silu_grad, (x, ggx), g.attrs)
    return in_dtypes(g, gx, ggout)


# ---- mish --------------------------------------------------------------------------------------


@register("mish", **_UNARY)
def mish(xp, attrs, x):
    """Out = X * tanh(softplus(X)).  dX = dOut * (t + X s (1 - t^2)), t = tanh(softplus(X)),
    s = sigmoid(X) ('mish_grad')."""
    return x * xp.tanh(_softplus_array(xp, x))


@mish.gradient
def _(g):
    return (apply(mish_grad, (g.inputs[0], g.gouts[0]), _NO_ATTRS),)


@register("mish_grad", **_GRAD)
def mish_grad(xp, attrs, x, gout):
    """X@GRAD = Out@GRAD * (t + X s (1 - t^2)), t = tanh(softplus(X)), s = sigmoid(X).

    d(Out@GRAD) = mish_grad(X, dX@GRAD);  dX = dX@GRAD * Out@GRAD * mish''(X), with
    mish'' = (1 - t^2) s (2 + X (1 - s) - 2 X t s).
    """
    x, gout = promote(x, gout)
    t = xp.tanh(_softplus_array(xp, x))
    return gout * (t + x * _sigmoid_array(xp, x) * (1.0 - t * t))


@mish_grad.gradient
def _(g):
    x, gout = g.inputs
    (ggx,) = g.gouts
    gx = ggout = None
    if g.needs(0):
        t = apply(tanh, (apply(softplus, (x,), softplus.defaults),), _NO_ATTRS)
        s = apply(sigmoid, (x,), _NO_ATTRS)
        sech2 = _scale(apply(square, (t,), _NO_ATTRS), -1.0, 1.0)
        bracket = _sub(_mul(x, _scale(s, -1.0, 1.0)), _scale(_mul(_mul(x, t), s), 2.0))
        curvature = _mul(_mul(sech2, s), _scale(bracket, 1.0, 2.0))
        gx = _mul(_mul(ggx, gout), curvature)
    if g.needs(1):
        ggout = apply(mish_grad, (x, ggx), _NO_ATTRS)
    return in_dtypes(g, gx, ggout)


# ---- logsigmoid and softsign: gradients composed -----------------------------------------------


@register("logsigmoid", **_UNARY)
def logsigmoid(xp, attrs, x):
    """Out = log(sigmoid(X)) = min(X, 0) - log1p(exp(-|X|)), finite for every X.

    dX = dOut * sigmoid(-X).
    """
    return xp.minimum(x, 0.0) - xp.log1p(xp.exp(-xp.abs(x)))


@logsigmoid.gradient
def _(g):
    return (_mul(g.gouts[0], apply(sigmoid, (_neg(g.inputs[0]),), _NO_ATTRS)),)


@register("softsign", **_UNARY)
def softsign(xp, attrs, x):
    """Out = X / (1 + |X|).  dX = dOut / (1 + |X|)^2."""
    return x / (1.0 + xp.abs(x))


@softsign.gradient
def _(g):
    denominator = _scale(apply(_abs_op, g.inputs, _NO_ATTRS), 1.0, 1.0)
    return (apply(elementwise_div, (g.gouts[0], apply(square, (denominator,), _NO_ATTRS)), _NUMPY),)


# ---- selu and celu: scaled exponential linear units --------------------------------------------

# PyTorch's constants (Klambauer et al., 2017).
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


@register("selu", **_UNARY)
def selu(xp, attrs, x):
    """Out = scale * (X where X > 0, else alpha (exp(X) - 1)), alpha ~ 1.6733, scale ~ 1.0507.

    dX = scale * elu_grad(X, dOut) with elu's alpha = alpha.
    """
    return SELU_SCALE * xp.where(x > 0, x, SELU_ALPHA * xp.expm1(xp.minimum(x, 0.0)))


@selu.gradient
def _(g):
    slope = apply(elu_grad, (g.inputs[0], g.gouts[0]), {"alpha": SELU_ALPHA})
    return (_scale(slope, SELU_SCALE),)


_CELU_ATTRS = {"alpha": Attr("float", 1.0, check=lambda a: a != 0.0, rule="alpha != 0")}


@register("celu", attrs=_CELU_ATTRS, **_UNARY)
def celu(xp, attrs, x):
    """Out = X where X > 0, else alpha (exp(X / alpha) - 1) (continuous for every alpha).

    dX = dOut where X > 0, else dOut * exp(X / alpha) ('celu_grad').
    """
    alpha = attrs["alpha"]
    return xp.where(x > 0, x, alpha * xp.expm1(xp.minimum(x, 0.0) * (1.0 / alpha)))


@celu.gradient
def _(g):
    return (apply(celu_grad, (g.inputs[0], g.gouts[0]), g.attrs),)


@register("celu_grad", attrs=_CELU_ATTRS, **_GRAD)
def celu_grad(xp, attrs, x, gout):
    """X@GRAD = Out@GRAD where X > 0, else Out@GRAD * exp(X / alpha).

    d(Out@GRAD) = celu_grad(X, dX@GRAD);  dX = P exp(X / alpha) / alpha where X <= 0 (else 0),
    with P = dX@GRAD * Out@GRAD, built as (celu_grad(X, P) - relu_grad(X, P)) / alpha.
    """
    x, gout = promote(x, gout)
    slope = xp.exp(xp.minimum(x, 0.0) * (1.0 / attrs["alpha"]))
    return xp.where(x > 0, gout, gout * slope)


@celu_grad.gradient
def _(g):
    x, gout = g.inputs
    (ggx,) = g.gouts
    gx = ggout = None
    if g.needs(0):
        both = _mul(ggx, gout)
        below = _sub(apply(celu_grad, (x, both), g.attrs), apply(relu_grad, (x, both), _NO_ATTRS))
        gx = _scale(below, 1.0 / g.attrs["alpha"])
    if g.needs(1):
        ggout = apply(celu_grad, (x, ggx), g.attrs)
    return in_dtypes(g, gx, ggout)
