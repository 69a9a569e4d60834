"""Cases for the order statistics (ops/order.py: sort, argsort, topk, kthvalue, median), the
picking ops they differentiate through (ops/along.py), and searchsorted and bucketize, with
PyTorch as the reference.

Inputs with gradients have distinct values (ties make sorted values kinked); ties and NaN get
forward-only cases where PyTorch's choice of index is deterministic (stable sort, median).
"""

import numpy as np
import torch

from tape.testing import OpCase
from tests.ops.cases_scan import _distinct
from tests.ops.cases_stats import torch_reference

_TIES = np.array([[1.0, 2.0, 1.0, 2.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0], [3.0, 1.0, 3.0, 1.0, 2.0]])
_NAN = np.array([[1.0, np.nan, -3.0, np.nan, -5.0], [2.0, 0.5, np.inf, -np.inf, 0.0]])


def _indices(shape, extent, axis, seed=0):
    """Integer indices in [0, extent) of ``shape`` (repeats included)."""
    return np.random.default_rng(seed).integers(0, extent, shape)


PICK = [
    OpCase(
        "pick_along",
        {"X": (3, 4), "Indices": _indices((3, 6), 4, 1)},
        {"axis": 1},
        reference=lambda x, i, axis: np.take_along_axis(x, i, axis),
        double_grad=True,
    ),
    OpCase(
        "pick_along",
        {"X": (3, 4), "Indices": _indices((2, 4), 3, 0)},
        {"axis": 0},
        reference=lambda x, i, axis: np.take_along_axis(x, i, axis),
        double_grad=True,
        name="axis0",
    ),
    OpCase(
        "pick_along",
        {"X": (2, 3), "Indices": -1 - _indices((2, 2), 3, 1)},
        {"axis": -1},
        reference=lambda x, i, axis: np.take_along_axis(x, i, axis),
        double_grad=True,
        name="negative_indices",
    ),
    OpCase(
        "pick_along_grad",
        {"X": (3, 4), "Indices": _indices((3, 6), 4, 1), "Out@GRAD": (3, 6)},
        {"axis": 1},
        reference=lambda x, i, g, axis: _scatter_add(x, i, g, axis),
        double_grad=True,
    ),
    OpCase(
        "pick_along_grad",
        {"X": (2, 3), "Indices": np.zeros((2, 0), np.int64), "Out@GRAD": (2, 0)},
        {"axis": 1},
        reference=lambda x, i, g, axis: np.zeros_like(x),
        double_grad=True,
        name="empty",
    ),
    OpCase(
        "pick_along_grad",
        {"X": (), "Indices": np.zeros((), np.int64), "Out@GRAD": ()},
        {"axis": 0},
        reference=lambda x, i, g, axis: g,
        double_grad=True,
        name="0d",
    ),
]


def _scatter_add(x, indices, gout, axis):
    out = torch.zeros(x.shape, dtype=torch.from_numpy(gout).dtype)
    return out.scatter_add_(axis, torch.from_numpy(indices), torch.from_numpy(gout)).numpy()


def _sort(t, axis=-1, descending=False, stable=False):
    # PyTorch is deterministic among ties only when stable; ours always is.
    return tuple(torch.sort(t, dim=axis, descending=descending, stable=True))


def _sort_cases(op, ref):
    grad = op == "sort"
    return [
        OpCase(op, {"X": _distinct((3, 5))}, {}, reference=ref, grad=grad, double_grad=grad),
        OpCase(
            op,
            {"X": _distinct((4, 3))},
            {"axis": 0, "descending": True},
            reference=ref,
            grad=grad,
            double_grad=grad,
            name="descending_axis0",
        ),
        OpCase(op, {"X": ()}, {"axis": 0}, reference=ref, grad=grad, double_grad=grad, name="0d"),
        OpCase(op, {"X": (2, 0)}, {}, reference=ref, grad=grad, name="size0"),
        OpCase(op, {"X": _TIES}, {"stable": True}, reference=ref, grad=False, name="ties"),
        OpCase(
            op,
            {"X": _TIES},
            {"descending": True},
            reference=ref,
            grad=False,
            name="ties_descending",
        ),
        OpCase(op, {"X": _NAN}, {"descending": True}, reference=ref, grad=False, name="nan_desc"),
        OpCase(op, {"X": _NAN}, {}, reference=ref, grad=False, name="nan"),
        OpCase(
            op,
            {"X": np.array([[3, -1, 3, 7], [0, 2, 2, -5]], np.int32)},
            {"descending": True},
            reference=ref,
            grad=False,
            name="int32",
        ),
    ]


