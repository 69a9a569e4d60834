"""Max pooling that returns where each maximum came from, and what consumes those indices: max
pooling with indices (max_pool<n>d_with_index), max unpooling (max_unpool<n>d) and the adjoint
pair the gradients of unpooling and adaptive max pooling are made of, plane_gather and
plane_scatter_add.

An index is PyTorch's: the flat position of the maximum within its (n, c) plane of the input
(row-major over the spatial axes), so the indices feed max unpooling directly.
"""

from __future__ import annotations

import math

import numpy as np

from ops.conv import WORDS
from ops.conv_kernels import SPATIAL
from ops.pool import Geometry, check_geometry, lowest, window_attrs, window_max
from ops.pool_grad import FAMILIES as POOL_FAMILIES
from ops.pool_grad import first_max_masks
from ops.registry import Attr, register
from tape.errors import DTypeError, IndexingError, ShapeError
from tape.tape import apply

INDEX = np.dtype("int64")


def _plane_strides(size):
    """Row-major strides (in elements) of a plane of spatial shape ``size``."""
    return tuple(math.prod(size[a + 1 :]) for a in range(len(size)))


def _flat(xp, index, plane, op):
    """Indices into the flattened (N * C * plane) array, after checking they lie in a plane."""
    n, c = index.shape[:2]
    if index.size and bool(((index < 0) | (index >= plane)).any()):
        raise IndexingError(
            op,
            "Indices hold a position outside the plane",
            expected=f"0 <= index < {plane} (the product of the spatial sizes)",
            actual=f"min {int(index.min())}, max {int(index.max())}",
        )
    offsets = xp.arange(n * c, dtype=INDEX).reshape(n, c, *(1,) * (index.ndim - 2))
    return (index.astype(INDEX, copy=False) + offsets * plane).reshape(-1)


def _require_index(index, slot="Indices"):
    if index.dtype.kind not in "iu":
        raise DTypeError(
            None, f"input {slot} must be integer", expected="int64", actual=str(index.dtype)
        )


def _require_planes(x, index, x_slot, rank=None, same_rank=True):
    if len(x.shape) < 3 or (rank is not None and len(x.shape) != rank):
        raise ShapeError(
            None,
            f"input {x_slot} must be {rank or 'at least 3'}-D",
            expected=f"{x_slot} (N, C, *spatial)",
            actual=f"{x_slot}.shape={x.shape}",
        )
    if tuple(index.shape[:2]) != tuple(x.shape[:2]) or (
        same_rank and len(index.shape) != len(x.shape)
    ):
        raise ShapeError(
            None,
            f"Indices must have {x_slot}'s {'rank, ' if same_rank else ''}batch and channels",
            expected=f"Indices.shape[:2] == {x_slot}.shape[:2] == {tuple(x.shape[:2])}",
            actual=f"Indices.shape={index.shape}, {x_slot}.shape={x.shape}",
        )


# ---- the adjoint pair: gather from planes, scatter-add into planes -------------------------


def _infer_gather(attrs, x, index):
    _require_index(index)
    _require_planes(x, index, "X", same_rank=False)
    return tuple(index.shape), x.dtype


@register("plane_gather", inputs=("X", "Indices"), infer=_infer_gather, no_need_buffer=("X",))
def plane_gather(xp, attrs, x, index):
    """Out[n, c, *p] = X[n, c].flat[Indices[n, c, *p]]: each (n, c) plane of X read at flat
    positions (X (N, C, *spatial), Indices (N, C, *any)).

    dX = plane_scatter_add(Indices, dOut) (X's spatial shape); Indices get none.
    """
    n, c = x.shape[:2]
    plane = math.prod(x.shape[2:])
    flat = _flat(xp, index, plane, "plane_gather")
    return x.reshape(-1)[flat].reshape(index.shape)


@plane_gather.gradient
def _(g):
    (x, index), (gout,) = g.inputs, g.gouts
    return apply(plane_scatter_add, (index, gout), {"output_size": x.shape[2:]}), None


