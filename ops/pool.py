"""2-D max and average pooling (NCHW), with gradient ops that route dOut back to the windows.

Every kernel loops over the kh*kw offsets of the window, each a strided slice of the padded input
covering all windows at once (measured here 20x faster than reducing a 6-D ``as_strided`` window
view). Max pooling's gradient goes to the first maximum of each window in row-major order, as in
PyTorch. The gradient ops are linear in Out@GRAD, and their adjoints are registered too
(``pool2d`` for average pooling, ``max_pool2d_select`` for max pooling), so gradients of any order
work; the argmax is piecewise constant in X, so no gradient flows to X from a gradient op.
"""

from __future__ import annotations

from ops.conv import four_paddings
from ops.registry import Attr, register
from tape.errors import DTypeError, ShapeError
from tape.tape import apply

_WINDOW_ATTRS = {
    "ksize": Attr(
        "ints", required=True, check=lambda v: len(v) == 2 and min(v) >= 1, rule="two ints >= 1"
    ),
    "strides": Attr(
        "ints",
        None,
        check=lambda v: len(v) == 2 and min(v) >= 1,
        rule="two ints >= 1 (None: equal to ksize)",
    ),
    "paddings": Attr(
        "ints",
        (0, 0),
        check=lambda v: len(v) in (2, 4) and min(v) >= 0,
        rule="two ints (h, w) or four (top, bottom, left, right), all >= 0",
    ),
    "ceil_mode": Attr("bool", False),
}
POOL_ATTRS = {
    "pooling_type": Attr("str", "max", choices=("max", "avg")),
    **_WINDOW_ATTRS,
    "exclusive": Attr("bool", True),
}


