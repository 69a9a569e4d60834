"""Unary elementwise ops (activations and math functions) and their gradient ops.

Where a gradient is cheaper as one dedicated op (tanh, sigmoid and relu read Out, so X's buffer
can be freed early; leaky_relu, elu, gelu, softplus and clip read X) it is a ``*_grad`` op that is
itself differentiable, so gradients of gradients work. The other gradients are compositions of
registered ops. Scalars in kernels are Python floats, so float32 stays float32.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.polynomial import chebyshev

from ops.elementwise import elementwise_div, elementwise_mul, elementwise_sub
from ops.fill import fill_ones_like
from ops.infer import require_float, same_as_input
from ops.registry import Attr, register
from tape.errors import AttrError, DTypeError, ShapeError
from tape.tape import apply

_NUMPY = {"axis": -1}
_NO_ATTRS = {}


def _float_same(attrs, x, *rest):
    require_float(None, x)
    return x.shape, x.dtype


def _real_float_same(attrs, x, *rest):
    """For kernels that compare or clamp values: real floating point only."""
    if x.dtype.kind != "f":
        raise DTypeError(None, "input X must be real floating point",
                         expected="float16, float32 or float64", actual=str(x.dtype))
    return x.shape, x.dtype


def _infer_grad(attrs, forward, gout):
    """X@GRAD takes Out@GRAD's shape and dtype; the forward tensor read must match its shape."""
    if forward.shape != gout.shape:
        raise ShapeError(None, "Out@GRAD must have the shape of the forward tensor",
                         expected=str(forward.shape), actual=str(gout.shape))
    return gout.shape, gout.dtype


def _mul(a, b):
    return apply(elementwise_mul, (a, b), _NUMPY)


def _scale(x, factor, bias=0.0):
    """factor * x + bias, as one 'scale' op."""
    return apply(scale, (x,), {"scale": factor, "bias": bias, "bias_after_scale": True})


# ---- sign, negation, absolute value, square, scale ----------------------------------------------


@register("neg", inputs=("X",), infer=same_as_input, elementwise=True, no_need_buffer=("X",))
def neg(xp, attrs, x):
    """Out = -X.  dX = -dOut."""
    return -x


@neg.gradient
def _(g):
    return (apply(neg, (g.gouts[0],), _NO_ATTRS),)


@register("sign", inputs=("X",), infer=same_as_input, elementwise=True, differentiable=False)
def sign(xp, attrs, x):
    """Out = -1, 0 or 1 as X is negative, zero or positive.  Piecewise constant: no gradient."""
    return xp.sign(x)


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


@register("scale", inputs=("X",), attrs={
    "scale": Attr("float", 1.0),
    "bias": Attr("float", 0.0),
    "bias_after_scale": Attr("bool", True),
}, infer=same_as_input, elementwise=True, no_need_buffer=("X",))
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


# ---- erf --------------------------------------------------------------------------------------
# numpy has no erf. For |x| <= 2, erf(x) = x * P(x^2); for |x| > 2, erf(x) = 1 - exp(-x^2) Q(|x|)
# (for |x| > 6, erfc(x) < 2e-17 and the result rounds to +-1). P and Q are Chebyshev
# interpolants of erf(x)/x in x^2 over [0, 4] and of erfc(x) exp(x^2) over [2, 6], computed in
# 50-digit arithmetic (mpmath). They are converted once to powers of the shifted variable for
# Horner's rule (2 in-place array passes per term); both sums of |coefficients| are below 1.2, so
# the conversion costs no accuracy. Measured: within 3 ulp of erf in float64; float32 and float16
# drop the terms below 1e-8 and compute in their own precision, within 3.2 ulp in float32.

