"""Piecewise-linear and gated activations: hardtanh, relu6, hardsigmoid, hardswish, prelu, glu.

The kinks follow PyTorch exactly: hardtanh, relu6 and hardsigmoid pass the gradient only strictly
inside their linear piece (0 at the bounds), hardswish's slope is 0 at X <= -3 and 1 at X >= 3,
prelu's slope at 0 is its weight. prelu has a learnable weight per channel (axis 1); glu halves
its input along ``dim``. Gradients are differentiable again.
"""

from __future__ import annotations

from ops.activation import _sigmoid as _sigmoid_array
from ops.activation import relu_grad, sigmoid, sigmoid_grad
from ops.activation_smooth import in_dtypes, infer_float_grad
from ops.compose import NO_ATTRS as _NO_ATTRS
from ops.compose import mul as _mul
from ops.compose import scale as _scale
from ops.compose import sub as _sub
from ops.elementwise import grad_x
from ops.infer import normalize_axis, real_float_same, result_dtype
from ops.registry import Attr, register
from ops.shape import concat, reshape, split
from ops.xp import promote
from tape.errors import AttrError, DTypeError, ShapeError
from tape.tape import apply

_HARDTANH_ATTRS = {"min_val": Attr("float", -1.0), "max_val": Attr("float", 1.0)}
_UNIT = {"min_val": -3.0, "max_val": 3.0}  # hardsigmoid's and hardswish's linear piece
_RELU6 = {"min_val": 0.0, "max_val": 6.0}


def _infer_hardtanh(attrs, x):
    if attrs["min_val"] > attrs["max_val"]:
        raise AttrError(
            None,
            "attribute 'min_val' is greater than 'max_val'",
            expected="min_val <= max_val",
            actual=f"min_val={attrs['min_val']}, max_val={attrs['max_val']}",
        )
    return real_float_same(attrs, x)


@register("hardtanh", inputs=("X",), attrs=_HARDTANH_ATTRS, infer=_infer_hardtanh, elementwise=True)
def hardtanh(xp, attrs, x):
    """Out = min(max(X, min_val), max_val).

    dX = dOut where min_val < X < max_val, else 0 (0 at the bounds, as in PyTorch; 'clip'
    passes it there) ('hardtanh_grad').
    """
    return xp.clip(x, attrs["min_val"], attrs["max_val"])


@hardtanh.gradient
def _(g):
    return (apply(hardtanh_grad, (g.inputs[0], g.gouts[0]), g.attrs),)


@register(
    "hardtanh_grad",
    inputs=("X", "Out@GRAD"),
    attrs=_HARDTANH_ATTRS,
    infer=infer_float_grad,
    elementwise=True,
)
def hardtanh_grad(xp, attrs, x, gout):
    """X@GRAD = Out@GRAD where min_val < X < max_val, else 0.

    Linear in Out@GRAD, piecewise constant in X: d(Out@GRAD) = hardtanh_grad(X, dX@GRAD), dX = 0.
    """
    x, gout = promote(x, gout)
    return gout * ((x > attrs["min_val"]) & (x < attrs["max_val"]))


@hardtanh_grad.gradient
def _(g):
    return in_dtypes(g, None, apply(hardtanh_grad, (g.inputs[0], g.gouts[0]), g.attrs))


@register("relu6", inputs=("X",), infer=real_float_same, elementwise=True)
def relu6(xp, attrs, x):
    """Out = min(max(X, 0), 6) (hardtanh(X, 0, 6)).  dX = dOut where 0 < X < 6, else 0."""
    return xp.clip(x, 0.0, 6.0)


@relu6.gradient
def _(g):
    return (apply(hardtanh_grad, (g.inputs[0], g.gouts[0]), _RELU6),)


@register("hardsigmoid", inputs=("X",), infer=real_float_same, elementwise=True)
def hardsigmoid(xp, attrs, x):
    """Out = min(max(X + 3, 0), 6) / 6.  dX = dOut / 6 where -3 < X < 3, else 0."""
    return xp.clip(x + 3.0, 0.0, 6.0) / 6.0


@hardsigmoid.gradient
def _(g):
    return (_scale(apply(hardtanh_grad, (g.inputs[0], g.gouts[0]), _UNIT), 1.0 / 6.0),)


@register("hardswish", inputs=("X",), infer=real_float_same, elementwise=True)
def hardswish(xp, attrs, x):
    """Out = X * min(max(X + 3, 0), 6) / 6.

    dX = 0 where X <= -3, dOut * (X / 3 + 1/2) where -3 < X < 3, dOut where X >= 3
    ('hardswish_grad'; PyTorch's values at the kinks).
    """
    return x * xp.clip(x + 3.0, 0.0, 6.0) / 6.0


@hardswish.gradient
def _(g):
    return (apply(hardswish_grad, (g.inputs[0], g.gouts[0]), _NO_ATTRS),)


