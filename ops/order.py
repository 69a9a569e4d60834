"""Order statistics along an axis: sort, argsort, topk, kthvalue and median; and searching a
sorted sequence: searchsorted and bucketize.

Sorting is always stable (a stable sort is one valid answer to an unstable request), NaN sorts
above every number as in PyTorch, and a descending sort keeps equal elements in index order (as
PyTorch's ``stable=True``). Values are differentiable through ``pick_along``: dX is dOut added
back at the returned indices. The functional calls return namedtuples ``(values, indices)``.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ops.along import scatter_back
from ops.infer import normalize_axis, require_real
from ops.registry import Attr, register
from ops.xp import promote
from tape.errors import AttrError, ShapeError
from tape.tape import apply

Sort = namedtuple("Sort", ["values", "indices"])
TopK = namedtuple("TopK", ["values", "indices"])
KthValue = namedtuple("KthValue", ["values", "indices"])
Median = namedtuple("Median", ["values", "indices"])

_INT64 = np.dtype(np.int64)


def argsort_along(xp, x, axis, descending):
    """Stable argsort along ``axis`` (int64). Descending sorts the reversed array ascending and
    maps back, so equal elements keep index order and NaN comes first."""
    if not descending:
        return xp.argsort(x, axis=axis, kind="stable").astype(np.int64, copy=False)
    reversed_order = xp.argsort(xp.flip(x, axis), axis=axis, kind="stable")
    return (x.shape[axis] - 1 - xp.flip(reversed_order, axis)).astype(np.int64, copy=False)


def _extent(x, axis):
    return x.shape[normalize_axis(None, axis, len(x.shape))] if x.shape else 1


def _with_extent(x, axis, extent):
    """X's shape with ``extent`` along ``axis`` (a 0-d X stays 0-d)."""
    if not x.shape:
        return ()
    axis = normalize_axis(None, axis, len(x.shape))
    return x.shape[:axis] + (extent,) + x.shape[axis + 1 :]


def _gradient_at_indices(g):
    """dX for an op whose Out holds X's entries at Indices along ``axis`` (both keep the axis)."""
    (x,), (_, indices), (gout, _) = g.inputs, g.outputs, g.gouts
    return (scatter_back(x, indices, gout, g.attrs["axis"]),)


# ---- sort and argsort -------------------------------------------------------------------------

_SORT_ATTRS = {
    "axis": Attr("int", -1),
    "descending": Attr("bool", False),
    "stable": Attr("bool", False),
}


def _infer_sort(attrs, x):
    normalize_axis(None, attrs["axis"], len(x.shape))
    return (x.shape, x.dtype), (x.shape, _INT64)


@register(
    "sort",
    inputs=("X",),
    outputs=("Out", "Indices"),
    attrs=_SORT_ATTRS,
    infer=_infer_sort,
    no_need_buffer=("X",),
    returns=lambda results: Sort(*results),
)
def sort(xp, attrs, x):
    """Out = X sorted along ``axis`` (ascending, or ``descending``), Indices = where each entry
    came from (int64): Out = pick_along(X, Indices). Always stable (``stable`` is accepted for
    PyTorch's signature); NaN sorts last ascending and first descending.

    dX = pick_along_grad(X, Indices, dOut).

    >>> import numpy as np, tape, ops
    >>> ops.sort(tape.Variable(np.array([3.0, 1.0, 2.0])), descending=True).indices.numpy()
    array([0, 2, 1])
    """
    if x.ndim == 0:
        return x.copy(), xp.zeros((), dtype=np.int64)
    indices = argsort_along(xp, x, attrs["axis"], attrs["descending"])
    return xp.take_along_axis(x, indices, axis=attrs["axis"]), indices


sort.gradient(_gradient_at_indices)


def _infer_argsort(attrs, x):
    normalize_axis(None, attrs["axis"], len(x.shape))
    return x.shape, _INT64


@register("argsort", inputs=("X",), attrs=_SORT_ATTRS, infer=_infer_argsort, differentiable=False)
def argsort(xp, attrs, x):
    """Out = the Indices of ``sort`` (int64, stable). Not differentiable."""
    if x.ndim == 0:
        return xp.zeros((), dtype=np.int64)
    return argsort_along(xp, x, attrs["axis"], attrs["descending"])


