"""Cases for hardtanh, relu6, hardsigmoid, hardswish, prelu, glu and their gradient ops
(ops/activation_hard.py).

Gradient cases keep the inputs away from the kinks; the kinks themselves are forward-only cases
here and are compared with PyTorch's gradients in test_activation_more.py.
"""

import numpy as np

from tape.testing import OpCase
from tests.ops.cases_unary import away_from, np_sigmoid


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def np_hardswish(x):
    x = _f64(x)
    return x * np.clip(x + 3, 0, 6) / 6


def np_hardswish_slope(x):
    x = _f64(x)
    return np.where(x <= -3, 0.0, np.where(x < 3, x / 3 + 0.5, 1.0))


def np_hardtanh_slope(x, min_val=-1.0, max_val=1.0):
    return ((x > min_val) & (x < max_val)).astype(np.float64)


def np_prelu(x, weight):
    x = _f64(x)
    if weight.size > 1:
        weight = weight.reshape((-1,) + (1,) * (x.ndim - 2))
    return np.where(x > 0, x, weight * x)


def np_glu(x, dim=-1):
    first, second = np.split(_f64(x), 2, axis=dim)
    return first * np_sigmoid(second)


_KINKS = np.array([-4.0, -3.0, -1.0, 0.0, 1.0, 3.0, 4.0, 6.0, 7.0])
_OFF_UNIT = away_from((3, 4), -1.0, 1.0)
_OFF_THREES = away_from((3, 4), -3.0, 3.0, low=-5.0, high=5.0)


def _positive_weight(shape):
    return lambda rng, dtype: rng.uniform(0.1, 0.5, shape).astype(dtype)


CASES = [
    OpCase("hardtanh", {"X": _OFF_UNIT}, reference=lambda x: np.clip(x, -1, 1), double_grad=True),
    OpCase(
        "hardtanh",
        {"X": away_from((3, 4), -0.5, 2.0, low=-3.0, high=3.0)},
        {"min_val": -0.5, "max_val": 2.0},
        reference=lambda x, min_val, max_val: np.clip(x, min_val, max_val),
        double_grad=True,
        name="bounds",
    ),
    OpCase(
        "hardtanh", {"X": _KINKS}, reference=lambda x: np.clip(x, -1, 1), grad=False, name="kinks"
    ),
    OpCase(
        "hardtanh_grad",
        {"X": _OFF_UNIT, "Out@GRAD": (3, 4)},
        reference=lambda x, gout: gout * np_hardtanh_slope(x),
        double_grad=True,
    ),
    OpCase(
        "hardtanh_grad",
        {"X": _KINKS, "Out@GRAD": np.ones(9)},
        {"min_val": 0.0, "max_val": 6.0},
        reference=lambda x, gout, **bounds: gout * np_hardtanh_slope(x, **bounds),
        grad=False,
        name="kinks",
    ),
    OpCase(
        "relu6",
        {"X": away_from((3, 4), 0.0, 6.0, low=-2.0, high=8.0)},
        reference=lambda x: np.clip(x, 0, 6),
        double_grad=True,
    ),
    OpCase("relu6", {"X": _KINKS}, reference=lambda x: np.clip(x, 0, 6), grad=False, name="kinks"),
    OpCase(
        "hardsigmoid",
        {"X": _OFF_THREES},
        reference=lambda x: np.clip(x + 3, 0, 6) / 6,
        double_grad=True,
    ),
    OpCase(
        "hardsigmoid",
        {"X": _KINKS},
        reference=lambda x: np.clip(x + 3, 0, 6) / 6,
        grad=False,
        name="kinks",
    ),
    OpCase("hardswish", {"X": _OFF_THREES}, reference=np_hardswish, double_grad=True),
    OpCase("hardswish", {"X": _KINKS}, reference=np_hardswish, grad=False, name="kinks"),
    OpCase(
        "hardswish_grad",
        {"X": _OFF_THREES, "Out@GRAD": (3, 4)},
        reference=lambda x, gout: gout * np_hardswish_slope(x),
        double_grad=True,
    ),
    OpCase(
        "hardswish_grad",
        {"X": _KINKS, "Out@GRAD": np.ones(9)},
        reference=lambda x, gout: gout * np_hardswish_slope(x),
        grad=False,
        name="kinks",
    ),
    OpCase(
        "prelu",
        {"X": away_from((2, 3, 4), 0.0), "Weight": _positive_weight((3,))},
        reference=np_prelu,
        double_grad=True,
    ),
    OpCase(
        "prelu",
        {"X": away_from((2, 3, 2, 2), 0.0), "Weight": (1,)},
        reference=np_prelu,
        double_grad=True,
        name="shared_weight",
    ),
    OpCase(
        "prelu",
        {"X": away_from((5,), 0.0), "Weight": (1,)},
        reference=np_prelu,
        name="1d",
    ),
    OpCase(
        "prelu",
        {"X": away_from((2, 3), 0.0), "Weight": ()},
        reference=np_prelu,
        name="0d_weight",
    ),
    OpCase(
        "prelu",
        {"X": np.array([[-2.0, 0.0, 3.0]]), "Weight": np.array([0.25])},
        reference=np_prelu,
        grad=False,
        name="zero",
    ),
    OpCase("glu", {"X": (3, 6)}, reference=np_glu, double_grad=True),
    OpCase("glu", {"X": (4, 3)}, {"dim": 0}, reference=np_glu, double_grad=True, name="dim0"),
    OpCase("glu", {"X": (2, 4, 3)}, {"dim": 1}, reference=np_glu, name="dim1"),
    OpCase("glu", {"X": (2,)}, reference=np_glu, name="1d"),
]
