"""Activation layers: parameterless Functions that record one activation op per call."""

from __future__ import annotations

from layers.function import Function
from ops.registry import REGISTRY
from tape.tape import apply


class Activation(Function):
    """Records op ``op_type`` with the attributes given at construction (checked once).

    >>> import numpy as np, tape, layers
    >>> layers.LeakyReLU(0.1)(tape.Variable(np.array([-2.0, 3.0], np.float32))).numpy()
    array([-0.2,  3. ], dtype=float32)
    """

    op_type = ""

    def __init__(self, **attrs):
        super().__init__()
        self._op = REGISTRY[self.op_type]
        self._attrs = self._op.check_attrs(attrs)
        self._given = attrs

    def forward(self, x):
        return apply(self._op, (x,), self._attrs)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self._given.items())
        return f"{type(self).__name__}({args})"


class ReLU(Activation):
    """max(x, 0)."""

    op_type = "relu"


class Tanh(Activation):
    op_type = "tanh"


class Sigmoid(Activation):
    """1 / (1 + exp(-x))."""

    op_type = "sigmoid"


class GELU(Activation):
    """x * Phi(x); ``approximate="tanh"`` uses the tanh approximation (as PyTorch)."""

    op_type = "gelu"

    def __init__(self, approximate="none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        super().__init__(approximate=approximate == "tanh")


class LeakyReLU(Activation):
    """x for x > 0, else negative_slope * x."""

    op_type = "leaky_relu"

    def __init__(self, negative_slope=0.01):
        super().__init__(alpha=negative_slope)


class ELU(Activation):
    """x for x > 0, else alpha * (exp(x) - 1)."""

    op_type = "elu"

    def __init__(self, alpha=1.0):
        super().__init__(alpha=alpha)


class Softplus(Activation):
    """log(1 + exp(beta * x)) / beta; linear where beta * x > threshold (as PyTorch)."""

    op_type = "softplus"

    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__(beta=beta, threshold=threshold)


class Softmax(Activation):
    """exp(x) / sum(exp(x)) along ``axis``."""

    op_type = "softmax"

    def __init__(self, axis=-1):
        super().__init__(axis=axis)


class LogSoftmax(Activation):
    """x - logsumexp(x) along ``axis``."""

    op_type = "log_softmax"

    def __init__(self, axis=-1):
        super().__init__(axis=axis)


__all__ = [
    "Activation",
    "ReLU",
    "Tanh",
    "Sigmoid",
    "GELU",
    "LeakyReLU",
    "ELU",
    "Softplus",
    "Softmax",
    "LogSoftmax",
]