# ---- topk and kthvalue ------------------------------------------------------------------------


def _check_k(attrs, x, low):
    extent = _extent(x, attrs["axis"])
    if not low <= attrs["k"] <= extent:
        raise AttrError(
            None,
            "attribute 'k' is out of range for the axis",
            expected=f"{low} <= k <= {extent} (X.shape={x.shape}, axis={attrs['axis']})",
            actual=str(attrs["k"]),
        )


def _infer_topk(attrs, x):
    _check_k(attrs, x, 0)
    shape = _with_extent(x, attrs["axis"], attrs["k"])
    return (shape, x.dtype), (shape, _INT64)


@register(
    "topk",
    inputs=("X",),
    outputs=("Out", "Indices"),
    attrs={
        "k": Attr("int", required=True),
        "axis": Attr("int", -1),
        "largest": Attr("bool", True),
        "sorted": Attr("bool", True),
    },
    infer=_infer_topk,
    no_need_buffer=("X",),
    returns=lambda results: TopK(*results),
)
def topk(xp, attrs, x):
    """Out = the ``k`` largest (or smallest) entries along ``axis``, largest first (smallest
    first), Indices where they came from; NaN counts as the largest. Always sorted (``sorted``
    is accepted for PyTorch's signature; unsorted order is unspecified there). Among equal
    entries the lower index comes first (PyTorch leaves the choice among ties unspecified).

    dX = pick_along_grad(X, Indices, dOut).
    """
    if x.ndim == 0:
        return x.reshape(()).copy(), xp.zeros((), dtype=np.int64)
    axis, k = attrs["axis"], attrs["k"]
    order = argsort_along(xp, x, axis, attrs["largest"])
    indices = xp.take(order, xp.arange(k), axis=axis)
    return xp.take_along_axis(x, indices, axis=axis), indices


topk.gradient(_gradient_at_indices)


def _infer_kth(attrs, x):
    _check_k(attrs, x, 1)
    axis = normalize_axis(None, attrs["axis"], len(x.shape))
    shape = _with_extent(x, axis, 1) if attrs["keepdim"] else x.shape[:axis] + x.shape[axis + 1 :]
    return (shape, x.dtype), (shape, _INT64)


def _kept(g, var):
    """``var`` (an output of a keepdim=False reduction over one axis) with that axis kept."""
    from ops.shape import reshape

    x = g.inputs[0]
    if g.attrs["keepdim"] or not x.shape:
        return var
    return apply(reshape, (var,), {"shape": _with_extent(x, g.attrs["axis"], 1)})


@register(
    "kthvalue",
    inputs=("X",),
    outputs=("Out", "Indices"),
    attrs={
        "k": Attr("int", required=True),
        "axis": Attr("int", -1),
        "keepdim": Attr("bool", False),
    },
    infer=_infer_kth,
    no_need_buffer=("X",),
    returns=lambda results: KthValue(*results),
)
def kthvalue(xp, attrs, x):
    """Out = the ``k``-th smallest entry along ``axis`` (k from 1), Indices where it came from;
    among equal entries the one a stable sort puts k-th (PyTorch's choice among ties is
    unspecified).

    dX = pick_along_grad(X, Indices, dOut) (the axis kept).
    """
    if x.ndim == 0:
        return x.copy(), xp.zeros((), dtype=np.int64)
    axis = attrs["axis"]
    order = argsort_along(xp, x, axis, False)
    indices = xp.take(order, xp.arange(attrs["k"] - 1, attrs["k"]), axis=axis)
    values = xp.take_along_axis(x, indices, axis=axis)
    if attrs["keepdim"]:
        return values, indices
    return xp.squeeze(values, axis=axis), xp.squeeze(indices, axis=axis)


@kthvalue.gradient
def _(g):
    (x,), (_, indices), (gout, _) = g.inputs, g.outputs, g.gouts
    return (scatter_back(x, _kept(g, indices), _kept(g, gout), g.attrs["axis"]),)


# ---- median -----------------------------------------------------------------------------------


