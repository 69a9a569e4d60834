"""BatchNorm (with running statistics as buffers), LayerNorm and GroupNorm, recording the norm
ops."""

from __future__ import annotations

import math

from layers import init
from layers.arguments import size, sizes
from layers.function import Function
from ops.registry import REGISTRY
from tape.errors import ShapeError, user_location
from tape.tape import apply, get_global_tape


def _buffer(shape, value, dtype, name):
    """A persistable Variable without a gradient (state the optimizer never touches)."""
    var = init.constant(value)(shape, dtype)
    var.name, var.persistable = name, True
    return var


class BatchNorm(Function):
    """Normalises each channel (axis 1) of an (N, C, ...) input over all its other axes, then
    scales by ``weight`` and shifts by ``bias`` (C,), as PyTorch's BatchNorm.

    Training uses the batch's statistics and updates the buffers ``running_mean`` and
    ``running_var`` in place: running = (1 - momentum) * running + momentum * batch statistic
    (the unbiased variance). After ``layer.eval()`` the running statistics are used instead.

    Args:
        num_features: C.
        eps: added to the variance before the square root.
        momentum: weight of the new batch in the running statistics.
        affine: learn ``weight`` (init 1) and ``bias`` (init 0); otherwise they are fixed.
        dtype: the parameters' and buffers' dtype.

    >>> import numpy as np, tape, layers
    >>> bn = layers.BatchNorm(2)
    >>> x = tape.Variable(np.array([[1.0, 10.0], [3.0, 30.0]], np.float32))
    >>> bn(x).numpy().round(3)
    array([[-1., -1.],
           [ 1.,  1.]], dtype=float32)
    >>> bn.running_mean.numpy(), bn.running_var.numpy()
    (array([0.2, 2. ], dtype=float32), array([ 1.1, 20.9], dtype=float32))
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, dtype="float32"):
        super().__init__()
        self.num_features = size(num_features, "num_features")
        self.eps, self.momentum = float(eps), momentum
        shape = (self.num_features,)
        if affine:
            self.weight = self.create_parameter(shape, init.ones(), dtype, name="BatchNormScale")
            self.bias = self.create_parameter(shape, init.zeros(), dtype, name="BatchNormBias")
        else:
            self.weight = _buffer(shape, 1.0, dtype, "BatchNormScale")
            self.bias = _buffer(shape, 0.0, dtype, "BatchNormBias")
        self.running_mean = _buffer(shape, 0.0, dtype, "BatchNormMean")
        self.running_var = _buffer(shape, 1.0, dtype, "BatchNormVariance")
        attrs = {"epsilon": self.eps, "momentum": float(momentum)}
        self._train_attrs = _BN.check_attrs({**attrs, "is_test": False})
        self._eval_attrs = _BN.check_attrs({**attrs, "is_test": True})

    def _check_input(self, x):
        if len(x.shape) < 2 or x.shape[1] != self.num_features:
            raise ShapeError(
                "batch_norm",
                f"{self!r} expects {self.num_features} channels",
                expected=f"X (N, {self.num_features}, ...)",
                actual=f"X.shape={x.shape}",
                location=user_location(),
            )

    def forward(self, x):
        self._check_input(x)
        running = {"MeanOut": [self.running_mean], "VarianceOut": [self.running_var]}
        y, *_ = get_global_tape().add_op(
            "batch_norm",
            {
                "X": [x],
                "Scale": [self.weight],
                "Bias": [self.bias],
                "Mean": [self.running_mean],
                "Variance": [self.running_var],
            },
            running,
            self._train_attrs if self.training else self._eval_attrs,
        )
        return y

    def __repr__(self):
        return (
            f"{type(self).__name__}({self.num_features}, eps={self.eps}, momentum={self.momentum})"
        )


class BatchNorm1d(BatchNorm):
    """BatchNorm for (N, C) or (N, C, L) inputs, as ``torch.nn.BatchNorm1d``."""

    def _check_input(self, x):
        if len(x.shape) not in (2, 3):
            raise ShapeError(
                "batch_norm",
                f"{type(self).__name__} expects a 2-D or 3-D input",
                expected="X (N, C) or (N, C, L)",
                actual=f"X.shape={x.shape}",
                location=user_location(),
            )
        super()._check_input(x)


class BatchNorm2d(BatchNorm):
    """BatchNorm for (N, C, H, W) inputs, as ``torch.nn.BatchNorm2d``."""

    def _check_input(self, x):
        if len(x.shape) != 4:
            raise ShapeError(
                "batch_norm",
                f"{type(self).__name__} expects a 4-D input",
                expected="X (N, C, H, W)",
                actual=f"X.shape={x.shape}",
                location=user_location(),
            )
        super()._check_input(x)


class LayerNorm(Function):
    """Normalises over the trailing ``normalized_shape`` dimensions of each sample, then applies
    an elementwise ``weight`` (init 1) and ``bias`` (init 0) of that shape, as
    ``torch.nn.LayerNorm``.

    >>> import numpy as np, tape, layers
    >>> ln = layers.LayerNorm(2)
    >>> ln(tape.Variable(np.array([[1.0, 3.0], [5.0, 4.0]], np.float32))).numpy().round(3)
    array([[-1.,  1.],
           [ 1., -1.]], dtype=float32)
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, dtype="float32"):
        super().__init__()
        self.normalized_shape = sizes(normalized_shape, "normalized_shape")
        self.eps = float(eps)
        self.weight = self.bias = None
        if elementwise_affine:
            self.weight = self.create_parameter(
                self.normalized_shape, init.ones(), dtype, name="LayerNormScale"
            )
            self.bias = self.create_parameter(
                self.normalized_shape, init.zeros(), dtype, name="LayerNormBias"
            )
        self._attrs = {}

    def forward(self, x):
        rank, count = len(x.shape), len(self.normalized_shape)
        if tuple(x.shape[rank - count :]) != self.normalized_shape or rank < count:
            raise ShapeError(
                "layer_norm",
                f"{self!r} normalises the trailing dimensions {self.normalized_shape}",
                expected=f"X.shape ending in {self.normalized_shape}",
                actual=f"X.shape={x.shape}",
                location=user_location(),
            )
        attrs = self._attrs.get(rank)
        if attrs is None:
            attrs = self._attrs[rank] = _LN.check_attrs(
                {"begin_norm_axis": rank - count, "epsilon": self.eps}
            )
        y, _, _ = apply(_LN, (x, self.weight, self.bias), attrs)
        return y

    def __repr__(self):
        return f"LayerNorm({self.normalized_shape}, eps={self.eps})"


