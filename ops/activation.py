"""Activation ops (relu, tanh, sigmoid, leaky_relu, elu, gelu, softplus) and their gradient ops.

Each gradient is one dedicated ``*_grad`` op that is itself differentiable, so gradients of
gradients work: relu, tanh and sigmoid read Out (X's buffer can be freed early), the others read
X. tanh and sigmoid are on the eager hot path: one op forward, one op backward.
"""

from __future__ import annotations

import math

import numpy as np

from ops import buffers, intra_op
from ops.compose import NO_ATTRS as _NO_ATTRS
from ops.compose import NUMPY_AXIS as _NUMPY
from ops.compose import mul as _mul
from ops.compose import scale as _scale
from ops.elementwise import elementwise_sub
from ops.fill import fill_ones_like
from ops.infer import float_same as _float_same
from ops.infer import real_float_same as _real_float_same
from ops.infer import same_as_gradient as _infer_grad
from ops.infer import same_as_input
from ops.registry import Attr, register
from ops.special import erf_array
from ops.unary import exp, square
from ops.xp import promote
from tape.tape import apply

# ---- activations read back from Out: relu, tanh, sigmoid -----------------------------------------


@register("relu", inputs=("X",), infer=same_as_input, elementwise=True, no_need_buffer=("X",))
def relu(xp, attrs, x):
    """Out = max(X, 0) (NaN stays NaN).  dX = dOut where not Out <= 0 (so a NaN input passes
    dOut, as in PyTorch), else 0."""
    if x.nbytes >= buffers.MIN_BYTES and x.dtype.kind == "f":  # (a reused buffer: no page faults)
        return intra_op.ufunc(xp.maximum, buffers.like(x), x, 0)
    return xp.maximum(x, 0)


@relu.gradient
def _(g):
    return (apply(relu_grad, (g.outputs[0], g.gouts[0]), _NO_ATTRS),)


@register("relu_grad", inputs=("Out", "Out@GRAD"), infer=_infer_grad, elementwise=True)
def relu_grad(xp, attrs, out, gout):
    """X@GRAD = Out@GRAD * M, M = not (Out <= 0): 1 where Out > 0 or Out is NaN (PyTorch
    propagates NaN), else 0.  d(Out@GRAD) = dX@GRAD * M; Out gets none.

    The mask is the same read from X, so other gradients use it as ``relu_grad(X, g)`` too. A
    multiply, not a select: an infinite Out@GRAD where Out <= 0 gives NaN (PyTorch: 0), because
    a select (np.where) measured 4-12x slower than the masked product on this hot path.
    """
    out, gout = promote(out, gout)
    if gout.shape == out.shape and gout.nbytes >= buffers.MIN_BYTES:  # (no page faults)
        mask = buffers.empty(xp, out.shape, bool)
        return intra_op.run(_relu_grad_steps, buffers.like(gout), xp, out, gout, mask, passes=3)
    keep = out <= 0
    if not keep.shape:
        return gout * ~keep
    mask = xp.invert(keep, out=keep)  # (in its own buffer: one temporary fewer, see _sigmoid)
    return gout * mask


def _relu_grad_steps(result, xp, out, gout, mask):
    """relu_grad's ufuncs into given buffers (``intra_op`` runs it on row chunks)."""
    xp.less_equal(out, 0, out=mask)
    xp.invert(mask, out=mask)
    xp.multiply(gout, mask, out=result)


@relu_grad.gradient
def _(g):
    out, _ = g.inputs
    return None, apply(relu_grad, (out, g.gouts[0]), _NO_ATTRS)


@register("tanh", inputs=("X",), infer=_float_same, elementwise=True, no_need_buffer=("X",))
def tanh(xp, attrs, x):
    """Out = tanh(X).  dX = dOut * (1 - Out^2), one 'tanh_grad' op."""
    if x.nbytes >= buffers.MIN_BYTES and x.dtype.kind == "f":  # (a reused buffer: no page faults)
        return intra_op.ufunc(xp.tanh, buffers.like(x), x)
    return xp.tanh(x)


@tanh.gradient
def _(g):
    return (apply(tanh_grad, (g.outputs[0], g.gouts[0]), _NO_ATTRS),)


@register("tanh_grad", inputs=("Out", "Out@GRAD"), infer=_infer_grad, elementwise=True)
def tanh_grad(xp, attrs, out, gout):
    """X@GRAD = Out@GRAD * (1 - Out^2).

    d(Out) = -2 * dX@GRAD * Out@GRAD * Out;  d(Out@GRAD) = tanh_grad(Out, dX@GRAD).
    """
    out, gout = promote(out, gout)
    if out.nbytes >= buffers.MIN_BYTES and gout.shape == out.shape:  # (no page faults)
        return intra_op.run(_tanh_grad_steps, buffers.like(out), xp, out, gout, passes=3)
    square = out * out
    if not square.shape or gout.shape != square.shape:
        return gout * (1.0 - square)
    xp.subtract(1.0, square, out=square)  # (the expression's ufuncs, one buffer: see _sigmoid)
    return xp.multiply(gout, square, out=square)


