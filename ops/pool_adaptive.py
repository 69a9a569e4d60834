"""Adaptive pooling (adaptive_avg_pool1d/2d/3d, adaptive_max_pool1d/2d/3d): pooling to a given
output size over PyTorch's windows [floor(i * L / out), ceil((i + 1) * L / out)) per axis.

Average pooling over such windows is separable, so it is interpolate's "area" map (one averaging
matrix per axis; the gradient is interpolate_grad). Max pooling gathers every window at once
(short windows repeat their last position, which changes neither the maximum nor where it is
first found) and also returns the flat index of each maximum within its plane, whose scatter
is the gradient.
"""

from __future__ import annotations

import math

from ops.conv import WORDS
from ops.conv_kernels import SPATIAL
from ops.interpolate import interpolate_grad, resample, window_bounds
from ops.pool_index import INDEX, scatter_gradient
from ops.registry import Attr, register
from tape.errors import DTypeError, ShapeError
from tape.tape import apply


def adaptive_attrs(nd):
    return {
        "output_size": Attr(
            "ints",
            required=True,
            check=lambda v: len(v) == nd and min(v) >= 1,
            rule=f"{WORDS[nd]} >= 1",
        )
    }


def check_adaptive(attrs, x, kinds):
    """The output shape, or the library's error for a bad rank, empty axis or dtype."""
    nd = len(attrs["output_size"])
    if len(x.shape) != nd + 2 or min(x.shape[2:]) < 1:
        raise ShapeError(
            None,
            f"input X must be {nd + 2}-D with non-empty spatial axes",
            expected=f"X (N, C, {SPATIAL[nd]}), {SPATIAL[nd]} >= 1",
            actual=f"X.shape={x.shape}",
        )
    if x.dtype.kind not in kinds:
        raise DTypeError(
            None,
            "input X has an unsupported dtype",
            expected="floating point" if kinds == "f" else "a float or integer dtype",
            actual=str(x.dtype),
        )
    return tuple(x.shape[:2]) + tuple(attrs["output_size"])


def _area(output_size, input_size=None):
    attrs = {"mode": "area", "out_size": output_size, "scales": None, "align_corners": False}
    return attrs if input_size is None else {**attrs, "input_size": input_size}


def _infer_avg(attrs, x):
    return check_adaptive(attrs, x, "f"), x.dtype


def _avg_kernel(xp, attrs, x):
    return resample(xp, x, _area(attrs["output_size"]), x.shape[2:])


def _avg_gradient(g):
    (x,), (gout,) = g.inputs, g.gouts
    return (apply(interpolate_grad, (gout,), _area(g.attrs["output_size"], x.shape[2:])),)


def _windows(xp, size, out):
    """(out, K) input positions of the windows along one axis, K the longest window."""
    starts, ends, longest = window_bounds(xp, size, out)
    return xp.minimum(starts[:, None] + xp.arange(longest, dtype=INDEX)[None, :], ends[:, None] - 1)


def _infer_max(attrs, x):
    shape = check_adaptive(attrs, x, "fiu")
    return (shape, x.dtype), (shape, INDEX)


def _max_kernel(xp, attrs, x):
    (n, c, *size), out = x.shape, tuple(attrs["output_size"])
    nd = len(size)
    # Axis a's table shaped (1, 1, ..., out_a, K_a, ..., 1, 1): indexing X with all of them
    # gives the windows as (N, C, out_0, K_0, out_1, K_1, ...).
    tables = [
        t.reshape((1,) * 2 * a + t.shape + (1,) * 2 * (nd - a - 1))
        for a, t in enumerate(_windows(xp, s, o) for s, o in zip(size, out))
    ]
    order = tuple(range(0, 2 * nd, 2)) + tuple(range(1, 2 * nd, 2))  # outs first, then Ks
    windows = x[(slice(None), slice(None), *tables)].transpose(0, 1, *(2 + i for i in order))
    longest = math.prod(t.shape[2 * a + 1] for a, t in enumerate(tables))
    windows = windows.reshape((n, c) + out + (longest,))
    # The flat plane position of every window element, laid out like one (n, c) of windows.
    steps = [math.prod(size[a + 1 :]) for a in range(nd)]
    flat = sum(t * step for t, step in zip(tables, steps)).transpose(order)
    flat = flat.reshape(math.prod(out), longest)
    first = xp.argmax(windows, axis=-1).reshape(n * c, math.prod(out))
    index = flat[xp.arange(flat.shape[0])[None, :], first].reshape((n, c) + out)
    return xp.max(windows, axis=-1), index


_AVG_DOC = """Out[n, c, *i] = the mean of X (N, C, {spatial}) over PyTorch's adaptive window i,
[floor(i * L / out), ceil((i + 1) * L / out)) along each axis (PyTorch's adaptive_avg_pool{nd}d;
interpolate's "area" mode).

dX = interpolate_grad(dOut) (mode "area"): each gradient spread evenly over its window.
{example}"""

_AVG_EXAMPLE = """
>>> import numpy as np, tape, ops
>>> x = tape.Variable(np.array([[[1.0, 2.0, 3.0, 4.0, 5.0]]], np.float32))
>>> ops.adaptive_avg_pool1d(x, output_size=[3]).numpy().round(5)  # (windows overlap)
array([[[1.5, 3. , 4.5]]], dtype=float32)
"""

_MAX_DOC = """Out[n, c, *i] = the maximum of X (N, C, {spatial}) over PyTorch's adaptive window
i, [floor(i * L / out), ceil((i + 1) * L / out)) along each axis; Mask (int64) = the flat
position of the window's first maximum within its (n, c) plane, as PyTorch's
adaptive_max_pool{nd}d returns. Integers are accepted (forward only). The functional call
returns (Out, Mask).

dX = plane_scatter_add(Mask, dOut).
"""


def _register(nd):
    words = dict(nd=nd, spatial=SPATIAL[nd])
    avg = register(
        f"adaptive_avg_pool{nd}d",
        inputs=("X",),
        attrs=adaptive_attrs(nd),
        infer=_infer_avg,
        no_need_buffer=("X",),
        doc=_AVG_DOC.format(example=_AVG_EXAMPLE if nd == 1 else "", **words),
    )(_avg_kernel)
    top = register(
        f"adaptive_max_pool{nd}d",
        inputs=("X",),
        outputs=("Out", "Mask"),
        attrs=adaptive_attrs(nd),
        infer=_infer_max,
        no_need_buffer=("X",),
        doc=_MAX_DOC.format(**words),
    )(_max_kernel)
    avg.gradient(_avg_gradient)
    top.gradient(scatter_gradient)
    return avg, top


adaptive_avg_pool1d, adaptive_max_pool1d = _register(1)
adaptive_avg_pool2d, adaptive_max_pool2d = _register(2)
adaptive_avg_pool3d, adaptive_max_pool3d = _register(3)
