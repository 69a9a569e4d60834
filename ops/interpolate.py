"""Resampling (PyTorch's interpolate: nearest, nearest-exact, linear, bilinear, bicubic,
trilinear and area) as one separable linear map, and its adjoint ``interpolate_grad``.

Every mode is separable: along each spatial axis the output is a fixed (out, in) matrix times
the input, built from PyTorch's source-index formulas (so values match its CPU kernels), and
applied with one matmul per axis. The gradient applies the transposed matrices, and the two ops
are each other's gradient, so derivatives of any order work. Dense matrices cost O(in) per
output element instead of the 1-4 taps of a gather, which is cheap at feature-map sizes and
keeps both directions to plain matmuls (no scatter-add).
"""

from __future__ import annotations

import math

import numpy as np

from ops.conv_kernels import SPATIAL
from ops.registry import Attr, register
from tape.errors import AttrError, DTypeError, ShapeError
from tape.tape import apply

# mode -> the number of spatial axes it works on (None: any of 1, 2, 3), as PyTorch's.
MODES = {
    "nearest": None,
    "nearest-exact": None,
    "area": None,
    "linear": 1,
    "bilinear": 2,
    "bicubic": 2,
    "trilinear": 3,
}
_SMOOTH = ("linear", "bilinear", "bicubic", "trilinear")