def _tanh_grad_steps(result, xp, out, gout):
    """tanh_grad's ufuncs in one buffer (``intra_op`` runs it on row chunks)."""
    xp.multiply(out, out, out=result)
    xp.subtract(1.0, result, out=result)
    xp.multiply(gout, result, out=result)


@tanh_grad.gradient
def _(g):
    out, gout = g.inputs
    (ggx,) = g.gouts
    gout_of_out = _scale(_mul(_mul(ggx, gout), out), -2.0) if g.needs(0) else None
    ggout = apply(tanh_grad, (out, ggx), _NO_ATTRS) if g.needs(1) else None
    return gout_of_out, ggout


def _sigmoid(xp, x):
    """1 / (1 + exp(-X)), with exp's overflow (X below about -88 in float32) not reported: it
    gives 1 / inf = 0, as the sigmoid's value rounds there anyway.

    (A clamp of exp's argument before, to silence the overflow, was a fifth of a large
    sigmoid's time: np.minimum, fmin and clip on 4M float32 each take as long as exp. The
    errstate block costs ~1-2 us a call instead, which shows only on small arrays; a clamp kept
    for those would make the value below -88 depend on the array's size.)
    """
    if x.nbytes >= buffers.MIN_BYTES:  # (no page faults; threads for the largest)
        return intra_op.run(_sigmoid_steps, buffers.like(x), xp, x, passes=4)
    t = xp.negative(x)
    with np.errstate(over="ignore"):
        if not t.shape:  # (a 0-d result may be a numpy scalar: no buffer to write into)
            return 1.0 / (1.0 + xp.exp(t))
        # The same ufuncs on the same operands as the expression, into one buffer: each fresh
        # temporary of a large array costs the kernel's page faults (4M float32: 6.7 -> 3.8 ms).
        xp.exp(t, out=t)
    xp.add(1.0, t, out=t)
    return xp.true_divide(1.0, t, out=t)


def _sigmoid_steps(t, xp, x):
    """``_sigmoid``'s ufuncs into ``t`` (``intra_op`` runs it on row chunks)."""
    xp.negative(x, out=t)
    with np.errstate(over="ignore"):
        xp.exp(t, out=t)
    xp.add(1.0, t, out=t)
    xp.true_divide(1.0, t, out=t)


@register("sigmoid", inputs=("X",), infer=_real_float_same, elementwise=True, no_need_buffer=("X",))
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
    out, gout = promote(out, gout)
    if out.nbytes >= buffers.MIN_BYTES and gout.shape == out.shape:  # (no page faults)
        rest = buffers.like(out)
        return intra_op.run(_sigmoid_grad_steps, buffers.like(out), xp, gout, out, rest, passes=3)
    scaled = gout * out
    if not scaled.shape:
        return scaled * (1.0 - out)
    return xp.multiply(scaled, xp.subtract(1.0, out), out=scaled)  # (one buffer fewer)


def _sigmoid_grad_steps(scaled, xp, gout, out, rest):
    """sigmoid_grad's ufuncs into given buffers (``intra_op`` runs it on row chunks)."""
    xp.multiply(gout, out, out=scaled)
    xp.subtract(1.0, out, out=rest)
    xp.multiply(scaled, rest, out=scaled)


@sigmoid_grad.gradient
def _(g):
    out, gout = g.inputs
    (ggx,) = g.gouts
    gout_of_out = _mul(_mul(ggx, gout), _scale(out, -2.0, 1.0)) if g.needs(0) else None
    ggout = apply(sigmoid_grad, (out, ggx), _NO_ATTRS) if g.needs(1) else None
    return gout_of_out, ggout


# ---- activations whose gradient reads X: leaky_relu, elu, gelu, softplus, clip -------------------


@register(
    "leaky_relu",
    inputs=("X",),
    attrs={"alpha": Attr("float", 0.01)},
    infer=_real_float_same,
    elementwise=True,
)
def leaky_relu(xp, attrs, x):
    """Out = X where X > 0, else alpha * X (PyTorch's default alpha = 0.01).

    dX = dOut where X > 0, else alpha * dOut ('leaky_relu_grad').
    """
    return xp.where(x > 0, x, x * attrs["alpha"])


@leaky_relu.gradient
def _(g):
    return (apply(leaky_relu_grad, (g.inputs[0], g.gouts[0]), g.attrs),)


@register(
    "leaky_relu_grad",
    inputs=("X", "Out@GRAD"),
    attrs={"alpha": Attr("float", 0.01)},
    infer=_infer_grad,
    elementwise=True,
)
def leaky_relu_grad(xp, attrs, x, gout):
    """X@GRAD = Out@GRAD where X > 0, else alpha * Out@GRAD.

    Linear in Out@GRAD and piecewise constant in X: d(Out@GRAD) = leaky_relu_grad(X, dX@GRAD),
    dX = 0.
    """
    x, gout = promote(x, gout)
    return xp.where(x > 0, gout, gout * attrs["alpha"])


