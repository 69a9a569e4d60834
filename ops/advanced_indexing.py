"""numpy's advanced indexing as ops: ``index`` (``x[i0, :, i1]``) and its functional update
``index_put`` (``x[i0, :, i1] = v`` out of place, or ``+=`` with ``accumulate``), each the other's
gradient.

An index is a list of items, one per entry of the Python index: a slice, a new axis (``None``),
an int, an integer array (the next Variable of Indices) or ``...``. The attribute ``kinds`` codes
them (``SLICE``, ``NEWAXIS``, ``INT``, ``ARRAY``, ``ELLIPSIS``) and ``starts``/``ends``/``strides``
hold each item's slice bounds (an int item's value in ``starts``); axes after the last item are
taken whole. Without ``kinds`` every Index array indexes one leading axis
(``ops.index(x, [i, j])`` is ``x[i, j]``, PyTorch's ``index_put(x, (i, j), v)``). The kernels
hand exactly this index to numpy (or cupy), so the result is numpy's: the arrays and ints
broadcast together, and their axes replace the indexed ones in place when the advanced items are
adjacent, else go first (a None or a '...' between them, even an empty one, separates them).
"""

from __future__ import annotations

import builtins

import numpy as np

from ops.infer import broadcast_shapes, result_dtype
from ops.registry import Attr, register
from tape.errors import AttrError, DTypeError, IndexingError
from tape.tape import apply

SLICE, NEWAXIS, INT, ARRAY, ELLIPSIS = 0, 1, 2, 3, 4

_INDEX_ATTRS = {
    "kinds": Attr("ints", ()),
    "starts": Attr("ints", ()),
    "ends": Attr("ints", ()),
    "strides": Attr("ints", ()),
}


def _items(attrs, count):
    kinds = attrs["kinds"] or (ARRAY,) * count
    starts = attrs["starts"] or (0,) * len(kinds)
    ends = attrs["ends"] or (0,) * len(kinds)
    strides = attrs["strides"] or (1,) * len(kinds)
    if len({len(kinds), len(starts), len(ends), len(strides)}) != 1 or kinds.count(ARRAY) != count:
        raise AttrError(
            None,
            "the index attributes do not describe the Indices given",
            expected=f"kinds, starts, ends, strides of one length, {count} of kind ARRAY ({ARRAY})",
            actual=f"kinds={attrs['kinds']}, {count} Indices",
        )
    return list(zip(kinds, starts, ends, strides))


def python_index(attrs, indices):
    """The Python index tuple the attributes and the Indices arrays describe."""
    arrays, out = iter(indices), []
    for kind, start, end, stride in _items(attrs, len(indices)):
        if kind == SLICE:
            out.append(builtins.slice(start, end, stride))
        elif kind == NEWAXIS:
            out.append(None)
        elif kind == INT:
            out.append(start)
        elif kind == ELLIPSIS:
            out.append(Ellipsis)
        else:
            out.append(next(arrays))
    return tuple(out)


def _check_array(k, index, n, axis):
    if index.dtype.kind not in "iu":
        raise DTypeError(
            None,
            f"Indices[{k}] must hold integers",
            expected="an integer dtype",
            actual=str(index.dtype),
            hint="x[mask] indexes with a boolean mask",
        )
    known = getattr(index, "_value", None)
    if known is not None and known.size and (int(known.min()) < -n or int(known.max()) >= n):
        bad = int(known.max()) if int(known.max()) >= n else int(known.min())
        raise IndexingError(
            None,
            f"index {bad} is out of range for axis {axis} of extent {n}",
            expected=f"-{n} <= Indices[{k}] < {n}",
            actual=f"Indices[{k}] values in [{int(known.min())}, {int(known.max())}]",
        )


def indexed_shape(attrs, x_shape, indices):
    """The shape of ``x[index]`` by numpy's rules, checking every item against X."""
    items = _items(attrs, len(indices))
    used = sum(1 for item in items if item[0] not in (NEWAXIS, ELLIPSIS))
    if used > len(x_shape) or [item[0] for item in items].count(ELLIPSIS) > 1:
        raise IndexingError(
            None,
            "too many indices (or more than one ellipsis)",
            expected=f"at most {len(x_shape)} (X.shape={x_shape})",
            actual=str(used),
        )
    axis, arrays, pieces, broadcast = 0, iter(enumerate(indices)), [], ()
    for place, item in enumerate(items):
        width = len(x_shape) - used if item[0] == ELLIPSIS else int(item[0] != NEWAXIS)
        piece = _piece(item, x_shape[axis : axis + width], axis, arrays, bool(indices))
        if piece.__class__ is tuple:  # an advanced item: its shape joins the broadcast
            broadcast = broadcast_shapes(None, broadcast, piece, "earlier indices", f"item {place}")
        pieces.append(piece)
        axis += width
    pieces.append(list(x_shape[axis:]))
    places = [k for k, piece in enumerate(pieces) if piece.__class__ is tuple]
    if not places:
        return tuple(d for piece in pieces for d in piece)
    before = [d for piece in pieces[: places[0]] for d in piece]
    after = [d for piece in pieces[places[0] :] if piece.__class__ is list for d in piece]
    if places == list(range(places[0], places[0] + len(places))):  # adjacent: in place
        return tuple(before) + broadcast + tuple(after)
    return broadcast + tuple(before + after)


