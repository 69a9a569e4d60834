"""Cases for silu, quick_gelu, mish, logsigmoid, softsign, selu, celu and their gradient ops
(ops/activation_smooth.py).

The "extremes" cases check that nothing overflows or turns into NaN at |X| up to 1000; softsign,
selu and celu, whose derivatives have a kink at 0, get inputs away from it.
"""

import numpy as np

from tape.testing import OpCase
from tests.ops.cases_unary import away_from, np_sigmoid

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
_EXTREMES = np.array([-1000.0, -100.0, -30.0, -1.0, 0.0, 1.0, 30.0, 100.0, 1000.0])
_OFF_ZERO = away_from((3, 4), 0.0, low=-3.0, high=3.0)


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def np_silu(x, beta=1.0):
    x = _f64(x)
    return x * np_sigmoid(beta * x)


def np_silu_slope(x, beta=1.0):
    x = _f64(x)
    s = np_sigmoid(beta * x)
    return s + beta * x * s * (1 - s)


def np_mish(x):
    x = _f64(x)
    return x * np.tanh(np.logaddexp(0.0, x))


def np_mish_slope(x):
    x = _f64(x)
    t = np.tanh(np.logaddexp(0.0, x))
    return t + x * np_sigmoid(x) * (1 - t * t)


def np_logsigmoid(x):
    return -np.logaddexp(0.0, -_f64(x))


def np_softsign(x):
    x = _f64(x)
    return x / (1 + np.abs(x))


def np_selu(x):
    x = _f64(x)
    return SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * np.expm1(np.minimum(x, 0)))


def np_celu(x, alpha=1.0):
    x = _f64(x)
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0) / alpha))


def np_celu_slope(x, alpha=1.0):
    x = _f64(x)
    return np.where(x > 0, 1.0, np.exp(np.minimum(x, 0) / alpha))


def _wide(shape, scale=3.0):
    return lambda rng, dtype: (scale * rng.standard_normal(shape)).astype(dtype)


CASES = [
    OpCase("silu", {"X": _wide((3, 4))}, reference=np_silu, double_grad=True),
    OpCase("silu", {"X": _EXTREMES}, reference=np_silu, grad=False, name="extremes"),
    OpCase("silu", {"X": ()}, reference=np_silu, name="0d"),
    OpCase(
        "silu_grad",
        {"X": _wide((3, 4)), "Out@GRAD": (3, 4)},
        reference=lambda x, gout, beta=1.0: gout * np_silu_slope(x),
        double_grad=True,
    ),
    OpCase(
        "silu_grad",
        {"X": _wide((3, 4)), "Out@GRAD": (3, 4)},
        {"beta": -0.7},
        reference=lambda x, gout, beta: gout * np_silu_slope(x, beta),
        double_grad=True,
        name="beta",
    ),
    OpCase(
        "quick_gelu",
        {"X": _wide((3, 4))},
        reference=lambda x: np_silu(x, 1.702),
        double_grad=True,
    ),
    OpCase(
        "quick_gelu",
        {"X": _EXTREMES},
        reference=lambda x: np_silu(x, 1.702),
        grad=False,
        name="extremes",
    ),
    OpCase("mish", {"X": _wide((3, 4))}, reference=np_mish, double_grad=True),
    OpCase("mish", {"X": _EXTREMES}, reference=np_mish, grad=False, name="extremes"),
    OpCase(
        "mish_grad",
        {"X": _wide((3, 4)), "Out@GRAD": (3, 4)},
        reference=lambda x, gout: gout * np_mish_slope(x),
        double_grad=True,
    ),
    OpCase(
        "mish_grad",
        {"X": _EXTREMES, "Out@GRAD": np.ones(9)},
        reference=lambda x, gout: gout * np_mish_slope(x),
        grad=False,
        name="extremes",
    ),
    OpCase("logsigmoid", {"X": _wide((3, 4))}, reference=np_logsigmoid, double_grad=True),
    OpCase("logsigmoid", {"X": _EXTREMES}, reference=np_logsigmoid, grad=False, name="extremes"),
    OpCase("softsign", {"X": _OFF_ZERO}, reference=np_softsign, double_grad=True),
    OpCase("softsign", {"X": _EXTREMES}, reference=np_softsign, grad=False, name="extremes"),
    OpCase("selu", {"X": _OFF_ZERO}, reference=np_selu, double_grad=True),
    OpCase("selu", {"X": _EXTREMES}, reference=np_selu, grad=False, name="extremes"),
    OpCase("celu", {"X": _OFF_ZERO}, reference=np_celu, double_grad=True),
    OpCase(
        "celu",
        {"X": _OFF_ZERO},
        {"alpha": 2.5},
        reference=np_celu,
        double_grad=True,
        name="alpha",
    ),
    OpCase(
        "celu",
        {"X": away_from((2, 3), 0.0, low=-1.0, high=1.0)},
        {"alpha": -1.5},
        reference=np_celu,
        double_grad=True,
        name="negative_alpha",
    ),
    OpCase("celu", {"X": _EXTREMES}, reference=np_celu, grad=False, name="extremes"),
    OpCase(
        "celu_grad",
        {"X": _OFF_ZERO, "Out@GRAD": (3, 4)},
        {"alpha": 0.6},
        reference=lambda x, gout, alpha: gout * np_celu_slope(x, alpha),
        double_grad=True,
    ),
]
