"""Cases for cosine_similarity and pairwise_distance: float64 numpy references from PyTorch's
definitions (each norm clamped at eps separately; the p-norm of X1 - X2 + eps)."""

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

CASES = COSINE_CASES + PAIRWISE_CASES
