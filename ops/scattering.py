"""PyTorch's scatter family along one axis: ``scatter``, ``scatter_add`` and ``scatter_reduce``
(sum, prod, mean, amax, amin, with or without X's own values), with PyTorch's gradients built
from registered ops.

For every position p of Index (axis 0 shown): Out[Index[p]][p1]... receives Src[p], so Index may
be shorter than Src on every axis and than X on the other axes (torch's rules); Src may also be
a 0-d value. Negative indices count from the end. Where Index repeats a position, ``scatter``
keeps one of the values (which one is unspecified, as in PyTorch) while the reductions combine
them all.
"""

from __future__ import annotations

import numpy as np

from ops.along_axis import check_index, fit_to, pick, positions, window
from ops.compose import NUMPY_AXIS as AXIS
from ops.infer import normalize_axis, result_dtype
from ops.registry import REGISTRY, Attr, register
from tape.constants import constant
from tape.errors import ShapeError
from tape.tape import apply


def _infer_scatter(attrs, x, index, src):
    if not x.shape:
        raise ShapeError(None, "X must have at least one axis", actual="X.shape == ()")
    axis = normalize_axis(None, attrs["axis"], len(x.shape))
    check_index(index, x.shape, axis)
    short = (
        len(index.shape) == len(x.shape)
        and all(i <= s for i, s in zip(index.shape, src.shape or index.shape))
        and all(i <= n for d, (i, n) in enumerate(zip(index.shape, x.shape)) if d != axis)
    )
    if not short or (src.shape and len(src.shape) != len(x.shape)):
        raise ShapeError(
            None,
            "Index must have X's rank and fit inside Src, and inside X except along 'axis'",
            expected="Index.shape[d] <= Src.shape[d] for all d, <= X.shape[d] for d != axis",
            actual=f"X.shape={x.shape}, Index.shape={index.shape}, Src.shape={src.shape}",
        )
    return x.shape, result_dtype(x, src)


def _start(x, src):
    """A copy of X in the promoted dtype of X and Src (numpy's rule), to write into."""
    return x.astype(np.result_type(x.dtype, src.dtype), copy=True)


def _values(xp, src, index, dtype):
    """Src's value for each position of Index, as ``dtype``."""
    values = xp.broadcast_to(src, index.shape) if not src.ndim else src[window(index.shape)]
    return values.astype(dtype, copy=False)


_AXIS = {"axis": Attr("int", 0)}


@register("scatter", inputs=("X", "Index", "Src"), attrs=_AXIS, infer=_infer_scatter)
def scatter(xp, attrs, x, index, src):
    """Out = X with Src[p] written at Index[p] along ``axis`` (torch.scatter; see the module
    docstring).  dX = dOut with the written positions zeroed; dSrc[p] = dOut at Index[p].

    >>> import numpy as np, tape, ops
    >>> x = tape.Variable(np.zeros((2, 3), np.float32))
    >>> ops.scatter(x, np.array([[2], [0]]), np.float32(5.0), axis=1).numpy()
    array([[0., 0., 5.],
           [5., 0., 0.]], dtype=float32)
    """
    out = _start(x, src)
    out[positions(xp, index, attrs["axis"] % x.ndim)] = _values(xp, src, index, out.dtype)
    return out


def _zeroed(gout, index, axis):
    """dOut with the positions Index writes set to zero (they no longer depend on X)."""
    return apply(scatter, (gout, index, constant(0, gout)), {"axis": axis})


def _typed(g, gx, gsrc):
    """The gradients of X and Src, each in its input's dtype (Out may be promoted)."""
    x, _, src = g.inputs
    return _cast(gx, x), None, _cast(gsrc, src)


def _cast(grad, var):
    if grad is None or grad.dtype == var.dtype:
        return grad
    return apply(REGISTRY["cast"], (grad,), {"out_dtype": var.dtype.name})


def _src_grad(g, values):
    """Src's gradient: ``values`` read at Index, fitted to Src's shape (or None)."""
    _, index, src = g.inputs
    if not g.needs(2):
        return None
    return fit_to(pick(values, index, g.attrs["axis"] % len(values.shape)), src.shape)


