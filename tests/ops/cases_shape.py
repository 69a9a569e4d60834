"""Cases for the shape ops: reshape, broadcast_to, transpose, (un)squeeze, concat, stack, split,
slice (and slice_grad), gather (and gather_grad) and where."""

import numpy as np

from tape.testing import OpCase

BIG = 2**62  # what Variable indexing passes for an open slice end


def _ints(values):
    return np.asarray(values, dtype=np.int64)


def _mask(shape):
    """A fixed boolean mask with both values present."""
    return lambda rng, dtype: (np.arange(int(np.prod(shape))) % 3 != 1).reshape(shape)


def _index(ndim, axes, starts, ends, strides=(), decrease_axis=()):
    index = [slice(None)] * ndim
    for k, (axis, start, end) in enumerate(zip(axes, starts, ends, strict=True)):
        index[axis] = slice(start, end, strides[k] if strides else 1)
    return tuple(index)


def _slice_ref(x, **attrs):
    out = x[_index(x.ndim, **attrs)]
    decrease = tuple(attrs.get("decrease_axis", ()))
    return np.squeeze(out, axis=decrease) if decrease else out


def _slice_grad_ref(x, gout, **attrs):
    gx = np.zeros(x.shape, gout.dtype)
    window = gx[_index(x.ndim, **attrs)]
    window[...] = gout.reshape(window.shape)
    return gx


def _slices_grad_ref(gouts, shape, axes, starts, ends, strides=(), decrease_axis=()):
    gx, n = np.zeros(shape, np.result_type(*[g.dtype for g in gouts])), len(axes)
    for k, gout in enumerate(gouts):
        cut = {
            "axes": axes,
            "starts": starts[k * n : (k + 1) * n],
            "ends": ends[k * n : (k + 1) * n],
        }
        if strides:
            cut["strides"] = strides[k * n : (k + 1) * n]
        window = gx[_index(len(shape), **cut)]
        window += gout.reshape(window.shape)
    return gx


def _gather_grad_ref(x, index, gout, axis=0):
    gx = np.zeros(x.shape, gout.dtype)
    np.add.at(gx, (slice(None),) * (axis % x.ndim) + (index,), gout)
    return gx


def _split_ref(x, num=0, sections=(), axis=0):
    if num:
        return np.split(x, num, axis=axis)
    sizes = list(sections)
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


RESHAPE = [
    OpCase(
        "reshape",
        {"X": (2, 3, 4)},
        {"shape": [4, -1]},
        reference=lambda x, shape: x.reshape(shape),
        double_grad=True,
    ),
    OpCase(
        "reshape",
        {"X": (1,)},
        {"shape": []},
        reference=lambda x, shape: x.reshape(()),
        double_grad=True,
        name="to_0d",
    ),
    OpCase(
        "reshape",
        {"X": (0, 3)},
        {"shape": [3, 0]},
        reference=lambda x, shape: x.reshape(3, 0),
        double_grad=True,
        name="size0",
    ),
    OpCase(
        "broadcast_to",
        {"X": (3, 1)},
        {"shape": [2, 3, 4]},
        reference=lambda x, shape: np.broadcast_to(x, shape),
        double_grad=True,
    ),
    OpCase(
        "broadcast_to",
        {"X": ()},
        {"shape": [2, 2]},
        reference=lambda x, shape: np.broadcast_to(x, shape),
        double_grad=True,
        name="from_0d",
    ),
    OpCase(
        "broadcast_to",
        {"X": (1, 3)},
        {"shape": [0, 3]},
        reference=lambda x, shape: np.broadcast_to(x, shape),
        double_grad=True,
        name="size0",
    ),
]