def _infer_scatter(attrs, index, x):
    _require_index(index)
    _require_planes(x, index, "X")
    if tuple(index.shape) != tuple(x.shape):
        raise ShapeError(
            None, "X must have Indices' shape", expected=str(index.shape), actual=str(x.shape)
        )
    return tuple(x.shape[:2]) + tuple(attrs["output_size"]), x.dtype


@register(
    "plane_scatter_add",
    inputs=("Indices", "X"),
    attrs={
        "output_size": Attr(
            "ints", required=True, check=lambda v: len(v) >= 1 and min(v) >= 0, rule="ints >= 0"
        )
    },
    infer=_infer_scatter,
)
def plane_scatter_add(xp, attrs, index, x):
    """Out = zeros (N, C, *output_size); Out[n, c].flat[Indices[n, c, *p]] += X[n, c, *p]
    (repeated positions add up). The adjoint of plane_gather: the gradient of max pooling with
    indices and of adaptive max pooling.

    dX = plane_gather(dOut, Indices); Indices get none.
    """
    n, c = x.shape[:2]
    plane = math.prod(attrs["output_size"])
    flat = _flat(xp, index, plane, "plane_scatter_add")
    # bincount sums repeated positions in one pass (it accumulates in float64).
    out = xp.bincount(flat, weights=x.reshape(-1), minlength=n * c * plane)
    return out.astype(x.dtype, copy=False).reshape((n, c) + tuple(attrs["output_size"]))


@plane_scatter_add.gradient
def _(g):
    (index, _), (gout,) = g.inputs, g.gouts
    return None, apply(plane_gather, (gout, index), {})


def scatter_gradient(g):
    """dX of an op whose Out holds X's values at the positions its Mask names (adaptive max)."""
    (x,), (gout, _) = g.inputs, g.gouts
    if gout is None:
        return (None,)
    return (apply(plane_scatter_add, (g.outputs[1], gout), {"output_size": x.shape[2:]}),)


# ---- max pooling with indices ------------------------------------------------------------


def _with_index_gradient(g):
    """dX as max pooling without indices routes it (Mask is piecewise constant in X)."""
    (x,), (out, _), (gout, _) = g.inputs, g.outputs, g.gouts
    if gout is None:
        return (None,)
    grad = POOL_FAMILIES[len(g.attrs["ksize"])][1]
    return (apply(grad, (x, gout, out), {**g.attrs, "pooling_type": "max", "exclusive": True}),)


def _infer_with_index(attrs, x):
    geom = check_geometry(attrs, x)
    shape = x.shape[:2] + geom.out
    return (shape, x.dtype), (shape, INDEX)


def _with_index_kernel(xp, attrs, x):
    geom = Geometry(attrs, x.shape[2:])
    maxima = window_max(xp, geom, geom.pad(xp, x, lowest(x.dtype)))
    plane = _plane_strides(geom.size)
    # The flat position of each window's first tap, in unpadded coordinates.
    start = 0
    for a, ((lo, _), step) in enumerate(zip(geom.pads, plane)):
        axis = (xp.arange(geom.out[a], dtype=INDEX) * geom.stride[a] - lo) * step
        start = start + axis.reshape((-1,) + (1,) * (len(plane) - a - 1))
    index = xp.empty(maxima.shape, dtype=INDEX)
    index[...] = geom.first_taps(xp, INDEX)  # kept only by windows of padding alone
    for offset, _, hit in first_max_masks(xp, geom, x, maxima):
        shift = sum(k * d * step for k, d, step in zip(offset, geom.dilation, plane))
        xp.copyto(index, start + shift, where=hit)
    return maxima, index


_WITH_INDEX_DOC = """Out = max pooling of X (N, C, {spatial}) as pool{nd}d with pooling_type
"max" (dilation, padding, ceil_mode; integers too); Mask (int64) = the flat position of each
window's first maximum within its (n, c) plane of X, PyTorch's return_indices convention, ready
for max_unpool{nd}d. The functional call returns (Out, Mask).

dX = pool{nd}d_grad(X, dOut, Out) (max): each gradient added at its window's first maximum,
where Mask points (none for a window of padding only).
{example}"""

