"""Max and average pooling layers (1-D, 2-D, 3-D; channels first), PyTorch's arguments: each
call records one ``pool<n>d`` op, or ``max_pool<n>d_with_index`` when indices are asked for."""

from __future__ import annotations

from layers.conv import ntuple
from layers.function import Function
from ops.registry import REGISTRY
from tape.tape import apply


class _PoolNd(Function):
    nd = None
    pooling_type = None

    def __init__(self, kernel_size, stride, padding, dilation, ceil_mode, exclusive):
        super().__init__()
        nd = self.nd
        self.kernel_size = ntuple(kernel_size, nd, "kernel_size", minimum=1)
        self.stride = (
            self.kernel_size if stride is None else ntuple(stride, nd, "stride", minimum=1)
        )
        self.padding = ntuple(padding, nd, "padding", minimum=0)
        self.dilation = ntuple(dilation, nd, "dilation", minimum=1)
        for p, k in zip(self.padding, self.kernel_size):
            if 2 * p > k:
                raise ValueError(
                    f"padding should be at most half of kernel size, got padding={padding!r} "
                    f"and kernel_size={kernel_size!r}"
                )
        self.ceil_mode = bool(ceil_mode)
        self._pool = REGISTRY[f"pool{nd}d"]
        self._attrs = self._pool.check_attrs(
            {
                "pooling_type": self.pooling_type,
                "ksize": self.kernel_size,
                "strides": self.stride,
                "paddings": self.padding,
                "dilations": self.dilation,
                "ceil_mode": self.ceil_mode,
                "exclusive": exclusive,
            }
        )

    def forward(self, x):
        return apply(self._pool, (x,), self._attrs)

    def __repr__(self):
        return (
            f"{type(self).__name__}(kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}, ceil_mode={self.ceil_mode})"
        )


class _MaxPoolNd(_PoolNd):
    pooling_type = "max"

    def __init__(
        self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False
    ):
        super().__init__(kernel_size, stride, padding, dilation, ceil_mode, True)
        self.return_indices = bool(return_indices)
        self._with_index = REGISTRY[f"max_pool{self.nd}d_with_index"]
        self._index_attrs = {k: v for k, v in self._attrs.items() if k in self._with_index.attrs}

    def forward(self, x):
        if self.return_indices:
            return apply(self._with_index, (x,), self._index_attrs)
        return apply(self._pool, (x,), self._attrs)


class _AvgPoolNd(_PoolNd):
    pooling_type = "avg"

    def __init__(
        self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True
    ):
        super().__init__(kernel_size, stride, padding, 1, ceil_mode, not count_include_pad)
        self.count_include_pad = bool(count_include_pad)


_MAX_ARGS = """
    Args:
        kernel_size: an int or {n} ints.
        stride: defaults to ``kernel_size``.
        padding: implicit -inf padding on both ends, at most half the window.
        dilation: the step between the elements of a window.
        return_indices: also return the flat position of each maximum within its (n, c) plane
            (an int64 Variable), as ``MaxUnpool{n}D`` takes.
        ceil_mode: keep a last partial window (it must start inside the input or its padding).
"""

_AVG_ARGS = """
    Args:
        kernel_size, stride, padding, ceil_mode: as for MaxPool{n}D (zero padding).
        count_include_pad: divide by the window size including padded zeros (PyTorch's default),
            or only by the number of real elements.
"""


class MaxPool1D(_MaxPoolNd):
    """The maximum of each ``kernel_size`` window of an (N, C, L) input, as
    ``torch.nn.MaxPool1d``; the gradient goes to the first maximum of each window. Integer
    inputs work (no gradient).
    {args}
    >>> import numpy as np, tape, layers
    >>> x = tape.Variable(np.array([[[3, 1, 4, 1, 5, 9, 2, 6]]]))
    >>> out, index = layers.MaxPool1D(2, return_indices=True)(x)
    >>> out.numpy(), index.numpy()
    (array([[[3, 4, 9, 6]]]), array([[[0, 2, 5, 7]]]))
    """

    nd = 1


class MaxPool2D(_MaxPoolNd):
    """The maximum of each ``kernel_size`` window of an (N, C, H, W) input, as
    ``torch.nn.MaxPool2d``; the gradient goes to the first maximum of each window.
    {args}
    >>> import numpy as np, tape, layers
    >>> x = tape.Variable(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    >>> layers.MaxPool2D(2)(x).numpy()[0, 0]
    array([[ 5.,  7.],
           [13., 15.]], dtype=float32)
    """

    nd = 2


class MaxPool3D(_MaxPoolNd):
    """The maximum of each ``kernel_size`` window of an (N, C, D, H, W) input, as
    ``torch.nn.MaxPool3d``.
    {args}"""

    nd = 3


class AvgPool1D(_AvgPoolNd):
    """The mean of each ``kernel_size`` window of an (N, C, L) input, as ``torch.nn.AvgPool1d``.
    {args}
    >>> import numpy as np, tape, layers
    >>> x = tape.Variable(np.array([[[1.0, 2.0, 3.0, 4.0]]], np.float32))
    >>> layers.AvgPool1D(2, stride=1, padding=1)(x).numpy()
    array([[[0.5, 1.5, 2.5, 3.5, 2. ]]], dtype=float32)
    """

    nd = 1


class AvgPool2D(_AvgPoolNd):
    """The mean of each ``kernel_size`` window of an (N, C, H, W) input, as
    ``torch.nn.AvgPool2d``.
    {args}
    >>> import numpy as np, tape, layers
    >>> x = tape.Variable(np.ones((1, 1, 2, 2), np.float32))
    >>> layers.AvgPool2D(2, stride=1, padding=1)(x).numpy()[0, 0]
    array([[0.25, 0.5 , 0.25],
           [0.5 , 1.  , 0.5 ],
           [0.25, 0.5 , 0.25]], dtype=float32)
    """

    nd = 2


class AvgPool3D(_AvgPoolNd):
    """The mean of each ``kernel_size`` window of an (N, C, D, H, W) input, as
    ``torch.nn.AvgPool3d``.
    {args}"""

    nd = 3


for _cls in (MaxPool1D, MaxPool2D, MaxPool3D):
    _cls.__doc__ = _cls.__doc__.replace("{args}", _MAX_ARGS.format(n=_cls.nd))
for _cls in (AvgPool1D, AvgPool2D, AvgPool3D):
    _cls.__doc__ = _cls.__doc__.replace("{args}", _AVG_ARGS.format(n=_cls.nd))
