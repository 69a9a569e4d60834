"""Linear (the seed's fully connected layer) and Mean, as Functions recording the seed's ops."""

from __future__ import annotations

import math

from layers import init
from layers.arguments import size
from layers.function import Function
from ops.registry import REGISTRY, OpDef, lookup
from tape.errors import ShapeError, user_location
from tape.tape import apply


def activation_op(act):
    """(OpDef, full attrs) for an activation given by op name (``"relu"``) or OpDef, or None."""
    if act is None:
        return None
    defn = act if isinstance(act, OpDef) else lookup(act)
    if len(defn.input_slots) != 1 or not defn.single_output:
        raise ValueError(f"activation {defn.type!r} must be an op with one input and one output")
    return defn, defn.check_attrs({})


class Linear(Function):
    """``act(x @ weight + bias)`` with ``weight`` of shape (in_dim, out_dim), as in the seed.

    Args:
        in_dim, out_dim: feature sizes; ``x`` has shape (..., in_dim).
        act: None or the name of a one-input activation op ("relu", "tanh", "softmax", ...).
        bias: whether to add a bias of shape (out_dim,).
        weight_init, bias_init: initializers ``f(shape, dtype)`` (see ``layers.init``). The
            default is PyTorch's: U(-1/sqrt(in_dim), 1/sqrt(in_dim)) for both, i.e.
            ``init.kaiming_uniform(a=sqrt(5))`` for the weight. The seed's constant init is
            ``weight_init=init.constant(1.0), bias_init=init.constant(1.0)``.
        dtype: the parameters' dtype.

    A call records the seed's ops: ``mul`` (x flattened at its last axis), ``elementwise_add``
    (bias aligned with the last axis) and the activation op.

    >>> import numpy as np, tape, layers
    >>> layer = layers.Linear(3, 2, act="relu")
    >>> layer(tape.Variable(np.ones((4, 3), np.float32))).shape
    (4, 2)
    >>> [name for name, _ in layer.named_params()]
    ['weight', 'bias']
    """

    def __init__(
        self,
        in_dim,
        out_dim,
        act=None,
        bias=True,
        weight_init=None,
        bias_init=None,
        dtype="float32",
    ):
        super().__init__()
        self.in_dim, self.out_dim = size(in_dim, "in_dim", 0), size(out_dim, "out_dim", 0)
        bound = 1.0 / math.sqrt(self.in_dim) if self.in_dim > 0 else 0.0
        weight_init = init.with_layout(
            weight_init or init.kaiming_uniform(a=math.sqrt(5)), "in_out"
        )
        self.weight = self.create_parameter(
            (self.in_dim, self.out_dim), weight_init, dtype, name="LinearWeight"
        )
        self.bias = None
        if bias:
            self.bias = self.create_parameter(
                (self.out_dim,), bias_init or init.uniform(-bound, bound), dtype, name="LinearBias"
            )
        self.act = act
        self._act = activation_op(act)
        # Full attribute dicts built once: recording skips attribute checking on the hot path.
        self._mul_attrs = {}
        self._add_attrs = {}

    def forward(self, x):
        ndim = len(x.shape)
        if ndim == 0 or x.shape[-1] != self.in_dim:
            raise ShapeError(
                "mul",
                f"{self!r} expects {self.in_dim} input features",
                expected=f"X.shape[-1] == in_dim == {self.in_dim}",
                actual=f"X.shape={x.shape}, weight.shape={self.weight.shape}",
                location=user_location(),
            )
        if ndim == 1:  # one sample: mul's 2-D form needs a batch axis, matmul takes vectors
            out = apply(_MATMUL, (x, self.weight), _MATMUL.defaults)
        else:
            out = apply(_MUL, (x, self.weight), self._attrs(self._mul_attrs, ndim, _mul_attrs))
        if self.bias is not None:
            out = apply(_ADD, (out, self.bias), self._attrs(self._add_attrs, ndim, _add_attrs))
        if self._act is not None:
            out = apply(self._act[0], (out,), self._act[1])
        return out

    @staticmethod
    def _attrs(cache, ndim, make):
        attrs = cache.get(ndim)
        if attrs is None:
            attrs = cache[ndim] = make(ndim)
        return attrs

    def __repr__(self):
        act = f", act={self.act!r}" if self.act is not None else ""
        return f"Linear(in_dim={self.in_dim}, out_dim={self.out_dim}{act})"


_MUL = REGISTRY["mul"]
_ADD = REGISTRY["elementwise_add"]
_MATMUL = REGISTRY["matmul"]


def _mul_attrs(ndim):
    # The seed's 2-D product on x flattened to (prod(leading dims), in_dim).
    return _MUL.check_attrs({"x_num_col_dims": ndim - 1, "y_num_col_dims": 1})


def _add_attrs(ndim):
    # Paddle's axis: the bias lines up with the output's last axis (the seed's axis=1 for 2-D).
    return _ADD.check_attrs({"axis": max(ndim - 1, 0)})


class Mean(Function):
    """The mean of all elements (the seed's Mean): records one ``mean`` op.

    >>> import numpy as np, tape, layers
    >>> layers.Mean()(tape.Variable(np.arange(4.0))).numpy()
    array(1.5)
    """

    def forward(self, x):
        return apply(_MEAN, (x,), _MEAN.defaults)


_MEAN = REGISTRY["mean"]