SORT = _sort_cases("sort", torch_reference(_sort)) + _sort_cases(
    "argsort", torch_reference(lambda t, **a: _sort(t, **a)[1])
)


def _topk(t, k, axis=-1, largest=True, sorted=True):
    return tuple(torch.topk(t, k, dim=axis, largest=largest, sorted=sorted))


_TOPK = torch_reference(_topk)

TOPK = [
    OpCase("topk", {"X": _distinct((3, 5))}, {"k": 2}, reference=_TOPK, double_grad=True),
    OpCase(
        "topk",
        {"X": _distinct((4, 3))},
        {"k": 3, "axis": 0, "largest": False},
        reference=_TOPK,
        double_grad=True,
        name="smallest_axis0",
    ),
    OpCase("topk", {"X": (2, 4)}, {"k": 0}, reference=_TOPK, name="k0"),
    OpCase("topk", {"X": ()}, {"k": 1}, reference=_TOPK, double_grad=True, name="0d"),
    OpCase("topk", {"X": _NAN}, {"k": 3}, reference=_TOPK, grad=False, name="nan"),
    OpCase(
        "topk",
        {"X": _NAN},
        {"k": 2, "largest": False},
        reference=_TOPK,
        grad=False,
        name="nan_smallest",
    ),
]


def _kthvalue(t, k, axis=-1, keepdim=False):
    return tuple(torch.kthvalue(t, k, dim=axis, keepdim=keepdim))


_KTH = torch_reference(_kthvalue)

KTHVALUE = [
    OpCase("kthvalue", {"X": _distinct((3, 5))}, {"k": 2}, reference=_KTH, double_grad=True),
    OpCase(
        "kthvalue",
        {"X": _distinct((4, 3))},
        {"k": 4, "axis": 0, "keepdim": True},
        reference=_KTH,
        double_grad=True,
        name="keepdim_axis0",
    ),
    OpCase("kthvalue", {"X": ()}, {"k": 1}, reference=_KTH, double_grad=True, name="0d"),
    OpCase("kthvalue", {"X": (0, 3)}, {"k": 1}, reference=_KTH, name="size0"),
]


