"""Shape ops: reshape, transpose, squeeze/unsqueeze, broadcast_to, concat, stack and split.

Their gradients are shape ops too, so they differentiate any number of times. Selection (slice,
gather, where) lives in ``ops.select``."""

from __future__ import annotations

import itertools
import math

import numpy as np

from ops import batching, buffers
from ops.infer import check_list_inputs, kernel_axes, normalize_axes, normalize_axis
from ops.registry import Attr, register
from tape.errors import AttrError, ShapeError
from tape.tape import apply


def _infer_reshape(attrs, x):
    shape = list(attrs["shape"])
    size = math.prod(x.shape)
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise ShapeError(
            None,
            "attribute 'shape' may hold at most one -1 and no other negatives",
            actual=str(tuple(shape)),
        )
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or size % known:
            raise ShapeError(
                None,
                "cannot infer the -1 dimension",
                expected=f"a shape with {size} elements",
                actual=f"shape={tuple(shape)} from X.shape={x.shape}",
            )
        shape[shape.index(-1)] = size // known
    if math.prod(shape) != size:
        raise ShapeError(
            None,
            "the new shape has a different number of elements",
            expected=f"{size} elements (X.shape={x.shape})",
            actual=f"{math.prod(shape)} elements (shape={tuple(shape)})",
        )
    return tuple(shape), x.dtype


@register(
    "reshape",
    inputs=("X",),
    attrs={"shape": Attr("ints", required=True)},
    infer=_infer_reshape,
    no_need_buffer=("X",),
    batch=batching.VIEW,
)
def reshape(xp, attrs, x):
    """Out = X with a new shape (one -1 inferred).  dX = reshape(dOut, X.shape)."""
    return x.reshape(attrs["shape"])


@reshape.gradient
def _(g):
    return (apply(reshape, (g.gouts[0],), {"shape": g.inputs[0].shape}),)


def _infer_broadcast_to(attrs, x):
    from ops.infer import broadcast_shapes

    shape = tuple(attrs["shape"])
    if len(shape) < len(x.shape) or broadcast_shapes(None, x.shape, shape) != shape:
        raise ShapeError(
            None,
            "X cannot be broadcast to the target shape",
            expected=f"a shape X.shape={x.shape} broadcasts to",
            actual=f"shape={shape}",
        )
    return shape, x.dtype


@register(
    "broadcast_to",
    inputs=("X",),
    attrs={"shape": Attr("ints", required=True)},
    infer=_infer_broadcast_to,
    no_need_buffer=("X",),
)
def broadcast_to(xp, attrs, x):
    """Out = X broadcast to ``shape`` (numpy rules).  dX = dOut summed back to X's shape."""
    return xp.broadcast_to(x, attrs["shape"])


@broadcast_to.gradient
def _(g):
    from ops.reduce import sum_to

    return (sum_to(g.gouts[0], g.inputs[0].shape),)


def _infer_transpose(attrs, x):
    ndim = len(x.shape)
    perm = [p + ndim if p < 0 else p for p in attrs["perm"]]
    if sorted(perm) != list(range(ndim)):
        raise ShapeError(
            None,
            "attribute 'perm' is not a permutation of X's axes",
            expected=f"a permutation of 0..{ndim - 1} (X.shape={x.shape})",
            actual=f"perm={attrs['perm']}",
        )
    return tuple(x.shape[p] for p in perm), x.dtype


@register(
    "transpose",
    inputs=("X",),
    attrs={"perm": Attr("ints", required=True)},
    infer=_infer_transpose,
    no_need_buffer=("X",),
)
def transpose(xp, attrs, x):
    """Out = X with its axes permuted: Out.shape[i] = X.shape[perm[i]].

    dX = transpose(dOut, inverse(perm)).
    """
    return xp.transpose(x, attrs["perm"])


@transpose.gradient
def _(g):
    ndim = len(g.inputs[0].shape)
    perm = [p % ndim for p in g.attrs["perm"]]
    inverse = tuple(perm.index(i) for i in range(ndim))
    return (apply(transpose, (g.gouts[0],), {"perm": inverse}),)