@scatter.gradient
def _(g):
    _, index, _ = g.inputs
    (gout,) = g.gouts
    gx = _zeroed(gout, index, g.attrs["axis"]) if g.needs(0) else None
    return _typed(g, gx, _src_grad(g, gout))


@register("scatter_add", inputs=("X", "Index", "Src"), attrs=_AXIS, infer=_infer_scatter)
def scatter_add(xp, attrs, x, index, src):
    """Out = X with Src[p] added at Index[p] along ``axis``, repeats accumulating
    (torch.scatter_add).  dX = dOut; dSrc[p] = dOut at Index[p]."""
    out = _start(x, src)
    xp.add.at(out, positions(xp, index, attrs["axis"] % x.ndim), _values(xp, src, index, out.dtype))
    return out


@scatter_add.gradient
def _(g):
    return _typed(g, g.gouts[0] if g.needs(0) else None, _src_grad(g, g.gouts[0]))


_REDUCE_ATTRS = {
    "axis": Attr("int", 0),
    "reduce": Attr("str", required=True, choices=("sum", "prod", "mean", "amax", "amin")),
    "include_self": Attr("bool", True),
}
_UFUNCS = {"sum": "add", "mean": "add", "prod": "multiply", "amax": "maximum", "amin": "minimum"}


def _identity(reduce, dtype):
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    big = np.inf if dtype.kind == "f" else np.iinfo(dtype).max
    return -big if reduce == "amax" else big


@register("scatter_reduce", inputs=("X", "Index", "Src"), attrs=_REDUCE_ATTRS, infer=_infer_scatter)
def scatter_reduce(xp, attrs, x, index, src):
    """Out = X where Index writes nothing; elsewhere the ``reduce`` (sum, prod, mean, amax, amin)
    of the Src values written there, and of X's own value when ``include_self``
    (torch.scatter_reduce; an integer mean rounds down).

    dX, dSrc as PyTorch: sum -- dOut, and dOut at Index; mean -- both divided by the count;
    amax/amin -- dOut shared equally by every value equal to the result; prod -- dOut times
    the product of the other values (exact with zeros). dX is 0 where X was excluded.
    """
    reduce, where = attrs["reduce"], positions(xp, index, attrs["axis"] % x.ndim)
    out = _start(x, src)
    values = _values(xp, src, index, out.dtype)
    if not attrs["include_self"]:
        out[where] = _identity(reduce, out.dtype)
    reduce_at(xp, _UFUNCS[reduce], out, where, values)
    if reduce == "mean":
        count = xp.zeros(x.shape, dtype=np.int64)
        xp.add.at(count, where, 1)
        count += 1 if attrs["include_self"] else 0
        count = xp.maximum(count, 1)
        out = out // count if out.dtype.kind in "iu" else (out / count).astype(out.dtype)
    return out


def reduce_at(xp, name, out, where, values):
    """``xp.<name>.at(out, where, values)``; cupy has no ``multiply.at``, so there the values
    are applied in rounds in which every target position occurs at most once."""
    ufunc = getattr(xp, name)
    if xp is np or name != "multiply":
        ufunc.at(out, where, values)
        return
    flat = xp.ravel_multi_index(xp.broadcast_arrays(*where), out.shape).reshape(-1)
    values = values.reshape(-1)
    order = xp.argsort(flat, kind="stable")
    flat, values = flat[order], values[order]
    rank = xp.arange(flat.size) - xp.searchsorted(flat, flat, side="left")
    target = out.reshape(-1)
    for r in range(int(rank.max()) + 1 if flat.size else 0):
        chosen = rank == r
        target[flat[chosen]] = ufunc(target[flat[chosen]], values[chosen])