def _median(t, axis=None, keepdim=False):
    if axis is None:  # torch.median(t) gives no index: the flat position of the value
        values = torch.median(t)
        flat = torch.sort(t.reshape(-1), stable=True).indices[(t.numel() - 1) // 2]
        if torch.isnan(values):
            flat = torch.nonzero(torch.isnan(t.reshape(-1)))[0, 0]
        shape = (1,) * t.ndim if keepdim else ()
        return values.reshape(shape), flat.reshape(shape)
    return tuple(torch.median(t, dim=axis, keepdim=keepdim))


_MEDIAN = torch_reference(_median)

MEDIAN = [
    OpCase("median", {"X": _distinct((3, 5))}, {"axis": 1}, reference=_MEDIAN, double_grad=True),
    OpCase(
        "median",
        {"X": _distinct((4, 3))},
        {"axis": 0, "keepdim": True},
        reference=_MEDIAN,
        double_grad=True,
        name="even_keepdim",
    ),
    OpCase("median", {"X": _distinct((2, 3))}, {}, reference=_MEDIAN, double_grad=True, name="all"),
    OpCase(
        "median",
        {"X": _distinct((2, 2))},
        {"keepdim": True},
        reference=_MEDIAN,
        double_grad=True,
        name="all_keepdim",
    ),
    OpCase("median", {"X": ()}, {"axis": -1}, reference=_MEDIAN, double_grad=True, name="0d"),
    OpCase("median", {"X": (0, 3)}, {"axis": 1}, reference=_MEDIAN, name="size0"),
    OpCase("median", {"X": _TIES}, {"axis": 1}, reference=_MEDIAN, grad=False, name="ties"),
    OpCase("median", {"X": _NAN}, {"axis": 1}, reference=_MEDIAN, grad=False, name="nan"),
    OpCase("median", {"X": _NAN}, {}, reference=_MEDIAN, grad=False, name="nan_all"),
]


def _sorted(shape):
    """Standard-normal values sorted along the last axis."""
    return lambda rng, dtype: np.sort(rng.standard_normal(shape), axis=-1).astype(dtype)


# Sequences with repeated entries and values hitting them exactly (the sides differ there), and
# values beyond both ends.
_REPEATS = np.array([-1.0, 0.0, 0.0, 2.0, 2.0, 2.0, 5.0])
_ON_REPEATS = np.array([[0.0, 2.0, -1.0, 5.0], [-3.0, 1.0, 7.0, 2.0]])
_ROWS = np.array([[[0.0, 0.0, 1.0], [-2.0, 3.0, 3.0]], [[1.0, 1.0, 1.0], [-5.0, -4.0, 0.0]]])
_ON_ROWS = np.array([[[0.0, 1.0], [3.0, -2.0]], [[1.0, 0.0], [0.0, -4.5]]])
_EDGES = np.array([[-np.inf, np.inf, np.nan, 0.0, 2.0]])

_SEARCHSORTED = torch_reference(lambda s, x, **attrs: torch.searchsorted(s, x, **attrs))
_BUCKETIZE = torch_reference(lambda x, b, **attrs: torch.bucketize(x, b, **attrs))


def _search_cases(op, ref, inputs):
    """The same configurations for both ops; ``inputs(sequence, values)`` names the slots."""
    configurations = [
        ("", _sorted((6,)), (3, 4), {}),
        ("right", _sorted((6,)), (3, 4), {"right": True}),
        ("repeats", _REPEATS, _ON_REPEATS, {}),
        ("repeats_right", _REPEATS, _ON_REPEATS, {"right": True}),
        ("edges", _REPEATS, _EDGES, {}),
        ("edges_right", _REPEATS, _EDGES, {"right": True}),
        ("0d_values", _sorted((5,)), (), {}),
        ("size1", _sorted((1,)), (1, 1), {}),
        ("empty_sequence", np.zeros(0), (2, 3), {}),
        ("no_values", _sorted((4,)), (2, 0), {}),
        ("out_int32", _REPEATS, _ON_REPEATS, {"out_int32": True}),
        ("int", _REPEATS.astype(np.int64), _ON_REPEATS.astype(np.int32), {"right": True}),
        ("int_sequence_float_values", _REPEATS.astype(np.int32), _ON_REPEATS, {}),
    ]
    if op == "searchsorted":
        configurations += [
            ("side_right", _REPEATS, _ON_REPEATS, {"side": "right"}),
            ("rows", _ROWS, _ON_ROWS, {}),
            ("rows_right", _ROWS, _ON_ROWS, {"right": True}),
            ("rows_random", _sorted((2, 3, 5)), (2, 3, 4), {}),
            ("rows_empty_sequence", np.zeros((3, 0)), (3, 2), {}),
            ("rows_no_values", _sorted((2, 4)), (2, 0), {"right": True}),
            ("rows_size1", _sorted((1, 1)), (1, 1), {}),
        ]
    return [
        OpCase(op, inputs(sequence, values), attrs, reference=ref, grad=False, name=name)
        for name, sequence, values, attrs in configurations
    ]


SEARCH = _search_cases(
    "searchsorted", _SEARCHSORTED, lambda s, x: {"SortedSequence": s, "X": x}
) + _search_cases("bucketize", _BUCKETIZE, lambda s, x: {"X": x, "Boundaries": s})

CASES = PICK + SORT + TOPK + KTHVALUE + MEDIAN + SEARCH
