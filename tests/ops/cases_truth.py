"""Cases for the reductions and tests without a gradient (ops/truth.py: argmax, argmin, any, all,
isclose, allclose), with PyTorch as the reference."""

import numpy as np
import torch

from tape.testing import OpCase
from tests.ops.cases_stats import _dims, torch_reference

_TIES = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, -1.0, -1.0, 2.0], [np.nan, 4.0, np.nan, -2.0]])


def _arg(fn):
    return torch_reference(lambda t, axis=None, keepdim=False: fn(t, dim=axis, keepdim=keepdim))


def _arg_cases(op, fn):
    ref = _arg(fn)
    return [
        OpCase(op, {"X": (3, 4)}, {"axis": 1}, reference=ref, grad=False),
        OpCase(
            op,
            {"X": (3, 4)},
            {"axis": -2, "keepdim": True},
            reference=ref,
            grad=False,
            name="keepdim",
        ),
        OpCase(op, {"X": (3, 4)}, {}, reference=ref, grad=False, name="flat"),
        OpCase(
            op, {"X": (2, 3)}, {"keepdim": True}, reference=ref, grad=False, name="flat_keepdim"
        ),
        OpCase(op, {"X": ()}, {"axis": -1}, reference=ref, grad=False, name="0d"),
        OpCase(op, {"X": (0, 3)}, {"axis": 1}, reference=ref, grad=False, name="size0"),
        OpCase(op, {"X": _TIES}, {"axis": 1}, reference=ref, grad=False, name="ties_nan"),
        OpCase(
            op,
            {"X": np.array([[3, 7, 7], [-2, -2, 0]], np.int64)},
            {"axis": 1},
            reference=ref,
            grad=False,
            name="int64",
        ),
    ]


ARG = _arg_cases("argmax", torch.argmax) + _arg_cases("argmin", torch.argmin)


def _truth(fn):
    def call(t, axis=None, keepdim=False):
        dims = _dims(axis)
        if dims is None:
            out = fn(t)
            return out.reshape((1,) * t.ndim) if keepdim else out
        return fn(t, dim=dims, keepdim=keepdim)

    return torch_reference(call)


_MIXED = np.array([[0.0, 0.0, 0.0], [0.0, np.nan, 0.0], [1.0, -2.0, 0.5], [0.0, 3.0, 0.0]])


def _truth_cases(op, fn):
    ref = _truth(fn)
    return [
        OpCase(op, {"X": _MIXED}, {"axis": 1}, reference=ref, grad=False),
        OpCase(
            op,
            {"X": _MIXED},
            {"axis": [0, 1], "keepdim": True},
            reference=ref,
            grad=False,
            name="keepdim",
        ),
        OpCase(op, {"X": _MIXED}, {}, reference=ref, grad=False, name="all_axes"),
        OpCase(op, {"X": np.array(0.0)}, {"axis": 0}, reference=ref, grad=False, name="0d"),
        OpCase(op, {"X": (2, 0)}, {"axis": 1}, reference=ref, grad=False, name="size0"),
        OpCase(
            op,
            {"X": np.array([[True, False], [True, True]])},
            {"axis": -1},
            reference=ref,
            grad=False,
            name="bool",
        ),
    ]


TRUTH = _truth_cases("any", torch.any) + _truth_cases("all", torch.all)


def _close(fn):
    def call(x, y, rtol=1e-5, atol=1e-8, equal_nan=False):
        x, y = torch.broadcast_tensors(x, y.to(x.dtype))
        return torch.as_tensor(fn(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan))

    return torch_reference(call)


def _near(shape):
    """Pairs differing by amounts around the default tolerance, with equal infinities and NaN."""

    def make(rng, dtype):
        x = rng.standard_normal(shape)
        x.reshape(-1)[:4] = [np.inf, -np.inf, np.nan, 0.0]
        return x.astype(dtype)

    return make


def _nudged(shape):
    def make(rng, dtype):
        x = _near(shape)(np.random.default_rng(0), np.float64)
        finite = np.isfinite(x)
        x[finite] += np.abs(x[finite]) * rng.choice([0.0, 5e-6, 2e-5, 1e-3], shape)[finite]
        return x.astype(dtype)

    return make


CLOSE = [
    OpCase(
        "isclose",
        {"X": _near((3, 4)), "Y": _nudged((3, 4))},
        {},
        reference=_close(torch.isclose),
        grad=False,
        dtypes=("float64",),
    ),
    OpCase(
        "isclose",
        {"X": _near((3, 4)), "Y": _nudged((3, 4))},
        {"rtol": 1e-3, "atol": 0.0, "equal_nan": True},
        reference=_close(torch.isclose),
        grad=False,
        dtypes=("float64",),
        name="tolerances",
    ),
    OpCase(
        "isclose",
        {"X": (2, 3), "Y": (3,)},
        {"atol": 1.0},
        reference=_close(torch.isclose),
        grad=False,
        name="broadcast",
    ),
    OpCase(
        "isclose",
        {"X": np.array([1, 2, 3], np.int64), "Y": np.array([1, 3, 3], np.int64)},
        {},
        reference=_close(torch.isclose),
        grad=False,
        name="int64",
    ),
    OpCase(
        "allclose",
        {"X": (2, 3), "Y": (2, 3)},
        {},
        reference=_close(torch.allclose),
        grad=False,
        name="different",
    ),
    OpCase(
        "allclose",
        {"X": np.ones((2, 3)), "Y": np.ones(3) + 1e-9},
        {},
        reference=_close(torch.allclose),
        grad=False,
        name="close",
    ),
    OpCase(
        "allclose",
        {"X": np.array([1.0, np.nan]), "Y": np.array([1.0, np.nan])},
        {"equal_nan": True},
        reference=_close(torch.allclose),
        grad=False,
        name="equal_nan",
    ),
]

CASES = ARG + TRUTH + CLOSE
