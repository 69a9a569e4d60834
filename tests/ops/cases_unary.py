"""Cases for the unary ops (ops/unary.py): math functions, activations and their gradient ops.

Inputs of ops with kinks (relu, abs, clip, leaky_relu, elu, softplus's threshold) stay away
from them by more than the finite-difference step; log and sqrt get positive inputs.
"""

import math

import numpy as np

from tape.testing import OpCase


def positive(shape, low=0.5, high=2.0):
    """Uniform values in [low, high]."""
    return lambda rng, dtype: rng.uniform(low, high, shape).astype(dtype)


def away_from(shape, *kinks, low=-2.0, high=2.0, gap=0.1):
    """Uniform values in [low, high], each at least ``gap`` from every kink."""

    def make(rng, dtype):
        x = rng.uniform(low, high, shape)
        for kink in kinks:
            near = np.abs(x - kink) < gap
            x[near] = kink + np.where(x[near] >= kink, gap, -gap) * rng.uniform(1.0, 2.0)
        return x.astype(dtype)

    return make


def in_open_unit_interval(shape):
    """Values in (0.05, 0.95), like a sigmoid's output."""
    return positive(shape, 0.05, 0.95)


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def np_sigmoid(x):
    x = _f64(x)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def np_gelu(x, approximate=False):
    x = _f64(x)
    if approximate:
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def np_gelu_slope(x, approximate=False):
    x = _f64(x)
    if approximate:
        c = math.sqrt(2.0 / math.pi)
        t = np.tanh(c * (x + 0.044715 * x**3))
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x * x)
    return 0.5 * (1.0 + _erf(x / math.sqrt(2.0))) + x * np.exp(-x * x / 2) / math.sqrt(2 * np.pi)


def np_softplus(x, beta=1.0, threshold=20.0):
    x = _f64(x)
    z = beta * x
    return np.where(z > threshold, x, np.log1p(np.exp(np.minimum(z, threshold))) / beta)


def np_softplus_slope(x, beta=1.0, threshold=20.0):
    x = _f64(x)
    return np.where(beta * x > threshold, 1.0, np_sigmoid(beta * x))


def np_elu(x, alpha=1.0):
    x = _f64(x)
    return np.where(x > 0, x, alpha * (np.exp(x) - 1.0))


def np_clip_slope(x, min=None, max=None):  # noqa: A002  (the op's attribute names)
    inside = np.ones(np.shape(x), bool)
    if min is not None:
        inside &= x >= min
    if max is not None:
        inside &= x <= max
    return inside


_EXTREMES = np.array([-1000.0, -100.0, -30.0, -1.0, 0.0, 1.0, 30.0, 100.0, 1000.0])
_ERF_RANGE = np.linspace(-6.5, 6.5, 27)

