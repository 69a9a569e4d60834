"""ConvTranspose1D, ConvTranspose2D, ConvTranspose3D: transposed convolution layers (channels
first) recording ``conv_transpose<n>d`` and a channel-wise bias add, as PyTorch's, with its
weight layout (C_in, C_out/groups, *kernel) so a state dict maps one to one."""

from __future__ import annotations

from layers.conv import _ConvNd, check_channels, ntuple
from layers.function import Function
from ops.registry import REGISTRY
from tape.tape import apply


class _ConvTransposeNd(_ConvNd):
    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups=1,
        bias=True,
        dilation=1,
        weight_init=None,
        bias_init=None,
        dtype="float32",
    ):
        Function.__init__(self)  # _ConvNd's __init__ builds a convolution's geometry
        check_channels(in_channels, out_channels, groups)
        nd = self.nd
        if isinstance(padding, str):
            raise ValueError(f"padding={padding!r} is not supported for transposed convolutions")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = ntuple(kernel_size, nd, "kernel_size", minimum=1)
        self.stride = ntuple(stride, nd, "stride", minimum=1)
        self.dilation = ntuple(dilation, nd, "dilation", minimum=1)
        self.padding = ntuple(padding, nd, "padding", minimum=0)
        self.output_padding = ntuple(output_padding, nd, "output_padding", minimum=0)
        for extra, s, d in zip(self.output_padding, self.stride, self.dilation):
            if extra >= max(s, d):
                raise ValueError(
                    f"output_padding must be smaller than either stride or dilation, got "
                    f"output_padding={self.output_padding}, stride={self.stride}, "
                    f"dilation={self.dilation}"
                )
        self._conv = REGISTRY[f"conv_transpose{nd}d"]
        self._conv_attrs = self._attrs(self.output_padding)
        shape = (in_channels, out_channels // groups) + self.kernel_size
        self._create(shape, bias, weight_init, bias_init, dtype)

    def _attrs(self, output_padding):
        return self._conv.check_attrs(
            {
                "strides": self.stride,
                "paddings": self.padding,
                "output_padding": output_padding,
                "dilations": self.dilation,
                "groups": self.groups,
            }
        )

    def forward(self, x, output_size=None):
        """``output_size`` (the spatial sizes, or the whole shape) picks the output_padding that
        gives it, as in PyTorch."""
        attrs = self._conv_attrs
        if output_size is not None:
            attrs = self._attrs(self._output_padding(x.shape[2:], output_size))
        return self._add_bias(apply(self._conv, (x, self.weight), attrs))

    def _output_padding(self, size, output_size):
        wanted = tuple(output_size)[-self.nd :]
        smallest = tuple(
            (n - 1) * s - 2 * p + d * (k - 1) + 1
            for n, s, p, d, k in zip(
                size, self.stride, self.padding, self.dilation, self.kernel_size
            )
        )
        if len(output_size) not in (self.nd, self.nd + 2) or any(
            not lo <= w < lo + s for w, lo, s in zip(wanted, smallest, self.stride)
        ):
            largest = tuple(lo + s - 1 for lo, s in zip(smallest, self.stride))
            raise ValueError(
                f"requested an output size of {tuple(output_size)}, but valid sizes range from "
                f"{smallest} to {largest} (for an input of {tuple(size)})"
            )
        return tuple(w - lo for w, lo in zip(wanted, smallest))

    def _extra_repr(self):
        return super()._extra_repr() + [("output_padding", self.output_padding, (0,) * self.nd)]


_ARGS = """
    Args:
        in_channels, out_channels: channel counts, both divisible by ``groups``.
        kernel_size, stride, dilation: an int or {n} ints, all >= 1.
        padding: an int or {n} ints >= 0: dilation * (kernel_size - 1) - padding zeros are
            added to both ends of the input, as PyTorch's.
        output_padding: an int or {n} ints added to one end of the output, each smaller than
            the stride or the dilation; or pass ``output_size`` when calling.
        groups, bias, weight_init, bias_init, dtype: as for the convolution layers (PyTorch's
            initialisation reads the weight as (out, in, *kernel), so fan_in = C_out/groups *
            prod(kernel)).
"""


class ConvTranspose1D(_ConvTransposeNd):
    """The transposed convolution of an (N, C_in, L) input with ``weight`` (C_in, C_out/groups,
    k), plus ``bias`` (C_out,), as ``torch.nn.ConvTranspose1d``; the output has length
    (L - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1.
    {args}
    >>> import numpy as np, tape, layers
    >>> up = layers.ConvTranspose1D(4, 2, kernel_size=4, stride=2, padding=1)
    >>> up(tape.Variable(np.ones((1, 4, 8), np.float32))).shape
    (1, 2, 16)
    """

    nd = 1


class ConvTranspose2D(_ConvTransposeNd):
    """The transposed convolution of an (N, C_in, H, W) input with ``weight`` (C_in,
    C_out/groups, kh, kw), plus ``bias`` (C_out,), as ``torch.nn.ConvTranspose2d``.
    {args}
    >>> import numpy as np, tape, layers
    >>> up = layers.ConvTranspose2D(8, 4, kernel_size=3, stride=2, padding=1)
    >>> x = tape.Variable(np.ones((2, 8, 5, 5), np.float32))
    >>> up(x).shape, up(x, output_size=(10, 10)).shape, up.weight.shape
    ((2, 4, 9, 9), (2, 4, 10, 10), (8, 4, 3, 3))
    """

    nd = 2


class ConvTranspose3D(_ConvTransposeNd):
    """The transposed convolution of an (N, C_in, D, H, W) input with ``weight`` (C_in,
    C_out/groups, kd, kh, kw), plus ``bias`` (C_out,), as ``torch.nn.ConvTranspose3d``.
    {args}"""

    nd = 3


for _cls in (ConvTranspose1D, ConvTranspose2D, ConvTranspose3D):
    _cls.__doc__ = _cls.__doc__.replace("{args}", _ARGS.format(n=_cls.nd))
