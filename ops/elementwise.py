"""Binary elementwise ops with numpy broadcasting and Paddle's ``axis`` attribute.

``axis=-1`` is numpy broadcasting. Any other ``axis`` aligns Y's dimensions with X's starting
there (Paddle): X (N, C, H, W) + Y (C,) with ``axis=1`` adds Y along C. Gradients reduce a
broadcast gradient back to each input's shape with the shared ``reduce.sum_to`` helper.
"""

from __future__ import annotations

import numpy as np

from ops import buffers, intra_op
from ops.broadcast_views import times_one
from ops.compose import NUMPY_AXIS as _NUMPY
from ops.infer import align_y, broadcast_shapes, result_dtype
from ops.reduce import sum_to
from ops.registry import Attr, register
from tape.errors import ShapeError
from tape.tape import apply

_AXIS = {"axis": Attr("int", -1)}


def infer_binary(attrs, x, y):
    """Broadcast shape of X and (aligned) Y; numpy's promotion of their dtypes."""
    shape, dtype = x.shape, x.dtype
    if shape == y.shape and dtype is y.dtype and attrs["axis"] == -1:
        return shape, dtype  # (the common case: a fifth of an op's recording spared)
    return broadcast_shapes(None, shape, _aligned_shape(x, y, attrs["axis"])), result_dtype(x, y)


def _aligned_shape(x, y, axis):
    if axis == -1:
        return y.shape
    if not 0 <= axis <= len(x.shape) - len(y.shape):
        raise ShapeError(
            None,
            "attribute 'axis' does not place Y inside X",
            expected=f"0 <= axis <= X.ndim - Y.ndim = {len(x.shape) - len(y.shape)}",
            actual=f"axis={axis}, X.shape={x.shape}, Y.shape={y.shape}",
        )
    for i, dim in enumerate(y.shape):
        if dim != 1 and dim != x.shape[axis + i]:
            raise ShapeError(
                None,
                "Y does not match X's dimensions at 'axis'",
                expected=f"Y.shape == X.shape[{axis}:{axis + len(y.shape)}] (or 1s)",
                actual=f"X.shape={x.shape}, Y.shape={y.shape}",
            )
    return align_y(x.shape, y.shape, axis)


def aligned(x, y, attrs):
    """Y reshaped for numpy broadcasting against X under Paddle's ``axis`` rule. (The
    arithmetic kernels test the default axis first: a call per op spared on the hot path.)"""
    axis = attrs["axis"]
    if axis == -1 or y.ndim >= x.ndim:
        return y
    return y.reshape(align_y(x.shape, y.shape, axis))


def grad_x(g, x):
    """Reduces a gradient of the output to X's shape (backward casts it to X's dtype)."""
    return g if g.shape == x.shape else sum_to(g, x.shape)  # (the test first: a call spared)


def grad_y(g, x, y, attrs):
    """Reduces a gradient of the output to Y's shape, undoing Paddle's alignment."""
    if g.shape == y.shape:
        return g
    axis = attrs["axis"]
    if axis == -1 or len(y.shape) >= len(x.shape):
        return sum_to(g, y.shape)
    from ops.shape import reshape

    return reshape(sum_to(g, align_y(x.shape, y.shape, axis)), shape=y.shape)


_FACTS = dict(
    inputs=("X", "Y"), outputs=("Out",), attrs=_AXIS, infer=infer_binary, elementwise=True
)


@register("elementwise_add", no_need_buffer=("X", "Y"), **_FACTS)
def elementwise_add(xp, attrs, x, y):
    """Out = X + Y.  dX = dOut, dY = dOut (each summed back to its input's shape)."""
    y = y if attrs["axis"] == -1 else aligned(x, y, attrs)
    if x.nbytes >= buffers.MIN_BYTES and (out := buffers.binary_out(x, y)) is not None:
        return intra_op.ufunc(xp.add, out, x, y)  # (a reused buffer: no page faults)
    return x + y


@elementwise_add.gradient
def _(g):
    x, y = g.inputs
    (gout,) = g.gouts
    gx = grad_x(gout, x) if x.requires_grad else None  # (Variables: what g.needs tests)
    gy = grad_y(gout, x, y, g.attrs) if y.requires_grad else None
    return gx, gy


@register("elementwise_sub", no_need_buffer=("X", "Y"), **_FACTS)
def elementwise_sub(xp, attrs, x, y):
    """Out = X - Y.  dX = dOut, dY = -dOut."""
    y = y if attrs["axis"] == -1 else aligned(x, y, attrs)
    if x.nbytes >= buffers.MIN_BYTES and (out := buffers.binary_out(x, y)) is not None:
        return intra_op.ufunc(xp.subtract, out, x, y)  # (a reused buffer: no page faults)
    return x - y


@elementwise_sub.gradient
def _(g):
    from ops.unary import neg

    x, y = g.inputs
    (gout,) = g.gouts
    gx = grad_x(gout, x) if g.needs(0) else None
    gy = neg(grad_y(gout, x, y, g.attrs)) if g.needs(1) else None
    return gx, gy


@register("elementwise_mul", **_FACTS)
def elementwise_mul(xp, attrs, x, y):
    """Out = X * Y.  dX = dOut * Y, dY = dOut * X.

    A factor that is ones broadcast (a sum's gradient reaching a product) gives the other
    factor itself, as a read-only view (``ops.broadcast_views.times_one``)."""
    y = y if attrs["axis"] == -1 else aligned(x, y, attrs)
    if (x.nbytes >= buffers.MIN_BYTES or y.nbytes >= buffers.MIN_BYTES) and (
        same := times_one(x, y)
    ) is not None:
        return same
    if x.nbytes >= buffers.MIN_BYTES and (out := buffers.binary_out(x, y)) is not None:
        return intra_op.ufunc(xp.multiply, out, x, y)  # (a reused buffer: no page faults)
    return x * y