_ERF_SMALL = (
    0.7415552820424018, -0.30107107338659495, 0.06899483068983156, -0.013916271264722188,
    0.0024207995224334636, -0.0003658639685848086, 4.862098443231905e-05,
    -5.749256558035685e-06, 6.113243578434765e-07, -5.8991015312958435e-08,
    5.2070090920686485e-09, -4.2329758799655433e-10, 3.188113506649175e-11,
    -2.2361550188326843e-12, 1.467329847991085e-13, -9.044001985381747e-15,
    5.254813715470919e-16, -2.8874261222848885e-17, 1.5047851875416895e-18,
    -7.457289238838174e-20,
)
_ERF_LARGE = (
    0.15454893254411423, -0.07674006034821483, 0.01849487416970198, -0.004337233595514166,
    0.0009916839077238056, -0.00022144890703087983, 4.836760032122529e-05,
    -1.034609832664543e-05, 2.1698719431920526e-06, -4.4664937548784355e-07,
    9.031674382673662e-08, -1.7955339488870227e-08, 3.5120800624763815e-09,
    -6.763532420163472e-10, 1.2831846446281685e-10, -2.3997023709710495e-11,
    4.425938010116778e-12, -8.05458382717957e-13, 1.4469907391153018e-13,
    -2.56717117805375e-14, 4.499661122153122e-15, -7.794693798871283e-16, 1.33491391133828e-16,
)


def _power_series(cheb, tol):
    """Power-basis coefficients of a Chebyshev series, without the tail summing below ``tol``."""
    n = len(cheb)
    while n > 1 and sum(math.fabs(c) for c in cheb[n - 1:]) < tol:
        n -= 1
    return tuple(float(c) for c in chebyshev.cheb2poly(cheb[:n]))


_ERF_SERIES = {
    "double": (_power_series(_ERF_SMALL, 0.0), _power_series(_ERF_LARGE, 0.0)),
    "single": (_power_series(_ERF_SMALL, 1e-8), _power_series(_ERF_LARGE, 1e-8)),
}


def _horner(xp, coeffs, t):
    out = xp.full_like(t, coeffs[-1])
    for c in coeffs[-2::-1]:
        out *= t
        out += c
    return out


def erf_array(xp, x):
    """erf of a real float array, elementwise, computed in X's dtype."""
    small, large = _ERF_SERIES["double" if x.dtype == np.float64 else "single"]
    flat = x.reshape(-1)  # 1-d, so that the in-place updates also work for 0-d inputs
    magnitude = xp.abs(flat)
    t = xp.minimum(magnitude, 2.0)  # clamped before squaring: no overflow for huge inputs
    t *= t
    t *= 0.5
    t -= 1.0
    out = _horner(xp, small, t)
    out *= flat
    far = magnitude > 2.0
    if far.any():
        x_far = flat[far]
        ax = xp.minimum(magnitude[far], 6.0)
        tail = xp.exp(-(ax * ax))
        tail *= _horner(xp, large, (ax - 4.0) * 0.5)
        out[far] = xp.copysign(1.0 - tail, x_far)
    return out.reshape(x.shape)


@register("erf", inputs=("X",), infer=_real_float_same, elementwise=True)
def erf(xp, attrs, x):
    """Out = erf(X) = 2/sqrt(pi) * integral_0^X exp(-t^2) dt.  dX = dOut * 2/sqrt(pi) exp(-X^2)."""
    return erf_array(xp, x)


@erf.gradient
def _(g):
    (x,), (gout,) = g.inputs, g.gouts
    bell = apply(exp, (_scale(apply(square, (x,), _NO_ATTRS), -1.0),), _NO_ATTRS)
    return (_mul(gout, _scale(bell, 2.0 / math.sqrt(math.pi))),)


# ---- activations read back from Out: relu, tanh, sigmoid -----------------------------------------


@register("relu", inputs=("X",), infer=same_as_input, elementwise=True, no_need_buffer=("X",))
def relu(xp, attrs, x):
    """Out = max(X, 0).  dX = dOut * (Out > 0)."""
    return xp.maximum(x, 0)


