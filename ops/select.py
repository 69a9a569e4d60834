"""Selection ops: slice (basic indexing), gather (integer-array indexing) and where, with their
gradient ops (slice_grad writes back into zeros, slices_grad all slices of one X at once;
gather_grad scatter-adds repeated indices)."""

from __future__ import annotations

import builtins
import functools

import numpy as np

from ops import batching
from ops.infer import broadcast_shapes, normalize_axes, normalize_axis, promoted, result_dtype
from ops.registry import Attr, register
from ops.xp import scatter_add
from tape.errors import AttrError, DTypeError, IndexingError, ShapeError
from tape.tape import apply


def _slice_index(attrs, ndim, piece=0):
    """The tuple of Python slices ``X[...]`` takes for the slice attributes (of slice ``piece``
    where they list several, one after the other: ``slices_grad``).

    (This module's ``slice`` is the op, hence ``builtins.slice``.)
    """
    index = [builtins.slice(None)] * ndim
    axes, starts, ends, strides = attrs["axes"], attrs["starts"], attrs["ends"], attrs["strides"]
    for j, axis in enumerate(axes, piece * len(axes)):
        index[axis % ndim] = builtins.slice(starts[j], ends[j], strides[j] if strides else 1)
    return tuple(index)


def _infer_slice(attrs, x):
    """Out's shape; X's shape sliced but with the decreased axes kept (the kernels need it)."""
    ndim, axes = len(x.shape), attrs["axes"]
    strides = attrs["strides"]
    if (  # one axis in range, step 1, none dropped (``z[:, a:b]``): the common case, kept short
        len(axes) == 1
        and (not strides or (len(strides) == 1 and strides[0] == 1))
        and not attrs["decrease_axis"]
        and len(attrs["starts"]) == 1 == len(attrs["ends"])
        and -ndim <= axes[0] < ndim
    ):
        axis, shape = axes[0] % ndim, tuple(x.shape)
        cut = builtins.slice(attrs["starts"][0], attrs["ends"][0]).indices(shape[axis])
        return shape[:axis] + (len(range(*cut)),) + shape[axis + 1 :], x.dtype
    lengths = {len(attrs["starts"]), len(attrs["ends"]), len(attrs["strides"] or axes)}
    if lengths != {len(axes)}:
        raise AttrError(
            None,
            "attributes 'axes', 'starts', 'ends' and 'strides' differ in length",
            expected="one start, end (and stride) per axis",
            actual=f"axes={axes}, starts={attrs['starts']}, ends={attrs['ends']}, "
            f"strides={attrs['strides']}",
        )
    normalize_axes(None, axes, ndim)
    sliced = list(x.shape)
    for axis, cut in enumerate(_slice_index(attrs, ndim)):
        sliced[axis] = len(range(*cut.indices(sliced[axis])))
    drop = normalize_axes(None, attrs["decrease_axis"], ndim)
    for axis in drop:
        if sliced[axis] != 1:
            raise ShapeError(
                None,
                f"decrease_axis {axis} has extent {sliced[axis]} after slicing",
                expected="extent 1 on every axis in decrease_axis",
                actual=f"sliced shape {tuple(sliced)}",
            )
    return tuple(d for i, d in enumerate(sliced) if i not in drop), x.dtype


_SLICE_ATTRS = {
    "axes": Attr("ints", required=True),
    "starts": Attr("ints", required=True),
    "ends": Attr("ints", required=True),
    "strides": Attr("ints", (), check=lambda v: 0 not in v, rule="no zero strides"),
    "decrease_axis": Attr("ints", ()),
}


@register(
    "slice",
    inputs=("X",),
    attrs=_SLICE_ATTRS,
    infer=_infer_slice,
    no_need_buffer=("X",),
    batch=batching.SLICE,
)
def slice(xp, attrs, x):  # noqa: A001  (Paddle's name)
    """Out = X[starts:ends:strides] on ``axes`` (Python slicing: negatives count from the end,
    bounds are clamped), without the extent-1 axes listed in ``decrease_axis``.

    dX = slice_grad(X, dOut): dOut written into zeros of X's shape.
    """
    out = x[_slice_index(attrs, x.ndim) + (Ellipsis,)]  # '...': a 0-d array, never a scalar
    if attrs["decrease_axis"]:
        out = xp.squeeze(out, axis=attrs["decrease_axis"])
    return out


