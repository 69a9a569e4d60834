"""Movement ops that copy elements to new positions: flip, roll, tile and repeat_interleave.

Each gradient moves dOut back (flip and roll are their own adjoints up to the sign of the shift;
tile and repeat_interleave sum the copies), built from registered ops, so they differentiate any
number of times. Pure re-arrangements composed from shape ops (permute, expand, flatten, chunk,
...) live in ``ops.rearrange``.
"""

from __future__ import annotations

import math

import numpy as np

from ops.infer import normalize_axes, normalize_axis, result_dtype
from ops.registry import Attr, register
from tape.errors import AttrError, ShapeError
from tape.tape import apply


def _infer_flip(attrs, x):
    normalize_axes(None, attrs["axis"], len(x.shape))
    return x.shape, x.dtype


@register(
    "flip",
    inputs=("X",),
    attrs={"axis": Attr("ints", required=True)},
    infer=_infer_flip,
    no_need_buffer=("X",),
)
def flip(xp, attrs, x):
    """Out = X reversed along each axis in ``axis`` (torch.flip).  dX = flip(dOut, axis).

    >>> import numpy as np, tape, ops
    >>> ops.flip(tape.Variable(np.arange(6).reshape(2, 3)), axis=[1]).numpy()
    array([[2, 1, 0],
           [5, 4, 3]])
    """
    return xp.flip(x, axis=attrs["axis"]) if x.ndim else x


@flip.gradient
def _(g):
    return (apply(flip, (g.gouts[0],), g.attrs),)


def _infer_roll(attrs, x):
    shifts, axis = attrs["shifts"], attrs["axis"]
    if axis is None and len(shifts) != 1:
        raise AttrError(
            None,
            "without 'axis', roll takes a single shift (of the flattened X)",
            actual=f"shifts={shifts}",
        )
    if axis is not None:
        if len(axis) != len(shifts):
            raise AttrError(
                None,
                "attributes 'shifts' and 'axis' differ in length",
                expected="one shift per axis",
                actual=f"shifts={shifts}, axis={axis}",
            )
        for a in axis:
            normalize_axis(None, a, len(x.shape))
    return x.shape, x.dtype


@register(
    "roll",
    inputs=("X",),
    attrs={"shifts": Attr("axes", required=True), "axis": Attr("axes", None)},
    infer=_infer_roll,
    no_need_buffer=("X",),
)
def roll(xp, attrs, x):
    """Out = X shifted cyclically by ``shifts[i]`` along ``axis[i]`` (torch.roll; no axis: the
    flattened X, reshaped back).  dX = roll(dOut, -shifts, axis)."""
    shifts, axis = attrs["shifts"], attrs["axis"]
    return xp.roll(x, shifts[0] if axis is None else shifts, axis=axis)


@roll.gradient
def _(g):
    back = {"shifts": tuple(-s for s in g.attrs["shifts"]), "axis": g.attrs["axis"]}
    return (apply(roll, (g.gouts[0],), back),)


def _tile_layout(x_shape, repeats):
    """X's shape and the repeats, both padded with leading 1s to the same length (np.tile)."""
    n = max(len(x_shape), len(repeats))
    return (1,) * (n - len(x_shape)) + tuple(x_shape), (1,) * (n - len(repeats)) + tuple(repeats)


def _infer_tile(attrs, x):
    if any(r < 0 for r in attrs["repeats"]):
        raise AttrError(
            None,
            "attribute 'repeats' has a negative count",
            expected="counts >= 0",
            actual=str(attrs["repeats"]),
        )
    shape, reps = _tile_layout(x.shape, attrs["repeats"])
    return tuple(d * r for d, r in zip(shape, reps)), x.dtype


@register(
    "tile",
    inputs=("X",),
    attrs={"repeats": Attr("ints", required=True)},
    infer=_infer_tile,
    no_need_buffer=("X",),
)
def tile(xp, attrs, x):
    """Out = X repeated ``repeats[i]`` times along axis i (np.tile, torch.tile; the shorter of
    X.shape and ``repeats`` is padded with leading 1s).

    dX = dOut reshaped to (r0, d0, r1, d1, ...) and summed over the r axes.
    """
    return xp.tile(x, attrs["repeats"])