@relu.gradient
def _(g):
    return (apply(relu_grad, (g.outputs[0], g.gouts[0]), _NO_ATTRS),)


@register("relu_grad", inputs=("Out", "Out@GRAD"), infer=_infer_grad, elementwise=True)
def relu_grad(xp, attrs, out, gout):
    """X@GRAD = Out@GRAD * (Out > 0).  d(Out@GRAD) = dX@GRAD * (Out > 0); Out gets none.

    The mask is the same read from X, so other gradients use it as ``relu_grad(X, g)`` too.
    """
    return gout * (out > 0)


@relu_grad.gradient
def _(g):
    out, _ = g.inputs
    return None, apply(relu_grad, (out, g.gouts[0]), _NO_ATTRS)


@register("tanh", inputs=("X",), infer=_float_same, elementwise=True, no_need_buffer=("X",))
def tanh(xp, attrs, x):
    """Out = tanh(X).  dX = dOut * (1 - Out^2), one 'tanh_grad' op."""
    return xp.tanh(x)


@tanh.gradient
def _(g):
    return (apply(tanh_grad, (g.outputs[0], g.gouts[0]), _NO_ATTRS),)


@register("tanh_grad", inputs=("Out", "Out@GRAD"), infer=_infer_grad, elementwise=True)
def tanh_grad(xp, attrs, out, gout):
    """X@GRAD = Out@GRAD * (1 - Out^2).

    d(Out) = -2 * dX@GRAD * Out@GRAD * Out;  d(Out@GRAD) = tanh_grad(Out, dX@GRAD).
    """
    return gout * (1.0 - out * out)


@tanh_grad.gradient
def _(g):
    out, gout = g.inputs
    (ggx,) = g.gouts
    gout_of_out = _scale(_mul(_mul(ggx, gout), out), -2.0) if g.needs(0) else None
    ggout = apply(tanh_grad, (out, ggx), _NO_ATTRS) if g.needs(1) else None
    return gout_of_out, ggout


_EXP_LIMITS = {}


def _sigmoid(xp, x):
    """1 / (1 + exp(-X)) without overflow warnings.

    exp(-X) is clamped where it would overflow; that changes the result only where it is
    below the dtype's smallest normal number.
    """
    limit = _EXP_LIMITS.get(x.dtype)
    if limit is None:
        limit = _EXP_LIMITS[x.dtype] = math.floor(math.log(float(np.finfo(x.dtype).max)))
    return 1.0 / (1.0 + xp.exp(xp.minimum(-x, limit)))


@register("sigmoid", inputs=("X",), infer=_real_float_same, elementwise=True,
          no_need_buffer=("X",))
def sigmoid(xp, attrs, x):
    """Out = 1 / (1 + exp(-X)).  dX = dOut * Out * (1 - Out), one 'sigmoid_grad' op."""
    return _sigmoid(xp, x)


@sigmoid.gradient
def _(g):
    return (apply(sigmoid_grad, (g.outputs[0], g.gouts[0]), _NO_ATTRS),)


@register("sigmoid_grad", inputs=("Out", "Out@GRAD"), infer=_infer_grad, elementwise=True)
def sigmoid_grad(xp, attrs, out, gout):
    """X@GRAD = Out@GRAD * Out * (1 - Out).

    d(Out) = dX@GRAD * Out@GRAD * (1 - 2 Out);  d(Out@GRAD) = sigmoid_grad(Out, dX@GRAD).
    """
    return gout * out * (1.0 - out)


@sigmoid_grad.gradient
def _(g):
    out, gout = g.inputs
    (ggx,) = g.gouts
    gout_of_out = _mul(_mul(ggx, gout), _scale(out, -2.0, 1.0)) if g.needs(0) else None
    ggout = apply(sigmoid_grad, (out, ggx), _NO_ATTRS) if g.needs(1) else None
    return gout_of_out, ggout


# ---- activations whose gradient reads X: leaky_relu, elu, gelu, softplus, clip -------------------