class GroupNorm(Function):
    """Normalises each sample's channels in ``num_groups`` groups, each over its channels and all
    spatial positions, then applies a per-channel ``weight`` (init 1) and ``bias`` (init 0), as
    ``torch.nn.GroupNorm``. Composed: the (N, C, ...) input reshaped to (N, groups, rest) goes
    through one ``layer_norm`` op (its fused gradient included), then the per-channel affine map.

    Args:
        num_groups: G, dividing num_channels.
        num_channels: C, the input's axis 1.
        eps: added to the variance before the square root.
        affine: learn ``weight`` and ``bias`` (C,).
        dtype: the parameters' dtype.

    >>> import numpy as np, tape, layers
    >>> gn = layers.GroupNorm(1, 2)
    >>> gn(tape.Variable(np.array([[[1.0], [3.0]]], np.float32))).numpy().round(3)[0, :, 0]
    array([-1.,  1.], dtype=float32)
    """

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, dtype="float32"):
        super().__init__()
        self.num_groups = size(num_groups, "num_groups")
        self.num_channels = size(num_channels, "num_channels")
        if self.num_groups < 1 or self.num_channels % self.num_groups:
            raise ValueError(
                f"num_channels ({self.num_channels}) must be divisible by num_groups "
                f"({self.num_groups})"
            )
        self.eps, self.affine = float(eps), bool(affine)
        self.weight = self.bias = None
        if affine:
            shape = (self.num_channels,)
            self.weight = self.create_parameter(shape, init.ones(), dtype, name="GroupNormScale")
            self.bias = self.create_parameter(shape, init.zeros(), dtype, name="GroupNormBias")
        self._ln_attrs = _LN.check_attrs({"begin_norm_axis": 2, "epsilon": self.eps})

    def forward(self, x):
        if len(x.shape) < 2 or x.shape[1] != self.num_channels:
            raise ShapeError(
                "layer_norm",
                f"{self!r} expects {self.num_channels} channels",
                expected=f"X (N, {self.num_channels}, ...)",
                actual=f"X.shape={x.shape}",
                location=user_location(),
            )
        rest = math.prod(x.shape[1:]) // self.num_groups
        grouped = apply(_RESHAPE, (x,), {"shape": (x.shape[0], self.num_groups, rest)})
        y, _, _ = apply(_LN, (grouped, None, None), self._ln_attrs)
        y = apply(_RESHAPE, (y,), {"shape": tuple(x.shape)})
        if self.affine:
            y = apply(_MUL, (y, self.weight), _CHANNEL_AXIS)
            y = apply(_ADD, (y, self.bias), _CHANNEL_AXIS)
        return y

    def __repr__(self):
        return f"GroupNorm({self.num_groups}, {self.num_channels}, eps={self.eps})"


_BN = REGISTRY["batch_norm"]
_LN = REGISTRY["layer_norm"]
_RESHAPE = REGISTRY["reshape"]
_MUL = REGISTRY["elementwise_mul"]
_ADD = REGISTRY["elementwise_add"]
_CHANNEL_AXIS = {"axis": 1}  # Paddle's axis: a (C,) vector lines up with axis 1
