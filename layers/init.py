"""Parameter initializers: callables ``init(shape, dtype) -> Variable`` running one fill/random op.

Each initializer records a single ``fill_constant``, ``uniform_random`` or ``gaussian_random``
op on a private ``tape.Tape()`` -- the seed's init tape -- so random ones draw from the
generator that ``tape.seed(n)`` re-seeds, and a seeded program initialises identically::

    >>> import tape
    >>> from layers import init
    >>> tape.seed(0); a = init.normal(0.0, 0.02)((3, 4)).numpy()
    >>> tape.seed(0); b = init.normal(0.0, 0.02)((3, 4)).numpy()
    >>> bool((a == b).all()), a.dtype.name
    (True, 'float32')

Fans follow PyTorch (``torch.nn.init._calculate_fan_in_and_fan_out``) for the layout it uses,
``"out_in"``: weight (out, in, *kernel) with fan_in = in * prod(kernel) and fan_out = out *
prod(kernel) -- our Conv2D weights. ``layers.Linear`` keeps the seed's (in_dim, out_dim) weight,
layout ``"in_out"``: fan_in = shape[0], fan_out = shape[1]. A fan-based initializer created
without a layout takes the one of the layer it is given to (see ``with_layout``); pass
``layout=`` to fix it yourself.
"""

from __future__ import annotations

import math

import numpy as np

from tape.tape import Tape
from tape.variable import Variable

LAYOUTS = ("out_in", "in_out")


def calculate_fans(shape, layout="out_in"):
    """(fan_in, fan_out) of a weight of ``shape`` stored in ``layout``.

    >>> calculate_fans((16, 3, 5, 5))          # conv weight (out, in, kh, kw)
    (75, 400)
    >>> calculate_fans((3, 16), layout="in_out")  # Linear weight (in_dim, out_dim)
    (3, 16)
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown weight layout {layout!r}; valid: {', '.join(LAYOUTS)}")
    if len(shape) < 2:
        raise ValueError(
            f"fan in and fan out need a weight with at least 2 dimensions, got shape {tuple(shape)}"
        )
    receptive = math.prod(shape[2:])
    outer, inner = shape[0] * receptive, shape[1] * receptive
    return (inner, outer) if layout == "out_in" else (outer, inner)


def calculate_gain(nonlinearity, param=None):
    """PyTorch's recommended gain for ``nonlinearity`` (``param``: leaky_relu's negative slope).

    >>> round(calculate_gain("relu"), 6), calculate_gain("tanh")
    (1.414214, 1.6666666666666667)
    """
    linear = (
        "linear",
        "identity",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "sigmoid",
    )
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"negative slope {slope!r} is not a number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}")


def run_init_op(op_type, shape, dtype="float32", **attrs):
    """Runs one initializer op on a private tape (the seed's init tape); returns its output."""
    out = Variable(name=f"{op_type}_init")
    init_tape = Tape()
    init_tape.add_op(
        op_type,
        {},
        {"Out": [out]},
        {"shape": [int(d) for d in shape], "dtype": np.dtype(dtype).name, **attrs},
    )
    init_tape.forward()
    return out


class Initializer:
    """Base class: ``init(shape, dtype="float32")`` returns a new Variable of that shape."""

    def __call__(self, shape, dtype="float32"):
        raise NotImplementedError

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if v is not None)
        return f"{type(self).__name__}({args})"


class Constant(Initializer):
    def __init__(self, value):
        self.value = float(value)

    def __call__(self, shape, dtype="float32"):
        return run_init_op("fill_constant", shape, dtype, value=self.value)


class Uniform(Initializer):
    def __init__(self, low, high):
        if not low <= high:
            raise ValueError(f"uniform initializer needs low <= high, got low={low}, high={high}")
        self.low, self.high = float(low), float(high)

    def __call__(self, shape, dtype="float32"):
        return run_init_op("uniform_random", shape, dtype, min=self.low, max=self.high)


class Normal(Initializer):
    def __init__(self, mean, std):
        if not std >= 0:
            raise ValueError(f"normal initializer needs std >= 0, got {std}")
        self.mean, self.std = float(mean), float(std)

    def __call__(self, shape, dtype="float32"):
        return run_init_op("gaussian_random", shape, dtype, mean=self.mean, std=self.std)