@tile.gradient
def _(g):
    from ops.reduce import reduce_sum
    from ops.shape import reshape

    (x,), (gout,) = g.inputs, g.gouts
    shape, reps = _tile_layout(x.shape, g.attrs["repeats"])
    pairs = tuple(d for pair in zip(reps, shape) for d in pair)
    split = apply(reshape, (gout,), {"shape": pairs})
    axes = tuple(range(0, len(pairs), 2))
    summed = apply(reduce_sum, (split,), {"axis": axes, "keepdim": False})
    return (apply(reshape, (summed,), {"shape": x.shape}),)


def _interleave_layout(attrs, x):
    """(axis or None, extent of the repeated axis, the repeat count per element)."""
    repeats, axis = attrs["repeats"], attrs["axis"]
    if axis is None:
        dim = math.prod(x.shape)
    else:
        if not x.shape:
            raise ShapeError(None, "a 0-d X has no axis to repeat along", actual=f"axis={axis}")
        axis = normalize_axis(None, axis, len(x.shape))
        dim = x.shape[axis]
    if len(repeats) == 1:
        repeats = repeats * dim
    if len(repeats) != dim or any(r < 0 for r in repeats):
        raise AttrError(
            None,
            "attribute 'repeats' must hold one count >= 0, or one per element along the axis",
            expected=f"1 or {dim} counts >= 0",
            actual=f"repeats={attrs['repeats']}",
        )
    return axis, dim, repeats


def _infer_repeat_interleave(attrs, x):
    axis, _, repeats = _interleave_layout(attrs, x)
    if axis is None:
        return (sum(repeats),), x.dtype
    return x.shape[:axis] + (sum(repeats),) + x.shape[axis + 1 :], x.dtype


_INTERLEAVE_ATTRS = {"repeats": Attr("axes", required=True), "axis": Attr("int", None)}


@register(
    "repeat_interleave",
    inputs=("X",),
    attrs=_INTERLEAVE_ATTRS,
    infer=_infer_repeat_interleave,
    no_need_buffer=("X",),
)
def repeat_interleave(xp, attrs, x):
    """Out = each element of X along ``axis`` repeated ``repeats`` times in place (np.repeat,
    torch.repeat_interleave); ``repeats`` is one count or one per element; no axis: the
    flattened X.

    dX = repeat_interleave_grad(X, dOut): each element's copies summed.

    >>> import numpy as np, tape, ops
    >>> ops.repeat_interleave(tape.Variable(np.array([1, 2])), repeats=[1, 3], axis=0).numpy()
    array([1, 2, 2, 2])
    """
    axis, _, repeats = _interleave_layout(attrs, x)
    counts = repeats[0] if len(set(repeats)) == 1 else list(repeats)
    return xp.repeat(x, counts, axis=axis)


@repeat_interleave.gradient
def _(g):
    return (apply(repeat_interleave_grad, (g.inputs[0], g.gouts[0]), g.attrs),)


def _infer_repeat_interleave_grad(attrs, x, gout):
    shape, _ = _infer_repeat_interleave(attrs, x)
    if gout.shape != shape:
        raise ShapeError(
            None,
            "Out@GRAD does not have repeat_interleave's output shape",
            expected=str(shape),
            actual=str(gout.shape),
        )
    return x.shape, result_dtype(x, gout)


@register(
    "repeat_interleave_grad",
    inputs=("X", "Out@GRAD"),
    attrs=_INTERLEAVE_ATTRS,
    infer=_infer_repeat_interleave_grad,
    no_need_buffer=("X",),
)
def repeat_interleave_grad(xp, attrs, x, gout):
    """Out = Out@GRAD with each element's copies summed, in X's shape (X's values are unused).

    d(Out@GRAD) = repeat_interleave(dOut); X gets none.
    """
    axis, dim, repeats = _interleave_layout(attrs, x)
    flat = axis is None
    if flat:
        gout, axis = gout.reshape(-1), 0
    # Segment i of Out@GRAD along the axis holds element i's copies: scatter-add them back.
    owner = xp.repeat(xp.arange(dim), list(repeats))
    shape = gout.shape[:axis] + (dim,) + gout.shape[axis + 1 :]
    gx = xp.zeros(shape, dtype=np.result_type(x.dtype, gout.dtype))
    xp.add.at(gx, (slice(None),) * axis + (owner,), gout)
    return gx.reshape(x.shape) if flat else gx


@repeat_interleave_grad.gradient
def _(g):
    from ops.select import _to_input

    return None, _to_input(apply(repeat_interleave, (g.gouts[0],), g.attrs), g.inputs[1])