def _infer_median(attrs, x):
    axis = attrs["axis"]
    if axis is None:
        extent = int(np.prod(x.shape))
        shape = (1,) * len(x.shape) if attrs["keepdim"] else ()
    else:
        axis = normalize_axis(None, axis, len(x.shape))
        extent = x.shape[axis] if x.shape else 1
        shape = x.shape[:axis] + x.shape[axis + 1 :]
        if attrs["keepdim"]:
            shape = _with_extent(x, axis, 1)
    if extent == 0:
        raise ShapeError(
            None,
            "cannot take the median over an empty axis",
            expected="a reduced extent > 0",
            actual=f"X.shape={x.shape}, axis={attrs['axis']}",
        )
    return (shape, x.dtype), (shape, _INT64)


@register(
    "median",
    inputs=("X",),
    outputs=("Out", "Indices"),
    attrs={"axis": Attr("int", None), "keepdim": Attr("bool", False)},
    infer=_infer_median,
    no_need_buffer=("X",),
    returns=lambda results: Median(*results),
)
def median(xp, attrs, x):
    """Out = the lower median along ``axis`` (of all elements when None, Indices then being flat
    positions): the entry a stable sort puts at (n - 1) // 2, as PyTorch (no averaging for even
    n). A slice holding NaN has median NaN at its first NaN, as PyTorch.

    dX = pick_along_grad(X, Indices, dOut). ``Variable.median()`` returns only the values when
    no dim is given, as ``torch.median``.
    """
    axis, keepdim = attrs["axis"], attrs["keepdim"]
    source = x.reshape(-1) if axis is None or x.ndim == 0 else x
    along = 0 if axis is None or x.ndim == 0 else axis
    order = argsort_along(xp, source, along, False)
    middle = (source.shape[along] - 1) // 2
    indices = xp.take(order, xp.arange(middle, middle + 1), axis=along)
    if source.dtype.kind == "f":
        nan = xp.isnan(source)
        first_nan = xp.argmax(nan, axis=along, keepdims=True).astype(np.int64, copy=False)
        indices = xp.where(nan.any(axis=along, keepdims=True), first_nan, indices)
    values = xp.take_along_axis(source, indices, axis=along)
    if axis is None or x.ndim == 0:
        shape = (1,) * x.ndim if keepdim else ()
    else:
        shape = values.shape if keepdim else xp.squeeze(values, axis=axis).shape
    return values.reshape(shape), indices.reshape(shape)


@median.gradient
def _(g):
    from ops.shape import reshape

    (x,), (_, indices), (gout, _) = g.inputs, g.outputs, g.gouts
    if g.attrs["axis"] is not None and x.shape:
        return (scatter_back(x, _kept(g, indices), _kept(g, gout), g.attrs["axis"]),)
    flat = apply(reshape, (x,), {"shape": (-1,)})
    picked = [apply(reshape, (v,), {"shape": (1,)}) for v in (indices, gout)]
    return (apply(reshape, (scatter_back(flat, *picked, 0),), {"shape": x.shape}),)


# ---- searchsorted and bucketize ---------------------------------------------------------------


def _index_dtype(attrs):
    return np.dtype(np.int32) if attrs["out_int32"] else _INT64


def _side(attrs):
    """'left' or 'right' from torch's ``right`` and ``side`` (which must not disagree)."""
    side = attrs["side"]
    if side is not None and attrs["right"] and side == "left":
        raise AttrError(
            None,
            "attributes 'side' and 'right' disagree",
            expected="side='right' with right=True, or either alone",
            actual=f"side={side!r}, right=True",
        )
    return side or ("right" if attrs["right"] else "left")


def _infer_searchsorted(attrs, sequence, x):
    require_real(sequence, "SortedSequence")
    require_real(x, "X")
    _side(attrs)
    shapes = f"SortedSequence.shape={sequence.shape}, X.shape={x.shape}"
    if not sequence.shape:
        raise ShapeError(
            None,
            "the sorted sequence needs at least one axis",
            expected="SortedSequence of shape (N,) or (..., N)",
            actual=shapes,
        )
    if len(sequence.shape) > 1 and (
        len(x.shape) != len(sequence.shape) or x.shape[:-1] != sequence.shape[:-1]
    ):
        raise ShapeError(
            None,
            "a batched sorted sequence needs X with the same leading dimensions",
            expected="SortedSequence 1-D, or X.shape[:-1] == SortedSequence.shape[:-1]",
            actual=shapes,
        )
    return x.shape, _index_dtype(attrs)