@register("leaky_relu", inputs=("X",), attrs={"alpha": Attr("float", 0.01)},
          infer=_real_float_same, elementwise=True)
def leaky_relu(xp, attrs, x):
    """Out = X where X > 0, else alpha * X (PyTorch's default alpha = 0.01).

    dX = dOut where X > 0, else alpha * dOut ('leaky_relu_grad').
    """
    return xp.where(x > 0, x, x * attrs["alpha"])


@leaky_relu.gradient
def _(g):
    return (apply(leaky_relu_grad, (g.inputs[0], g.gouts[0]), g.attrs),)


@register("leaky_relu_grad", inputs=("X", "Out@GRAD"), attrs={"alpha": Attr("float", 0.01)},
          infer=_infer_grad, elementwise=True)
def leaky_relu_grad(xp, attrs, x, gout):
    """X@GRAD = Out@GRAD where X > 0, else alpha * Out@GRAD.

    Linear in Out@GRAD and piecewise constant in X: d(Out@GRAD) = leaky_relu_grad(X, dX@GRAD),
    dX = 0.
    """
    return xp.where(x > 0, gout, gout * attrs["alpha"])


@leaky_relu_grad.gradient
def _(g):
    return None, apply(leaky_relu_grad, (g.inputs[0], g.gouts[0]), g.attrs)


@register("elu", inputs=("X",), attrs={"alpha": Attr("float", 1.0)}, infer=_real_float_same,
          elementwise=True)
def elu(xp, attrs, x):
    """Out = X where X > 0, else alpha * (exp(X) - 1).

    dX = dOut where X > 0, else dOut * alpha * exp(X) ('elu_grad').
    """
    # exp only of min(X, 0): the branch not taken must not overflow either.
    return xp.where(x > 0, x, attrs["alpha"] * xp.expm1(xp.minimum(x, 0.0)))


@elu.gradient
def _(g):
    return (apply(elu_grad, (g.inputs[0], g.gouts[0]), g.attrs),)


@register("elu_grad", inputs=("X", "Out@GRAD"), attrs={"alpha": Attr("float", 1.0)},
          infer=_infer_grad, elementwise=True)
def elu_grad(xp, attrs, x, gout):
    """X@GRAD = Out@GRAD where X > 0, else Out@GRAD * alpha * exp(X).

    d(Out@GRAD) = elu_grad(X, dX@GRAD);  dX = P * alpha * exp(X) where X <= 0 (else 0), with
    P = dX@GRAD * Out@GRAD, built as elu_grad(X, P) - relu_grad(X, P).
    """
    return xp.where(x > 0, gout, gout * (attrs["alpha"] * xp.exp(xp.minimum(x, 0.0))))


@elu_grad.gradient
def _(g):
    x, gout = g.inputs
    (ggx,) = g.gouts
    gx = ggout = None
    if g.needs(0):
        both = _mul(ggx, gout)
        gx = apply(elementwise_sub, (apply(elu_grad, (x, both), g.attrs),
                                     apply(relu_grad, (x, both), _NO_ATTRS)), _NUMPY)
    if g.needs(1):
        ggout = apply(elu_grad, (x, ggx), g.attrs)
    return gx, ggout


_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
# The tanh form: Phi(x) ~ (1 + tanh(C (x + K x^3))) / 2.
_TANH_C = math.sqrt(2.0 / math.pi)
_TANH_K = 0.044715


def _normal_cdf(xp, x):
    cdf = erf_array(xp, x * _SQRT_HALF)
    cdf += 1.0
    cdf *= 0.5
    return cdf


@register("gelu", inputs=("X",), attrs={"approximate": Attr("bool", False)},
          infer=_real_float_same, elementwise=True)