@register("hardswish_grad", inputs=("X", "Out@GRAD"), infer=infer_float_grad, elementwise=True)
def hardswish_grad(xp, attrs, x, gout):
    """X@GRAD = 0 where X <= -3, Out@GRAD (X / 3 + 1/2) where -3 < X < 3, Out@GRAD where X >= 3.

    d(Out@GRAD) = hardswish_grad(X, dX@GRAD);  dX = dX@GRAD * Out@GRAD / 3 where -3 < X < 3,
    else 0 (PyTorch's double backward).
    """
    x, gout = promote(x, gout)
    slope = xp.where(x < 3.0, x * (1.0 / 3.0) + 0.5, 1.0)
    return xp.where(x <= -3.0, 0.0, gout * slope)


@hardswish_grad.gradient
def _(g):
    x, gout = g.inputs
    (ggx,) = g.gouts
    gx = ggout = None
    if g.needs(0):
        gx = _scale(apply(hardtanh_grad, (x, _mul(ggx, gout)), _UNIT), 1.0 / 3.0)
    if g.needs(1):
        ggout = apply(hardswish_grad, (x, ggx), _NO_ATTRS)
    return in_dtypes(g, gx, ggout)


# ---- prelu: a learnable negative slope per channel ---------------------------------------------


def _weight_layout(x_shape, weight_shape):
    """The shape the weight broadcasts as: () for one weight, (C, 1, ...) for one per channel."""
    if weight_shape in ((), (1,)):
        return ()
    return (weight_shape[0],) + (1,) * (len(x_shape) - 2)


def _infer_prelu(attrs, x, weight):
    for var, slot in ((x, "X"), (weight, "Weight")):
        if var.dtype.kind != "f":
            raise DTypeError(
                None,
                f"input {slot} must be real floating point",
                expected="float16, float32 or float64",
                actual=str(var.dtype),
            )
    channels = x.shape[1] if len(x.shape) >= 2 else 1
    if len(weight.shape) > 1 or (weight.shape not in ((), (1,)) and weight.shape[0] != channels):
        raise ShapeError(
            None,
            "input Weight must hold one value, or one per channel (X's axis 1)",
            expected=f"Weight.shape == (1,) or ({channels},)",
            actual=f"X.shape={x.shape}, Weight.shape={weight.shape}",
        )
    return x.shape, result_dtype(x, weight)


@register("prelu", inputs=("X", "Weight"), infer=_infer_prelu)
def prelu(xp, attrs, x, weight):
    """Out = X where X > 0, else Weight * X, Weight broadcast along X's axis 1 (the channels;
    a single weight applies everywhere), as PyTorch's prelu.

    dX = dOut where X > 0, else Weight * dOut;  dWeight = sum of dOut * X where X <= 0, over
    every axis but the channel axis.
    """
    slope = weight.reshape(_weight_layout(x.shape, weight.shape))
    return xp.where(x > 0, x, slope * x)


@prelu.gradient
def _(g):
    x, weight = g.inputs
    (gout,) = g.gouts
    layout = _weight_layout(x.shape, weight.shape)
    slope = weight if weight.shape == layout else apply(reshape, (weight,), {"shape": layout})
    below = _sub(gout, apply(relu_grad, (x, gout), _NO_ATTRS))  # dOut where X <= 0
    gx = gweight = None
    if g.needs(0):
        gx = grad_x(_sub(gout, _mul(_scale(slope, -1.0, 1.0), below)), x)
    if g.needs(1):
        gweight = grad_x(_mul(below, x), slope)
        if gweight.shape != weight.shape:
            gweight = apply(reshape, (gweight,), {"shape": weight.shape})
    return gx, gweight


# ---- glu: gated linear unit --------------------------------------------------------------------


def _infer_glu(attrs, x):
    real_float_same(attrs, x)
    if not x.shape:
        raise ShapeError(None, "a 0-d X cannot be halved", expected="X with at least one axis")
    axis = normalize_axis(None, attrs["dim"], len(x.shape), "dim")
    if x.shape[axis] % 2:
        raise ShapeError(
            None,
            f"X's extent along dim {attrs['dim']} must be even to split it in halves",
            expected=f"X.shape[{attrs['dim']}] even",
            actual=f"X.shape={x.shape}",
        )
    return x.shape[:axis] + (x.shape[axis] // 2,) + x.shape[axis + 1 :], x.dtype


@register("glu", inputs=("X",), attrs={"dim": Attr("int", -1)}, infer=_infer_glu)
def glu(xp, attrs, x):
    """Out = A * sigmoid(B), where A and B are the first and second halves of X along ``dim``.

    dA = dOut * sigmoid(B), dB = dOut * A * s (1 - s) with s = sigmoid(B); dX = concat(dA, dB).
    """
    first, second = xp.split(x, 2, axis=attrs["dim"])
    return first * _sigmoid_array(xp, second)


@glu.gradient
def _(g):
    (x,), (gout,) = g.inputs, g.gouts
    axis = g.attrs["dim"] % len(x.shape)
    first, second = apply(split, (x,), {"num": 2, "sections": (), "axis": axis})
    gate = apply(sigmoid, (second,), _NO_ATTRS)
    gfirst = _mul(gout, gate)
    gsecond = apply(sigmoid_grad, (gate, _mul(gout, first)), _NO_ATTRS)
    return (apply(concat, ([gfirst, gsecond],), {"axis": axis}),)
