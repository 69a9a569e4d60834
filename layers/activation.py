"""Activation layers: Functions that record one activation op per call (PReLU has a parameter)."""

from __future__ import annotations

from layers import init as _init
from layers.arguments import size
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


class SiLU(Activation):
    """x * sigmoid(x) (also called swish)."""

    op_type = "silu"


class Mish(Activation):
    """x * tanh(softplus(x))."""

    op_type = "mish"


class SELU(Activation):
    """scale * (x for x > 0, else alpha * (exp(x) - 1)) with PyTorch's fixed alpha and scale."""

    op_type = "selu"


class CELU(Activation):
    """x for x > 0, else alpha * (exp(x / alpha) - 1)."""

    op_type = "celu"

    def __init__(self, alpha=1.0):
        super().__init__(alpha=alpha)


class Softsign(Activation):
    """x / (1 + |x|)."""

    op_type = "softsign"


class Hardswish(Activation):
    """x * relu6(x + 3) / 6."""

    op_type = "hardswish"


class Hardsigmoid(Activation):
    """relu6(x + 3) / 6."""

    op_type = "hardsigmoid"


class Hardtanh(Activation):
    """x clamped to [min_val, max_val]; the gradient is 0 outside the open interval.

    >>> import numpy as np, tape, layers
    >>> layers.Hardtanh(-2.0, 2.0)(tape.Variable(np.array([-3.0, 0.5, 3.0]))).numpy()
    array([-2. ,  0.5,  2. ])
    """

    op_type = "hardtanh"

    def __init__(self, min_val=-1.0, max_val=1.0):
        if not max_val > min_val:
            raise ValueError(f"max_val ({max_val}) must be greater than min_val ({min_val})")
        super().__init__(min_val=min_val, max_val=max_val)


class ReLU6(Activation):
    """min(max(x, 0), 6)."""

    op_type = "relu6"


class LogSigmoid(Activation):
    """log(sigmoid(x)), computed without overflow."""

    op_type = "logsigmoid"


class GLU(Activation):
    """a * sigmoid(b), where a and b are the halves of x along ``dim``."""

    op_type = "glu"

    def __init__(self, dim=-1):
        super().__init__(dim=dim)


class PReLU(Function):
    """x for x > 0, else weight * x, with a learnable weight: one shared value
    (``num_parameters=1``) or one per channel (axis 1 of the input), initialised to ``init``.

    >>> import numpy as np, tape, layers
    >>> act = layers.PReLU(num_parameters=2)
    >>> act(tape.Variable(np.array([[-4.0, -4.0], [1.0, 2.0]], np.float32))).numpy()
    array([[-1., -1.],
           [ 1.,  2.]], dtype=float32)
    >>> [(name, p.shape) for name, p in act.named_params()]
    [('weight', (2,))]
    """

    def __init__(self, num_parameters=1, init=0.25, dtype="float32"):
        super().__init__()
        self.num_parameters = size(num_parameters, "num_parameters")
        self.init = float(init)
        self.weight = self.create_parameter(
            (self.num_parameters,), _init.constant(self.init), dtype, name="PReLUWeight"
        )
        self._op = REGISTRY["prelu"]

    def forward(self, x):
        return apply(self._op, (x, self.weight), {})

    def __repr__(self):
        return f"PReLU(num_parameters={self.num_parameters})"


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
    "SiLU",
    "Mish",
    "SELU",
    "CELU",
    "Softsign",
    "Hardswish",
    "Hardsigmoid",
    "Hardtanh",
    "ReLU6",
    "LogSigmoid",
    "GLU",
    "PReLU",
]