def gelu(xp, attrs, x):
    """Out = X * Phi(X), Phi the standard normal CDF (exact, via erf), as in PyTorch.

    With ``approximate``, Phi(X) ~ (1 + tanh(sqrt(2/pi) (X + 0.044715 X^3))) / 2.
    dX = dOut * (Phi(X) + X * phi(X)), phi the normal density, or the tanh form's derivative
    ('gelu_grad').
    """
    if attrs["approximate"]:
        sq = x * x
        half = xp.tanh(x * (sq * (_TANH_C * _TANH_K) + _TANH_C))
        half += 1.0
        half *= 0.5
        return x * half
    return x * _normal_cdf(xp, x)


@gelu.gradient
def _(g):
    return (apply(gelu_grad, (g.inputs[0], g.gouts[0]), g.attrs),)


@register("gelu_grad", inputs=("X", "Out@GRAD"), attrs={"approximate": Attr("bool", False)},
          infer=_infer_grad, elementwise=True)
def gelu_grad(xp, attrs, x, gout):
    """X@GRAD = Out@GRAD * gelu'(X): Phi(X) + X phi(X), or for the tanh form, with
    T = tanh(U), U = C (X + K X^3): (1 + T) / 2 + X (1 - T^2) C (1 + 3 K X^2) / 2.

    d(Out@GRAD) = gelu_grad(X, dX@GRAD);  dX = dX@GRAD * Out@GRAD * gelu''(X), where gelu'' is
    phi(X) (2 - X^2), or (1 - T^2) (C + 6 C K X^2 - X T (C + 3 C K X^2)^2) for the tanh form.
    """
    sq = x * x
    if attrs["approximate"]:
        t = xp.tanh(x * (sq * (_TANH_C * _TANH_K) + _TANH_C))
        slope = 0.5 * (1.0 + t) + (0.5 * x) * (1.0 - t * t) * (sq * (3.0 * _TANH_C * _TANH_K)
                                                               + _TANH_C)
    else:
        slope = _normal_cdf(xp, x) + x * (xp.exp(sq * -0.5) * _INV_SQRT_2PI)
    return gout * slope


@gelu_grad.gradient
def _(g):
    x, gout = g.inputs
    (ggx,) = g.gouts
    gx = ggout = None
    if g.needs(0):
        gx = _mul(_mul(ggx, gout), _gelu_curvature(x, g.attrs["approximate"]))
    if g.needs(1):
        ggout = apply(gelu_grad, (x, ggx), g.attrs)
    return gx, ggout


def _gelu_curvature(x, approximate):
    """gelu''(X) from registered (differentiable) ops; see gelu_grad's docstring."""
    sq = apply(square, (x,), _NO_ATTRS)
    if not approximate:
        density = _scale(apply(exp, (_scale(sq, -0.5),), _NO_ATTRS), _INV_SQRT_2PI)
        return _mul(density, _scale(sq, -1.0, 2.0))
    ck = _TANH_C * _TANH_K
    t = apply(tanh, (_mul(x, _scale(sq, ck, _TANH_C)),), _NO_ATTRS)
    slope_u = apply(square, (_scale(sq, 3.0 * ck, _TANH_C),), _NO_ATTRS)
    inner = apply(elementwise_sub, (_scale(sq, 6.0 * ck, _TANH_C), _mul(_mul(x, t), slope_u)),
                  _NUMPY)
    return _mul(_scale(apply(square, (t,), _NO_ATTRS), -1.0, 1.0), inner)


_SOFTPLUS_ATTRS = {
    "beta": Attr("float", 1.0, check=lambda beta: beta != 0.0, rule="beta != 0"),
    "threshold": Attr("float", 20.0),
}


@register("softplus", inputs=("X",), attrs=_SOFTPLUS_ATTRS, infer=_real_float_same,
          elementwise=True)
