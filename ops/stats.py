"""Statistics over axes: product, variance and standard deviation (with PyTorch's ``correction``),
and var_mean / std_mean, which return the mean beside them.

Their gradients are compositions of registered ops, so they differentiate again. The product's
gradient is exact with zeros in X (as PyTorch): it multiplies exclusive cumulative products from
both ends instead of dividing the product by X.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from ops.compose import scale
from ops.infer import kernel_axes, normalize_axes
from ops.reduce import (
    REDUCE_ATTRS,
    accumulated_dtype,
    broadcast_to_shape,
    keep_dims,
    reduce_mean,
    reduced_shape,
)
from ops.registry import REGISTRY, Attr, register
from tape.constants import constant
from tape.errors import DTypeError
from tape.tape import apply

VarMean = namedtuple("VarMean", ["var", "mean"])
StdMean = namedtuple("StdMean", ["std", "mean"])

# ---- prod -------------------------------------------------------------------------------------


def _infer_prod(attrs, x):
    axes = normalize_axes(None, attrs["axis"], len(x.shape))
    return reduced_shape(x.shape, axes, attrs["keepdim"]), accumulated_dtype(x.dtype)


@register("prod", inputs=("X",), attrs=REDUCE_ATTRS, infer=_infer_prod)
def prod(xp, attrs, x):
    """Out = product of X over ``axis`` (all axes when None); bool and narrow integers multiply
    in 64 bits, as numpy.

    dX_i = dOut * (product of the other reduced elements), computed as the exclusive cumulative
    product from the front times the one from the back: exact where X holds zeros (one zero
    gets the product of the rest, the others 0), as PyTorch.

    >>> import numpy as np, tape, ops
    >>> ops.prod(tape.Variable(np.array([[1.0, 2.0], [3.0, 4.0]])), axis=1).numpy()
    array([ 2., 12.])
    """
    dtype = accumulated_dtype(x.dtype)
    return x.prod(axis=kernel_axes(attrs["axis"], x.ndim), keepdims=attrs["keepdim"], dtype=dtype)


@prod.gradient
def _(g):
    (x,), (gout,) = g.inputs, g.gouts
    axes = normalize_axes(None, g.attrs["axis"], len(x.shape))
    return (_product_of_others(x, axes) * keep_dims(gout, x, g.attrs),)


def _product_of_others(x, axes):
    """For each element of X, the product of the other elements of its slice over ``axes``."""
    from ops.scan import cumprod
    from ops.shape import reshape, transpose

    if not axes:  # a reduction over nothing: Out = X, so dOut/dX = 1
        return apply(REGISTRY["fill_ones_like"], (x,), {})
    kept = [i for i in range(len(x.shape)) if i not in axes]
    perm = kept + list(axes)
    flat = x
    if len(axes) > 1 or axes[0] != len(x.shape) - 1:
        moved = apply(transpose, (x,), {"perm": perm})
        flat_shape = moved.shape[: len(kept)] + (math.prod(x.shape[i] for i in axes),)
        flat = apply(reshape, (moved,), {"shape": flat_shape})
    before = apply(cumprod, (flat,), {"axis": -1, "exclusive": True, "reverse": False})
    after = apply(cumprod, (flat,), {"axis": -1, "exclusive": True, "reverse": True})
    others = before * after
    if flat is x:
        return others
    others = apply(reshape, (others,), {"shape": moved.shape})
    inverse = tuple(perm.index(i) for i in range(len(perm)))
    return apply(transpose, (others,), {"perm": inverse})


# ---- variance and standard deviation ----------------------------------------------------------

MOMENT_ATTRS = {
    "axis": Attr("axes", None),
    "correction": Attr("float", 1.0),
    "keepdim": Attr("bool", False),
}


def _infer_moment(attrs, x):
    if x.dtype.kind != "f":
        raise DTypeError(
            None,
            "input X must be real floating point",
            expected="float16, float32 or float64",
            actual=str(x.dtype),
        )
    axes = normalize_axes(None, attrs["axis"], len(x.shape))
    return reduced_shape(x.shape, axes, attrs["keepdim"]), x.dtype


def _infer_moment_and_mean(attrs, x):
    desc = _infer_moment(attrs, x)
    return desc, desc


def _count(shape, attrs):
    """How many elements each output reduces over."""
    return math.prod(shape[i] for i in normalize_axes(None, attrs["axis"], len(shape)))


def _variance_and_mean(xp, attrs, x):
    """(var, mean); var divides by max(N - correction, 0) as PyTorch (inf or NaN when that is
    0, as there), and an empty slice has mean NaN."""
    axes, count = kernel_axes(attrs["axis"], x.ndim), _count(x.shape, attrs)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = x.sum(axis=axes, keepdims=True) / count
        centered = x - mean
        centered *= centered
        var = centered.sum(axis=axes, keepdims=attrs["keepdim"])
        var /= max(count - attrs["correction"], 0)
    return var, mean if attrs["keepdim"] else mean.reshape(var.shape)


@register("var", inputs=("X",), attrs=MOMENT_ATTRS, infer=_infer_moment)
def var(xp, attrs, x):
    """Out = sum((X - mean)^2) / max(N - correction, 0) over ``axis`` (all when None), N the
    elements reduced; ``correction=1`` (the default, as PyTorch) is the unbiased estimate.

    dX = dOut * 2 (X - mean) / (N - correction).

    >>> import numpy as np, tape, ops
    >>> ops.var(tape.Variable(np.array([1.0, 2.0, 4.0]))).numpy()
    array(2.33333333)
    """
    return _variance_and_mean(xp, attrs, x)[0]


@register("std", inputs=("X",), attrs=MOMENT_ATTRS, infer=_infer_moment)
def std(xp, attrs, x):
    """Out = sqrt(var(X)) with the same ``axis`` and ``correction``.

    dX = var's gradient for dVar = dOut / (2 Out), taken as 0 where Out = 0 (a constant slice),
    as PyTorch.
    """
    return xp.sqrt(_variance_and_mean(xp, attrs, x)[0])


@register(
    "var_mean",
    inputs=("X",),
    outputs=("Var", "Mean"),
    attrs=MOMENT_ATTRS,
    infer=_infer_moment_and_mean,
    returns=lambda results: VarMean(*results),
)
def var_mean(xp, attrs, x):
    """(Var, Mean) of X over ``axis``, as ``var`` and ``reduce_mean`` in one pass; the
    functional call returns the namedtuple ``VarMean(var, mean)``.

    dX = var's gradient for dVar + dMean / N.
    """
    return _variance_and_mean(xp, attrs, x)


@register(
    "std_mean",
    inputs=("X",),
    outputs=("Std", "Mean"),
    attrs=MOMENT_ATTRS,
    infer=_infer_moment_and_mean,
    returns=lambda results: StdMean(*results),
)
def std_mean(xp, attrs, x):
    """(Std, Mean) of X over ``axis``; the functional call returns ``StdMean(std, mean)``.

    dX = std's gradient for dStd + dMean / N.
    """
    variance, mean = _variance_and_mean(xp, attrs, x)
    return xp.sqrt(variance), mean


def _from_var(x, gvar, attrs):
    """dX for dVar: 2 (X - mean) dVar / (N - correction), with the reduced axes broadcast."""
    dof = _count(x.shape, attrs) - attrs["correction"]
    mean = apply(reduce_mean, (x,), {"axis": attrs["axis"], "keepdim": True})
    return scale((x - mean) * keep_dims(gvar, x, attrs), 2.0 / dof if dof > 0 else math.inf)


def _var_from_std(std_out, gstd):
    """dVar for dStd: dStd / (2 Std), 0 where Std = 0 (the divisor is made 1 there first, so
    the masked branch has no NaN gradient either)."""
    where, zero = REGISTRY["where"], constant(0, std_out)
    at_zero = apply(REGISTRY["equal"], (std_out, zero), {"axis": -1})
    safe = apply(where, (at_zero, constant(1, std_out), std_out), {})
    return apply(where, (at_zero, zero, gstd / scale(safe, 2.0)), {})


def _from_mean(x, gmean, attrs):
    """dX for dMean: dMean / N, broadcast over the reduced axes."""
    scaled = scale(gmean, 1.0 / max(_count(x.shape, attrs), 1))
    return apply(broadcast_to_shape(), (keep_dims(scaled, x, attrs),), {"shape": x.shape})


@var.gradient
def _(g):
    return (_from_var(g.inputs[0], g.gouts[0], g.attrs),)


@std.gradient
def _(g):
    return (_from_var(g.inputs[0], _var_from_std(g.outputs[0], g.gouts[0]), g.attrs),)


@var_mean.gradient
@std_mean.gradient
def _(g):
    (x,), (spread, _), (gspread, gmean) = g.inputs, g.outputs, g.gouts
    terms = []
    if gspread is not None:
        gvar = gspread if g.op.defn is var_mean else _var_from_std(spread, gspread)
        terms.append(_from_var(x, gvar, g.attrs))
    if gmean is not None:
        terms.append(_from_mean(x, gmean, g.attrs))
    return (terms[0] if len(terms) == 1 else terms[0] + terms[1],)