TRANSPOSE = [
    OpCase(
        "transpose",
        {"X": (2, 3, 4)},
        {"perm": [2, 0, 1]},
        reference=lambda x, perm: x.transpose(perm),
        double_grad=True,
    ),
    OpCase(
        "transpose",
        {"X": (3, 4)},
        {"perm": [-1, 0]},
        reference=lambda x, perm: x.T,
        double_grad=True,
        name="negative_axis",
    ),
    OpCase(
        "transpose",
        {"X": (2, 0, 3)},
        {"perm": [1, 2, 0]},
        reference=lambda x, perm: x.transpose(perm),
        double_grad=True,
        name="size0",
    ),
    OpCase(
        "squeeze",
        {"X": (1, 3, 1, 2)},
        {"axes": []},
        reference=lambda x, axes: np.squeeze(x),
        double_grad=True,
        name="all",
    ),
    OpCase(
        "squeeze",
        {"X": (1, 3, 1, 2)},
        {"axes": [0, -2]},
        reference=lambda x, axes: np.squeeze(x, axis=(0, 2)),
        double_grad=True,
    ),
    OpCase(
        "squeeze",
        {"X": (0, 1)},
        {"axes": [1]},
        reference=lambda x, axes: x.reshape(0),
        double_grad=True,
        name="size0",
    ),
    OpCase(
        "unsqueeze",
        {"X": (3, 2)},
        {"axes": [0, 3]},
        reference=lambda x, axes: np.expand_dims(x, (0, 3)),
        double_grad=True,
    ),
    OpCase(
        "unsqueeze",
        {"X": (3, 2)},
        {"axes": [-1, 1]},
        reference=lambda x, axes: np.expand_dims(x, (-1, 1)),
        double_grad=True,
        name="negative_axes",
    ),
    OpCase(
        "unsqueeze",
        {"X": ()},
        {"axes": [0]},
        reference=lambda x, axes: x.reshape(1),
        double_grad=True,
        name="from_0d",
    ),
]

JOIN = [
    OpCase(
        "concat",
        {"X": [(2, 3), (1, 3), (4, 3)]},
        {"axis": 0},
        reference=lambda xs, axis: np.concatenate(xs, axis),
        double_grad=True,
    ),
    OpCase(
        "concat",
        {"X": [(2, 1, 3), (2, 2, 3)]},
        {"axis": -2},
        reference=lambda xs, axis: np.concatenate(xs, axis),
        double_grad=True,
        name="negative_axis",
    ),
    OpCase(
        "concat",
        {"X": [(2, 0), (2, 3)]},
        {"axis": 1},
        reference=lambda xs, axis: np.concatenate(xs, axis),
        double_grad=True,
        name="size0_piece",
    ),
    OpCase(
        "stack",
        {"X": [(2, 3), (2, 3), (2, 3)]},
        {"axis": 0},
        reference=lambda xs, axis: np.stack(xs, axis),
        double_grad=True,
    ),
    OpCase(
        "stack",
        {"X": [(2, 3), (2, 3)]},
        {"axis": -1},
        reference=lambda xs, axis: np.stack(xs, axis),
        double_grad=True,
        name="last_axis",
    ),
    OpCase(
        "stack",
        {"X": [(4,)]},
        {"axis": 1},
        reference=lambda xs, axis: np.stack(xs, axis),
        double_grad=True,
        name="single",
    ),
    OpCase(
        "split",
        {"X": (6, 4)},
        {"num": 3, "axis": 0},
        reference=lambda x, **a: tuple(_split_ref(x, **a)),
        double_grad=True,
    ),
    OpCase(
        "split",
        {"X": (3, 4)},
        {"sections": [1, -1, 2], "axis": -1},
        reference=lambda x, **a: tuple(_split_ref(x, **a)),
        double_grad=True,
        name="sections",
    ),
    OpCase(
        "split",
        {"X": (2, 3)},
        {"sections": [0, 3], "axis": 1},
        reference=lambda x, **a: tuple(_split_ref(x, **a)),
        double_grad=True,
        name="size0_piece",
    ),
]

SLICE = [
    OpCase(
        "slice",
        {"X": (4, 5)},
        {"axes": [0, 1], "starts": [1, -4], "ends": [3, BIG]},
        reference=_slice_ref,
        double_grad=True,
    ),
    OpCase(
        "slice",
        {"X": (5, 4)},
        {"axes": [0], "starts": [-1], "ends": [-BIG], "strides": [-2]},
        reference=_slice_ref,
        double_grad=True,
        name="negative_stride",
    ),
    OpCase(
        "slice",
        {"X": (3, 4, 2)},
        {"axes": [1, 2], "starts": [2, 0], "ends": [3, BIG], "decrease_axis": [1]},
        reference=_slice_ref,
        double_grad=True,
        name="decrease",
    ),
    OpCase(
        "slice",
        {"X": (3, 4)},
        {"axes": [-1], "starts": [-10], "ends": [10], "strides": [3]},
        reference=_slice_ref,
        double_grad=True,
        name="clamped",
    ),
    OpCase(
        "slice",
        {"X": (3, 4)},
        {"axes": [0], "starts": [2], "ends": [1]},
        reference=_slice_ref,
        double_grad=True,
        name="empty",
    ),
    OpCase(
        "slice_grad",
        {"X": (4, 5), "Out@GRAD": (2, 3)},
        {"axes": [0, 1], "starts": [1, -1], "ends": [3, -BIG], "strides": [1, -2]},
        reference=_slice_grad_ref,
        grad_inputs=("Out@GRAD",),
        double_grad=True,
    ),
    OpCase(
        "slice_grad",
        {"X": (3, 4, 2), "Out@GRAD": (3, 2)},
        {"axes": [1], "starts": [-2], "ends": [-1], "decrease_axis": [1]},
        reference=_slice_grad_ref,
        grad_inputs=("Out@GRAD",),
        double_grad=True,
        name="decrease",
    ),
]


