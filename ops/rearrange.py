"""PyTorch's re-arranging functions, composed from the shape ops (no new op types).

``permute``, ``movedim``, ``expand``, ``repeat``, ``flatten``, ``unflatten``, ``chunk``, ``unbind``
and ``meshgrid`` record ``transpose``, ``broadcast_to``, ``tile``, ``reshape`` and ``split``, so
they differentiate (any number of times) through those ops' gradients. They take PyTorch's
arguments, with ``axis`` for PyTorch's ``dim`` as everywhere in ``ops``; the Variable methods of
the same names (``x.permute(1, 0)``, ``x.flatten(1)``, ...) take PyTorch's exact signatures.
"""

from __future__ import annotations

import math

from ops.infer import normalize_axis
from ops.registry import REGISTRY
from tape.constants import as_variable
from tape.errors import ShapeError, user_location


def _sizes(sizes):
    """``f(x, 2, 3)`` and ``f(x, (2, 3))`` both give (2, 3)."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = sizes[0]
    return tuple(int(s) for s in sizes)


def _error(op, headline, expected=None, actual=None):
    return ShapeError(op, headline, expected=expected, actual=actual, location=user_location())


def _axis(op, axis, ndim):
    try:
        return normalize_axis(op, axis, ndim)
    except ShapeError as err:
        raise err.with_context(location=user_location()) from None


def permute(x, *dims):
    """X with its axes in the order ``dims`` (torch.permute), as op 'transpose'.

    >>> import numpy as np, tape, ops
    >>> ops.permute(tape.Variable(np.zeros((2, 3, 4))), 2, 0, 1).shape
    (4, 2, 3)
    """
    return REGISTRY["transpose"](as_variable(x), perm=_sizes(dims))


def movedim(x, source, destination):
    """X with axes ``source`` moved to positions ``destination`` (ints or sequences; the other
    axes keep their order), as op 'transpose' (torch.movedim, np.moveaxis).

    >>> import numpy as np, tape, ops
    >>> ops.movedim(tape.Variable(np.zeros((2, 3, 4))), 0, -1).shape
    (3, 4, 2)
    """
    x = as_variable(x)
    ndim = len(x.shape)
    source = (source,) if isinstance(source, int) else tuple(source)
    destination = (destination,) if isinstance(destination, int) else tuple(destination)
    src = [_axis("movedim", a, ndim) for a in source]
    dst = [_axis("movedim", a, ndim) for a in destination]
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise _error(
            "movedim",
            "source and destination must be distinct axes, as many of one as of the other",
            actual=f"source={source}, destination={destination}",
        )
    order = [a for a in range(ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return REGISTRY["transpose"](x, perm=order)


def expand(x, *sizes):
    """X broadcast to ``sizes`` (torch.Tensor.expand): -1 keeps an axis's extent, new axes may
    be added in front; as op 'broadcast_to'.  dX = dOut summed back to X's shape.

    >>> import numpy as np, tape, ops
    >>> ops.expand(tape.Variable(np.zeros((3, 1))), 2, -1, 4).shape
    (2, 3, 4)
    """
    x = as_variable(x)
    sizes, shape = _sizes(sizes), x.shape
    new = len(sizes) - len(shape)
    if new < 0 or any(s == -1 for s in sizes[:new]):
        raise _error(
            "expand",
            "the sizes must cover X's axes, and new leading axes cannot be -1",
            expected=f"at least {len(shape)} sizes for X.shape={shape}",
            actual=f"sizes={sizes}",
        )
    target = sizes[:new] + tuple(d if s == -1 else s for s, d in zip(sizes[new:], shape))
    for s, d in zip(target[new:], shape):
        if (s != d and d != 1) or s < 0:
            raise _error(
                "expand",
                "an axis of extent other than 1 can only keep its extent",
                expected=f"sizes compatible with X.shape={shape} (-1 keeps an axis)",
                actual=f"sizes={sizes}",
            )
    return REGISTRY["broadcast_to"](x, shape=target)


def repeat(x, *sizes):
    """X tiled ``sizes[i]`` times along axis i (torch.Tensor.repeat, which needs at least one
    size per axis; np.tile's numbers), as op 'tile'.

    >>> import numpy as np, tape, ops
    >>> ops.repeat(tape.Variable(np.array([1, 2])), 2, 2).numpy()
    array([[1, 2, 1, 2],
           [1, 2, 1, 2]])
    """
    x = as_variable(x)
    sizes = _sizes(sizes)
    if len(sizes) < len(x.shape):
        raise _error(
            "repeat",
            "repeat needs a count for every axis of X",
            expected=f"at least {len(x.shape)} counts (X.shape={x.shape})",
            actual=f"sizes={sizes}",
        )
    return REGISTRY["tile"](x, repeats=sizes)


def flatten(x, start_axis=0, end_axis=-1):
    """X with axes ``start_axis..end_axis`` merged into one (torch.flatten; a 0-d X becomes
    shape (1,)), as op 'reshape'.

    >>> import numpy as np, tape, ops
    >>> ops.flatten(tape.Variable(np.zeros((2, 3, 4))), 1).shape
    (2, 12)
    """
    x = as_variable(x)
    shape = x.shape or (1,)
    start, end = _axis("flatten", start_axis, len(shape)), _axis("flatten", end_axis, len(shape))
    if start > end:
        raise _error(
            "flatten",
            "start_axis comes after end_axis",
            expected="start_axis <= end_axis",
            actual=f"start_axis={start_axis}, end_axis={end_axis} (X.shape={x.shape})",
        )
    merged = shape[:start] + (math.prod(shape[start : end + 1]),) + shape[end + 1 :]
    return REGISTRY["reshape"](x, shape=merged)


def unflatten(x, axis, sizes):
    """X with axis ``axis`` split into axes of extents ``sizes`` (one may be -1), as op
    'reshape' (torch.unflatten).

    >>> import numpy as np, tape, ops
    >>> ops.unflatten(tape.Variable(np.zeros((2, 12))), 1, (3, -1)).shape
    (2, 3, 4)
    """
    x = as_variable(x)
    axis, sizes = _axis("unflatten", axis, len(x.shape)), tuple(int(s) for s in sizes)
    dim, known = x.shape[axis], math.prod(s for s in sizes if s != -1)
    if sizes.count(-1) == 1 and known and dim % known == 0:
        sizes = tuple(dim // known if s == -1 else s for s in sizes)
    if not sizes or math.prod(sizes) != dim or any(s < 0 for s in sizes):
        raise _error(
            "unflatten",
            "the sizes do not multiply to the axis's extent",
            expected=f"extents >= 0 (one may be -1) with product X.shape[{axis}] == {dim}",
            actual=f"sizes={sizes}",
        )
    return REGISTRY["reshape"](x, shape=x.shape[:axis] + sizes + x.shape[axis + 1 :])


def chunk(x, chunks, axis=0):
    """X split along ``axis`` into pieces of ceil(extent / chunks) (the last may be smaller, and
    there may be fewer than ``chunks``), as op 'split'; returns a list (torch.chunk).

    >>> import numpy as np, tape, ops
    >>> [c.shape for c in ops.chunk(tape.Variable(np.zeros(5)), 3)]
    [(2,), (2,), (1,)]
    """
    x = as_variable(x)
    if int(chunks) < 1:
        raise _error("chunk", "chunks must be at least 1", actual=f"chunks={chunks}")
    if not x.shape:
        raise _error("chunk", "a 0-d X cannot be chunked", expected="X with at least one axis")
    axis = _axis("chunk", axis, len(x.shape))
    dim = x.shape[axis]
    if dim == 0:
        return REGISTRY["split"](x, sections=(0,) * int(chunks), axis=axis)
    size = -(-dim // int(chunks))
    sections = (size,) * (dim // size) + ((dim % size,) if dim % size else ())
    return REGISTRY["split"](x, sections=sections, axis=axis)


def unbind(x, axis=0):
    """The slices of X along ``axis``, each without that axis (torch.unbind), as ops 'split' and
    'reshape'; returns a tuple.

    >>> import numpy as np, tape, ops
    >>> [t.shape for t in ops.unbind(tape.Variable(np.zeros((2, 3))), 1)]
    [(2,), (2,), (2,)]
    """
    x = as_variable(x)
    if not x.shape:
        raise _error("unbind", "a 0-d X cannot be unbound", expected="X with at least one axis")
    axis = _axis("unbind", axis, len(x.shape))
    if x.shape[axis] == 0:
        return ()
    shape = x.shape[:axis] + x.shape[axis + 1 :]
    pieces = REGISTRY["split"](x, num=x.shape[axis], axis=axis)
    return tuple(REGISTRY["reshape"](p, shape=shape) for p in pieces)


def meshgrid(*xs, indexing="ij"):
    """Coordinate grids from 1-d (or 0-d) inputs (torch.meshgrid): output k holds xs[k] along
    axis k and is broadcast along the others; ``indexing='xy'`` swaps the first two axes (the
    Cartesian convention). As ops 'reshape' and 'broadcast_to'; returns a list.

    >>> import numpy as np, tape, ops
    >>> [g.shape for g in ops.meshgrid(tape.Variable(np.zeros(2)), tape.Variable(np.zeros(3)))]
    [(2, 3), (2, 3)]
    """
    if len(xs) == 1 and isinstance(xs[0], (tuple, list)):
        xs = tuple(xs[0])
    xs = [as_variable(x) for x in xs]
    if indexing not in ("ij", "xy"):
        raise _error("meshgrid", "unknown indexing", expected="'ij' or 'xy'", actual=repr(indexing))
    for i, x in enumerate(xs):
        if len(x.shape) > 1:
            raise _error("meshgrid", "inputs must be 0-d or 1-d", actual=f"xs[{i}].shape={x.shape}")
    sizes = [x.shape[0] if x.shape else 1 for x in xs]
    swap = indexing == "xy" and len(xs) > 1
    order = [1, 0, *range(2, len(xs))] if swap else list(range(len(xs)))
    shape = tuple(sizes[k] for k in order)
    grids = []
    for k, x in enumerate(xs):
        at = order.index(k)
        line = tuple(sizes[k] if a == at else 1 for a in range(len(xs)))
        grids.append(REGISTRY["broadcast_to"](REGISTRY["reshape"](x, shape=line), shape=shape))
    return grids


__all__ = [
    "permute",
    "movedim",
    "expand",
    "repeat",
    "flatten",
    "unflatten",
    "chunk",
    "unbind",
    "meshgrid",
]