@elementwise_mul.gradient
def _(g):
    x, y = g.inputs
    (gout,) = g.gouts
    gx = grad_x(apply(elementwise_mul, (gout, y), g.attrs), x) if x.requires_grad else None
    gy = (
        grad_y(apply(elementwise_mul, (gout, x), _NUMPY), x, y, g.attrs)
        if y.requires_grad
        else None
    )
    return gx, gy


def _infer_div(attrs, x, y):
    """True division, as numpy: integers (and bools) divided by integers give float64."""
    shape, dtype = infer_binary(attrs, x, y)
    return shape, (_FLOAT64 if dtype.kind in "biu" else dtype)


_FLOAT64 = np.dtype(np.float64)


@register("elementwise_div", **{**_FACTS, "infer": _infer_div})
def elementwise_div(xp, attrs, x, y):
    """Out = X / Y (true division).  dX = dOut / Y, dY = -dOut * Out / Y."""
    return x / (y if attrs["axis"] == -1 else aligned(x, y, attrs))


@elementwise_div.gradient
def _(g):
    x, y = g.inputs
    (out,), (gout,) = g.outputs, g.gouts
    gx = grad_x(apply(elementwise_div, (gout, y), g.attrs), x) if g.needs(0) else None
    gy = None
    if g.needs(1):
        from ops.unary import neg

        gy = apply(elementwise_div, (apply(elementwise_mul, (gout, out), _NUMPY), y), g.attrs)
        gy = neg(grad_y(gy, x, y, g.attrs))
    return gx, gy


@register("elementwise_pow", **_FACTS)
def elementwise_pow(xp, attrs, x, y):
    """Out = X ** Y.  dX = dOut * Y * X ** (Y - 1), 0 where Y == 0; dY = dOut * Out * log(X),
    0 where X == 0 and Y >= 0 (PyTorch's rules: no 0 * inf at X = 0; dY is -inf for Y < 0)."""
    return x ** aligned(x, y, attrs)


@elementwise_pow.gradient
def _(g):
    from ops.compare import equal, greater_equal
    from ops.select import where
    from ops.unary import cast, log

    x, y = g.inputs
    (out,), (gout,) = g.outputs, g.gouts
    ya = _numpy_aligned(x, y, g.attrs)
    gx = gy = None
    if g.needs(0):
        slope = _mul(apply(elementwise_pow, (x, _sub(ya, _const(1, ya))), _NUMPY), ya)
        slope = where(equal(ya, _const(0, ya)), _const(0, slope), slope)
        gx = grad_x(_mul(gout, slope), x)
    if g.needs(1):
        # log needs a float base: an integer array raised to a float Variable has one.
        base = x if x.dtype.kind in "fc" else cast(x, out_dtype=out.dtype.name)
        nonneg = greater_equal(ya, _const(0, ya))
        zero_base = where(equal(base, _const(0, base)), nonneg, _const(False, nonneg))
        safe_log = log(where(zero_base, _const(1, base), base))
        gy = grad_y(_mul(gout, _mul(out, safe_log)), x, y, g.attrs)
    return gx, gy


def _numpy_aligned(x, y, attrs):
    """Y reshaped for numpy broadcasting against X (a reshape op under Paddle's ``axis``)."""
    shape = align_y(x.shape, y.shape, attrs["axis"])
    if tuple(shape) == tuple(y.shape):
        return y
    from ops.shape import reshape

    return reshape(y, shape=shape)


def _const(value, like):
    from tape.constants import constant

    return constant(value, like)


def _mul(a, b):
    return apply(elementwise_mul, (a, b), _NUMPY)


def _sub(a, b):
    return apply(elementwise_sub, (a, b), _NUMPY)


def _select_grad(g, x_wins):
    """Gradients of maximum (``x_wins``) or minimum: each input gets dOut unless it lost (half
    on ties), so both get it where a NaN compares false both ways, and a losing input gets 0
    even for an infinite dOut (PyTorch's rules)."""
    from ops.compare import equal, greater_than, less_than
    from ops.select import where

    x, y = g.inputs
    (gout,) = g.gouts
    ties = apply(equal, (x, y), g.attrs)
    shared = _mul(gout, where(ties, _const(0.5, gout), _const(1.0, gout)))
    zero = _const(0, shared)
    gx = gy = None
    if g.needs(0):
        x_loses = apply(less_than if x_wins else greater_than, (x, y), g.attrs)
        gx = grad_x(where(x_loses, zero, shared), x)
    if g.needs(1):
        y_loses = apply(greater_than if x_wins else less_than, (x, y), g.attrs)
        gy = grad_y(where(y_loses, zero, shared), x, y, g.attrs)
    return gx, gy


@register("elementwise_max", **_FACTS)
def elementwise_max(xp, attrs, x, y):
    """Out = maximum(X, Y) (NaN if either is).  dX = dOut where X >= Y (half on ties, all where
    either is NaN), else 0; dY likewise."""
    return xp.maximum(x, aligned(x, y, attrs))


@elementwise_max.gradient
def _(g):
    return _select_grad(g, x_wins=True)


@register("elementwise_min", **_FACTS)
def elementwise_min(xp, attrs, x, y):
    """Out = minimum(X, Y) (NaN if either is).  dX = dOut where X <= Y (half on ties, all where
    either is NaN), else 0; dY likewise."""
    return xp.minimum(x, aligned(x, y, attrs))


@elementwise_min.gradient
def _(g):
    return _select_grad(g, x_wins=False)
