"""Upsample and ``interpolate``: PyTorch's resizing by ``size`` or ``scale_factor``, recording
one ``interpolate`` op with the output size PyTorch would compute."""

from __future__ import annotations

import math

from layers.function import Function
from ops.interpolate import MODES
from ops.registry import REGISTRY
from tape.tape import apply

_SMOOTH = ("linear", "bilinear", "bicubic", "trilinear")


def _per_axis(value, nd, what):
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,) * nd
    if len(items) != nd:
        raise ValueError(f"{what} must be one value or {nd} (one per spatial axis), got {value!r}")
    return items


def interpolate_attrs(
    spatial, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute=None
):
    """The ``interpolate`` op's attributes for an input of spatial shape ``spatial`` and
    PyTorch's arguments (the output size is floor(size * scale_factor) per axis)."""
    nd = len(spatial)
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    if (size is None) == (scale_factor is None):
        raise ValueError("give exactly one of size and scale_factor")
    if align_corners is not None and mode not in _SMOOTH:
        raise ValueError(
            "align_corners can only be set with the interpolating modes: " + ", ".join(_SMOOTH)
        )
    scales = None
    if size is not None:
        out = _per_axis(size, nd, "size")
    else:
        factors = tuple(float(f) for f in _per_axis(scale_factor, nd, "scale_factor"))
        out = tuple(math.floor(n * f) for n, f in zip(spatial, factors))
        if not recompute and mode != "area":
            scales = factors
    return {
        "mode": mode,
        "out_size": out,
        "scales": scales,
        "align_corners": bool(align_corners),
    }


def interpolate(
    x,
    size=None,
    scale_factor=None,
    mode="nearest",
    align_corners=None,
    recompute_scale_factor=None,
):
    """``torch.nn.functional.interpolate`` on an (N, C, *spatial) Variable: resizes to ``size``
    or by ``scale_factor`` with ``mode`` (nearest, nearest-exact, linear, bilinear, bicubic,
    trilinear, area).

    >>> import numpy as np, tape
    >>> from layers.upsample import interpolate
    >>> x = tape.Variable(np.array([[[[0.0, 4.0], [8.0, 12.0]]]], np.float32))
    >>> interpolate(x, size=(2, 5), mode="bilinear", align_corners=True).numpy()[0, 0]
    array([[ 0.,  1.,  2.,  3.,  4.],
           [ 8.,  9., 10., 11., 12.]], dtype=float32)
    """
    attrs = interpolate_attrs(
        x.shape[2:], size, scale_factor, mode, align_corners, recompute_scale_factor
    )
    return apply(_OP, (x,), _OP.check_attrs(attrs))


class Upsample(Function):
    """Resizes (N, C, *spatial) inputs to ``size`` or by ``scale_factor``, as
    ``torch.nn.Upsample``.

    Args:
        size: an int or one per spatial axis (the output's spatial shape).
        scale_factor: a float or one per spatial axis; the output is floor(input * factor).
        mode: 'nearest' (default), 'nearest-exact', 'linear' (3-D input), 'bilinear' and
            'bicubic' (4-D), 'trilinear' (5-D) or 'area' (adaptive average pooling).
        align_corners: for the interpolating modes, map the corner pixels' centres onto each
            other instead of their outer edges (PyTorch's default False).
        recompute_scale_factor: compute the source coordinates from the sizes, not the factor.

    >>> import numpy as np, tape, layers
    >>> x = tape.Variable(np.array([[[[1.0, 2.0], [3.0, 4.0]]]], np.float32))
    >>> layers.Upsample(scale_factor=2)(x).numpy()[0, 0]
    array([[1., 1., 2., 2.],
           [1., 1., 2., 2.],
           [3., 3., 4., 4.],
           [3., 3., 4., 4.]], dtype=float32)
    """

    def __init__(
        self,
        size=None,
        scale_factor=None,
        mode="nearest",
        align_corners=None,
        recompute_scale_factor=None,
    ):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
        if (size is None) == (scale_factor is None):
            raise ValueError("give exactly one of size and scale_factor")
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x):
        return interpolate(
            x,
            self.size,
            self.scale_factor,
            self.mode,
            self.align_corners,
            self.recompute_scale_factor,
        )

    def __repr__(self):
        what = f"size={self.size!r}"
        if self.size is None:
            what = f"scale_factor={self.scale_factor!r}"
        return f"Upsample({what}, mode={self.mode!r})"


_OP = REGISTRY["interpolate"]
