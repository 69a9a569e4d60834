"""Adaptive pooling and max unpooling layers (1-D, 2-D, 3-D; channels first), PyTorch's
arguments: AdaptiveAvgPool<n>D, AdaptiveMaxPool<n>D and MaxUnpool<n>D, each recording one op."""

from __future__ import annotations

from layers.conv import ntuple
from layers.function import Function
from ops.registry import REGISTRY
from tape.tape import apply


def adaptive_size(output_size, nd):
    """``output_size`` as nd entries, each an int >= 1 or None (keep the input's size)."""
    items = (output_size,) * nd if not isinstance(output_size, (tuple, list)) else output_size
    items = tuple(items)
    if len(items) != nd or not all(
        v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1) for v in items
    ):
        raise ValueError(
            f"output_size must be an int >= 1 or {nd} of them (None keeps the input's size), "
            f"got {output_size!r}"
        )
    return items


class _AdaptiveNd(Function):
    nd = None
    kind = None

    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size = adaptive_size(output_size, self.nd)
        self.return_indices = bool(return_indices)
        self._op = REGISTRY[f"adaptive_{self.kind}_pool{self.nd}d"]

    def forward(self, x):
        size = tuple(n if o is None else o for n, o in zip(x.shape[-self.nd :], self.output_size))
        out = apply(self._op, (x,), self._op.check_attrs({"output_size": size}))
        if self.kind == "avg" or self.return_indices:
            return out
        return out[0]

    def __repr__(self):
        return f"{type(self).__name__}(output_size={self.output_size})"


class AdaptiveAvgPool1D(_AdaptiveNd):
    """The mean over each of ``output_size`` windows of an (N, C, L) input, the windows
    [floor(i * L / out), ceil((i + 1) * L / out)), as ``torch.nn.AdaptiveAvgPool1d``.

    >>> import numpy as np, tape, layers
    >>> x = tape.Variable(np.arange(5, dtype=np.float32).reshape(1, 1, 5))
    >>> layers.AdaptiveAvgPool1D(2)(x).numpy()
    array([[[1., 3.]]], dtype=float32)
    """

    nd, kind = 1, "avg"

    def __init__(self, output_size):
        super().__init__(output_size)


class AdaptiveAvgPool2D(AdaptiveAvgPool1D):
    """``torch.nn.AdaptiveAvgPool2d`` on (N, C, H, W): ``output_size`` an int or (h, w), None
    keeping that axis.

    >>> import numpy as np, tape, layers
    >>> x = tape.Variable(np.ones((2, 8, 7, 5), np.float32))
    >>> layers.AdaptiveAvgPool2D((1, None))(x).shape
    (2, 8, 1, 5)
    """

    nd = 2


class AdaptiveAvgPool3D(AdaptiveAvgPool1D):
    """``torch.nn.AdaptiveAvgPool3d`` on (N, C, D, H, W)."""

    nd = 3


class AdaptiveMaxPool1D(_AdaptiveNd):
    """The maximum over each of ``output_size`` adaptive windows of an (N, C, L) input, as
    ``torch.nn.AdaptiveMaxPool1d``; with ``return_indices`` also the flat position of each
    maximum within its (n, c) plane (int64).

    >>> import numpy as np, tape, layers
    >>> x = tape.Variable(np.array([[[3.0, 1.0, 4.0, 1.0, 5.0]]], np.float32))
    >>> out, index = layers.AdaptiveMaxPool1D(2, return_indices=True)(x)
    >>> out.numpy(), index.numpy()
    (array([[[4., 5.]]], dtype=float32), array([[[2, 4]]]))
    """

    nd, kind = 1, "max"


class AdaptiveMaxPool2D(AdaptiveMaxPool1D):
    """``torch.nn.AdaptiveMaxPool2d`` on (N, C, H, W)."""

    nd = 2


class AdaptiveMaxPool3D(AdaptiveMaxPool1D):
    """``torch.nn.AdaptiveMaxPool3d`` on (N, C, D, H, W)."""

    nd = 3


class _MaxUnpoolNd(Function):
    nd = None

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        nd = self.nd
        self.kernel_size = ntuple(kernel_size, nd, "kernel_size", minimum=1)
        self.stride = (
            self.kernel_size if stride is None else ntuple(stride, nd, "stride", minimum=1)
        )
        self.padding = ntuple(padding, nd, "padding", minimum=0)
        self._op = REGISTRY[f"max_unpool{nd}d"]

    def forward(self, x, indices, output_size=None):
        """``output_size`` (spatial sizes, or the whole shape) overrides the default
        (L - 1) * stride - 2 * padding + kernel_size, within one stride of it (PyTorch's rule)."""
        size = tuple(
            (n - 1) * s - 2 * p + k
            for n, s, p, k in zip(x.shape[2:], self.stride, self.padding, self.kernel_size)
        )
        if output_size is not None:
            wanted = tuple(output_size)[-self.nd :]
            if len(output_size) not in (self.nd, self.nd + 2) or any(
                not d - s < w < d + s for w, d, s in zip(wanted, size, self.stride)
            ):
                raise ValueError(
                    f"invalid output_size {tuple(output_size)}: each spatial size must lie "
                    f"strictly within one stride {self.stride} of {size}"
                )
            size = wanted
        return apply(self._op, (x, indices), self._op.check_attrs({"output_size": size}))

    def __repr__(self):
        return (
            f"{type(self).__name__}(kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding})"
        )


class MaxUnpool1D(_MaxUnpoolNd):
    """The partial inverse of ``MaxPool1D(..., return_indices=True)``, as
    ``torch.nn.MaxUnpool1d``: each value written at its index, zeros elsewhere.

    >>> import numpy as np, tape, layers
    >>> x = tape.Variable(np.array([[[3.0, 1.0, 4.0, 1.0]]], np.float32))
    >>> out, index = layers.MaxPool1D(2, return_indices=True)(x)
    >>> layers.MaxUnpool1D(2)(out, index).numpy()
    array([[[3., 0., 4., 0.]]], dtype=float32)
    """

    nd = 1


class MaxUnpool2D(_MaxUnpoolNd):
    """``torch.nn.MaxUnpool2d``: the partial inverse of ``MaxPool2D(..., return_indices=True)``
    on (N, C, H, W)."""

    nd = 2


class MaxUnpool3D(_MaxUnpoolNd):
    """``torch.nn.MaxUnpool3d`` on (N, C, D, H, W)."""

    nd = 3
