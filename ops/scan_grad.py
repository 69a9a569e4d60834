"""Gradients of the product and log-sum-exp scans (``ops.scan``): the ``cumprod_grad`` op, exact
with zeros in X, and the compositions of registered ops used where a gradient must itself be
differentiable."""

from __future__ import annotations

import numpy as np

from ops.infer import normalize_axis, real_float_same, result_dtype
from ops.registry import REGISTRY, register
from ops.scan import SCAN_ATTRS, along, cumprod, logcumsumexp, scan
from ops.xp import promote
from tape.constants import constant
from tape.errors import ShapeError
from tape.tape import apply
from tape.variable import Variable


def _infer_cumprod_grad(attrs, x, gout):
    if gout.shape != x.shape:
        raise ShapeError(
            None, "Out@GRAD must have X's shape", expected=str(x.shape), actual=str(gout.shape)
        )
    normalize_axis(None, attrs["axis"], len(x.shape))
    real_float_same(attrs, x)
    shape, _ = real_float_same(attrs, gout)
    return shape, result_dtype(x, gout)


@register(
    "cumprod_grad",
    inputs=("X", "Out@GRAD"),
    attrs=SCAN_ATTRS,
    infer=_infer_cumprod_grad,
    differentiable=False,
)
def cumprod_grad(xp, attrs, x, gout):
    """X@GRAD of ``cumprod`` (the same attributes) for G = Out@GRAD, exact with zeros in X.

    In the inclusive forward case, with z the first zero of a slice: before z,
    dX_i = rcumsum(G * Out)_i / X_i (rcumsum sums from the end; terms past z are 0); at z,
    dX_z = prod(X[:z]) * sum over k in [z, next zero) of G_k * prod(X[z+1..k]); after z, 0 (the
    same split as PyTorch). Exclusive shifts G by one, reverse flips the axis. Its derivative is
    taken through ``cumprod_grad_composed``, which ``cumprod``'s gradient records instead of
    this op when the gradient is to be differentiated.
    """
    x, gout = promote(x, gout)  # the dtype rule (ops.infer)
    if x.ndim == 0:
        return xp.zeros_like(gout) if attrs["exclusive"] else gout.copy()
    axis = attrs["axis"]
    if attrs["reverse"]:
        x, gout = xp.flip(x, axis), xp.flip(gout, axis)
    if attrs["exclusive"]:  # Out_k is the inclusive product up to k - 1
        shifted = xp.zeros_like(gout)
        shifted[along(axis, x.ndim, None, -1)] = gout[along(axis, x.ndim, 1)]
        gout = shifted
    gx = _inclusive_cumprod_grad(xp, x, gout, axis)
    return xp.flip(gx, axis) if attrs["reverse"] else gx


def _reverse_cumsum(xp, a, axis):
    return xp.flip(xp.cumsum(xp.flip(a, axis), axis=axis), axis)


def _inclusive_cumprod_grad(xp, x, gout, axis):
    out = xp.cumprod(x, axis=axis)
    weighted = out * gout
    zero = x == 0
    if not zero.any():
        return _reverse_cumsum(xp, weighted, axis) / x
    zeros_so_far = xp.cumsum(zero, axis=axis)
    before = zeros_so_far == 0
    summed = _reverse_cumsum(xp, xp.where(before, weighted, 0), axis)
    gx = xp.where(before, summed / xp.where(before, x, 1), 0)
    first_zero = zero & (zeros_so_far == 1)
    after_first = (zeros_so_far == 1) & ~first_zero
    tail = xp.cumprod(xp.where(after_first, x, 1), axis=axis)
    tail *= xp.where(zeros_so_far == 1, gout, 0)
    exclusive = {"axis": axis, "exclusive": True, "reverse": False}
    prefix = scan(xp, lambda a, ax: xp.cumprod(a, axis=ax), x, exclusive, 1)
    return xp.where(first_zero, prefix * tail.sum(axis=axis, keepdims=True), gx)


