"""Conv1D, Conv2D, Conv3D: convolution layers (channels first) recording ``conv<n>d`` and a
channel-wise bias add, with PyTorch's arguments, parameter layouts and initialisation."""

from __future__ import annotations

import math

from layers import init
from layers.arguments import size
from layers.function import Function
from ops.registry import REGISTRY
from tape.tape import apply


def ntuple(value, n, what, minimum=None):
    """An n-tuple of ints from an int or n ints, as PyTorch's layers accept both; each at least
    ``minimum`` when given (ValueError naming ``what`` otherwise)."""
    if isinstance(value, int) and not isinstance(value, bool):
        items = (value,) * n
    else:
        try:
            items = tuple(value)
        except TypeError:
            items = ()
        if len(items) != n or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in items
        ):
            kind = {1: "an int", 2: "an int or a pair of ints"}.get(n, f"an int or {n} ints")
            raise ValueError(f"{what} must be {kind}, got {value!r}")
    if minimum is not None and min(items) < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value!r}")
    return items


def pair(value, what):
    """(h, w) from an int or a pair of ints."""
    return ntuple(value, 2, what)


def conv_paddings(padding, kernel, stride, dilation):
    """The op's paddings for an int, n ints, or PyTorch's 'valid' / 'same' (extra on the end)."""
    if padding == "valid":
        return (0,) * len(kernel)
    if padding != "same":
        return ntuple(padding, len(kernel), "padding", minimum=0)
    if max(stride) != 1:
        raise ValueError(f"padding='same' needs stride 1, got stride={stride}")
    pads = []
    for k, d in zip(kernel, dilation, strict=True):
        total = d * (k - 1)
        pads += [total // 2, total - total // 2]
    return tuple(pads)


def check_channels(in_channels, out_channels, groups):
    size(in_channels, "in_channels"), size(out_channels, "out_channels"), size(groups, "groups")
    if in_channels % groups or out_channels % groups:
        raise ValueError(
            f"in_channels ({in_channels}) and out_channels ({out_channels}) "
            f"must be divisible by groups ({groups})"
        )


class _ConvNd(Function):
    """The shared body of the convolution layers; ``nd`` is the number of spatial axes."""

    nd = None

    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups=1,
        bias=True,
        weight_init=None,
        bias_init=None,
        dtype="float32",
    ):
        super().__init__()
        check_channels(in_channels, out_channels, groups)
        nd = self.nd
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = ntuple(kernel_size, nd, "kernel_size", minimum=1)
        self.stride = ntuple(stride, nd, "stride", minimum=1)
        self.dilation = ntuple(dilation, nd, "dilation", minimum=1)
        self.padding = padding
        paddings = conv_paddings(padding, self.kernel_size, self.stride, self.dilation)
        self._conv = REGISTRY[f"conv{nd}d"]
        self._conv_attrs = self._conv.check_attrs(
            {
                "strides": self.stride,
                "dilations": self.dilation,
                "groups": groups,
                "paddings": paddings,
            }
        )
        self._create(self._weight_shape(), bias, weight_init, bias_init, dtype)

    def _weight_shape(self):
        return (self.out_channels, self.in_channels // self.groups) + self.kernel_size

    def _create(self, shape, bias, weight_init, bias_init, dtype):
        name = type(self).__name__
        weight_init = init.with_layout(
            weight_init or init.kaiming_uniform(a=math.sqrt(5)), "out_in"
        )
        self.weight = self.create_parameter(shape, weight_init, dtype, name=f"{name}Weight")
        self.bias = None
        if bias:
            # PyTorch's fan_in reads the weight as (out, in, *kernel), for transposed ones too.
            fan_in = math.prod(shape[1:])
            bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
            self.bias = self.create_parameter(
                (self.out_channels,),
                bias_init or init.uniform(-bound, bound),
                dtype,
                name=f"{name}Bias",
            )

    def forward(self, x):
        out = apply(self._conv, (x, self.weight), self._conv_attrs)
        return self._add_bias(out)

    def _add_bias(self, out):
        if self.bias is not None:
            out = apply(_ADD, (out, self.bias), _CHANNEL_AXIS)
        return out

    def _extra_repr(self):
        return [
            ("stride", self.stride, (1,) * self.nd),
            ("padding", self.padding, 0),
            ("dilation", self.dilation, (1,) * self.nd),
            ("groups", self.groups, 1),
            ("bias", self.bias is not None, True),
        ]

    def __repr__(self):
        extra = "".join(
            f", {name}={value!r}" for name, value, default in self._extra_repr() if value != default
        )
        return (
            f"{type(self).__name__}({self.in_channels}, {self.out_channels}, "
            f"kernel_size={self.kernel_size}{extra})"
        )


_ARGS = """
    Args:
        in_channels, out_channels: channel counts, both divisible by ``groups``.
        kernel_size, stride, dilation: an int or {n} ints, all >= 1.
        padding: an int or {n} ints >= 0 (zeros on both ends), or 'valid' / 'same' (stride 1;
            odd totals pad the end).
        groups: channel groups convolved separately (``groups == in_channels``: depthwise).
        bias: whether to add a learned bias.
        weight_init, bias_init: initializers ``f(shape, dtype)`` (``layers.init``); the default is
            PyTorch's, U(-b, b) for both with b = 1/sqrt(fan_in), fan_in = in/groups * prod(kernel).
        dtype: the parameters' dtype (inputs of another float dtype promote, as numpy does).
"""


class Conv1D(_ConvNd):
    """Cross-correlates an (N, C_in, L) input with ``weight`` (C_out, C_in/groups, k) and adds
    ``bias`` (C_out,) along the channel axis, as ``torch.nn.Conv1d``.
    {args}
    >>> import numpy as np, tape, layers
    >>> conv = layers.Conv1D(4, 6, kernel_size=3, stride=2, padding=1)
    >>> conv(tape.Variable(np.ones((2, 4, 9), np.float32))).shape
    (2, 6, 5)
    """

    nd = 1


class Conv2D(_ConvNd):
    """Cross-correlates an (N, C_in, H, W) input with ``weight`` (C_out, C_in/groups, kh, kw) and
    adds ``bias`` (C_out,) along the channel axis, as ``torch.nn.Conv2d``.
    {args}
    >>> import numpy as np, tape, layers
    >>> conv = layers.Conv2D(3, 8, kernel_size=3, padding=1)
    >>> conv(tape.Variable(np.ones((2, 3, 5, 5), np.float32))).shape
    (2, 8, 5, 5)
    >>> conv.weight.shape, conv.bias.shape
    ((8, 3, 3, 3), (8,))
    """

    nd = 2


class Conv3D(_ConvNd):
    """Cross-correlates an (N, C_in, D, H, W) input with ``weight`` (C_out, C_in/groups, kd, kh,
    kw) and adds ``bias`` (C_out,) along the channel axis, as ``torch.nn.Conv3d``.
    {args}
    >>> import numpy as np, tape, layers
    >>> conv = layers.Conv3D(2, 4, kernel_size=(1, 3, 3), padding="same")
    >>> conv(tape.Variable(np.ones((1, 2, 3, 5, 5), np.float32))).shape
    (1, 4, 3, 5, 5)
    """

    nd = 3


for _cls in (Conv1D, Conv2D, Conv3D):
    _cls.__doc__ = _cls.__doc__.replace("{args}", _ARGS.format(n=_cls.nd))

_ADD = REGISTRY["elementwise_add"]
_CHANNEL_AXIS = _ADD.check_attrs({"axis": 1})