def _infer_squeeze(attrs, x):
    axes = attrs["axes"]
    if not axes:
        return tuple(d for d in x.shape if d != 1), x.dtype
    drop = normalize_axes(None, axes, len(x.shape))
    for axis in drop:
        if x.shape[axis] != 1:
            raise ShapeError(
                None,
                f"cannot squeeze axis {axis} of extent {x.shape[axis]}",
                expected="every axis in 'axes' has extent 1",
                actual=f"X.shape={x.shape}, axes={axes}",
            )
    return tuple(d for i, d in enumerate(x.shape) if i not in drop), x.dtype


@register(
    "squeeze",
    inputs=("X",),
    attrs={"axes": Attr("ints", ())},
    infer=_infer_squeeze,
    no_need_buffer=("X",),
    batch=batching.VIEW,
)
def squeeze(xp, attrs, x):
    """Out = X without the listed size-1 axes (all size-1 axes when ``axes`` is empty).

    dX = reshape(dOut, X.shape).
    """
    axes = attrs["axes"]
    return xp.squeeze(x, axis=kernel_axes(axes, x.ndim) if axes else None)


@squeeze.gradient
def _(g):
    return (apply(reshape, (g.gouts[0],), {"shape": g.inputs[0].shape}),)


def _infer_unsqueeze(attrs, x):
    ndim = len(x.shape) + len(attrs["axes"])
    new = normalize_axes(None, attrs["axes"], ndim)
    dims = iter(x.shape)
    return tuple(1 if i in new else next(dims) for i in range(ndim)), x.dtype


@register(
    "unsqueeze",
    inputs=("X",),
    attrs={"axes": Attr("ints", required=True)},
    infer=_infer_unsqueeze,
    no_need_buffer=("X",),
    batch=batching.VIEW,
)
def unsqueeze(xp, attrs, x):
    """Out = np.expand_dims(X, axes): ``axes`` index Out's dimensions, which get extent 1.

    dX = reshape(dOut, X.shape).
    """
    axes = attrs["axes"]
    if len(axes) == 1:  # (the common case, as a reshape: a third of expand_dims' cost)
        axis = axes[0] + x.ndim + 1 if axes[0] < 0 else axes[0]
        return x.reshape(x.shape[:axis] + (1,) + x.shape[axis:])
    return xp.expand_dims(x, tuple(axes))


@unsqueeze.gradient
def _(g):
    return (apply(reshape, (g.gouts[0],), {"shape": g.inputs[0].shape}),)


def _infer_concat(attrs, xs):
    if xs and not xs[0].shape:
        raise ShapeError(
            None,
            "0-d inputs cannot be concatenated",
            expected="inputs with at least one dimension",
            actual="X[0].shape == ()",
        )
    axis = normalize_axis(None, attrs["axis"], len(xs[0].shape)) if xs else 0
    dtype = check_list_inputs(xs, axis, f" except along axis {axis}")
    total = 0
    for x in xs:  # (no generator: a frame per call)
        total += x.shape[axis]
    shape = xs[0].shape
    return shape[:axis] + (total,) + shape[axis + 1 :], dtype


@register(
    "concat",
    inputs=("X*",),
    attrs={"axis": Attr("int", 0)},
    infer=_infer_concat,
    no_need_buffer=("X",),
    batch=batching.CONCAT,
)
def concat(xp, attrs, xs):
    """Out = X[0], X[1], ... joined along ``axis``.  dX[i] = the matching piece of split(dOut).

    A large result is written into a reused buffer (``ops.buffers``): the joins of a weight's
    gradient product (``batch_products``) made 16 fresh 288 KiB arrays a step on the
    ``parallel`` benchmark and page-faulted each in again: ~70 us a concat, ~20 us pooled."""
    axis = attrs["axis"]
    first = xs[0] if xs else None
    if first.__class__ is np.ndarray and first.nbytes * len(xs) >= buffers.MIN_BYTES:
        dtype, ndim = first.dtype, first.ndim
        if ndim and all(x.__class__ is np.ndarray and x.dtype == dtype for x in xs):
            at = axis % ndim
            shape = list(first.shape)
            shape[at] = sum(x.shape[at] for x in xs)
            return np.concatenate(xs, axis=at, out=buffers.empty(np, shape, dtype))
    return xp.concatenate(xs, axis=axis)


