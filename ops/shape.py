"""Shape ops: reshape, transpose, squeeze/unsqueeze, broadcast_to, concat, stack, split, slice,
gather and where. Their gradients are shape ops too, so they differentiate any number of times."""

from __future__ import annotations

import math

from ops.registry import Attr, register
from tape.errors import ShapeError
from tape.tape import apply


def _infer_reshape(attrs, x):
    shape = list(attrs["shape"])
    size = math.prod(x.shape)
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise ShapeError(None, "attribute 'shape' may hold at most one -1 and no other negatives",
                         actual=str(tuple(shape)))
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or size % known:
            raise ShapeError(None, "cannot infer the -1 dimension",
                             expected=f"a shape with {size} elements",
                             actual=f"shape={tuple(shape)} from X.shape={x.shape}")
        shape[shape.index(-1)] = size // known
    if math.prod(shape) != size:
        raise ShapeError(None, "the new shape has a different number of elements",
                         expected=f"{size} elements (X.shape={x.shape})",
                         actual=f"{math.prod(shape)} elements (shape={tuple(shape)})")
    return tuple(shape), x.dtype


@register("reshape", inputs=("X",), attrs={"shape": Attr("ints", required=True)},
          infer=_infer_reshape, no_need_buffer=("X",))
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
        raise ShapeError(None, "X cannot be broadcast to the target shape",
                         expected=f"a shape X.shape={x.shape} broadcasts to",
                         actual=f"shape={shape}")
    return shape, x.dtype


@register("broadcast_to", inputs=("X",), attrs={"shape": Attr("ints", required=True)},
          infer=_infer_broadcast_to, no_need_buffer=("X",))
def broadcast_to(xp, attrs, x):
    """Out = X broadcast to ``shape`` (numpy rules).  dX = dOut summed back to X's shape."""
    return xp.broadcast_to(x, attrs["shape"])


@broadcast_to.gradient
def _(g):
    from ops.reduce import sum_to

    return (sum_to(g.gouts[0], g.inputs[0].shape),)