@slice.gradient
def _(g):
    return (apply(slice_grad, (g.inputs[0], g.gouts[0]), g.attrs),)


def _infer_slice_grad(attrs, x, gout):
    shape, _ = _infer_slice(attrs, x)
    if gout.shape != shape:
        raise ShapeError(
            None,
            "Out@GRAD does not have the slice's shape",
            expected=f"{shape} (slice of X.shape={x.shape})",
            actual=str(gout.shape),
        )
    return x.shape, result_dtype(x, gout)


@register(
    "slice_grad",
    inputs=("X", "Out@GRAD"),
    attrs=_SLICE_ATTRS,
    infer=_infer_slice_grad,
    no_need_buffer=("X",),
    batch=batching.SLICE,
)
def slice_grad(xp, attrs, x, gout):
    """Out = zeros of X's shape with Out@GRAD written into the slice (X's values are unused).

    d(Out@GRAD) = slice(dOut); X gets no gradient.
    """
    gx = xp.zeros(x.shape, dtype=np.result_type(x.dtype, gout.dtype))
    # The trailing '...' makes the window a view even of a 0-d X (``gx[()]`` is a scalar copy).
    window = gx[_slice_index(attrs, len(x.shape)) + (Ellipsis,)]
    window[...] = gout.reshape(window.shape)
    return gx


@slice_grad.gradient
def _(g):
    return None, apply(slice, (g.gouts[0],), g.attrs)


def piece_attrs(attrs, k):
    """The slice attributes of piece ``k`` of a ``slices_grad`` (its starts, ends and strides
    are those of every piece, one after the other)."""
    n = len(attrs["axes"])
    strides = attrs["strides"]
    return {
        "axes": attrs["axes"],
        "starts": attrs["starts"][k * n : (k + 1) * n],
        "ends": attrs["ends"][k * n : (k + 1) * n],
        "strides": strides[k * n : (k + 1) * n] if strides else (),
        "decrease_axis": attrs["decrease_axis"],
    }


class _Shape:
    """A stand-in for X in ``_infer_slice``: only its shape is read."""

    def __init__(self, shape):
        self.shape, self.dtype = tuple(shape), None


def _infer_slices_grad(attrs, gouts):
    n, count = len(attrs["axes"]), len(gouts)
    sizes = {len(attrs["starts"]), len(attrs["ends"]), len(attrs["strides"] or attrs["starts"])}
    if not count or sizes != {n * count}:
        raise AttrError(
            None,
            "'starts', 'ends' and 'strides' must hold one slice per Out@GRAD",
            expected=f"{n} values per Out@GRAD ({count} of them) in each",
            actual=f"starts={attrs['starts']}, ends={attrs['ends']}, strides={attrs['strides']}",
        )
    x = _Shape(attrs["shape"])
    for k, gout in enumerate(gouts):
        shape, _ = _infer_slice(piece_attrs(attrs, k), x)
        if tuple(gout.shape) != shape:
            raise ShapeError(
                None,
                f"Out@GRAD[{k}] does not have its slice's shape",
                expected=f"{shape} (slice {k} of shape={x.shape})",
                actual=str(gout.shape),
            )
    return x.shape, promoted(*gouts)