_WITH_INDEX_EXAMPLE = """
>>> import numpy as np, tape, ops
>>> x = tape.Variable(np.array([[[[1.0, 5.0], [7.0, 2.0]]]], np.float32))
>>> out, mask = ops.max_pool2d_with_index(x, ksize=[2, 2])
>>> out.numpy().ravel(), mask.numpy().ravel()
(array([7.], dtype=float32), array([2]))
"""


# ---- max unpooling ----------------------------------------------------------------------


def _infer_unpool(attrs, x, index):
    nd = len(attrs["output_size"])
    _require_index(index)
    _require_planes(x, index, "X", rank=nd + 2)
    if tuple(index.shape) != tuple(x.shape):
        raise ShapeError(
            None, "Indices must have X's shape", expected=str(x.shape), actual=str(index.shape)
        )
    if x.dtype.kind not in "fiu":
        raise DTypeError(None, "input X must be numeric", actual=str(x.dtype))
    return tuple(x.shape[:2]) + tuple(attrs["output_size"]), x.dtype


def _unpool_kernel(xp, attrs, x, index):
    (n, c), size = x.shape[:2], tuple(attrs["output_size"])
    flat = _flat(xp, index, math.prod(size), f"max_unpool{len(size)}d")
    out = xp.zeros(n * c * math.prod(size), dtype=x.dtype)
    out[flat] = x.reshape(-1)
    return out.reshape((n, c) + size)


def _unpool_gradient(g):
    (_, index), (gout,) = g.inputs, g.gouts
    return apply(plane_gather, (gout, index), {}), None


_UNPOOL_DOC = """Out = zeros (N, C, *output_size) with Out[n, c].flat[Indices[n, c, *p]] =
X[n, c, *p]: PyTorch's max_unpool{nd}d, the partial inverse of max pooling given the Mask of
max_pool{nd}d_with_index (X, Indices (N, C, {spatial})). A position named twice keeps one of
the values (PyTorch leaves which one unspecified).

dX = plane_gather(dOut, Indices); Indices get none.
{example}"""

_UNPOOL_EXAMPLE = """
>>> import numpy as np, tape, ops
>>> x = tape.Variable(np.array([[[7.0, 9.0]]], np.float32))
>>> index = tape.Variable(np.array([[[1, 2]]]))
>>> ops.max_unpool1d(x, index, output_size=[4]).numpy()
array([[[0., 7., 9., 0.]]], dtype=float32)
"""


def _register(nd):
    words = dict(nd=nd, spatial=SPATIAL[nd])
    with_index = register(
        f"max_pool{nd}d_with_index",
        inputs=("X",),
        outputs=("Out", "Mask"),
        attrs=window_attrs(nd),
        infer=_infer_with_index,
        doc=_WITH_INDEX_DOC.format(example=_WITH_INDEX_EXAMPLE if nd == 2 else "", **words),
    )(_with_index_kernel)
    unpool = register(
        f"max_unpool{nd}d",
        inputs=("X", "Indices"),
        attrs={
            "output_size": Attr(
                "ints",
                required=True,
                check=lambda v: len(v) == nd and min(v) >= 1,
                rule=f"{WORDS[nd]} >= 1",
            )
        },
        infer=_infer_unpool,
        no_need_buffer=("X",),
        doc=_UNPOOL_DOC.format(example=_UNPOOL_EXAMPLE if nd == 1 else "", **words),
    )(_unpool_kernel)
    with_index.gradient(_with_index_gradient)
    unpool.gradient(_unpool_gradient)
    return with_index, unpool


max_pool1d_with_index, max_unpool1d = _register(1)
max_pool2d_with_index, max_unpool2d = _register(2)
max_pool3d_with_index, max_unpool3d = _register(3)
