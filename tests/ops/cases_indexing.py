"""Cases for indexing along an axis and by index lists: take_along_dim, the scatter family
(against PyTorch), numpy's advanced indexing (index, index_put), masked_select, and slice of a
0-d array."""

import numpy as np
import torch

from tape.testing import OpCase


def _ints(values):
    return np.asarray(values, dtype=np.int64)


def _mask(shape):
    return lambda rng, dtype: (np.arange(int(np.prod(shape))) % 3 != 1).reshape(shape)


def _t(x):
    return torch.from_numpy(np.array(x))  # contiguous, and still 0-d for 0-d


def _take_ref(x, index, axis=None):
    if axis is None:
        return np.take_along_axis(x.reshape(-1), index.reshape(-1), 0)
    return _t(x).take_along_dim(_t(index), dim=axis).numpy()


def _take_grad_ref(x, index, gout, axis=None):
    t = _t(x).clone().requires_grad_(True)
    t.take_along_dim(_t(index), dim=axis).backward(_t(gout))
    return t.grad.numpy()


def _scatter_ref(op, **fixed):
    def reference(x, index, src, axis=0, **attrs):
        t, s = _t(x), _t(src)
        if not src.ndim:  # torch takes a value only in scatter: a full Src elsewhere
            s = float(src) if op == "scatter" else _t(np.full(index.shape, src))
        if op == "scatter_reduce":
            return t.scatter_reduce(axis, _t(index), s, **attrs).numpy()
        return getattr(t, op)(axis, _t(index), s).numpy()

    return reference


# Every row of X written at least once and some twice, on a (3, 4) X along axis 0.
_ROWS = _ints([[0, 2, 1, 0], [2, 2, 0, 1]])

ALONG = [
    OpCase(
        "take_along_dim",
        {"X": (3, 4), "Index": _ints([[2, 0, 1, -1], [0, 0, 2, 1]])},
        {"axis": 0},
        reference=_take_ref,
        double_grad=True,
    ),
    OpCase(
        "take_along_dim",
        {"X": (3, 1, 4), "Index": _ints([[[1], [3]]])},
        {"axis": -1},
        reference=_take_ref,
        double_grad=True,
        name="broadcast",
    ),
    OpCase(
        "take_along_dim",
        {"X": (2, 3), "Index": _ints([5, 0, 0])},
        reference=_take_ref,
        double_grad=True,
        name="flattened",
    ),
    OpCase(
        "take_along_dim_grad",
        {"X": (3, 1, 4), "Index": _ints([[[1], [3]]]), "Out@GRAD": (3, 2, 1)},
        {"axis": -1},
        reference=_take_grad_ref,
        grad_inputs=("Out@GRAD",),
        double_grad=True,
    ),
    OpCase(
        "scatter",
        {"X": (3, 4), "Index": _ints([[2, 0, 1, 0], [0, 2, 2, 1]]), "Src": (2, 5)},
        {"axis": 0},
        reference=_scatter_ref("scatter"),
        double_grad=True,
    ),
    OpCase(
        "scatter",
        {"X": (2, 4), "Index": _ints([[3], [0]]), "Src": ()},
        {"axis": 1},
        reference=_scatter_ref("scatter"),
        double_grad=True,
        name="value",
    ),
    OpCase(
        "scatter_add",
        {"X": (3, 4), "Index": _ROWS, "Src": (3, 4)},
        reference=_scatter_ref("scatter_add"),
        double_grad=True,
    ),
    OpCase(
        "scatter_add",
        {"X": (2, 3), "Index": _ints([[0, 0], [2, 0]]), "Src": ()},
        {"axis": -1},
        reference=_scatter_ref("scatter_add"),
        double_grad=True,
        name="value",
    ),
]

REDUCE = [
    OpCase(
        "scatter_reduce",
        {"X": (3, 4), "Index": _ROWS, "Src": (2, 4)},
        {"reduce": reduce, "include_self": include_self},
        reference=_scatter_ref("scatter_reduce"),
        double_grad=True,
        name=f"{reduce}_{'self' if include_self else 'no_self'}",
    )
    for reduce in ("sum", "prod", "mean", "amax", "amin")
    for include_self in (True, False)
] + [
    OpCase(
        "scatter_reduce",
        {"X": (2, 3), "Index": _ints([[1], [1]]), "Src": (2, 2)},
        {"axis": 1, "reduce": "prod"},
        reference=lambda x, i, s, axis, reduce: _scatter_ref("scatter_reduce")(
            x, i, s[:, :1], axis, reduce=reduce
        ),
        double_grad=True,
        name="larger_src",
    ),
    OpCase(
        "scatter_reduce",
        {
            "X": lambda rng, dtype: np.array([[0.0, 2.0], [3.0, 0.0]], dtype),
            "Index": _ints([[0, 1], [0, 1]]),
            "Src": lambda rng, dtype: np.array([[0.0, 5.0], [4.0, 0.0]], dtype),
        },
        {"reduce": "prod"},
        reference=_scatter_ref("scatter_reduce"),
        name="prod_zeros",
    ),
    OpCase(
        "scatter_reduce",
        {
            "X": lambda rng, dtype: np.arange(6).reshape(2, 3),
            "Index": _ints([[1, 0, 1]]),
            "Src": lambda rng, dtype: np.array([[7, -1, 4]]),
        },
        {"reduce": "mean", "include_self": False},
        reference=_scatter_ref("scatter_reduce"),
        grad=False,
        name="int_mean",
    ),
]


