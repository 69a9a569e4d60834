"""Cases for exp2, expm1, log2, log10, log1p, rsqrt and reciprocal (ops/exp_log.py).

The "tiny" cases check that expm1 and log1p keep their digits near 0, where exp(x) - 1 and
log(1 + x) would return 0 or rounding noise.
"""

import numpy as np

from tape.testing import OpCase
from tests.ops.cases_trig import uniform
from tests.ops.cases_unary import away_from, positive

_TINY = np.array([1e-30, -1e-12, 3e-8, -2e-5])

CASES = [
    OpCase("exp2", {"X": (3, 4)}, reference=np.exp2, double_grad=True),
    OpCase("exp2", {"X": ()}, reference=np.exp2, name="0d"),
    OpCase("expm1", {"X": (3, 4)}, reference=np.expm1, double_grad=True),
    OpCase(
        "expm1",
        {"X": _TINY},
        reference=np.expm1,
        tol={"float32": (1e-6, 0.0), "float64": (1e-15, 0.0)},
        name="tiny",
    ),
    OpCase("log2", {"X": positive((3, 4), 0.1, 8.0)}, reference=np.log2, double_grad=True),
    OpCase("log10", {"X": positive((3, 4), 0.1, 8.0)}, reference=np.log10, double_grad=True),
    OpCase("log1p", {"X": uniform((3, 4), -0.8, 3.0)}, reference=np.log1p, double_grad=True),
    OpCase(
        "log1p",
        {"X": _TINY},
        reference=np.log1p,
        tol={"float32": (1e-6, 0.0), "float64": (1e-15, 0.0)},
        name="tiny",
    ),
    OpCase("log1p", {"X": (0,)}, reference=np.log1p, name="size0"),
    OpCase(
        "rsqrt",
        {"X": positive((3, 4), 0.2, 5.0)},
        reference=lambda x: 1 / np.sqrt(x),
        double_grad=True,
    ),
    OpCase(
        "rsqrt",
        {"X": np.array([0.0, 0.25, 1e30])},
        reference=lambda x: 1 / np.sqrt(x),
        grad=False,
        name="edges",
    ),
    OpCase(
        "reciprocal",
        {"X": away_from((3, 4), 0.0, gap=0.3)},
        reference=np.reciprocal,
        double_grad=True,
    ),
    OpCase("reciprocal", {"X": ()}, reference=np.reciprocal, name="0d"),
]
