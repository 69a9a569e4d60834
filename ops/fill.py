"""Fill ops: constants of a given shape (the seed's initializer) and zeros/ones like a variable."""

from __future__ import annotations

import numpy as np

from ops.registry import Attr, register
from tape.errors import ShapeError


def _infer_fill(attrs, *inputs):
    shape = attrs["shape"]
    if any(d < 0 for d in shape):
        raise ShapeError(
            None,
            "attribute 'shape' has a negative dimension",
            expected="dimensions >= 0",
            actual=str(shape),
        )
    return tuple(shape), np.dtype(attrs["dtype"])


@register(
    "fill_constant",
    inputs=(),
    attrs={
        "shape": Attr("ints", required=True),
        "value": Attr("float", 0.0),
        "dtype": Attr("dtype", "float32"),
    },
    infer=_infer_fill,
    differentiable=False,
)
def fill_constant(xp, attrs, *inputs):
    """Out = an array of ``shape`` filled with ``value``, as ``dtype`` (no inputs, no gradient)."""
    return xp.full(attrs["shape"], attrs["value"], dtype=attrs["dtype"])


def _infer_like(attrs, x):
    return x.shape, x.dtype


@register(
    "fill_zeros_like", inputs=("X",), infer=_infer_like, differentiable=False, no_need_buffer=("X",)
)
def fill_zeros_like(xp, attrs, x):
    """Out = zeros with X's shape and dtype (no gradient)."""
    return xp.zeros_like(x)


@register(
    "fill_ones_like", inputs=("X",), infer=_infer_like, differentiable=False, no_need_buffer=("X",)
)
def fill_ones_like(xp, attrs, x):
    """Out = ones with X's shape and dtype (no gradient); the seed gradient of a loss."""
    return xp.ones_like(x)
