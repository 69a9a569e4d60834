"""The gradients of 2-D pooling: pool2d_grad routes dOut back to the windows (to each window's
first maximum, or evenly over the averaged elements), and max_pool2d_select is its adjoint.

The gradient ops are linear in Out@GRAD, and their adjoints are registered too (``pool2d`` for
average pooling, ``max_pool2d_select`` for max pooling), so gradients of any order work; the
argmax is piecewise constant in X, so no gradient flows to X from a gradient op.
"""

from __future__ import annotations

from ops.pool import POOL_ATTRS, WINDOW_ATTRS, Geometry, check_geometry, pool2d, window_max
from ops.registry import register
from tape.errors import ShapeError
from tape.tape import apply


def _pool_attrs(attrs):
    return {key: attrs[key] for key in POOL_ATTRS}


def _window_attrs(attrs):
    return {key: attrs[key] for key in WINDOW_ATTRS}


@pool2d.gradient
def _(g):
    (x,), (out,), (gout,) = g.inputs, g.outputs, g.gouts
    # Max pooling's gradient compares X with the window maxima: pass the ones computed here.
    maxima = out if g.attrs["pooling_type"] == "max" else None
    return (apply(pool2d_grad, (x, gout, maxima), _pool_attrs(g.attrs)),)


def first_max_masks(xp, geom, x, maxima=None):
    """For each kernel offset, (window slices, mask of the windows whose first maximum in
    row-major order sits at that offset). A NaN is a window's maximum (the first NaN wins).
    ``maxima`` are the window maxima when known (max pool2d's Out), else recomputed.

    Comparing against the window maxima is measured here 4x faster than tracking a running
    argmax with masked copies. The mask is one buffer, rewritten at each offset: use it before
    the next one.
    """
    padded = geom.pad(xp, x, -xp.inf)
    if maxima is None:
        maxima = window_max(xp, geom, padded)
    has_nan = bool(xp.isnan(maxima).any())
    hit, taken = xp.empty(maxima.shape, dtype=bool), None
    last = geom.kernel[0] * geom.kernel[1] - 1
    for index, window in geom.offsets():
        if index == last and taken is not None:
            # Every window holds its maximum, so those not taken yet have it at the last offset.
            xp.logical_not(taken, out=hit)
            yield window, hit
            continue
        part = padded[(..., *window)]
        xp.equal(part, maxima, out=hit)
        if has_nan:
            hit |= xp.isnan(part)
        if taken is None:
            taken = hit.copy()
        else:
            xp.greater(hit, taken, out=hit)  # hit and not taken: only the first maximum
            taken |= hit
        yield window, hit


def _route_to_maxima(xp, geom, x, gout, maxima):
    """dX of max pooling: each window's gout at its first maximum, +0.0 elsewhere.

    Selecting by AND-ing gout's bits with an all-ones or all-zeros mask is exact like
    ``where(hit, gout, 0)`` (inf and NaN included) and measured 2x faster. Windows that
    neither overlap nor reach padding write straight into dX, with no accumulation or crop.
    """
    bits = xp.dtype(f"uint{8 * gout.dtype.itemsize}")
    extent = geom.padded_extent()
    disjoint = extent == tuple(geom.size) and not any(geom.pads)  # no window leaves X
    disjoint = disjoint and all(s >= k for s, k in zip(geom.stride, geom.kernel))
    # Stride == kernel and the windows tile X: every element of dX is written.
    covered = disjoint and all(
        s == k and o * k == n for s, k, o, n in zip(geom.stride, geom.kernel, geom.out, geom.size)
    )
    shape = x.shape[:2] + extent
    gx = (xp.empty if covered else xp.zeros)(shape, dtype=gout.dtype)
    gout_bits, mask = gout.view(bits), xp.empty(gout.shape, dtype=bits)
    for window, hit in first_max_masks(xp, geom, x, maxima):
        mask[...] = hit
        xp.negative(mask, out=mask)  # True -> all ones, False -> 0
        dst = gx[(..., *window)]
        if disjoint:
            xp.bitwise_and(gout_bits, mask, out=dst.view(bits))
        else:
            dst += xp.bitwise_and(gout_bits, mask, out=mask).view(gout.dtype)
    return gx if disjoint else geom.crop(gx)


