"""Logical and bitwise ops: logical and/or/xor/not on truth values, bitwise and/or/xor/not and
shifts on integers (and bool, except shifts), broadcasting like the arithmetic ops.

None has a gradient. Logical ops take any dtype (nonzero is true) and give bool; bitwise ops
keep numpy's promotion of their integer inputs and refuse floats, as PyTorch does. Shifts by a
count at least the bit width give 0 (-1 for a negative X shifted right), as in PyTorch.
"""

from __future__ import annotations

import numpy as np

from ops.infer import broadcast_shapes, result_dtype
from ops.registry import register
from tape.errors import DTypeError

_BOOL = np.dtype(bool)
_FACTS = dict(elementwise=True, differentiable=False)


def _infer_logical(attrs, x, y):
    return broadcast_shapes(None, x.shape, y.shape), _BOOL


def _infer_logical_not(attrs, x):
    return x.shape, _BOOL


def _logical(op_type, ufunc, words):
    def kernel(xp, attrs, x, y):
        return getattr(xp, ufunc)(x, y)

    kernel.__doc__ = f"Out = X {words} Y as truth values (nonzero is true), bool; no gradient."
    return register(op_type, inputs=("X", "Y"), infer=_infer_logical, **_FACTS)(kernel)


logical_and = _logical("logical_and", "logical_and", "and")
logical_or = _logical("logical_or", "logical_or", "or")
logical_xor = _logical("logical_xor", "logical_xor", "xor")


@register("logical_not", inputs=("X",), infer=_infer_logical_not, **_FACTS)
def logical_not(xp, attrs, x):
    """Out = not X as a truth value (zero is false), bool; no gradient."""
    return xp.logical_not(x)


def _require_bits(var, slot, kinds):
    if var.dtype.kind not in kinds:
        what = "an integer or bool dtype" if "b" in kinds else "an integer dtype"
        raise DTypeError(
            None, f"input {slot} must have {what}", expected=what, actual=str(var.dtype)
        )


def _infer_bits(kinds):
    def infer(attrs, x, y):
        _require_bits(x, "X", kinds)
        _require_bits(y, "Y", kinds)
        dtype = result_dtype(x, y)
        if dtype.kind not in kinds:  # int64 with uint64 promotes to float64 in numpy
            raise DTypeError(
                None,
                "inputs X and Y have no common integer dtype",
                expected="integer dtypes that promote to an integer dtype",
                actual=f"X.dtype={x.dtype}, Y.dtype={y.dtype} -> {dtype}",
            )
        return broadcast_shapes(None, x.shape, y.shape), dtype

    return infer


def _bitwise(op_type, ufunc, symbol, kinds="biu"):
    def kernel(xp, attrs, x, y):
        return getattr(xp, ufunc)(x, y)

    kernel.__doc__ = f"Out = X {symbol} Y on the bits of integers; no gradient."
    return register(op_type, inputs=("X", "Y"), infer=_infer_bits(kinds), **_FACTS)(kernel)


bitwise_and = _bitwise("bitwise_and", "bitwise_and", "&")
bitwise_or = _bitwise("bitwise_or", "bitwise_or", "|")
bitwise_xor = _bitwise("bitwise_xor", "bitwise_xor", "^")
bitwise_left_shift = _bitwise("bitwise_left_shift", "left_shift", "<<", kinds="iu")
bitwise_right_shift = _bitwise("bitwise_right_shift", "right_shift", ">> (arithmetic)", kinds="iu")


def _infer_bitwise_not(attrs, x):
    _require_bits(x, "X", "biu")
    return x.shape, x.dtype


@register("bitwise_not", inputs=("X",), infer=_infer_bitwise_not, **_FACTS)
def bitwise_not(xp, attrs, x):
    """Out = ~X: every bit flipped (two's complement: ~5 == -6); logical not for bool."""
    return xp.invert(x)
