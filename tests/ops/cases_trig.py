"""Cases for the trigonometric and hyperbolic ops (ops/trig.py).

Inputs stay inside each function's domain and away from its poles (tan near pi/2, asin/acos/
atanh near +-1, acosh near 1); the edges themselves are forward-only cases, and the gradients
there are compared with PyTorch in test_elementwise_math.py.
"""

import numpy as np

from tape.testing import OpCase
from tests.ops.cases_unary import positive


def uniform(shape, low, high):
    """Uniform values in [low, high]."""
    return lambda rng, dtype: rng.uniform(low, high, shape).astype(dtype)


_INSIDE_UNIT = uniform((3, 4), -0.9, 0.9)
_UNIT_EDGES = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])


def _wide(shape, scale=3.0):
    return lambda rng, dtype: (scale * rng.standard_normal(shape)).astype(dtype)


CASES = [
    OpCase("tan", {"X": uniform((3, 4), -1.2, 1.2)}, reference=np.tan, double_grad=True),
    OpCase("tan", {"X": ()}, reference=np.tan, name="0d"),
    OpCase("asin", {"X": _INSIDE_UNIT}, reference=np.arcsin, double_grad=True),
    OpCase("asin", {"X": _UNIT_EDGES}, reference=np.arcsin, grad=False, name="edges"),
    OpCase("acos", {"X": _INSIDE_UNIT}, reference=np.arccos, double_grad=True),
    OpCase("acos", {"X": _UNIT_EDGES}, reference=np.arccos, grad=False, name="edges"),
    OpCase("atan", {"X": _wide((3, 4))}, reference=np.arctan, double_grad=True),
    OpCase("atan", {"X": np.array([-1e30, -1.0, 0.0, 1e30])}, reference=np.arctan, name="far"),
    OpCase("sinh", {"X": (3, 4)}, reference=np.sinh, double_grad=True),
    OpCase("sinh", {"X": (0, 2)}, reference=np.sinh, name="size0"),
    OpCase("cosh", {"X": (3, 4)}, reference=np.cosh, double_grad=True),
    OpCase("asinh", {"X": _wide((3, 4))}, reference=np.arcsinh, double_grad=True),
    OpCase("acosh", {"X": positive((3, 4), 1.1, 4.0)}, reference=np.arccosh, double_grad=True),
    OpCase(
        "acosh", {"X": np.array([1.0, 2.0, 1e10])}, reference=np.arccosh, grad=False, name="edge"
    ),
    OpCase("atanh", {"X": _INSIDE_UNIT}, reference=np.arctanh, double_grad=True),
    OpCase("atanh", {"X": _UNIT_EDGES}, reference=np.arctanh, grad=False, name="edges"),
    # atan2(X, Y) with X the ordinate: broadcast both ways, 0-d, and every quadrant (gradients
    # away from the branch cut X = 0, Y < 0, where the angle jumps from pi to -pi).
    OpCase("atan2", {"X": (3, 4), "Y": (3, 4)}, reference=np.arctan2, double_grad=True),
    OpCase(
        "atan2",
        {"X": (2, 3, 4), "Y": (4,)},
        reference=np.arctan2,
        double_grad=True,
        name="broadcast_y",
    ),
    OpCase("atan2", {"X": (3, 1), "Y": (1, 4)}, reference=np.arctan2, name="broadcast_both"),
    OpCase("atan2", {"X": (), "Y": (3,)}, reference=np.arctan2, name="0d_x"),
    OpCase(
        "atan2",
        {"X": np.array([1.0, 1.0, -1.0, -1.0, 0.0, 0.5]), "Y": np.array([1, -1, 1, -1, 1, -1.0])},
        reference=np.arctan2,
        name="quadrants",
    ),
    OpCase(
        "atan2",
        {"X": np.array([0.0, -0.0, 0.0, -0.0]), "Y": np.array([0.0, 0.0, -0.0, -0.0])},
        reference=np.arctan2,
        grad=False,
        name="signed_zeros",
    ),
]
