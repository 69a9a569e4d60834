"""Cases for remainder, fmod, floor_divide, copysign and lerp (ops/arithmetic.py).

remainder, fmod and floor_divide jump where X / Y crosses an integer: gradient cases build X as
Y * (k + f) with f in [0.1, 0.9], so finite differences never cross a jump. Integer cases
cover every sign combination of dividend and divisor.
"""

import numpy as np

from tape.testing import OpCase
from tests.ops.cases_unary import away_from


def _dividend_divisor(x_shape, y_shape, seed):
    """(X, Y) with |Y| in [0.5, 2] and X / Y an integer plus a fraction in [0.1, 0.9]; Y's
    shape broadcasts to X's."""
    rng = np.random.default_rng(seed)
    y = rng.uniform(0.5, 2.0, y_shape) * rng.choice([-1.0, 1.0], y_shape)
    quotient = rng.integers(-3, 3, x_shape) + rng.uniform(0.1, 0.9, x_shape)
    return y * quotient, y


_SAME = _dividend_divisor((3, 4), (3, 4), 1)
_BROADCAST = _dividend_divisor((2, 3, 4), (4,), 2)
_SCALAR_Y = _dividend_divisor((2, 3), (), 3)
_SIGNS_X = np.array([7.0, -7.0, 7.0, -7.0, 6.0, -6.0, 0.5])
_SIGNS_Y = np.array([3.0, 3.0, -3.0, -3.0, 3.0, 3.0, -2.0])
_INT_X = np.array([7, -7, 7, -7, 6, 0, -1], np.int64)
_INT_Y = np.array([3, 3, -3, -3, -3, 5, 4], np.int64)


def _division_cases(op, fn):
    return [
        OpCase(op, {"X": _SAME[0], "Y": _SAME[1]}, reference=fn, double_grad=True),
        OpCase(
            op,
            {"X": _BROADCAST[0], "Y": _BROADCAST[1]},
            reference=fn,
            double_grad=True,
            name="broadcast",
        ),
        OpCase(op, {"X": _SCALAR_Y[0], "Y": _SCALAR_Y[1]}, reference=fn, name="0d_y"),
        OpCase(op, {"X": _SIGNS_X, "Y": _SIGNS_Y}, reference=fn, grad=False, name="signs"),
        OpCase(op, {"X": _INT_X, "Y": _INT_Y}, reference=fn, grad=False, name="int"),
        OpCase(
            op,
            {"X": _INT_X.astype(np.int8), "Y": np.array(2, np.int32)},
            reference=fn,
            grad=False,
            name="int_promotion",
        ),
    ]


def np_lerp(x, end, weight):
    return x + weight * (end - x)


_NONZERO = away_from((3, 4), 0.0, gap=0.2)

CASES = [
    *_division_cases("remainder", np.remainder),
    *_division_cases("fmod", np.fmod),
    *_division_cases("floor_divide", np.floor_divide),
    OpCase("copysign", {"X": _NONZERO, "Y": _NONZERO}, reference=np.copysign, double_grad=True),
    OpCase(
        "copysign",
        {"X": away_from((2, 3, 4), 0.0, gap=0.2), "Y": away_from((4,), 0.0, gap=0.2)},
        reference=np.copysign,
        double_grad=True,
        name="broadcast",
    ),
    OpCase(
        "copysign",
        {
            "X": np.array([1.5, 1.5, -2.0, 0.0, -0.0, np.inf]),
            "Y": np.array([-0.0, 0.0, 3.0, -1.0, 1.0, -np.inf]),
        },
        reference=np.copysign,
        grad=False,
        name="signed_zeros",
    ),
    OpCase(
        "lerp",
        {
            "X": (3, 4),
            "End": (3, 4),
            "Weight": lambda rng, dt: rng.uniform(-0.5, 1.5, (3, 4)).astype(dt),
        },
        reference=np_lerp,
        double_grad=True,
    ),
    OpCase(
        "lerp",
        {"X": (2, 1, 4), "End": (3, 1), "Weight": np.array(0.75)},
        reference=np_lerp,
        double_grad=True,
        name="broadcast",
    ),
    OpCase(
        "lerp",
        {"X": (4,), "End": (4,), "Weight": np.array([0.0, 0.25, 0.5, 1.0])},
        reference=np_lerp,
        name="endpoints",
    ),
]
