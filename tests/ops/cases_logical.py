"""Cases for the logical and bitwise ops (ops/logical.py) and the non-finite tests and
nan_to_num (ops/nonfinite.py). Only nan_to_num has a gradient."""

import numpy as np

from tape.testing import OpCase

_TRUTHS_X = np.array([[0.0, 1.5, -2.0], [0.0, 0.0, 3.0]])
_TRUTHS_Y = np.array([0.0, 2.0, 0.0])
_BOOL_X = np.array([True, True, False, False])
_BOOL_Y = np.array([True, False, True, False])
_INT_X = np.array([[12, -7, 0, 255], [1, -1, 6, -128]], np.int32)
_INT_Y = np.array([10, 3, -1, 15], np.int32)
_UINT = np.array([0, 1, 200, 255], np.uint8)
_COUNTS = np.array([[0, 1, 31, 32], [33, 64, 2, 5]], np.int64)
_SHIFTED = np.array([[1, -1, 5, -8], [3, -3, 1 << 40, -(1 << 40)]], np.int64)
_SPECIALS = np.array([[np.nan, np.inf, -np.inf], [0.0, -1.5, 1e30]])
_INTS = np.array([3, -4, 0], np.int64)


def _logical_cases(op, fn):
    return [
        OpCase(op, {"X": _TRUTHS_X, "Y": _TRUTHS_Y}, reference=fn, grad=False),
        OpCase(op, {"X": _BOOL_X, "Y": _BOOL_Y}, reference=fn, grad=False, name="bool"),
        OpCase(op, {"X": _INT_X, "Y": np.array(0)}, reference=fn, grad=False, name="int_0d"),
    ]


def _bitwise_cases(op, fn):
    return [
        OpCase(op, {"X": _INT_X, "Y": _INT_Y}, reference=fn, grad=False),
        OpCase(op, {"X": _BOOL_X, "Y": _BOOL_Y}, reference=fn, grad=False, name="bool"),
        OpCase(
            op, {"X": _UINT, "Y": np.array(0x0F, np.uint8)}, reference=fn, grad=False, name="uint8"
        ),
        OpCase(
            op,
            {"X": _INT_X.astype(np.int8), "Y": _INT_Y.astype(np.int64)},
            reference=fn,
            grad=False,
            name="promotion",
        ),
    ]


def _shift_cases(op, fn):
    return [
        OpCase(op, {"X": _SHIFTED, "Y": _COUNTS}, reference=fn, grad=False),
        OpCase(
            op,
            {"X": _UINT, "Y": np.array([0, 1, 3, 8], np.uint8)},
            reference=fn,
            grad=False,
            name="uint8",
        ),
        OpCase(op, {"X": _INTS, "Y": np.array(2, np.int64)}, reference=fn, grad=False, name="0d"),
    ]


def np_nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    return np.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)


CASES = [
    *_logical_cases("logical_and", np.logical_and),
    *_logical_cases("logical_or", np.logical_or),
    *_logical_cases("logical_xor", np.logical_xor),
    OpCase("logical_not", {"X": _TRUTHS_X}, reference=np.logical_not, grad=False),
    OpCase("logical_not", {"X": _INT_X}, reference=np.logical_not, grad=False, name="int"),
    *_bitwise_cases("bitwise_and", np.bitwise_and),
    *_bitwise_cases("bitwise_or", np.bitwise_or),
    *_bitwise_cases("bitwise_xor", np.bitwise_xor),
    OpCase("bitwise_not", {"X": _INT_X}, reference=np.invert, grad=False),
    OpCase("bitwise_not", {"X": _BOOL_X}, reference=np.invert, grad=False, name="bool"),
    OpCase("bitwise_not", {"X": _UINT}, reference=np.invert, grad=False, name="uint8"),
    *_shift_cases("bitwise_left_shift", np.left_shift),
    *_shift_cases("bitwise_right_shift", np.right_shift),
    # -- non-finite values
    OpCase("isnan", {"X": _SPECIALS}, reference=np.isnan, grad=False),
    OpCase("isnan", {"X": _INTS}, reference=np.isnan, grad=False, name="int"),
    OpCase("isinf", {"X": _SPECIALS}, reference=np.isinf, grad=False),
    OpCase("isinf", {"X": _INTS}, reference=np.isinf, grad=False, name="int"),
    OpCase("isfinite", {"X": _SPECIALS}, reference=np.isfinite, grad=False),
    OpCase("isfinite", {"X": _BOOL_X}, reference=np.isfinite, grad=False, name="bool"),
    OpCase("nan_to_num", {"X": (3, 4)}, reference=np_nan_to_num, double_grad=True),
    OpCase("nan_to_num", {"X": _SPECIALS}, reference=np_nan_to_num, grad=False, name="defaults"),
    OpCase(
        "nan_to_num",
        {"X": _SPECIALS},
        {"nan": -1.0, "posinf": 100.0, "neginf": -100.0},
        reference=np_nan_to_num,
        grad=False,
        name="replacements",
    ),
    OpCase("nan_to_num", {"X": _INTS}, reference=np_nan_to_num, grad=False, name="int"),
]