def _index_ref(x, indices, kinds=(), starts=(), ends=(), strides=()):
    from ops.advanced_indexing import python_index

    attrs = {"kinds": tuple(kinds), "starts": starts, "ends": ends, "strides": strides}
    return x[python_index(attrs, indices)]


def _index_put_ref(x, indices, values, accumulate=False, **attrs):
    from ops.advanced_indexing import python_index

    attrs = {k: tuple(attrs.get(k, ())) for k in ("kinds", "starts", "ends", "strides")}
    out = x.copy()
    if accumulate:
        np.add.at(out, python_index(attrs, indices), values)
    else:
        out[python_index(attrs, indices)] = values
    return out


# x[1:, None, [2, 0], 1] on a (3, 4, 2): a slice, a new axis, an array and an int (the array
# and the int are advanced and adjacent).
_MIXED = {"kinds": [0, 1, 3, 2], "starts": [1, 0, 0, 1], "ends": [2**62, 0, 0, 0]}

ADVANCED = [
    OpCase(
        "index",
        {"X": (3, 4), "Indices": [_ints([0, 2, 2]), _ints([[1], [3]])]},
        reference=_index_ref,
        double_grad=True,
    ),
    OpCase(
        "index",
        {"X": (3, 4, 2), "Indices": [_ints([2, 0])]},
        dict(_MIXED, strides=[1, 1, 1, 1]),
        reference=_index_ref,
        double_grad=True,
        name="mixed",
    ),
    OpCase(
        "index",
        {"X": (3, 4, 2), "Indices": [_ints([1, 1]), _ints([0, 1])]},
        {"kinds": [3, 0, 3], "starts": [0, -1, 0], "ends": [0, -5, 0], "strides": [1, -2, 1]},
        reference=_index_ref,
        double_grad=True,
        name="separated",
    ),
    OpCase(
        "index",
        {"X": (2, 3, 4), "Indices": [_ints([1, 0]), _ints([[1], [3]])]},
        {"kinds": [0, 3, 4, 3], "starts": [0] * 4, "ends": [2**62, 0, 0, 0], "strides": [1] * 4},
        reference=_index_ref,
        double_grad=True,
        name="empty_ellipsis_separates",
    ),
    OpCase(
        "index_put",
        {"X": (3, 4), "Indices": [_ints([0, 2]), _ints([1, 3])], "Values": (2,)},
        reference=_index_put_ref,
        double_grad=True,
    ),
    OpCase(
        "index_put",
        {"X": (3, 4), "Indices": [_ints([0, 2, 0])], "Values": (1, 4)},
        {"accumulate": True},
        reference=_index_put_ref,
        double_grad=True,
        name="accumulate",
    ),
    OpCase(
        "index_put",
        {"X": (3, 4, 2), "Indices": [_ints([2, 0])], "Values": ()},
        dict(_MIXED, strides=[1, 1, 1, 1]),
        reference=_index_put_ref,
        double_grad=True,
        name="mixed",
    ),
    OpCase(
        "masked_select",
        {"X": (3, 4), "Mask": _mask((3, 4))},
        reference=lambda x, m: x[m],
        double_grad=True,
    ),
    OpCase(
        "masked_select",
        {"X": (1, 4), "Mask": _mask((3, 1))},
        reference=lambda x, m: np.broadcast_to(x, (3, 4))[np.broadcast_to(m, (3, 4))],
        double_grad=True,
        name="broadcast",
    ),
    OpCase(
        "masked_select_grad",
        {"X": (1, 4), "Mask": _mask((3, 1)), "Out@GRAD": (8,)},
        reference=lambda x, m, g: _masked_scatter(x, m, g),
        grad_inputs=("Out@GRAD",),
        double_grad=True,
    ),
    OpCase(
        "slice",
        {"X": ()},
        {"axes": [], "starts": [], "ends": []},
        reference=lambda x, **a: x,
        double_grad=True,
        name="0d",
    ),
    OpCase(
        "slice_grad",
        {"X": (), "Out@GRAD": ()},
        {"axes": [], "starts": [], "ends": []},
        reference=lambda x, g, **a: g,
        grad_inputs=("Out@GRAD",),
        double_grad=True,
        name="0d",
    ),
]


def _masked_scatter(x, mask, gout):
    shape = np.broadcast_shapes(x.shape, mask.shape)
    full = np.zeros(shape, gout.dtype)
    full[np.broadcast_to(mask, shape)] = gout
    return full.sum(axis=0, keepdims=True)


CASES = ALONG + REDUCE + ADVANCED
