"""Cases for cosine_similarity, pairwise_distance and cdist: float64 numpy references from
PyTorch's definitions (each norm clamped at eps separately; the p-norm of X1 - X2 + eps; the
p-norm of every row difference)."""

import math

import numpy as np

from tape.testing import OpCase


def _cosine_reference(x1, x2, axis=1, eps=1e-8):
    x1, x2 = np.broadcast_arrays(x1.astype(np.float64), x2.astype(np.float64))
    n1 = np.maximum(np.sqrt((x1**2).sum(axis=axis, keepdims=True)), eps)
    n2 = np.maximum(np.sqrt((x2**2).sum(axis=axis, keepdims=True)), eps)
    return ((x1 / n1) * (x2 / n2)).sum(axis=axis)


def _pairwise_reference(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    d = np.abs(x1.astype(np.float64) - x2 + eps)
    if p == math.inf:
        out = d.max(axis=-1, keepdims=keepdim)
    elif p == 0:
        out = (d != 0).sum(axis=-1, keepdims=keepdim).astype(np.float64)
    else:
        out = (d**p).sum(axis=-1, keepdims=keepdim) ** (1 / p)
    return out


def _with_zero_row(shape):
    def make(rng, dtype):
        x = rng.standard_normal(shape)
        x[0] = 0.0
        return x.astype(dtype)

    return make


def _pairwise(inputs, attrs=None, name="", **options):
    return OpCase(
        "pairwise_distance",
        inputs,
        attrs or {},
        reference=_pairwise_reference,
        name=name,
        **options,
    )


COSINE_CASES = [
    OpCase(
        "cosine_similarity",
        {"X1": (3, 4), "X2": (3, 4)},
        reference=_cosine_reference,
        double_grad=True,
    ),
    OpCase(
        "cosine_similarity",
        {"X1": (2, 3, 4), "X2": (3, 4)},
        {"axis": -1},
        reference=_cosine_reference,
        double_grad=True,
        name="broadcast_last_axis",
    ),
    OpCase(
        "cosine_similarity",
        {"X1": (3, 1), "X2": (3, 4)},
        reference=_cosine_reference,
        double_grad=True,
        name="broadcast_along_axis",
    ),
    OpCase(
        "cosine_similarity",
        {"X1": lambda rng, dt: (1e-9 * rng.standard_normal((2, 3))).astype(dt), "X2": (2, 3)},
        {"eps": 1e-6},
        reference=_cosine_reference,
        grad=False,  # finite steps dwarf X1; tests/ops/test_loss_ops.py checks it against torch
        name="norm_below_eps",
    ),
    OpCase(
        "cosine_similarity",
        {"X1": _with_zero_row((2, 3)), "X2": (2, 3)},
        reference=_cosine_reference,
        grad=False,
        name="zero_vector",
    ),
]

PAIRWISE_CASES = [
    _pairwise({"X1": (3, 4), "X2": (3, 4)}, double_grad=True),
    _pairwise({"X1": (3, 4), "X2": (3, 4)}, {"p": 1.0}, double_grad=True, name="p1"),
    _pairwise({"X1": (3, 4), "X2": (3, 4)}, {"p": 3.0}, double_grad=True, name="p3"),
    _pairwise({"X1": (3, 4), "X2": (3, 4)}, {"p": 1.5}, double_grad=True, name="p1_5"),
    _pairwise({"X1": (3, 4), "X2": (3, 4)}, {"p": math.inf}, double_grad=True, name="inf"),
    _pairwise({"X1": (3, 4), "X2": (3, 4)}, {"p": 0.0}, name="p0"),
    _pairwise(
        {"X1": (2, 3, 4), "X2": (4,)},
        {"keepdim": True, "eps": 0.1},
        double_grad=True,
        name="broadcast_keepdim",
    ),
    _pairwise({"X1": (5,), "X2": (5,)}, name="vectors"),
    _pairwise(
        {"X1": np.array([[1.0, 2.0], [3.0, 3.0]]), "X2": np.array([[1.0, 2.0], [0.0, 0.0]])},
        {"eps": 0.0},
        grad=False,
        name="zero_distance",
    ),
]


def _cdist_reference(x1, x2, p=2.0):
    diff = x1.astype(np.float64)[..., :, None, :] - x2[..., None, :, :]
    if diff.shape[-1] == 0:  # (the max over no entries is 0 here, as in PyTorch)
        return np.zeros(diff.shape[:-1])
    return _pairwise_reference(diff, np.zeros(()), p=p, eps=0.0)


def _with_shared_rows(shape1, shape2, zero_coordinate=False):
    """Makers for X1 and X2 where X1's first row equals X2's first (a zero distance) and, with
    ``zero_coordinate``, X1's second row shares one coordinate with X2's second (D has a 0).
    X2 is drawn from its own seed, so X1's maker can copy from it."""

    def second(rng, dtype):
        return np.random.default_rng(99).standard_normal(shape2).astype(dtype)

    def first(rng, dtype):
        x1, x2 = rng.standard_normal(shape1), second(rng, np.float64)
        x1[0] = x2[0]
        if zero_coordinate:
            x1[1, 0] = x2[1, 0]
        return x1.astype(dtype)

    return first, second


def _cdist(inputs, attrs=None, name="", **options):
    return OpCase("cdist", inputs, attrs or {}, reference=_cdist_reference, name=name, **options)


_SHARED = dict(zip(("X1", "X2"), _with_shared_rows((3, 4), (2, 4))))
_SHARED_COORDINATE = dict(zip(("X1", "X2"), _with_shared_rows((3, 4), (2, 4), True)))

CDIST_CASES = [
    _cdist({"X1": (3, 4), "X2": (5, 4)}, double_grad=True),
    _cdist({"X1": (3, 4), "X2": (5, 4)}, {"p": 1.0}, double_grad=True, name="p1"),
    _cdist({"X1": (3, 4), "X2": (2, 4)}, {"p": 3.0}, double_grad=True, name="p3"),
    _cdist({"X1": (3, 4), "X2": (2, 4)}, {"p": 1.5}, double_grad=True, name="p1_5"),
    _cdist({"X1": (3, 4), "X2": (2, 4)}, {"p": 0.5}, double_grad=True, name="p0_5"),
    _cdist({"X1": (3, 4), "X2": (2, 4)}, {"p": math.inf}, double_grad=True, name="inf"),
    _cdist({"X1": (3, 4), "X2": (2, 4)}, {"p": 0.0}, name="p0"),
    _cdist({"X1": (2, 1, 3, 2), "X2": (4, 2, 2)}, double_grad=True, name="broadcast_batch"),
    _cdist({"X1": (1, 1), "X2": (1, 1)}, double_grad=True, name="size1"),
    _cdist({"X1": (0, 3), "X2": (2, 3)}, name="no_rows"),
    _cdist({"X1": (2, 0), "X2": (3, 0)}, name="no_columns"),
    _cdist({"X1": (2, 2, 0), "X2": (2, 3, 0)}, {"p": math.inf}, name="no_columns_inf"),
    # A zero distance: its p = 2 gradient is 0 (as PyTorch's), which central differences of the
    # norm's kink give too; so do p < 1's zero coordinates.
    _cdist(_SHARED, name="zero_distance"),
    _cdist(_SHARED, {"p": 3.0}, name="zero_distance_p3"),
    _cdist(_SHARED_COORDINATE, {"p": 0.5}, name="zero_coordinate_p0_5"),
]

CASES = COSINE_CASES + PAIRWISE_CASES + CDIST_CASES