def _out_size(size, pad_lo, pad_hi, kernel, stride, ceil_mode):
    """PyTorch's pooling_output_shape: in ceil mode the last window must start inside the input
    or its leading padding."""
    out = (size + pad_lo + pad_hi - kernel + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad_lo:
        out -= 1
    return out


class _Geometry:
    """Window sizes, strides, paddings and output sizes of one pooling over an (H, W) input."""

    __slots__ = ("kernel", "stride", "pads", "out", "size")

    def __init__(self, attrs, size):
        self.kernel, self.size = attrs["ksize"], size
        self.stride = attrs["strides"] or self.kernel
        self.pads = four_paddings(attrs["paddings"])
        self.out = tuple(
            _out_size(
                size[a],
                self.pads[2 * a],
                self.pads[2 * a + 1],
                self.kernel[a],
                self.stride[a],
                attrs["ceil_mode"],
            )
            for a in (0, 1)
        )

    def padded_extent(self):
        """Rows and columns of the padded buffer: exactly what the windows reach."""
        return tuple(
            max(
                (self.out[a] - 1) * self.stride[a] + self.kernel[a], self.size[a] + self.pads[2 * a]
            )
            for a in (0, 1)
        )

    def offsets(self):
        """(offset index, window-position slices) for each kernel offset, row-major."""
        (kh, kw), (sh, sw), (oh, ow) = self.kernel, self.stride, self.out
        for i in range(kh):
            for j in range(kw):
                yield (
                    i * kw + j,
                    (slice(i, i + (oh - 1) * sh + 1, sh), slice(j, j + (ow - 1) * sw + 1, sw)),
                )

    def pad(self, xp, x, value):
        """x placed in a buffer of the padded extent filled with ``value`` (x itself if the
        windows never leave it)."""
        top, _, left, _ = self.pads
        extent = self.padded_extent()
        if not top and not left and extent == tuple(x.shape[2:]):
            return x
        out = xp.full(x.shape[:2] + extent, value, dtype=x.dtype)
        out[:, :, top : top + x.shape[2], left : left + x.shape[3]] = x
        return out

    def crop(self, padded):
        top, _, left, _ = self.pads
        return padded[:, :, top : top + self.size[0], left : left + self.size[1]]

    def divisor(self, xp, exclusive, dtype):
        """Elements averaged per window: the real ones (exclusive) or those inside the padding."""
        counts = []
        for a in (0, 1):
            starts = xp.arange(self.out[a]) * self.stride[a] - self.pads[2 * a]
            ends = xp.minimum(starts + self.kernel[a], self.size[a] + self.pads[2 * a + 1])
            if exclusive:
                starts, ends = xp.maximum(starts, 0), xp.minimum(ends, self.size[a])
            counts.append((ends - starts).astype(dtype))
        return counts[0][:, None] * counts[1][None, :]


def _check_geometry(attrs, x):
    if len(x.shape) != 4:
        raise ShapeError(
            None, "input X must be 4-D", expected="X (N, C, H, W)", actual=f"X.shape={x.shape}"
        )
    if x.dtype.kind != "f":
        raise DTypeError(
            None,
            "input X must be floating point",
            expected="float16, float32 or float64",
            actual=str(x.dtype),
        )
    geom = _Geometry(attrs, x.shape[2:])
    for a, axis in enumerate("HW"):
        pads = geom.pads[2 * a : 2 * a + 2]
        if 2 * max(pads) > geom.kernel[a]:
            raise ShapeError(
                None,
                "padding is more than half the window",
                expected=f"paddings along {axis} <= ksize / 2 = {geom.kernel[a] / 2}",
                actual=f"paddings={attrs['paddings']}, ksize={attrs['ksize']}",
            )
        if geom.out[a] < 1:
            raise ShapeError(
                None,
                "window is larger than the padded input",
                expected=f"ksize along {axis} ({geom.kernel[a]}) <= padded size "
                f"({x.shape[2 + a] + sum(pads)})",
                actual=f"X.shape={x.shape}, ksize={attrs['ksize']}, paddings={attrs['paddings']}",
            )
    return geom


def _infer_pool(attrs, x):
    geom = _check_geometry(attrs, x)
    return x.shape[:2] + geom.out, x.dtype


@register("pool2d", inputs=("X",), attrs=POOL_ATTRS, infer=_infer_pool)
def pool2d(xp, attrs, x):
    """Out[n, c, oh, ow] = max or mean of the window of ``ksize`` at (oh*sh, ow*sw) of X padded by
    ``paddings`` (NCHW; ``strides`` default to ``ksize``). Max ignores the padding; avg divides by
    the real elements when ``exclusive`` (PyTorch's count_include_pad=False), else by the window
    clipped to the padded input. ``ceil_mode`` keeps a last partial window (PyTorch's rule).

    dX = pool2d_grad(X, dOut, Out): dOut routed to each window's first maximum, or spread evenly
    over the averaged elements.

    >>> import numpy as np, tape, ops
    >>> x = tape.Variable(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    >>> ops.pool2d(x, ksize=[2, 2]).numpy()[0, 0]
    array([[ 5.,  7.],
           [13., 15.]], dtype=float32)
    >>> ops.pool2d(x, pooling_type="avg", ksize=[2, 2]).numpy()[0, 0]
    array([[ 2.5,  4.5],
           [10.5, 12.5]], dtype=float32)
    """
    geom = _Geometry(attrs, x.shape[2:])
    if attrs["pooling_type"] == "max":
        return _window_max(xp, geom, geom.pad(xp, x, -xp.inf))
    padded = geom.pad(xp, x, 0)
    out = None
    for _, window in geom.offsets():
        part = padded[(..., *window)]
        out = part.copy() if out is None else xp.add(out, part, out=out)
    return xp.divide(out, geom.divisor(xp, attrs["exclusive"], x.dtype), out=out)


def _pool_attrs(attrs):
    return {key: attrs[key] for key in POOL_ATTRS}


def _window_attrs(attrs):
    return {key: attrs[key] for key in _WINDOW_ATTRS}


@pool2d.gradient
def _(g):
    (x,), (out,), (gout,) = g.inputs, g.outputs, g.gouts
    # Max pooling's gradient compares X with the window maxima: pass the ones computed here.
    maxima = out if g.attrs["pooling_type"] == "max" else None
    return (apply(pool2d_grad, (x, gout, maxima), _pool_attrs(g.attrs)),)


def _window_max(xp, geom, padded):
    out = None
    for _, window in geom.offsets():
        part = padded[(..., *window)]
        out = part.copy() if out is None else xp.maximum(out, part, out=out)
    return out


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
        maxima = _window_max(xp, geom, padded)
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
    geom = _check_geometry(attrs, x)
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
    geom = _Geometry(attrs, x.shape[2:])
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
    geom = _check_geometry(attrs, x)
    if tuple(y.shape) != tuple(x.shape):
        raise ShapeError(None, "Y must have X's shape", expected=str(x.shape), actual=str(y.shape))
    return x.shape[:2] + geom.out, y.dtype


@register("max_pool2d_select", inputs=("X", "Y"), attrs=_WINDOW_ATTRS, infer=_infer_select)
def max_pool2d_select(xp, attrs, x, y):
    """Out[n, c, oh, ow] = Y at the position of the first maximum of X's window (oh, ow): max
    pooling of X, read from Y. With Y = X it is max pooling; it is the adjoint of max pool2d_grad.

    dY = pool2d_grad(X, dOut) (max); X gets none (the argmax is piecewise constant).
    """
    geom = _Geometry(attrs, x.shape[2:])
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