class FanInitializer(Initializer):
    """Draws U(-bound, bound) or N(0, std) with a scale computed from the weight's fans."""

    def __init__(self, distribution, layout):
        if layout is not None and layout not in LAYOUTS:
            raise ValueError(f"unknown weight layout {layout!r}; valid: {', '.join(LAYOUTS)}")
        self.distribution, self.layout = distribution, layout

    def std(self, fan_in, fan_out):
        raise NotImplementedError

    def __call__(self, shape, dtype="float32"):
        shape = tuple(shape)
        fan_in, fan_out = calculate_fans(shape, self.layout or "out_in")
        # A zero-size weight has nothing to draw; its scale is irrelevant (PyTorch: a no-op).
        std = self.std(fan_in, fan_out) if math.prod(shape) else 0.0
        if self.distribution == "uniform":
            bound = math.sqrt(3.0) * std  # U(-b, b) has std b / sqrt(3)
            return run_init_op("uniform_random", shape, dtype, min=-bound, max=bound)
        return run_init_op("gaussian_random", shape, dtype, mean=0.0, std=std)


class Xavier(FanInitializer):
    def __init__(self, distribution, gain=1.0, layout=None):
        super().__init__(distribution, layout)
        self.gain = float(gain)

    def std(self, fan_in, fan_out):
        return self.gain * math.sqrt(2.0 / (fan_in + fan_out))


class Kaiming(FanInitializer):
    def __init__(self, distribution, a=0.0, mode="fan_in", nonlinearity="leaky_relu", layout=None):
        if mode not in ("fan_in", "fan_out"):
            raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
        super().__init__(distribution, layout)
        self.gain = calculate_gain(nonlinearity, a)
        self.a, self.mode, self.nonlinearity = a, mode, nonlinearity

    def std(self, fan_in, fan_out):
        return self.gain / math.sqrt(fan_in if self.mode == "fan_in" else fan_out)


def constant(value):
    """Every element equals ``value`` (the seed's ``fill_constant`` initializer)."""
    return Constant(value)


def zeros():
    return Constant(0.0)


def ones():
    return Constant(1.0)


def uniform(low=0.0, high=1.0):
    """U(low, high)."""
    return Uniform(low, high)


def normal(mean=0.0, std=1.0):
    """N(mean, std**2)."""
    return Normal(mean, std)


def xavier_uniform(gain=1.0, layout=None):
    """U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio)."""
    return Xavier("uniform", gain, layout)


def xavier_normal(gain=1.0, layout=None):
    """N(0, std**2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    return Xavier("normal", gain, layout)


def kaiming_uniform(a=0.0, mode="fan_in", nonlinearity="leaky_relu", layout=None):
    """U(-b, b) with b = gain * sqrt(3 / fan) (He et al.), gain = calculate_gain(nonlinearity, a).

    ``kaiming_uniform(a=math.sqrt(5))`` is PyTorch's default for Linear and Conv weights:
    b = 1 / sqrt(fan_in).
    """
    return Kaiming("uniform", a, mode, nonlinearity, layout)


def kaiming_normal(a=0.0, mode="fan_in", nonlinearity="leaky_relu", layout=None):
    """N(0, std**2) with std = gain / sqrt(fan), gain = calculate_gain(nonlinearity, a)."""
    return Kaiming("normal", a, mode, nonlinearity, layout)


def with_layout(initializer, layout):
    """``initializer`` for a weight stored in ``layout``: a fan-based initializer created without
    a layout gets a copy bound to it; any other callable is returned unchanged."""
    if isinstance(initializer, FanInitializer) and initializer.layout is None:
        bound = object.__new__(type(initializer))
        bound.__dict__.update(vars(initializer), layout=layout)
        return bound
    return initializer


__all__ = [
    "Initializer",
    "calculate_fans",
    "calculate_gain",
    "constant",
    "zeros",
    "ones",
    "uniform",
    "normal",
    "xavier_uniform",
    "xavier_normal",
    "kaiming_uniform",
    "kaiming_normal",
    "with_layout",
    "run_init_op",
]
