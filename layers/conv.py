"""Conv2D: a 2-D convolution layer (NCHW) recording ``conv2d`` and a channel-wise bias add."""

from __future__ import annotations

import math

from layers import init
from layers.function import Function
from ops.registry import REGISTRY
from tape.tape import apply


def pair(value, what):
    """(h, w) from an int or a pair of ints, as PyTorch's layers accept both."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    items = tuple(value)
    if len(items) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise ValueError(f"{what} must be an int or a pair of ints, got {value!r}")
    return items


def _paddings(padding, kernel, stride, dilation):
    """The op's paddings for an int, a pair, or PyTorch's 'valid' / 'same' (extra on the end)."""
    if padding == "valid":
        return (0, 0)
    if padding != "same":
        return pair(padding, "padding")
    if stride != (1, 1):
        raise ValueError(f"padding='same' needs stride 1, got stride={stride}")
    pads = []
    for k, d in zip(kernel, dilation, strict=True):
        total = d * (k - 1)
        pads += [total // 2, total - total // 2]
    return tuple(pads)


class Conv2D(Function):
    """Cross-correlates an (N, C_in, H, W) input with ``weight`` (C_out, C_in/groups, kh, kw) and
    adds ``bias`` (C_out,) along the channel axis, as ``torch.nn.Conv2d``.

    Args:
        in_channels, out_channels: channel counts, both divisible by ``groups``.
        kernel_size, stride, dilation: an int or an (h, w) pair.
        padding: an int, an (h, w) pair, or 'valid' / 'same' (stride 1; odd totals pad the end).
        groups: channel groups convolved separately (``groups == in_channels``: depthwise).
        bias: whether to add a learned bias.
        weight_init, bias_init: initializers ``f(shape, dtype)`` (``layers.init``); the default is
            PyTorch's, U(-b, b) for both with b = 1/sqrt(fan_in), fan_in = in/groups * kh * kw.
        dtype: the parameters' dtype.

    >>> import numpy as np, tape, layers
    >>> conv = layers.Conv2D(3, 8, kernel_size=3, padding=1)
    >>> conv(tape.Variable(np.ones((2, 3, 5, 5), np.float32))).shape
    (2, 8, 5, 5)
    >>> conv.weight.shape, conv.bias.shape
    ((8, 3, 3, 3), (8,))
    """

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
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(
                f"in_channels ({in_channels}) and out_channels ({out_channels}) "
                f"must be divisible by groups ({groups})"
            )
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = pair(kernel_size, "kernel_size")
        self.stride, self.dilation = pair(stride, "stride"), pair(dilation, "dilation")
        self.padding = padding
        shape = (out_channels, in_channels // groups) + self.kernel_size
        weight_init = init.with_layout(
            weight_init or init.kaiming_uniform(a=math.sqrt(5)), "out_in"
        )
        self.weight = self.create_parameter(shape, weight_init, dtype, name="Conv2DWeight")
        self.bias = None
        if bias:
            fan_in = math.prod(shape[1:])
            bound = 1.0 / math.sqrt(fan_in) if fan_in else 0.0
            self.bias = self.create_parameter(
                (out_channels,), bias_init or init.uniform(-bound, bound), dtype, name="Conv2DBias"
            )
        self._conv_attrs = _CONV.check_attrs(
            {
                "strides": self.stride,
                "dilations": self.dilation,
                "groups": groups,
                "paddings": _paddings(padding, self.kernel_size, self.stride, self.dilation),
            }
        )

    def forward(self, x):
        out = apply(_CONV, (x, self.weight), self._conv_attrs)
        if self.bias is not None:
            out = apply(_ADD, (out, self.bias), _CHANNEL_AXIS)
        return out

    def __repr__(self):
        extra = "".join(
            f", {name}={value!r}"
            for name, value, default in (
                ("stride", self.stride, (1, 1)),
                ("padding", self.padding, 0),
                ("dilation", self.dilation, (1, 1)),
                ("groups", self.groups, 1),
                ("bias", self.bias is not None, True),
            )
            if value != default
        )
        return (
            f"Conv2D({self.in_channels}, {self.out_channels}, "
            f"kernel_size={self.kernel_size}{extra})"
        )


_CONV = REGISTRY["conv2d"]
_ADD = REGISTRY["elementwise_add"]
_CHANNEL_AXIS = _ADD.check_attrs({"axis": 1})