@register(
    "slices_grad",
    inputs=("Out@GRAD*",),
    attrs={"shape": Attr("ints", required=True), **_SLICE_ATTRS},
    infer=_infer_slices_grad,
    batch=batching.SLICES,
)
def slices_grad(xp, attrs, gouts):
    """Out = zeros of ``shape`` with each Out@GRAD[k] added into slice k: the gradient of a
    Variable of that shape read by several slices (an LSTM's gates cut from one product), one
    op and one buffer where one ``slice_grad`` each and their ``sum`` took k + 1 of each. Equal
    to that sum (bit for bit, but that pieces tiling the whole array along one axis, as gates
    do, are joined in one copy, so a -0.0 keeps its sign); a single slice is written as
    ``slice_grad`` writes it.

    d(Out@GRAD[k]) = slice k of dOut.
    """
    shape = tuple(attrs["shape"])
    tiling = _tiling(attrs, shape, len(gouts))
    if tiling is not None:  # (one pass over the output: zeros and k adds were 3.5x slower)
        axis, order = tiling
        return xp.concatenate([gouts[k].reshape(window) for k, window in order], axis=axis)
    out = xp.zeros(shape, dtype=np.result_type(*[g.dtype for g in gouts]))
    for k, gout in enumerate(gouts):
        window = out[_slice_index(attrs, len(shape), k) + (Ellipsis,)]
        if len(gouts) == 1:
            window[...] = gout.reshape(window.shape)
        else:
            window += gout.reshape(window.shape)  # (0 + g: the sum's rounding of -0.0 too)
    return out


def _tiling(attrs, shape, count):
    """(axis, [(piece, its window's shape)] in order) where the ``count`` pieces of a
    ``slices_grad`` cut ``shape`` along one axis into consecutive windows covering it, each
    once; else None. Cached by the attributes and shape (finding it was ~5 us of a 7 us
    LSTM gate gradient on 16 x 256)."""
    key = (attrs["axes"], attrs["starts"], attrs["ends"], attrs["strides"])
    try:
        return _cached_tiling(key, bool(attrs["decrease_axis"]), shape, count)
    except TypeError:  # (an attribute given as a list: unhashable)
        return _find_tiling(attrs, shape, count)


@functools.lru_cache(maxsize=1024)
def _cached_tiling(key, decrease, shape, count):
    axes, starts, ends, strides = key
    attrs = {
        "axes": axes,
        "starts": starts,
        "ends": ends,
        "strides": strides,
        "decrease_axis": decrease,
    }
    return _find_tiling(attrs, shape, count)  # (shared by later calls: a tuple)


def _find_tiling(attrs, shape, count):
    axes, strides = attrs["axes"], attrs["strides"]
    if len(axes) != 1 or attrs["decrease_axis"] or any(step != 1 for step in strides or ()):
        return None
    axis = axes[0] % len(shape) if shape else None
    if axis is None:
        return None
    dim = shape[axis]
    spans = sorted(
        (*builtins.slice(start, end).indices(dim)[:2], k)
        for k, (start, end) in enumerate(zip(attrs["starts"], attrs["ends"], strict=True))
    )
    at = 0
    for start, end, _ in spans:
        if start != at or end <= start:
            return None
        at = end
    if at != dim:
        return None
    return axis, tuple(
        (k, shape[:axis] + (end - start,) + shape[axis + 1 :]) for start, end, k in spans
    )


@slices_grad.gradient
def _(g):
    (gout,), count = g.gouts, len(g.inputs[0])
    return ([apply(slice, (gout,), piece_attrs(g.attrs, k)) for k in range(count)],)


def _infer_gather(attrs, x, index):
    if index.dtype.kind not in "iu":
        raise DTypeError(
            None,
            "input Index must hold integers",
            expected="an integer dtype",
            actual=str(index.dtype),
        )
    if not x.shape:
        raise ShapeError(None, "X must have at least one dimension", actual="X.shape == ()")
    axis = normalize_axis(None, attrs["axis"], len(x.shape))
    dim, known = x.shape[axis], index._value
    if known is not None and known.size:
        low, high = int(known.min()), int(known.max())
        if low < -dim or high >= dim:
            bad = high if high >= dim else low
            raise IndexingError(
                None,
                f"index {bad} is out of range for axis {axis} of extent {dim}",
                expected=f"-{dim} <= Index < {dim}",
                actual=f"Index values in [{low}, {high}], X.shape={x.shape}",
            )
    return x.shape[:axis] + index.shape + x.shape[axis + 1 :], x.dtype