_SEARCH_ATTRS = {
    "right": Attr("bool", False),
    "side": Attr("str", None, choices=("left", "right")),
    "out_int32": Attr("bool", False),
}


@register(
    "searchsorted",
    inputs=("SortedSequence", "X"),
    attrs=_SEARCH_ATTRS,
    infer=_infer_searchsorted,
    differentiable=False,
)
def searchsorted(xp, attrs, sequence, x):
    """Out = for each entry v of X, the index where v would be inserted into the sorted last axis
    of SortedSequence to keep it sorted: the first index i with v <= S[i] (``side='left'``, the
    default), or with v < S[i] (``right=True`` or ``side='right'``), as torch.searchsorted.
    SortedSequence is 1-D (X any shape) or (..., N) with X of shape (..., M), each row of X
    searched in its own row. Out is int64 (int32 with ``out_int32``); not differentiable.
    Compared in numpy's promotion of both dtypes; NaN in X sorts after every number (a sequence
    holding NaN has no defined answer, as in PyTorch).

    >>> import numpy as np, tape, ops
    >>> s = tape.Variable(np.array([1.0, 2.0, 2.0, 3.0]))
    >>> ops.searchsorted(s, np.array([2.0, 0.0, 5.0])).numpy()
    array([1, 0, 4])
    >>> ops.searchsorted(s, np.array([2.0, 0.0, 5.0]), right=True).numpy()
    array([3, 0, 4])
    """
    return search_sorted(xp, sequence, x, _side(attrs)).astype(_index_dtype(attrs), copy=False)


def search_sorted(xp, sequence, x, side):
    """The insertion points of X in SortedSequence's rows (see ``searchsorted``)."""
    sequence, x = promote(sequence, x)
    if sequence.ndim == 1:  # (through 1-D values, so a 0-d X gives a 0-d array, not a scalar)
        return xp.searchsorted(sequence, x.reshape(-1), side=side).reshape(x.shape)
    # Each row at once: a stable sort of the row's values merged with its sequence entries, the
    # values first for side='left' (so each sorts before the entries equal to it) and last for
    # 'right'; a value's answer is the count of sequence entries sorted before it.
    count, extent = x.shape[-1], sequence.shape[-1]
    merged = [x, sequence] if side == "left" else [sequence, x]
    order = xp.argsort(xp.concatenate(merged, axis=-1), axis=-1, kind="stable")
    from_sequence = order >= count if side == "left" else order < extent
    entries_before = xp.cumsum(from_sequence, axis=-1)
    place = xp.argsort(order, axis=-1)  # the inverse permutation: where each merged entry went
    values = place[..., :count] if side == "left" else place[..., extent:]
    return xp.take_along_axis(entries_before, values, axis=-1)


def _infer_bucketize(attrs, x, boundaries):
    require_real(x, "X")
    require_real(boundaries, "Boundaries")
    if len(boundaries.shape) != 1:
        raise ShapeError(
            None,
            "the boundaries must be one-dimensional",
            expected="Boundaries of shape (N,)",
            actual=f"Boundaries.shape={boundaries.shape}, X.shape={x.shape}",
        )
    return x.shape, _index_dtype(attrs)


@register(
    "bucketize",
    inputs=("X", "Boundaries"),
    attrs={"right": Attr("bool", False), "out_int32": Attr("bool", False)},
    infer=_infer_bucketize,
    differentiable=False,
)
def bucketize(xp, attrs, x, boundaries):
    """Out = for each entry v of X, the index i of its bucket among the sorted 1-D Boundaries B:
    B[i-1] < v <= B[i] (the default), or B[i-1] <= v < B[i] with ``right=True``; 0 below the
    first boundary and len(B) above the last (torch.bucketize: searchsorted(B, X) with the same
    ``right``). Out is int64 (int32 with ``out_int32``); not differentiable.

    >>> import numpy as np, tape, ops
    >>> b = np.array([1.0, 3.0, 5.0])
    >>> ops.bucketize(tape.Variable(np.array([[3.0, 6.0], [0.5, 4.0]])), b).numpy()
    array([[1, 3],
           [0, 2]])
    """
    side = "right" if attrs["right"] else "left"
    return search_sorted(xp, boundaries, x, side).astype(_index_dtype(attrs), copy=False)