@scatter_reduce.gradient
def _(g):
    x, index, _ = g.inputs
    (gout,), attrs = g.gouts, g.attrs
    axis, include_self = attrs["axis"] % len(x.shape), attrs["include_self"]
    if attrs["reduce"] == "prod":
        return _prod_grads(g, axis)
    if attrs["reduce"] in ("amax", "amin"):
        return _extreme_grads(g, axis)
    gx = gsrc = gout
    if attrs["reduce"] == "mean":
        count = _hits(x, index, axis, constant(1, x))
        if include_self:
            count = count + constant(1, count)
        gx = gsrc = gout / apply(REGISTRY["elementwise_max"], (count, constant(1, count)), AXIS)
    if not include_self and g.needs(0):
        gx = _zeroed(gx, index, axis)
    return _typed(g, gx if g.needs(0) else None, _src_grad(g, gsrc))


def _hits(x, index, axis, src):
    """``src`` scatter-added into zeros like X (a constant: the count of writes for src 1)."""
    zeros = apply(REGISTRY["fill_zeros_like"], (x,), {})
    return apply(scatter_add, (zeros, index, src), {"axis": axis})


def _src_part(src, index):
    """Src's value at each position of Index (Src broadcast or cut to Index's shape)."""
    if src.shape == index.shape:
        return src
    if not src.shape:
        return apply(REGISTRY["broadcast_to"], (src,), {"shape": index.shape})
    slice_op = REGISTRY["slice"]
    axes = list(range(len(index.shape)))
    cut = {"axes": axes, "starts": [0] * len(axes), "ends": list(index.shape)}
    return apply(slice_op, (src,), dict(slice_op.defaults, **cut))


def _is(condition, like):
    """A boolean Variable as 0/1 in ``like``'s dtype."""
    return apply(REGISTRY["cast"], (condition,), {"out_dtype": like.dtype.name})


def _extreme_grads(g, axis):
    """amax/amin: dOut shared equally by X (where included) and the Src values equal to Out."""
    x, index, src = g.inputs
    (out,), (gout,) = g.outputs, g.gouts
    equal = REGISTRY["equal"]
    self_is = _is(apply(equal, (x, out), AXIS), gout)
    if not g.attrs["include_self"]:
        self_is = _zeroed(self_is, index, axis)
    part = _src_part(src, index)
    src_is = _is(apply(equal, (part, pick(out, index, axis)), AXIS), gout)
    share = gout / apply(scatter_add, (self_is, index, src_is), {"axis": axis})
    gx = self_is * share if g.needs(0) else None
    gsrc = fit_to(src_is * pick(share, index, axis), src.shape) if g.needs(2) else None
    return _typed(g, gx, gsrc)


def _prod_grads(g, axis):
    """prod: dOut times the product of the other values, with zeros handled exactly as
    PyTorch does (a zero's gradient is the product of the rest; two zeros give 0)."""
    x, index, src = g.inputs
    (out,), (gout,), attrs = g.outputs, g.gouts, g.attrs
    equal, where, zero, one = REGISTRY["equal"], REGISTRY["where"], constant(0, x), constant(1, x)
    gx = gsrc = None
    if g.needs(0):
        x_zero = apply(equal, (x, zero), AXIS)
        masked = apply(where, (x_zero, one, x), {})
        gx = gout * apply(scatter_reduce, (masked, index, src), attrs) / masked
        if not attrs["include_self"]:
            gx = _zeroed(gx, index, axis)
    if g.needs(2):
        part = _src_part(src, index)
        src_zero = apply(equal, (part, zero), AXIS)
        zeros_there = pick(_hits(x, index, axis, _is(src_zero, x)), index, axis)
        single = apply(
            REGISTRY["greater_than"],
            (_is(src_zero, x) * _is(apply(equal, (zeros_there, one), AXIS), x), zero),
            AXIS,
        )
        others = apply(scatter_reduce, (x, index, apply(where, (single, one, part), {})), attrs)
        nonzero = apply(where, (src_zero, one, part), {})
        picked = apply(
            where,
            (single, pick(gout * others, index, axis), pick(gout * out, index, axis) / nonzero),
            {},
        )
        gsrc = fit_to(picked, src.shape)
    return _typed(g, gx, gsrc)
