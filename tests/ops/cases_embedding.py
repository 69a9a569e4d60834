"""Cases for the embedding lookup (lookup_table) and its scatter-add gradient op."""

import numpy as np

from tape.testing import OpCase

# Repeated ids (0 and 3 twice) exercise the accumulation; 5 is never looked up.
_IDS = np.array([[0, 3, 1], [3, 0, 4]], dtype=np.int64)
_MANY = np.random.default_rng(7).integers(0, 50, size=40).astype(np.int32)


def _take(w, ids, padding_idx=-1):
    return w[ids]


def _scatter(w, ids, gout, padding_idx=-1):
    gw = np.zeros(w.shape)
    np.add.at(gw, ids.reshape(-1), gout.reshape(-1, w.shape[1]))
    if padding_idx >= 0:
        gw[padding_idx] = 0
    return gw


CASES = [
    OpCase("lookup_table", {"W": (6, 4), "Ids": _IDS}, reference=_take, double_grad=True),
    OpCase("lookup_table", {"W": (6, 4), "Ids": np.array(2)}, reference=_take, name="scalar_id"),
    OpCase(
        "lookup_table",
        {"W": (6, 4), "Ids": np.zeros((0, 3), np.int64)},
        reference=_take,
        name="no_ids",
    ),
    OpCase("lookup_table", {"W": (50, 3), "Ids": _MANY}, reference=_take, name="many_int32"),
    # The padding row is read as it is, but frozen: its gradient is zero (checked in
    # tests/layers/test_embedding.py), so finite differences do not apply here.
    OpCase(
        "lookup_table",
        {"W": (6, 4), "Ids": _IDS},
        {"padding_idx": 3},
        reference=_take,
        grad=False,
        name="padding",
    ),
    OpCase(
        "lookup_table_grad",
        {"W": (6, 4), "Ids": _IDS, "Out@GRAD": (2, 3, 4)},
        reference=_scatter,
        grad_inputs=("Out@GRAD",),
        double_grad=True,
    ),
    OpCase(
        "lookup_table_grad",
        {"W": (6, 4), "Ids": _IDS, "Out@GRAD": (2, 3, 4)},
        {"padding_idx": 0},
        reference=_scatter,
        grad_inputs=("Out@GRAD",),
        double_grad=True,
        name="padding",
    ),
    OpCase(
        "lookup_table_grad",
        {"W": (50, 3), "Ids": _MANY, "Out@GRAD": (40, 3)},
        reference=_scatter,
        grad_inputs=("Out@GRAD",),
        name="many_repeats",
    ),
    OpCase(
        "lookup_table_grad",
        {"W": (8, 2), "Ids": np.array([5, 1, 7, 0]), "Out@GRAD": (4, 2)},
        reference=_scatter,
        grad_inputs=("Out@GRAD",),
        name="unique",
    ),
    OpCase(
        "lookup_table_grad",
        {"W": (4, 2), "Ids": np.zeros((0,), np.int64), "Out@GRAD": (0, 2)},
        reference=_scatter,
        grad=False,
        name="no_ids",
    ),
]