@leaky_relu_grad.gradient
def _(g):
    return None, apply(leaky_relu_grad, (g.inputs[0], g.gouts[0]), g.attrs)


@register(
    "elu",
    inputs=("X",),
    attrs={"alpha": Attr("float", 1.0)},
    infer=_real_float_same,
    elementwise=True,
)
def elu(xp, attrs, x):
    """Out = X where X > 0, else alpha * (exp(X) - 1).

    dX = dOut where X > 0, else dOut * alpha * exp(X) ('elu_grad').
    """
    # exp only of min(X, 0): the branch not taken must not overflow either.
    return xp.where(x > 0, x, attrs["alpha"] * xp.expm1(xp.minimum(x, 0.0)))


@elu.gradient
def _(g):
    return (apply(elu_grad, (g.inputs[0], g.gouts[0]), g.attrs),)


@register(
    "elu_grad",
    inputs=("X", "Out@GRAD"),
    attrs={"alpha": Attr("float", 1.0)},
    infer=_infer_grad,
    elementwise=True,
)
def elu_grad(xp, attrs, x, gout):
    """X@GRAD = Out@GRAD where X > 0, else Out@GRAD * alpha * exp(X).

    d(Out@GRAD) = elu_grad(X, dX@GRAD);  dX = P * alpha * exp(X) where X <= 0 (else 0), with
    P = dX@GRAD * Out@GRAD, built as elu_grad(X, P) - relu_grad(X, P).
    """
    x, gout = promote(x, gout)
    return xp.where(x > 0, gout, gout * (attrs["alpha"] * xp.exp(xp.minimum(x, 0.0))))


@elu_grad.gradient
def _(g):
    x, gout = g.inputs
    (ggx,) = g.gouts
    gx = ggout = None
    if g.needs(0):
        both = _mul(ggx, gout)
        gx = apply(
            elementwise_sub,
            (apply(elu_grad, (x, both), g.attrs), apply(relu_grad, (x, both), _NO_ATTRS)),
            _NUMPY,
        )
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


@register(
    "gelu",
    inputs=("X",),
    attrs={"approximate": Attr("bool", False)},
    infer=_real_float_same,
    elementwise=True,
)
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


@register(
    "gelu_grad",
    inputs=("X", "Out@GRAD"),
    attrs={"approximate": Attr("bool", False)},
    infer=_infer_grad,
    elementwise=True,
)
def gelu_grad(xp, attrs, x, gout):
    """X@GRAD = Out@GRAD * gelu'(X): Phi(X) + X phi(X), or for the tanh form, with
    T = tanh(U), U = C (X + K X^3): (1 + T) / 2 + X (1 - T^2) C (1 + 3 K X^2) / 2.

    d(Out@GRAD) = gelu_grad(X, dX@GRAD);  dX = dX@GRAD * Out@GRAD * gelu''(X), where gelu'' is
    phi(X) (2 - X^2), or (1 - T^2) (C + 6 C K X^2 - X T (C + 3 C K X^2)^2) for the tanh form.
    """
    x, gout = promote(x, gout)
    sq = x * x
    if attrs["approximate"]:
        t = xp.tanh(x * (sq * (_TANH_C * _TANH_K) + _TANH_C))
        slope = 0.5 * (1.0 + t) + (0.5 * x) * (1.0 - t * t) * (
            sq * (3.0 * _TANH_C * _TANH_K) + _TANH_C
        )
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
    inner = apply(
        elementwise_sub, (_scale(sq, 6.0 * ck, _TANH_C), _mul(_mul(x, t), slope_u)), _NUMPY
    )
    return _mul(_scale(apply(square, (t,), _NO_ATTRS), -1.0, 1.0), inner)


_SOFTPLUS_ATTRS = {
    "beta": Attr("float", 1.0, check=lambda beta: beta != 0.0, rule="beta != 0"),
    "threshold": Attr("float", 20.0),
}


@register(
    "softplus", inputs=("X",), attrs=_SOFTPLUS_ATTRS, infer=_real_float_same, elementwise=True
)
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


@register(
    "softplus_grad",
    inputs=("X", "Out@GRAD"),
    attrs=_SOFTPLUS_ATTRS,
    infer=_infer_grad,
    elementwise=True,
)
def softplus_grad(xp, attrs, x, gout):
    """X@GRAD = Out@GRAD * H(X), H(X) = sigmoid(beta X), or 1 where beta X > threshold.

    d(Out@GRAD) = softplus_grad(X, dX@GRAD);  dX = dX@GRAD * Out@GRAD * beta H (1 - H), since
    H' = beta H (1 - H) on both sides of the threshold (built from 'sigmoid_grad').
    """
    x, gout = promote(x, gout)
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
