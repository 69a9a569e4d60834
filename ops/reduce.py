"""Reductions: the seed's ``sum`` (adds a list) and ``mean`` (of all elements), axis reductions
(sum, mean, max, min, logsumexp), and ``sum_to_shape``, which reduces a broadcast gradient back
to an input's shape."""

from __future__ import annotations

import math

import numpy as np

from ops import batching
from ops.compose import NUMPY_AXIS
from ops.infer import check_list_inputs, kernel_axes, normalize_axes, require_float
from ops.registry import REGISTRY, Attr, register
from ops.xp import promote
from tape.errors import ShapeError
from tape.tape import apply


def _infer_sum(attrs, xs):
    return xs[0].shape, check_list_inputs(xs)


@register(
    "sum",
    inputs=("X*",),
    infer=_infer_sum,
    elementwise=True,
    no_need_buffer=("X",),
    batch=batching.LIST,
)
def sum(xp, attrs, xs):  # noqa: A001  (the seed's name)
    """Out = X[0] + X[1] + ... (same shapes); backward uses it to add up gradients.

    dX[i] = dOut.
    """
    xs = promote(*xs)  # `out += x` would keep a first float32 among float64s
    out = xs[0] + xs[1] if len(xs) > 1 else xs[0].copy()
    for x in xs[2:]:
        out += x
    return out


@sum.gradient
def _(g):
    (xs,), (gout,) = g.inputs, g.gouts
    return ([gout] * len(xs),)


def _infer_mean(attrs, x):
    return (), x.dtype if x.dtype.kind in "fc" else np.dtype(np.float64)


@register("mean", inputs=("X",), infer=_infer_mean, no_need_buffer=("X",))
def mean(xp, attrs, x):
    """Out = mean of all elements of X (a 0-d array).  dX = dOut / X.size, broadcast."""
    return xp.mean(x)


@mean.gradient
def _(g):
    (x,), (gout,) = g.inputs, g.gouts
    from tape.constants import constant

    scaled = gout * constant(1.0 / max(x.size, 1), gout)
    return (apply(broadcast_to_shape(), (scaled,), {"shape": x.shape}),)


def broadcast_to_shape():
    from ops.shape import broadcast_to

    return broadcast_to


def _infer_sum_to(attrs, x):
    target = attrs["shape"]
    extra = len(x.shape) - len(target)
    if extra < 0 or any(t != 1 and t != s for t, s in zip(target, x.shape[extra:], strict=True)):
        raise ShapeError(
            None,
            "X cannot be summed down to the target shape",
            expected=f"a shape X.shape={x.shape} broadcasts from",
            actual=f"shape={target}",
        )
    return tuple(target), x.dtype


@register(
    "sum_to_shape",
    inputs=("X",),
    attrs={"shape": Attr("ints", required=True)},
    infer=_infer_sum_to,
    no_need_buffer=("X",),
)
def sum_to_shape(xp, attrs, x):
    """Out = X summed over the axes broadcasting added to ``shape``.  dX = broadcast(dOut)."""
    target = attrs["shape"]
    extra = x.ndim - len(target)
    axes = tuple(range(extra)) + tuple(
        i + extra for i, t in enumerate(target) if t == 1 and x.shape[i + extra] != 1
    )
    out = x.sum(axis=axes, keepdims=True) if axes else x
    return out.reshape(target)


@sum_to_shape.gradient
def _(g):
    (x,), (gout,) = g.inputs, g.gouts
    return (apply(broadcast_to_shape(), (gout,), {"shape": x.shape}),)


def sum_to(g, shape):
    """``g`` reduced to ``shape`` (the one shared helper for broadcast gradients)."""
    if g.shape == shape:
        return g
    return apply(sum_to_shape, (g,), {"shape": tuple(shape)})


def reduced_shape(shape, axes, keepdim):
    """The shape a reduction over the normalized ``axes`` leaves (1s there with ``keepdim``)."""
    if keepdim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def accumulated_dtype(dtype):
    """The dtype sums and products accumulate in, as numpy (and PyTorch for signed ints): bool
    and narrower integers widen to 64 bits; floats keep theirs."""
    if dtype.kind == "f":
        return dtype
    if dtype.kind == "b" or (dtype.kind == "i" and dtype.itemsize < 8):
        return np.dtype(np.int64)
    if dtype.kind == "u" and dtype.itemsize < 8:
        return np.dtype(np.uint64)
    return dtype


def _infer_reduce(attrs, x):
    if attrs["axis"] is None:  # (over every axis, the common case: no axes to list)
        return ((1,) * len(x.shape) if attrs["keepdim"] else ()), x.dtype
    axes = normalize_axes(None, attrs["axis"], len(x.shape))
    return reduced_shape(x.shape, axes, attrs["keepdim"]), x.dtype


def _infer_reduce_sum(attrs, x):
    shape, dtype = _infer_reduce(attrs, x)
    return shape, accumulated_dtype(dtype)


REDUCE_ATTRS = {"axis": Attr("axes", None), "keepdim": Attr("bool", False)}


@register(
    "reduce_sum",
    inputs=("X",),
    attrs=REDUCE_ATTRS,
    infer=_infer_reduce_sum,
    no_need_buffer=("X",),
    batch=batching.REDUCE,
)
def reduce_sum(xp, attrs, x):
    """Out = sum of X over ``axis`` (all when None); bool and integers narrower than 64 bits sum
    in 64 bits, as numpy and PyTorch.  dX = dOut broadcast back to X's shape."""
    return x.sum(axis=kernel_axes(attrs["axis"], x.ndim), keepdims=attrs["keepdim"])