def _slices_case(gouts, attrs, name):
    return OpCase(
        "slices_grad",
        {"Out@GRAD": gouts},
        attrs,
        reference=_slices_grad_ref,
        double_grad=True,
        name=name,
    )


SLICES_GRAD = [
    _slices_case(  # an LSTM's four gates cut from one product
        [(2,), (2,), (2,), (2,)],
        {"shape": [8], "axes": [0], "starts": [0, 2, 4, 6], "ends": [2, 4, 6, 8]},
        "gates",
    ),
    _slices_case(
        [(3, 3), (3, 2)],
        {"shape": [3, 5], "axes": [1], "starts": [0, 3], "ends": [3, 5]},
        "columns_overlap_none",
    ),
    _slices_case(
        [(2, 3), (3, 2)],
        {"shape": [4, 5], "axes": [0, 1], "starts": [0, 0, 1, 2], "ends": [2, 3, 4, 4]},
        "overlapping",
    ),
    _slices_case(
        [(4,), (2,)],
        {
            "shape": [3, 4],
            "axes": [0, 1],
            "starts": [1, 0, 2, 3],
            "ends": [2, 4, 3, -BIG],
            "strides": [1, 1, 1, -2],
            "decrease_axis": [0],
        },
        "strided_decrease",
    ),
    _slices_case(
        [(0,), (3,)], {"shape": [5], "axes": [0], "starts": [2, 1], "ends": [2, 4]}, "size0_piece"
    ),
]

GATHER = [
    OpCase(
        "gather",
        {"X": (5, 3), "Index": _ints([0, 4, -1, 0])},
        reference=lambda x, i, axis=0: np.take(x, i, axis=0),
        double_grad=True,
    ),
    OpCase(
        "gather",
        {"X": (2, 4, 3), "Index": _ints([[3, 1], [1, -4]])},
        {"axis": 1},
        reference=lambda x, i, axis: np.take(x, i, axis=axis),
        double_grad=True,
        name="axis1_2d_index",
    ),
    OpCase(
        "gather",
        {"X": (4, 3), "Index": _ints(2)},
        {"axis": -2},
        reference=lambda x, i, axis: np.take(x, i, axis=axis),
        double_grad=True,
        name="0d_index",
    ),
    OpCase(
        "gather",
        {"X": (4, 3), "Index": _ints([])},
        reference=lambda x, i: np.take(x, i, axis=0),
        double_grad=True,
        name="empty_index",
    ),
    OpCase(
        "gather_grad",
        {"X": (5, 3), "Index": _ints([0, 4, -1, 0]), "Out@GRAD": (4, 3)},
        reference=_gather_grad_ref,
        grad_inputs=("Out@GRAD",),
        double_grad=True,
    ),
    OpCase(
        "gather_grad",
        {"X": (2, 3), "Index": _ints([[2, 2], [0, 2]]), "Out@GRAD": (2, 2, 2)},
        {"axis": 1},
        reference=_gather_grad_ref,
        grad_inputs=("Out@GRAD",),
        double_grad=True,
        name="axis1",
    ),
]

WHERE = [
    OpCase(
        "where",
        {"Condition": _mask((3, 4)), "X": (3, 4), "Y": (3, 4)},
        reference=np.where,
        double_grad=True,
    ),
    OpCase(
        "where",
        {"Condition": _mask((3, 1)), "X": (1, 4), "Y": ()},
        reference=np.where,
        double_grad=True,
        name="broadcast",
    ),
    OpCase(
        "where",
        {"Condition": _mask((2, 3)), "X": (3,), "Y": (0, 1, 1)},
        reference=np.where,
        double_grad=True,
        name="size0",
    ),
]

CASES = RESHAPE + TRANSPOSE + JOIN + SLICE + SLICES_GRAD + GATHER + WHERE
