"""Comparison ops: elementwise, broadcasting like the arithmetic ops, bool output, no gradient."""

from __future__ import annotations

import numpy as np

from ops.elementwise import aligned, infer_binary
from ops.registry import Attr, register

_BOOL = np.dtype(bool)


def _infer_compare(attrs, x, y):
    shape, _ = infer_binary(attrs, x, y)
    return shape, _BOOL


def _comparison(op_type, ufunc, symbol):
    def kernel(xp, attrs, x, y):
        return getattr(xp, ufunc)(x, aligned(x, y, attrs))

    kernel.__doc__ = f"Out = X {symbol} Y (bool); not differentiable."
    return register(
        op_type,
        inputs=("X", "Y"),
        attrs={"axis": Attr("int", -1)},
        infer=_infer_compare,
        elementwise=True,
        differentiable=False,
    )(kernel)


less_than = _comparison("less_than", "less", "<")
less_equal = _comparison("less_equal", "less_equal", "<=")
greater_than = _comparison("greater_than", "greater", ">")
greater_equal = _comparison("greater_equal", "greater_equal", ">=")
equal = _comparison("equal", "equal", "==")
not_equal = _comparison("not_equal", "not_equal", "!=")
