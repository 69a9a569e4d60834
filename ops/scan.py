"""Scans along an axis: cumsum, cumprod, logcumsumexp, cummax and cummin.

cumsum and cumprod take ``exclusive`` (each output leaves its own element out) and ``reverse``
(accumulate from the end), as Paddle's and TensorFlow's do; gradients use them: the gradient of
a cumsum is the cumsum the other way. A 0-d X is a scan over one element, as in PyTorch.
Scans without an xp primitive (logaddexp, maximum, minimum) run as log2(n) vectorized doubling
steps, the same code on numpy and cupy.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ops.along import arange_along, scatter_back
from ops.infer import normalize_axis, require_float
from ops.reduce import accumulated_dtype
from ops.registry import REGISTRY, Attr, register
from tape.tape import apply

CumMax = namedtuple("CumMax", ["values", "indices"])
CumMin = namedtuple("CumMin", ["values", "indices"])

SCAN_ATTRS = {
    "axis": Attr("int", required=True),
    "exclusive": Attr("bool", False),
    "reverse": Attr("bool", False),
}


def along(axis, ndim, start=None, stop=None):
    """The index tuple of ``start:stop`` along ``axis`` (everything along the others)."""
    return (slice(None),) * (axis % ndim) + (slice(start, stop),)


def scan(xp, accumulate, x, attrs, identity):
    """``accumulate(x, axis)`` (inclusive, forward) turned into the scan ``attrs`` ask for."""
    if x.ndim == 0:
        return scan(xp, accumulate, x.reshape(1), attrs, identity).reshape(())
    axis = attrs["axis"]
    if attrs["reverse"]:
        x = xp.flip(x, axis)
    out = accumulate(x, axis)
    if attrs["exclusive"]:
        shifted = xp.empty_like(out)
        shifted[along(axis, x.ndim, 0, 1)] = identity
        shifted[along(axis, x.ndim, 1)] = out[along(axis, x.ndim, None, -1)]
        out = shifted
    return xp.flip(out, axis) if attrs["reverse"] else out


def doubling_scan(combine, x, axis):
    """Inclusive scan of the associative ``combine`` in ceil(log2 n) vectorized steps: after the
    step of width w, each entry combines the 2w entries ending at it (Hillis and Steele)."""
    out, extent, width = x.copy(), x.shape[axis], 1
    while width < extent:
        later, earlier = along(axis, x.ndim, width), along(axis, x.ndim, None, extent - width)
        out[later] = combine(out[later], out[earlier])  # the right side is read in full first
        width *= 2
    return out


def _infer_scan(attrs, x):
    normalize_axis(None, attrs["axis"], len(x.shape))
    return x.shape, accumulated_dtype(x.dtype)


# ---- cumsum -----------------------------------------------------------------------------------


@register("cumsum", inputs=("X",), attrs=SCAN_ATTRS, infer=_infer_scan, no_need_buffer=("X",))
def cumsum(xp, attrs, x):
    """Out[k] = X[0] + ... + X[k] along ``axis`` (X[k] itself left out when ``exclusive``;
    from the end when ``reverse``); bool and narrow integers sum in 64 bits.

    dX = cumsum(dOut) with ``reverse`` flipped.

    >>> import numpy as np, tape, ops
    >>> ops.cumsum(tape.Variable(np.array([1.0, 2.0, 3.0])), axis=0).numpy()
    array([1., 3., 6.])
    """
    dtype = accumulated_dtype(x.dtype)
    return scan(xp, lambda a, axis: xp.cumsum(a, axis=axis, dtype=dtype), x, attrs, 0)


@cumsum.gradient
def _(g):
    return (apply(cumsum, (g.gouts[0],), {**g.attrs, "reverse": not g.attrs["reverse"]}),)


# ---- cumprod ----------------------------------------------------------------------------------


@register("cumprod", inputs=("X",), attrs=SCAN_ATTRS, infer=_infer_scan)
def cumprod(xp, attrs, x):
    """Out[k] = X[0] * ... * X[k] along ``axis`` (with ``exclusive`` and ``reverse`` as cumsum).

    dX_i = sum over the k whose product holds X_i of dOut_k * (that product without X_i): exact
    with zeros in X, as PyTorch. Recorded as ``cumprod_grad``; when the gradient is itself to be
    differentiated (``create_graph``) it is composed from registered ops instead, in O(n^2)
    memory along the axis (PyTorch takes O(n^2) time there too).
    """
    dtype = accumulated_dtype(x.dtype)
    return scan(xp, lambda a, axis: xp.cumprod(a, axis=axis, dtype=dtype), x, attrs, 1)


@cumprod.gradient
def _(g):
    from tape.grad_mode import is_grad_enabled

    (x,), (gout,) = g.inputs, g.gouts
    if not x.shape:  # a product of one element (or of none, when exclusive)
        return (None if g.attrs["exclusive"] else gout,)
    if is_grad_enabled():
        from ops.scan_grad import cumprod_grad_composed

        return (cumprod_grad_composed(x, gout, g.attrs),)
    return (apply(REGISTRY["cumprod_grad"], (x, gout), g.attrs),)


# ---- logcumsumexp -----------------------------------------------------------------------------


def _infer_logcumsumexp(attrs, x):
    require_float(None, x)
    normalize_axis(None, attrs["axis"], len(x.shape))
    return x.shape, x.dtype


@register(
    "logcumsumexp",
    inputs=("X",),
    attrs={"axis": Attr("int", required=True), "reverse": Attr("bool", False)},
    infer=_infer_logcumsumexp,
)
def logcumsumexp(xp, attrs, x):
    """Out[k] = log(exp(X[0]) + ... + exp(X[k])) along ``axis`` (from the end when ``reverse``),
    accumulated with logaddexp, so it neither overflows nor underflows.

    dX_i = sum over k >= i of dOut_k * exp(X_i - Out_k), computed as PyTorch does: the positive
    and negative parts of dOut go through a reversed logcumsumexp of log|dOut| - Out.
    """
    scanned = {**attrs, "exclusive": False}
    return scan(xp, lambda a, axis: doubling_scan(xp.logaddexp, a, axis), x, scanned, None)


@logcumsumexp.gradient
def _(g):
    from ops.scan_grad import logcumsumexp_grad_composed

    (x,), (out,), (gout,) = g.inputs, g.outputs, g.gouts
    return (logcumsumexp_grad_composed(x, out, gout, g.attrs),)


# ---- cummax and cummin ------------------------------------------------------------------------


def _infer_cumextreme(attrs, x):
    normalize_axis(None, attrs["axis"], len(x.shape))
    return (x.shape, x.dtype), (x.shape, np.dtype(np.int64))


def _running_extreme(xp, combine, x, axis):
    """(values, indices) of the running extreme; an index moves to every entry that equals the
    running value (the last of ties, as PyTorch) or is NaN (NaN propagates, as there)."""
    if x.ndim == 0:
        return x.copy(), xp.zeros((), dtype=np.int64)
    values = doubling_scan(combine, x, axis)
    hits = values == x
    if x.dtype.kind == "f":
        hits |= xp.isnan(x)
    positions = xp.where(hits, arange_along(xp, x.shape, axis % x.ndim), 0)
    return values, doubling_scan(xp.maximum, positions, axis)


def _cumextreme(op_type, combine_name, result_type):
    def kernel(xp, attrs, x):
        return _running_extreme(xp, getattr(xp, combine_name), x, attrs["axis"])

    word = "maximum" if combine_name == "maximum" else "minimum"
    kernel.__doc__ = f"""Out[k] = the {word} of X[0..k] along ``axis``, Indices[k] where it was
    taken (int64; the last of equal entries, and NaN propagates, as PyTorch). The functional
    call returns ``{result_type.__name__}(values, indices)``.

    dX = pick_along_grad(X, Indices, dOut): each dOut_k goes to the entry it was taken from."""
    op = register(
        op_type,
        inputs=("X",),
        outputs=("Out", "Indices"),
        attrs={"axis": Attr("int", required=True)},
        infer=_infer_cumextreme,
        no_need_buffer=("X",),
        returns=lambda results: result_type(*results),
    )(kernel)

    @op.gradient
    def _(g):
        (x,), (_, indices), (gout, _) = g.inputs, g.outputs, g.gouts
        return (scatter_back(x, indices, gout, g.attrs["axis"]),)

    return op


cummax = _cumextreme("cummax", "maximum", CumMax)
cummin = _cumextreme("cummin", "minimum", CumMin)