def _infer_pool_grad(attrs, x, gout, out=None):
    geom = check_geometry(attrs, x)
    expected = x.shape[:2] + geom.out
    for slot, given in (("Out@GRAD", gout), ("Out", out)):
        if given is not None and tuple(given.shape) != expected:
            raise ShapeError(
                None,
                f"{slot} does not have the pooling's output shape",
                expected=f"{expected} (X.shape={x.shape})",
                actual=str(given.shape),
            )
    return x.shape, x.dtype


@register(
    "pool2d_grad",
    inputs=("X", "Out@GRAD", "Out?"),
    outputs=("X@GRAD",),
    attrs=POOL_ATTRS,
    infer=_infer_pool_grad,
)
def pool2d_grad(xp, attrs, x, gout, out=None):
    """X@GRAD = Out@GRAD added back to the window elements pool2d read: to each window's first
    maximum (max), or divided by the window's divisor to each averaged element (avg). ``Out``,
    pool2d's output, saves max pooling recomputing the window maxima (absent: recomputed).

    Linear in Out@GRAD: its gradient for an upstream G is d(Out@GRAD) = max_pool2d_select(X, G)
    (max) or pool2d(G) (avg); X and Out get none (the argmax is piecewise constant).
    """
    geom = Geometry(attrs, x.shape[2:])
    if attrs["pooling_type"] == "max":
        return _route_to_maxima(xp, geom, x, gout, out)
    padded = xp.zeros(x.shape[:2] + geom.padded_extent(), dtype=gout.dtype)
    share = gout / geom.divisor(xp, attrs["exclusive"], gout.dtype)
    for _, window in geom.offsets():
        padded[(..., *window)] += share
    return geom.crop(padded)


@pool2d_grad.gradient
def _(g):
    x = g.inputs[0]
    (upstream,) = g.gouts
    if not g.needs(1):
        return None, None, None
    if g.attrs["pooling_type"] == "max":
        return None, apply(max_pool2d_select, (x, upstream), _window_attrs(g.attrs)), None
    return None, apply(pool2d, (upstream,), _pool_attrs(g.attrs)), None


def _infer_select(attrs, x, y):
    geom = check_geometry(attrs, x)
    if tuple(y.shape) != tuple(x.shape):
        raise ShapeError(None, "Y must have X's shape", expected=str(x.shape), actual=str(y.shape))
    return x.shape[:2] + geom.out, y.dtype


@register("max_pool2d_select", inputs=("X", "Y"), attrs=WINDOW_ATTRS, infer=_infer_select)
def max_pool2d_select(xp, attrs, x, y):
    """Out[n, c, oh, ow] = Y at the position of the first maximum of X's window (oh, ow): max
    pooling of X, read from Y. With Y = X it is max pooling; it is the adjoint of max pool2d_grad.

    dY = pool2d_grad(X, dOut) (max); X gets none (the argmax is piecewise constant).
    """
    geom = Geometry(attrs, x.shape[2:])
    padded = geom.pad(xp, y, 0)
    out = xp.zeros(x.shape[:2] + geom.out, dtype=y.dtype)
    for window, hit in first_max_masks(xp, geom, x):
        xp.copyto(out, padded[(..., *window)], where=hit)
    return out


@max_pool2d_select.gradient
def _(g):
    x, _ = g.inputs
    (gout,) = g.gouts
    if not g.needs(1):
        return None, None
    return None, apply(
        pool2d_grad, (x, gout, None), {**g.attrs, "pooling_type": "max", "exclusive": True}
    )
