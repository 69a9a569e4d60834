"""Cases for floor, ceil, round, trunc and frac (ops/rounding.py).

Gradient cases keep the inputs away from the jumps (integers; halves for round), so finite
differences see the zero slope; exact halves and integer inputs are forward-only cases.
"""

import numpy as np

from tape.testing import OpCase
from tests.ops.cases_unary import away_from

_INTEGERS = tuple(float(k) for k in range(-3, 4))
_HALVES = tuple(k + 0.5 for k in range(-4, 4))
_OFF_INTEGERS = away_from((3, 4), *_INTEGERS, low=-3.0, high=3.0, gap=0.05)
_OFF_HALVES = away_from((3, 4), *_HALVES, low=-3.0, high=3.0, gap=0.05)
_TIES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5])
_INTS = np.array([[-7, 0, 3], [12, -1, 5]], np.int32)


def _identity(x, **attrs):
    return x


CASES = [
    OpCase("floor", {"X": _OFF_INTEGERS}, reference=np.floor, double_grad=True),
    OpCase("floor", {"X": _TIES}, reference=np.floor, grad=False, name="ties"),
    OpCase("floor", {"X": _INTS}, reference=_identity, grad=False, name="int"),
    OpCase("ceil", {"X": _OFF_INTEGERS}, reference=np.ceil, double_grad=True),
    OpCase("ceil", {"X": _INTS}, reference=_identity, grad=False, name="int"),
    OpCase("trunc", {"X": _OFF_INTEGERS}, reference=np.trunc, double_grad=True),
    OpCase("trunc", {"X": _TIES}, reference=np.trunc, grad=False, name="ties"),
    OpCase("trunc", {"X": ()}, reference=np.trunc, name="0d"),
    OpCase("round", {"X": _OFF_HALVES}, reference=np.round, double_grad=True),
    OpCase("round", {"X": _TIES}, reference=np.round, grad=False, name="half_to_even"),
    OpCase(
        "round",
        {"X": np.array([1.234567, -9.87654, 0.125, 1234.5678])},
        {"decimals": 2},
        reference=lambda x, decimals: np.round(x, decimals),
        grad=False,
        name="decimals",
    ),
    OpCase(
        "round",
        {"X": np.array([1234.5678, -1250.0, 49.9])},
        {"decimals": -2},
        reference=lambda x, decimals: np.round(x, decimals),
        grad=False,
        name="negative_decimals",
    ),
    OpCase("round", {"X": _INTS}, reference=_identity, grad=False, name="int"),
    OpCase(
        "frac",
        {"X": _OFF_INTEGERS},
        reference=lambda x: x - np.trunc(x),
        double_grad=True,
    ),
    OpCase(
        "frac",
        {"X": np.array([-2.75, -0.25, 0.0, 0.5, 3.0, 7.125])},
        reference=lambda x: x - np.trunc(x),
        grad=False,
        name="signs",
    ),
]