@reduce_sum.gradient
def _(g):
    (x,), (gout,) = g.inputs, g.gouts
    return (apply(broadcast_to_shape(), (keep_dims(gout, x, g.attrs),), {"shape": x.shape}),)


def keep_dims(gout, x, attrs):
    """``gout`` of a reduction reshaped to keep the reduced axes as 1s (ready to broadcast)."""
    if attrs["keepdim"]:
        return gout
    axes = normalize_axes(None, attrs["axis"], len(x.shape))
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if shape == gout.shape:
        return gout
    from ops.shape import reshape

    return apply(reshape, (gout,), {"shape": shape})


def _reduced_count(x, attrs):
    """How many elements of X each output element reduces over."""
    axes = normalize_axes(None, attrs["axis"], len(x.shape))
    return math.prod(x.shape[i] for i in axes)


def _infer_reduce_mean(attrs, x):
    shape, dtype = _infer_reduce(attrs, x)
    return shape, dtype if dtype.kind in "fc" else np.dtype(np.float64)


@register(
    "reduce_mean",
    inputs=("X",),
    attrs=REDUCE_ATTRS,
    infer=_infer_reduce_mean,
    no_need_buffer=("X",),
    batch=batching.REDUCE,
)
def reduce_mean(xp, attrs, x):
    """Out = mean of X over ``axis`` (all when None).  dX = broadcast(dOut) / (elements reduced)."""
    return x.mean(axis=kernel_axes(attrs["axis"], x.ndim), keepdims=attrs["keepdim"])


@reduce_mean.gradient
def _(g):
    from tape.constants import constant

    (x,), (gout,) = g.inputs, g.gouts
    scaled = gout * constant(1.0 / max(_reduced_count(x, g.attrs), 1), gout)
    return (apply(broadcast_to_shape(), (keep_dims(scaled, x, g.attrs),), {"shape": x.shape}),)


def _infer_extreme(attrs, x):
    shape, dtype = _infer_reduce(attrs, x)
    if _reduced_count(x, attrs) == 0:
        raise ShapeError(
            None,
            "cannot take the max or min over an empty axis",
            expected="every reduced axis has extent > 0",
            actual=f"X.shape={x.shape}, axis={attrs['axis']}",
        )
    return shape, dtype


@register("reduce_max", inputs=("X",), attrs=REDUCE_ATTRS, infer=_infer_extreme)
def reduce_max(xp, attrs, x):
    """Out = max of X over ``axis``.  dX = dOut at the positions of the max, shared equally
    among ties (as PyTorch's amax), 0 elsewhere."""
    return x.max(axis=kernel_axes(attrs["axis"], x.ndim), keepdims=attrs["keepdim"])


@register("reduce_min", inputs=("X",), attrs=REDUCE_ATTRS, infer=_infer_extreme)
def reduce_min(xp, attrs, x):
    """Out = min of X over ``axis``.  dX = dOut at the positions of the min, shared equally
    among ties, 0 elsewhere."""
    return x.min(axis=kernel_axes(attrs["axis"], x.ndim), keepdims=attrs["keepdim"])


@reduce_max.gradient
@reduce_min.gradient
def _(g):
    from ops.compare import equal
    from ops.unary import cast

    (x,), (out,), (gout,) = g.inputs, g.outputs, g.gouts
    # Where X attains the extreme: a constant mask (comparisons have no gradient), so the
    # gradient is piecewise linear in dOut and its own derivative w.r.t. X is zero.
    hits = apply(equal, (x, keep_dims(out, x, g.attrs)), NUMPY_AXIS)
    hits = apply(cast, (hits,), {"out_dtype": x.dtype.name})
    count = apply(reduce_sum, (hits,), {"axis": g.attrs["axis"], "keepdim": True})
    return (hits / count * keep_dims(gout, x, g.attrs),)


def _infer_logsumexp(attrs, x):
    require_float(None, x)
    return _infer_reduce(attrs, x)


@register("logsumexp", inputs=("X",), attrs=REDUCE_ATTRS, infer=_infer_logsumexp)
def logsumexp(xp, attrs, x):
    """Out = log(sum(exp(X))) over ``axis``, computed as m + log(sum(exp(X - m))) with m the
    max, so it neither overflows nor underflows.  dX = dOut * exp(X - Out) (a softmax)."""
    axes, keepdim = normalize_axes(None, attrs["axis"], x.ndim), attrs["keepdim"]
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    if 0 in kept or not math.prod(x.shape[i] for i in axes):
        # Empty output, or sums over empty axes (0, whose log is -inf): no max to shift by.
        out = xp.full(kept, -xp.inf, dtype=x.dtype)
    else:
        shift = x.max(axis=axes, keepdims=True)
        # An all -inf (or +inf) slice would make X - m NaN; shifting it by 0 gives the limit.
        shift = xp.where(xp.isfinite(shift), shift, 0)
        with np.errstate(divide="ignore"):  # log(0) = -inf for all -inf slices, as intended
            out = xp.log(xp.exp(x - shift).sum(axis=axes, keepdims=True)) + shift
    return out if keepdim else out.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axes))


@logsumexp.gradient
def _(g):
    (x,), (out,), (gout,) = g.inputs, g.outputs, g.gouts
    softmax = REGISTRY["exp"](x - keep_dims(out, x, g.attrs))
    return (softmax * keep_dims(gout, x, g.attrs),)
