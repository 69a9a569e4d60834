"""Building gradient expressions from registered ops: the small helpers gradient makers share.

Each helper records one op through the engine's fast path (``apply``); ops are looked up by type
when called, so any op module can use these without import cycles.
"""

from __future__ import annotations

from ops.registry import REGISTRY
from tape.tape import apply

NUMPY_AXIS = {"axis": -1}  # elementwise ops with numpy broadcasting
NO_ATTRS = {}


def mul(x, y):
    """x * y (numpy broadcasting)."""
    return apply(REGISTRY["elementwise_mul"], (x, y), NUMPY_AXIS)


def add(x, y):
    """x + y (numpy broadcasting)."""
    return apply(REGISTRY["elementwise_add"], (x, y), NUMPY_AXIS)


def sub(x, y):
    """x - y (numpy broadcasting)."""
    return apply(REGISTRY["elementwise_sub"], (x, y), NUMPY_AXIS)


def div(x, y):
    """x / y (numpy broadcasting)."""
    return apply(REGISTRY["elementwise_div"], (x, y), NUMPY_AXIS)


def neg(x):
    """-x."""
    return apply(REGISTRY["neg"], (x,), NO_ATTRS)


def scale(x, factor, bias=0.0):
    """factor * x + bias, as one 'scale' op."""
    return apply(REGISTRY["scale"], (x,), {"scale": factor, "bias": bias, "bias_after_scale": True})


def sum_keep(x, axis):
    """The sum over one axis, keeping it as size 1 (ready to broadcast back)."""
    return apply(REGISTRY["reduce_sum"], (x,), {"axis": (axis,), "keepdim": True})