def _device_constant(like, array):
    """A constant Variable holding the numpy ``array`` on ``like``'s device."""
    from ops.xp import array_module, default_module

    xp = array_module(like._value) if like._value is not None else default_module()
    return Variable(xp.asarray(array))


def _to_last(var, axis, ndim):
    """``var`` with ``axis`` moved to the end, and the permutation that moves it back."""
    from ops.shape import transpose

    if axis == ndim - 1:
        return var, None
    perm = [k for k in range(ndim) if k != axis] + [axis]
    inverse = tuple(perm.index(k) for k in range(ndim))
    return apply(transpose, (var,), {"perm": perm}), inverse


def cumprod_grad_composed(x, gout, attrs):
    """``cumprod_grad`` from registered ops, exact (zeros included) and differentiable.

    Row i of an (n, n) block is X with X_i replaced by 1; its cumprod (same attributes) at k is
    Out_k without the factor X_i, so dX_i = sum over k of [X_i is a factor of Out_k] G_k times
    that entry. O(n^2) memory along the axis.
    """
    from ops.shape import transpose, unsqueeze

    ndim = len(x.shape)
    axis = normalize_axis(None, attrs["axis"], ndim)
    (x_last, inverse), (g_last, _) = _to_last(x, axis, ndim), _to_last(gout, axis, ndim)
    extent = x.shape[axis]
    rows, k = np.arange(extent)[:, None], np.arange(extent)[None, :]
    factor = {(False, False): rows <= k, (True, False): rows < k}
    factor.update({(False, True): rows >= k, (True, True): rows > k})
    holds = _device_constant(x, factor[attrs["exclusive"], attrs["reverse"]])
    where = REGISTRY["where"]
    eye = _device_constant(x, np.eye(extent, dtype=bool))
    blocks = apply(
        where, (eye, constant(1, x), apply(unsqueeze, (x_last,), {"axes": (ndim - 1,)})), {}
    )
    products = apply(cumprod, (blocks,), {**attrs, "axis": -1})
    weights = apply(
        where, (holds, apply(unsqueeze, (g_last,), {"axes": (ndim - 1,)}), constant(0, x)), {}
    )
    gx = apply(REGISTRY["reduce_sum"], (products * weights,), {"axis": (-1,), "keepdim": False})
    return gx if inverse is None else apply(transpose, (gx,), {"perm": inverse})


def logcumsumexp_grad_composed(x, out, gout, attrs):
    """dX_i = sum over k >= i of G_k exp(X_i - Out_k) (k <= i when ``reverse``), as PyTorch:
    exp(rlcse(log G+ - Out) + X) - exp(rlcse(log G- - Out) + X) with rlcse the logcumsumexp the
    other way and G+ / G- the positive and negative parts of G = dOut. Every exponent is at most
    log max|G|, so nothing overflows; a zero of G enters as a very low float, not log 0.
    """
    where, zero = REGISTRY["where"], constant(0, gout)
    nonzero = apply(REGISTRY["not_equal"], (gout, zero), {"axis": -1})
    magnitude = apply(where, (nonzero, apply(REGISTRY["abs"], (gout,), {}), constant(1, gout)), {})
    log_magnitude = apply(REGISTRY["log"], (magnitude,), {})
    # PyTorch's stand-in for log 0 is the lowest float; a quarter of it still gives exp() = 0
    # and leaves room for the sums of several of them in gradients of this gradient.
    lowest = constant(float(np.finfo(gout.dtype).min) / 4, gout)
    other_way = {"axis": attrs["axis"], "reverse": not attrs["reverse"]}

    def part(compare):
        selected = apply(compare, (gout, zero), {"axis": -1})
        logs = apply(where, (selected, log_magnitude, lowest), {})
        return apply(REGISTRY["exp"], (apply(logcumsumexp, (logs - out,), other_way) + x,), {})

    return part(REGISTRY["greater_than"]) - part(REGISTRY["less_than"])