@concat.gradient
def _(g):
    (xs,), (gout,) = g.inputs, g.gouts
    axis = g.attrs["axis"] % len(gout.shape)
    sections = tuple(x.shape[axis] for x in xs)
    return (apply(split, (gout,), {"num": 0, "sections": sections, "axis": axis}),)


def _infer_stack(attrs, xs):
    dtype = check_list_inputs(xs)
    axis = normalize_axis(None, attrs["axis"], len(xs[0].shape) + 1)
    shape = list(xs[0].shape)
    shape.insert(axis, len(xs))
    return tuple(shape), dtype


@register(
    "stack",
    inputs=("X*",),
    attrs={"axis": Attr("int", 0)},
    infer=_infer_stack,
    no_need_buffer=("X",),
)
def stack(xp, attrs, xs):
    """Out = X[0], X[1], ... (equal shapes) stacked along a new axis ``axis`` of Out.

    dX[i] = the i-th slice of dOut along ``axis``.
    """
    return xp.stack(xs, axis=attrs["axis"])


@stack.gradient
def _(g):
    (xs,), (gout,) = g.inputs, g.gouts
    axis = g.attrs["axis"] % len(gout.shape)
    pieces = apply(split, (gout,), {"num": len(xs), "sections": (), "axis": axis})
    return ([apply(reshape, (p,), {"shape": x.shape}) for p, x in zip(pieces, xs, strict=True)],)


def _split_sizes(attrs, x):
    """The normalized axis and the extent of each piece along it."""
    if not x.shape:
        raise ShapeError(None, "a 0-d X cannot be split", expected="X with at least one dimension")
    axis = normalize_axis(None, attrs["axis"], len(x.shape))
    dim, num, sections = x.shape[axis], attrs["num"], list(attrs["sections"])
    if (num > 0) == bool(sections):
        raise AttrError(
            None,
            "give exactly one of attributes 'num' and 'sections'",
            actual=f"num={num}, sections={tuple(sections)}",
        )
    if num:
        if dim % num:
            raise ShapeError(
                None,
                f"axis {axis} of extent {dim} cannot be split into {num} equal pieces",
                expected=f"X.shape[{axis}] divisible by num",
                actual=f"X.shape={x.shape}, num={num}",
            )
        return axis, [dim // num] * num
    known = sum(s for s in sections if s != -1)
    if sections.count(-1) == 1 and known <= dim:
        sections[sections.index(-1)] = dim - known
    if sum(sections) != dim or any(s < 0 for s in sections):
        raise ShapeError(
            None,
            "attribute 'sections' does not add up to the axis's extent",
            expected=f"sizes >= 0 (one may be -1) summing to X.shape[{axis}] == {dim}",
            actual=f"sections={attrs['sections']}",
        )
    return axis, sections


def _infer_split(attrs, x):
    axis, sizes = _split_sizes(attrs, x)
    shapes = [x.shape[:axis] + (size,) + x.shape[axis + 1 :] for size in sizes]
    return ([(shape, x.dtype) for shape in shapes],)


@register(
    "split",
    inputs=("X",),
    outputs=("Out*",),
    attrs={
        "num": Attr("int", 0, check=lambda v: v >= 0, rule=">= 0"),
        "sections": Attr("ints", ()),
        "axis": Attr("int", 0),
    },
    infer=_infer_split,
    no_need_buffer=("X",),
    returns=lambda results: results[0],
)
def split(xp, attrs, x):
    """Out = X cut along ``axis`` into ``num`` equal pieces or pieces of extents ``sections``
    (one may be -1: the rest); returns a list.

    dX = concat of the pieces' gradients (zeros for pieces no gradient reached).
    """
    axis, sizes = _split_sizes(attrs, x)
    bounds = list(itertools.accumulate(sizes))[:-1]
    return (xp.split(x, bounds, axis=axis),)


@split.gradient
def _(g):
    from ops.fill import fill_zeros_like

    (pieces,), (gouts,) = g.outputs, g.gouts
    grads = [
        gout if gout is not None else apply(fill_zeros_like, (piece,), {})
        for piece, gout in zip(pieces, gouts, strict=True)
    ]
    axis = g.attrs["axis"] % len(g.inputs[0].shape)
    return (apply(concat, (grads,), {"axis": axis}),)
