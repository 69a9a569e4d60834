"""MaxPool2D and AvgPool2D: parameter-free layers recording one ``pool2d`` op (NCHW)."""

from __future__ import annotations

from layers.conv import pair
from layers.function import Function
from ops.registry import REGISTRY
from tape.tape import apply


class _Pool2D(Function):
    pooling_type = None

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True):
        super().__init__()
        self.kernel_size = pair(kernel_size, "kernel_size")
        self.stride = self.kernel_size if stride is None else pair(stride, "stride")
        self.padding, self.ceil_mode = pair(padding, "padding"), bool(ceil_mode)
        self._attrs = _POOL.check_attrs(
            {
                "pooling_type": self.pooling_type,
                "ksize": self.kernel_size,
                "strides": self.stride,
                "paddings": self.padding,
                "ceil_mode": self.ceil_mode,
                "exclusive": exclusive,
            }
        )

    def forward(self, x):
        return apply(_POOL, (x,), self._attrs)

    def __repr__(self):
        return (
            f"{type(self).__name__}(kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}, ceil_mode={self.ceil_mode})"
        )


class MaxPool2D(_Pool2D):
    """The maximum of each ``kernel_size`` window, as ``torch.nn.MaxPool2d``; the gradient goes to
    the first maximum of each window.

    Args:
        kernel_size: an int or an (h, w) pair.
        stride: defaults to ``kernel_size``.
        padding: implicit -inf padding on both sides, at most half the window.
        ceil_mode: keep a last partial window (it must start inside the input or its padding).

    >>> import numpy as np, tape, layers
    >>> x = tape.Variable(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    >>> layers.MaxPool2D(2)(x).numpy()[0, 0]
    array([[ 5.,  7.],
           [13., 15.]], dtype=float32)
    """

    pooling_type = "max"

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False):
        super().__init__(kernel_size, stride, padding, ceil_mode)


class AvgPool2D(_Pool2D):
    """The mean of each ``kernel_size`` window, as ``torch.nn.AvgPool2d``.

    Args:
        kernel_size, stride, padding, ceil_mode: as for MaxPool2D (zero padding).
        count_include_pad: divide by the window size including padded zeros (PyTorch's default),
            or only by the number of real elements (the op's ``exclusive``).

    >>> import numpy as np, tape, layers
    >>> x = tape.Variable(np.ones((1, 1, 2, 2), np.float32))
    >>> layers.AvgPool2D(2, stride=1, padding=1)(x).numpy()[0, 0]
    array([[0.25, 0.5 , 0.25],
           [0.5 , 1.  , 0.5 ],
           [0.25, 0.5 , 0.25]], dtype=float32)
    """

    pooling_type = "avg"

    def __init__(
        self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True
    ):
        super().__init__(kernel_size, stride, padding, ceil_mode, not count_include_pad)
        self.count_include_pad = bool(count_include_pad)


_POOL = REGISTRY["pool2d"]