CASES = [
    # -- sign, negation, absolute value, square, scale
    OpCase("neg", {"X": (3, 4)}, reference=lambda x: -x, double_grad=True),
    OpCase("neg", {"X": ()}, reference=lambda x: -x, name="0d"),
    OpCase("neg", {"X": (0, 3)}, reference=lambda x: -x, name="size0"),
    OpCase(
        "neg",
        {"X": np.array([[1, -2, 3]], np.int64)},
        reference=lambda x: -x,
        grad=False,
        name="int",
    ),
    OpCase("sign", {"X": np.array([-2.5, -0.0, 0.0, 1e-30, 3.0])}, reference=np.sign, grad=False),
    OpCase("sign", {"X": away_from((3, 4), 0.0)}, reference=np.sign, double_grad=True, name="grad"),
    OpCase("abs", {"X": away_from((3, 4), 0.0)}, reference=np.abs, double_grad=True),
    OpCase("abs", {"X": np.array([-3, 0, 2], np.int32)}, reference=np.abs, grad=False, name="int"),
    OpCase("square", {"X": (3, 4)}, reference=np.square, double_grad=True),
    OpCase("square", {"X": ()}, reference=np.square, name="0d"),
    OpCase(
        "scale",
        {"X": (3, 4)},
        {"scale": 2.5, "bias": -1.0},
        reference=lambda x, scale, bias: scale * x + bias,
        double_grad=True,
    ),
    OpCase(
        "scale",
        {"X": (2, 3)},
        {"scale": -0.5, "bias": 3.0, "bias_after_scale": False},
        reference=lambda x, scale, bias, bias_after_scale: scale * (x + bias),
        double_grad=True,
        name="bias_before_scale",
    ),
    OpCase("scale", {"X": (4,)}, reference=lambda x: x, name="defaults"),
    OpCase(
        "scale",
        {"X": np.array([1, 2, 3], np.int64)},
        {"scale": 2.0, "bias": 1.0},
        reference=lambda x, scale, bias: (x * 2 + 1).astype(np.int64),
        grad=False,
        name="int",
    ),
    # -- exponentials, logarithms, roots, trigonometry
    OpCase("exp", {"X": (3, 4)}, reference=np.exp, double_grad=True),
    OpCase("exp", {"X": ()}, reference=np.exp, name="0d"),
    OpCase("log", {"X": positive((3, 4))}, reference=np.log, double_grad=True),
    OpCase("log", {"X": positive((0, 2))}, reference=np.log, name="size0"),
    OpCase("sqrt", {"X": positive((3, 4))}, reference=np.sqrt, double_grad=True),
    OpCase("sin", {"X": (3, 4)}, reference=np.sin, double_grad=True),
    OpCase("cos", {"X": (3, 4)}, reference=np.cos, double_grad=True),
    OpCase("erf", {"X": (3, 4)}, reference=lambda x: _erf(_f64(x)), double_grad=True),
    OpCase("erf", {"X": _ERF_RANGE}, reference=lambda x: _erf(_f64(x)), name="tails"),
    OpCase(
        "erf",
        {"X": np.array([[0.0, -1e-8], [2.0, -2.0]])},
        reference=lambda x: _erf(_f64(x)),
        name="region_edges",
    ),
    OpCase("erf", {"X": ()}, reference=lambda x: _erf(_f64(x)), name="0d"),
    # -- activations read back from Out
    OpCase("tanh", {"X": (3, 4)}, reference=np.tanh, double_grad=True),
    OpCase("tanh", {"X": ()}, reference=np.tanh, double_grad=True, name="0d"),
    OpCase(
        "tanh_grad",
        {
            "Out": lambda rng, dt: np.tanh(rng.standard_normal((3, 4))).astype(dt),
            "Out@GRAD": (3, 4),
        },
        reference=lambda out, gout: gout * (1 - out * out),
        double_grad=True,
    ),
    OpCase("sigmoid", {"X": (3, 4)}, reference=np_sigmoid, double_grad=True),
    OpCase("sigmoid", {"X": _EXTREMES}, reference=np_sigmoid, grad=False, name="extremes"),
    OpCase(
        "sigmoid_grad",
        {"Out": in_open_unit_interval((3, 4)), "Out@GRAD": (3, 4)},
        reference=lambda out, gout: gout * out * (1 - out),
        double_grad=True,
    ),
    OpCase(
        "relu",
        {"X": away_from((2, 5), 0.0)},
        reference=lambda x: np.maximum(x, 0),
        double_grad=True,
        name="more",
    ),
    OpCase(
        "relu",
        {"X": np.array([-1, 0, 4], np.int64)},
        reference=lambda x: np.maximum(x, 0),
        grad=False,
        name="int",
    ),
    # -- activations whose gradient reads X
    OpCase(
        "leaky_relu",
        {"X": away_from((3, 4), 0.0)},
        reference=lambda x: np.where(x > 0, x, 0.01 * x),
        double_grad=True,
    ),
    OpCase(
        "leaky_relu",
        {"X": away_from((2, 3), 0.0)},
        {"alpha": 0.2},
        reference=lambda x, alpha: np.where(x > 0, x, alpha * x),
        double_grad=True,
        name="alpha",
    ),
    OpCase(
        "leaky_relu_grad",
        {"X": away_from((3, 4), 0.0), "Out@GRAD": (3, 4)},
        {"alpha": 0.2},
        reference=lambda x, gout, alpha: np.where(x > 0, gout, alpha * gout),
        double_grad=True,
    ),
    OpCase("elu", {"X": away_from((3, 4), 0.0)}, reference=np_elu, double_grad=True),
    OpCase(
        "elu",
        {"X": away_from((2, 3), 0.0, low=-30.0, high=30.0)},
        {"alpha": 0.5},
        reference=np_elu,
        double_grad=True,
        name="alpha_wide",
    ),
    OpCase(
        "elu_grad",
        {"X": away_from((3, 4), 0.0), "Out@GRAD": (3, 4)},
        {"alpha": 0.7},
        reference=lambda x, gout, alpha: gout * np.where(x > 0, 1.0, alpha * np.exp(x)),
        double_grad=True,
    ),
    OpCase("gelu", {"X": (3, 4)}, reference=np_gelu, double_grad=True),
    OpCase(
        "gelu",
        {"X": (3, 4)},
        {"approximate": True},
        reference=np_gelu,
        double_grad=True,
        name="tanh",
    ),
    OpCase("gelu", {"X": _ERF_RANGE * 2}, reference=np_gelu, name="wide"),
    OpCase(
        "gelu_grad",
        {"X": (3, 4), "Out@GRAD": (3, 4)},
        reference=lambda x, gout: gout * np_gelu_slope(x),
        double_grad=True,
    ),
    OpCase(
        "gelu_grad",
        {"X": (3, 4), "Out@GRAD": (3, 4)},
        {"approximate": True},
        reference=lambda x, gout, approximate: gout * np_gelu_slope(x, True),
        double_grad=True,
        name="tanh",
    ),
    OpCase("softplus", {"X": (3, 4)}, reference=np_softplus, double_grad=True),
    OpCase(
        "softplus",
        {"X": away_from((3, 4), 0.5)},
        {"beta": 2.0, "threshold": 1.0},
        reference=np_softplus,
        double_grad=True,
        name="beta_threshold",
    ),
    OpCase("softplus", {"X": _EXTREMES}, reference=np_softplus, grad=False, name="extremes"),
    OpCase(
        "softplus_grad",
        {"X": away_from((3, 4), -0.25), "Out@GRAD": (3, 4)},
        {"beta": -2.0, "threshold": 0.5},
        reference=lambda x, gout, **a: gout * np_softplus_slope(x, **a),
        double_grad=True,
    ),
    OpCase(
        "clip",
        {"X": away_from((3, 4), -0.5, 0.8)},
        {"min": -0.5, "max": 0.8},
        reference=lambda x, **a: np.clip(x, a["min"], a["max"]),
        double_grad=True,
    ),
    OpCase(
        "clip",
        {"X": away_from((2, 3), 0.3)},
        {"min": 0.3},
        reference=lambda x, min: np.maximum(x, min),
        name="min_only",
    ),
    OpCase(
        "clip",
        {"X": away_from((2, 3), 0.3)},
        {"max": 0.3},
        reference=lambda x, max: np.minimum(x, max),
        name="max_only",
    ),
    OpCase(
        "clip",
        {"X": away_from((2, 3), 0.5, 1.5)},
        {"min": 1.5, "max": 0.5},
        reference=lambda x, **a: np.full_like(x, 0.5),
        double_grad=True,
        name="min_above_max",
    ),
    OpCase(
        "clip",
        {"X": np.arange(-4, 5, dtype=np.int64)},
        {"min": -1.5, "max": 2.5},
        reference=lambda x, **a: np.clip(x, -1, 2),
        grad=False,
        name="int",
    ),
    OpCase(
        "clip_grad",
        {"X": away_from((3, 4), -0.5, 0.8), "Out@GRAD": (3, 4)},
        {"min": -0.5, "max": 0.8},
        reference=lambda x, gout, **a: gout * np_clip_slope(x, **a),
        double_grad=True,
    ),
    OpCase(
        "clip_grad",
        {"X": np.array([-1.0, -0.5, 0.0, 0.8, 1.0]), "Out@GRAD": (5,)},
        {"min": -0.5, "max": 0.8},
        reference=lambda x, gout, **a: gout * np_clip_slope(x, **a),
        grad=False,
        name="bounds_pass",
    ),
    # -- dtype conversion
    OpCase(
        "cast",
        {"X": (3, 4)},
        {"out_dtype": "float64"},
        reference=lambda x, out_dtype: x.astype(np.float64),
        double_grad=True,
    ),
    OpCase(
        "cast",
        {"X": (3, 4)},
        {"out_dtype": "float32"},
        reference=lambda x, out_dtype: x.astype(np.float32),
        grad=False,
        name="to_float32",
    ),
    OpCase(
        "cast",
        {"X": np.array([[1.7, -2.2, 0.0]])},
        {"out_dtype": "int32"},
        reference=lambda x, out_dtype: x.astype(np.int32),
        grad=False,
        name="to_int",
    ),
    OpCase(
        "cast",
        {"X": np.array([0, 1, 2], np.int64)},
        {"out_dtype": "bool"},
        reference=lambda x, out_dtype: x.astype(bool),
        grad=False,
        name="int_to_bool",
    ),
]