def window_bounds(xp, size, out):
    """PyTorch's adaptive windows along one axis: window i is [floor(i * size / out),
    ceil((i + 1) * size / out)); returns the starts and ends as (out,) int64 arrays and the
    longest window's length."""
    steps = xp.arange(out, dtype=np.int64)
    starts, ends = (steps * size) // out, -((-(steps + 1) * size) // out)
    # The longest window, from Python ints (no device round trip).
    longest = max(-((-(i + 1) * size) // out) - (i * size) // out for i in range(out))
    return starts, ends, longest


def _step(size, out, scale, align_corners, dtype):
    """PyTorch's area_pixel_compute_scale, input units per output unit, computed as it does in
    the input's float type (so float32 picks the same source pixels as PyTorch's float32)."""
    real = np.dtype(dtype).type
    if align_corners:
        return (real(size) - 1) / real(out - 1) if out > 1 else real(0)
    return real(1.0 / scale) if scale else real(size) / real(out)


def _cubic(t):
    """PyTorch's cubic convolution weights (A = -0.75) of the taps at -1, 0, 1, 2 for a
    fractional offset t."""
    a = -0.75

    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return far(t + 1), near(t), near(1 - t), far(2 - t)


def _taps(xp, mode, size, out, scale, align_corners, dtype):
    """(source indices, weights) per tap: the rows of one axis's matrix, as (out,) arrays."""
    dst = xp.arange(out, dtype=dtype)
    if mode == "nearest-2d" and out in (size, 2 * size):
        # PyTorch's 2-D nearest kernel maps these sizes by i (or i // 2) whatever the scale.
        return [(xp.arange(out) // (out // size), None)]
    if mode in ("nearest", "nearest-exact", "nearest-2d"):
        step = _step(size, out, scale, False, dtype)
        src = xp.floor((dst + 0.5) * step if mode == "nearest-exact" else dst * step)
        return [(xp.minimum(src.astype(np.int64), size - 1), None)]
    step = _step(size, out, scale, align_corners, dtype)
    src = dst * step if align_corners else (dst + 0.5) * step - 0.5
    if mode != "bicubic":
        src = xp.maximum(src, 0)
    # guard_index_and_lambda: the integer part kept inside the input, the fraction in [0, 1].
    index = xp.minimum(xp.floor(src).astype(np.int64), size - 1)
    frac = xp.clip(src - index.astype(dtype), 0, 1)
    if mode == "bicubic":
        return [
            (xp.clip(index + (k - 1), 0, size - 1), weight) for k, weight in enumerate(_cubic(frac))
        ]
    return [(index, 1 - frac), (xp.minimum(index + 1, size - 1), frac)]


def axis_matrix(xp, mode, size, out, scale, align_corners, dtype):
    """The (out, size) matrix resampling one axis of length ``size`` to ``out``."""
    columns = xp.arange(size)[None, :]
    if mode == "area":
        starts, ends, _ = window_bounds(xp, size, out)
        starts, ends = starts[:, None], ends[:, None]
        inside = (columns >= starts) & (columns < ends)
        return inside.astype(dtype) / (ends - starts).astype(dtype)
    matrix = xp.zeros((out, size), dtype=dtype)
    for index, weight in _taps(xp, mode, size, out, scale, align_corners, dtype):
        hit = (index[:, None] == columns).astype(dtype)
        matrix += hit if weight is None else hit * weight.astype(dtype)[:, None]
    return matrix


def _identity(mode, size, out, scale, align_corners):
    """Whether the axis's matrix is the identity (a copy: skip its matmul). PyTorch's linear
    kernels (and its 2-D nearest one) copy an axis whose size does not change whatever the
    scale factor says; bicubic and the other nearest kernels still apply the factor."""
    if size != out:
        return False
    copies = ("area", "nearest-2d", "linear", "bilinear", "trilinear")
    return mode in copies or align_corners or scale in (None, 1.0)


def along(xp, x, matrix, axis):
    """``matrix`` (out, in) applied to axis ``axis`` of x: one matmul."""
    out, size = matrix.shape
    lead, trail = math.prod(x.shape[:axis]), math.prod(x.shape[axis + 1 :])
    if trail == 1:
        result = xp.matmul(x.reshape(lead, size), matrix.T)
    else:
        result = xp.matmul(matrix, x.reshape(lead, size, trail))
    return result.reshape(x.shape[:axis] + (out,) + x.shape[axis + 1 :])


def resample(xp, x, attrs, in_size, transpose=False):
    """x (spatial shape ``in_size``) resampled to ``attrs["out_size"]``; or, ``transpose``, the
    adjoint: x of the output's spatial shape mapped back to ``in_size``. Shrinking axes go
    first (less work for the others); identity axes are skipped."""
    mode, corners, scales = attrs["mode"], attrs["align_corners"], attrs["scales"]
    if mode == "nearest" and len(in_size) == 2:
        mode = "nearest-2d"
    axes = []
    for a, (n_in, n_out) in enumerate(zip(in_size, attrs["out_size"])):
        scale = scales[a] if scales else None
        if not _identity(mode, n_in, n_out, scale, corners):
            ratio = n_in / n_out if transpose else n_out / n_in
            axes.append((ratio, a, n_in, n_out, scale))
    if not axes:
        return x.copy()
    for _, a, n_in, n_out, scale in sorted(axes):
        matrix = axis_matrix(xp, mode, n_in, n_out, scale, corners, x.dtype)
        x = along(xp, x, matrix.T if transpose else matrix, 2 + a)
    return x


INTERPOLATE_ATTRS = {
    "mode": Attr("str", "nearest", choices=tuple(MODES)),
    "out_size": Attr(
        "ints",
        required=True,
        check=lambda v: 1 <= len(v) <= 3 and min(v) >= 1,
        rule="1 to 3 ints >= 1 (the output's spatial shape)",
    ),
    "scales": Attr(
        "floats",
        None,
        check=lambda v: 1 <= len(v) <= 3 and min(v) > 0,
        rule="None, or one float > 0 per spatial axis (PyTorch's scale_factor)",
    ),
    "align_corners": Attr("bool", False),
}
_KEYS = tuple(INTERPOLATE_ATTRS)


def check_resample(attrs, x, slot="X"):
    """The library's error for an input or attributes interpolate cannot take."""
    nd, mode = len(attrs["out_size"]), attrs["mode"]
    if x.dtype.kind != "f":
        raise DTypeError(
            None,
            f"input {slot} must be floating point",
            expected="float16, float32 or float64",
            actual=str(x.dtype),
        )
    if len(x.shape) != nd + 2 or min(x.shape[2:]) < 1:
        raise ShapeError(
            None,
            f"input {slot} must be {nd + 2}-D with non-empty spatial axes (out_size has {nd})",
            expected=f"{slot} (N, C, {SPATIAL[nd]}), {SPATIAL[nd]} >= 1",
            actual=f"{slot}.shape={x.shape}",
        )
    if MODES[mode] not in (None, nd):
        raise ShapeError(
            None,
            f"mode '{mode}' resamples {MODES[mode]} spatial axes",
            expected=f"a {MODES[mode] + 2}-D input",
            actual=f"{slot}.shape={x.shape}",
        )
    if attrs["align_corners"] and mode not in _SMOOTH:
        raise AttrError(
            None,
            "align_corners only applies to the interpolating modes",
            expected=f"mode in {list(_SMOOTH)}",
            actual=f"mode='{mode}'",
        )
    if attrs["scales"] is not None and len(attrs["scales"]) != nd:
        raise AttrError(
            None,
            "one scale per spatial axis",
            expected=f"{nd} floats",
            actual=str(attrs["scales"]),
        )


def _infer(attrs, x):
    check_resample(attrs, x)
    return tuple(x.shape[:2]) + tuple(attrs["out_size"]), x.dtype


@register(
    "interpolate", inputs=("X",), attrs=INTERPOLATE_ATTRS, infer=_infer, no_need_buffer=("X",)
)
def interpolate(xp, attrs, x):
    """Out = X (N, C, *spatial) resampled to ``out_size`` by ``mode``, PyTorch's
    interpolate: along each axis output position i reads the source coordinate
    (i + 0.5) * in / out - 0.5 (or i * (in - 1) / (out - 1) with ``align_corners``; ``scales``,
    PyTorch's scale_factor, replaces in / out by 1 / scale) with linear or cubic (A = -0.75)
    weights; nearest takes floor(i * in / out) and nearest-exact floor((i + 0.5) * in / out);
    area averages PyTorch's adaptive windows. linear, bilinear and trilinear are one separable
    map on 1, 2 or 3 axes. As PyTorch's kernels, the linear modes copy an axis whose length
    does not change, and 2-D nearest reads i or i // 2 for an output as long as the input or
    twice it, whatever the scale.

    Out is linear in X: dX = interpolate_grad(dOut), the transposed map.

    >>> import numpy as np, tape, ops
    >>> x = tape.Variable(np.array([[[0.0, 1.0, 3.0]]], np.float32))
    >>> ops.interpolate(x, mode="linear", out_size=[5], align_corners=True).numpy()
    array([[[0. , 0.5, 1. , 2. , 3. ]]], dtype=float32)
    >>> ops.interpolate(x, out_size=[6]).numpy()
    array([[[0., 0., 1., 1., 3., 3.]]], dtype=float32)
    """
    return resample(xp, x, attrs, x.shape[2:])


@interpolate.gradient
def _(g):
    (x,), (gout,) = g.inputs, g.gouts
    attrs = {key: g.attrs[key] for key in _KEYS}
    return (apply(interpolate_grad, (gout,), {**attrs, "input_size": x.shape[2:]}),)


def _infer_grad(attrs, gout):
    check_resample(attrs, gout, "Out@GRAD")
    if tuple(gout.shape[2:]) != tuple(attrs["out_size"]) or len(attrs["input_size"]) != len(
        attrs["out_size"]
    ):
        raise ShapeError(
            None,
            "Out@GRAD and input_size do not match out_size",
            expected=f"Out@GRAD spatial shape {tuple(attrs['out_size'])} and "
            f"{len(attrs['out_size'])} input sizes",
            actual=f"Out@GRAD.shape={gout.shape}, input_size={attrs['input_size']}",
        )
    return tuple(gout.shape[:2]) + tuple(attrs["input_size"]), gout.dtype


@register(
    "interpolate_grad",
    inputs=("Out@GRAD",),
    outputs=("X@GRAD",),
    attrs={
        **INTERPOLATE_ATTRS,
        "input_size": Attr(
            "ints", required=True, check=lambda v: min(v, default=0) >= 1, rule="ints >= 1"
        ),
    },
    infer=_infer_grad,
    no_need_buffer=("Out@GRAD",),
)
def interpolate_grad(xp, attrs, gout):
    """X@GRAD = the transpose of interpolate's map (X's spatial shape ``input_size``) applied
    to Out@GRAD: each output's gradient spread over the input positions it read, by the same
    weights.

    Linear: d(Out@GRAD) = interpolate(G) for an upstream gradient G.
    """
    return resample(xp, gout, attrs, attrs["input_size"], transpose=True)


@interpolate_grad.gradient
def _(g):
    attrs = {key: g.attrs[key] for key in _KEYS}
    return (apply(interpolate, (g.gouts[0],), attrs),)