@register(
    "gather",
    inputs=("X", "Index"),
    attrs={"axis": Attr("int", 0)},
    infer=_infer_gather,
    no_need_buffer=("X",),
)
def gather(xp, attrs, x, index):
    """Out = take(X, Index, axis) (negative indices count from the end); Out.shape is
    X.shape[:axis] + Index.shape + X.shape[axis + 1:]. This is Paddle's gather (np.take;
    torch.index_select for a 1-d Index); PyTorch's element-wise torch.gather is
    ``ops.take_along_dim`` (and the method ``x.gather(dim, index)``).

    dX = gather_grad(X, Index, dOut): dOut scatter-added into zeros (repeats accumulate).
    """
    return xp.take(x, index, axis=attrs["axis"])


@gather.gradient
def _(g):
    x, index = g.inputs
    return apply(gather_grad, (x, index, g.gouts[0]), g.attrs), None


def _infer_gather_grad(attrs, x, index, gout):
    shape, _ = _infer_gather(attrs, x, index)
    if gout.shape != shape:
        raise ShapeError(
            None,
            "Out@GRAD does not have the gather's shape",
            expected=str(shape),
            actual=str(gout.shape),
        )
    return x.shape, result_dtype(x, gout)


@register(
    "gather_grad",
    inputs=("X", "Index", "Out@GRAD"),
    attrs={"axis": Attr("int", 0)},
    infer=_infer_gather_grad,
    no_need_buffer=("X",),
)
def gather_grad(xp, attrs, x, index, gout):
    """Out = zeros of X's shape with Out@GRAD added at Index along ``axis`` (X's values unused).

    d(Out@GRAD) = gather(dOut, Index, axis); X and Index get none.
    """
    gx = xp.zeros(x.shape, dtype=np.result_type(x.dtype, gout.dtype))
    xp.add.at(gx, _along(attrs["axis"], len(x.shape), index), gout)
    return gx


@gather_grad.kernel_for("gpu")
def _(xp, attrs, x, index, gout):
    gx = xp.zeros(x.shape, dtype=np.result_type(x.dtype, gout.dtype))
    scatter_add(xp, gx, _along(attrs["axis"], len(x.shape), index), gout)
    return gx


def _along(axis, ndim, index):
    return (builtins.slice(None),) * (axis % ndim) + (index,)


@gather_grad.gradient
def _(g):
    _, index, _ = g.inputs
    return None, None, apply(gather, (g.gouts[0], index), g.attrs)


def _infer_where(attrs, condition, x, y):
    if condition.dtype.kind != "b":
        raise DTypeError(
            None, "input Condition must be boolean", expected="bool", actual=str(condition.dtype)
        )
    values = broadcast_shapes(None, x.shape, y.shape)
    return broadcast_shapes(None, condition.shape, values, "Condition", "X and Y"), result_dtype(
        x, y
    )


@register("where", inputs=("Condition", "X", "Y"), infer=_infer_where, no_need_buffer=("X", "Y"))
def where(xp, attrs, condition, x, y):
    """Out = X where Condition else Y (all three broadcast).

    dX = where(Condition, dOut, 0) and dY = where(Condition, 0, dOut), each summed to its shape.
    """
    return xp.where(condition, x, y)


@where.gradient
def _(g):
    from tape.constants import constant

    condition, x, y = g.inputs
    (gout,) = g.gouts
    zero = constant(0, gout)
    gx = _to_input(apply(where, (condition, gout, zero), {}), x) if g.needs(1) else None
    gy = _to_input(apply(where, (condition, zero, gout), {}), y) if g.needs(2) else None
    return None, gx, gy


def _to_input(grad, var):
    """A broadcast, promoted gradient reduced to ``var``'s shape and cast to its dtype."""
    from ops.reduce import sum_to
    from ops.unary import cast

    grad = sum_to(grad, var.shape)
    return grad if grad.dtype == var.dtype else apply(cast, (grad,), {"out_dtype": var.dtype.name})