def _piece(item, dims, axis, arrays, has_arrays):
    """One item's contribution: a list of basic extents, or (advanced) its index's shape."""
    kind, start, end, stride = item
    if kind == NEWAXIS:
        return [1]
    if kind == ELLIPSIS:
        return list(dims)
    n = dims[0]
    if kind == SLICE:
        if stride == 0:
            raise AttrError(None, "a slice step cannot be zero", actual=f"axis {axis}")
        return [len(range(*builtins.slice(start, end, stride).indices(n)))]
    if kind == INT:
        if not -n <= start < n:
            raise IndexingError(
                None,
                f"index {start} is out of range for axis {axis} of extent {n}",
                expected=f"-{n} <= index < {n}",
                actual=str(start),
            )
        return () if has_arrays else []  # with arrays an int is advanced (a 0-d index)
    k, index = next(arrays)
    _check_array(k, index, n, axis)
    return tuple(index.shape)


def _infer_index(attrs, x, indices):
    return indexed_shape(attrs, x.shape, indices), x.dtype


@register(
    "index",
    inputs=("X", "Indices*"),
    attrs=_INDEX_ATTRS,
    infer=_infer_index,
    no_need_buffer=("X",),
)
def index(xp, attrs, x, indices):
    """Out = X[index] by numpy's rules, for an index of slices, None, ints and integer arrays
    (see the module docstring).

    dX = index_put(zeros like X, Indices, dOut, accumulate=True): repeated positions add up.

    >>> import numpy as np, tape, ops
    >>> x = tape.Variable(np.arange(12).reshape(3, 4))
    >>> ops.index(x, [np.array([0, 2]), np.array([1, 3])]).numpy()  # x[[0, 2], [1, 3]]
    array([ 1, 11])
    """
    return x[python_index(attrs, indices)]


@index.gradient
def _(g):
    from ops.fill import fill_zeros_like

    x, indices = g.inputs
    zeros = apply(fill_zeros_like, (x,), {})
    return apply(index_put, (zeros, indices, g.gouts[0]), dict(g.attrs, accumulate=True)), None


def _infer_index_put(attrs, x, indices, values):
    target = indexed_shape(attrs, x.shape, indices)
    if len(values.shape) > len(target) or broadcast_shapes(None, values.shape, target) != target:
        raise IndexingError(
            None,
            "Values cannot be broadcast to the indexed shape",
            expected=f"a shape that broadcasts to {target}",
            actual=f"Values.shape={values.shape}",
        )
    return x.shape, result_dtype(x, values)


@register(
    "index_put",
    inputs=("X", "Indices*", "Values"),
    attrs=dict(_INDEX_ATTRS, accumulate=Attr("bool", False)),
    infer=_infer_index_put,
)
def index_put(xp, attrs, x, indices, values):
    """Out = a copy of X with X[index] = Values (broadcast; Out has numpy's promotion of both
    dtypes, while ``x[index] = v`` casts v to x's dtype first, as numpy), or with Values added
    there when ``accumulate`` (repeated positions then add up; without it one of the
    repeated writes wins, as in PyTorch). X itself is unchanged: this is ``x[index] = v`` out of
    place (PyTorch's ``index_put``).

    dX = dOut, with the written positions zeroed unless ``accumulate``;
    dValues = dOut[index] summed to Values' shape.

    >>> import numpy as np, tape, ops
    >>> x = tape.Variable(np.zeros(4, np.float32))
    >>> ops.index_put(x, [np.array([0, 0, 3])], np.float32(1.0), accumulate=True).numpy()
    array([2., 0., 0., 1.], dtype=float32)
    """
    where = python_index(attrs, indices)
    out = x.astype(np.result_type(x.dtype, values.dtype), copy=True)
    if attrs["accumulate"]:
        xp.add.at(out, where, values.astype(out.dtype, copy=False))
    else:
        out[where] = values
    return out


@index_put.gradient
def _(g):
    from ops.reduce import sum_to
    from ops.unary import cast
    from tape.constants import constant

    x, indices, values = g.inputs
    (gout,), accumulate = g.gouts, g.attrs["accumulate"]
    read = {k: v for k, v in g.attrs.items() if k != "accumulate"}
    gx = gvalues = None
    if g.needs(0):
        gx = gout
        if not accumulate:
            cleared = dict(g.attrs, accumulate=False)
            gx = apply(index_put, (gout, indices, constant(0, gout)), cleared)
        if gx.dtype != x.dtype:
            gx = apply(cast, (gx,), {"out_dtype": x.dtype.name})
    if g.needs(2):
        gvalues = sum_to(apply(index, (gout, indices), read), values.shape)
        if gvalues.dtype != values.dtype:
            gvalues = apply(cast, (gvalues,), {"out_dtype": values.dtype.name})
    return gx, None, gvalues