def softplus(xp, attrs, x):
    """Out = log(1 + exp(beta X)) / beta, and X itself where beta X > threshold (PyTorch).

    dX = dOut * sigmoid(beta X), and dOut where beta X > threshold ('softplus_grad').
    """
    beta = attrs["beta"]
    z = x * beta if beta != 1.0 else x
    # log(1 + exp(z)) = max(z, 0) + log1p(exp(-|z|)), which never overflows.
    soft = xp.maximum(z, 0.0) + xp.log1p(xp.exp(-xp.abs(z)))
    if beta != 1.0:
        soft = soft / beta
    return xp.where(z > attrs["threshold"], x, soft)


@softplus.gradient
def _(g):
    return (apply(softplus_grad, (g.inputs[0], g.gouts[0]), g.attrs),)


@register("softplus_grad", inputs=("X", "Out@GRAD"), attrs=_SOFTPLUS_ATTRS, infer=_infer_grad,
          elementwise=True)
def softplus_grad(xp, attrs, x, gout):
    """X@GRAD = Out@GRAD * H(X), H(X) = sigmoid(beta X), or 1 where beta X > threshold.

    d(Out@GRAD) = softplus_grad(X, dX@GRAD);  dX = dX@GRAD * Out@GRAD * beta H (1 - H), since
    H' = beta H (1 - H) on both sides of the threshold (built from 'sigmoid_grad').
    """
    z = x * attrs["beta"] if attrs["beta"] != 1.0 else x
    return xp.where(z > attrs["threshold"], gout, gout * _sigmoid(xp, z))


@softplus_grad.gradient
def _(g):
    x, gout = g.inputs
    (ggx,) = g.gouts
    gx = ggout = None
    if g.needs(0):
        slope = apply(softplus_grad, (x, apply(fill_ones_like, (x,), _NO_ATTRS)), g.attrs)
        gx = _scale(apply(sigmoid_grad, (slope, _mul(ggx, gout)), _NO_ATTRS), g.attrs["beta"])
    if g.needs(1):
        ggout = apply(softplus_grad, (x, ggx), g.attrs)
    return gx, ggout


_CLIP_ATTRS = {"min": Attr("float", None), "max": Attr("float", None)}


def _infer_clip(attrs, x):
    low, high = attrs["min"], attrs["max"]
    if low is None and high is None:
        raise AttrError(None, "attributes 'min' and 'max' are both None",
                        expected="at least one bound")
    if low is not None and high is not None and low > high:
        raise AttrError(None, "attribute 'min' is greater than 'max'", expected="min <= max",
                        actual=f"min={low}, max={high}")
    if x.dtype.kind not in "iuf":
        raise DTypeError(None, "input X must hold real numbers",
                         expected="an integer or floating-point dtype", actual=str(x.dtype))
    return x.shape, x.dtype


@register("clip", inputs=("X",), attrs=_CLIP_ATTRS, infer=_infer_clip, elementwise=True)
def clip(xp, attrs, x):
    """Out = min(max(X, min), max); a bound that is None is not applied.

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


@register("clip_grad", inputs=("X", "Out@GRAD"), attrs=_CLIP_ATTRS, infer=_infer_grad,
          elementwise=True)
def clip_grad(xp, attrs, x, gout):
    """X@GRAD = Out@GRAD where min <= X <= max, else 0.

    d(Out@GRAD) = clip_grad(X, dX@GRAD);  dX = 0 (piecewise constant in X).
    """
    low, high = attrs["min"], attrs["max"]
    inside = None if low is None else x >= low
    if high is not None:
        inside = x <= high if inside is None else inside & (x <= high)
    return gout.copy() if inside is None else gout * inside


@clip_grad.gradient
def _(g):
    return None, apply(clip_grad, (g.inputs[0], g.gouts[0]), g.attrs)


# ---- dtype conversion ------------------------------------------------------------------------


def _infer_cast(attrs, x):
    return x.shape, np.dtype(attrs["out_dtype"])


@register("cast", inputs=("X",), attrs={"out_dtype": Attr("dtype", required=True)},
          infer=_infer_cast, elementwise=True, no_need_buffer=("X",))
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
