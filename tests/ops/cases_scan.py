"""Cases for the scans (ops/scan.py, ops/scan_grad.py): cumsum, cumprod and its gradient op,
logcumsumexp, cummax and cummin, with PyTorch as the reference."""

import numpy as np
import torch

from tape.testing import OpCase
from tests.ops.cases_stats import _with_zeros, torch_reference


def _flags(t, axis, exclusive, reverse, fn, identity):
    """A torch scan with Paddle's ``exclusive`` and ``reverse``, from flips and a shift."""
    if t.ndim == 0:
        return torch.full_like(fn(t, 0), identity) if exclusive else fn(t, 0)
    if reverse:
        t = torch.flip(t, [axis])
    out = fn(t, axis)
    if exclusive:
        first = torch.full_like(out.narrow(axis, 0, 1), identity)
        out = torch.cat([first, out.narrow(axis, 0, out.shape[axis] - 1)], axis)
    return torch.flip(out, [axis]) if reverse else out


def _scan_reference(fn, identity):
    def call(t, axis, exclusive=False, reverse=False):
        return _flags(t, axis, exclusive, reverse, fn, identity)

    return torch_reference(call)


def _scan_cases(op, fn, identity, make=None):
    make = make or (lambda shape: shape)
    ref = _scan_reference(fn, identity)
    cases = [
        OpCase(op, {"X": make((3, 4))}, {"axis": 1}, reference=ref, double_grad=True),
        OpCase(
            op, {"X": make((3, 4))}, {"axis": -2}, reference=ref, double_grad=True, name="axis0"
        ),
        OpCase(op, {"X": make((0, 3))}, {"axis": 1}, reference=ref, double_grad=True, name="size0"),
        OpCase(op, {"X": make(())}, {"axis": -1}, reference=ref, double_grad=True, name="0d"),
    ]
    for exclusive, reverse in [(True, False), (False, True), (True, True)]:
        cases.append(
            OpCase(
                op,
                {"X": make((2, 5))},
                {"axis": 1, "exclusive": exclusive, "reverse": reverse},
                reference=ref,
                double_grad=True,
                name=f"exclusive{int(exclusive)}_reverse{int(reverse)}",
            )
        )
    return cases


CUMSUM = _scan_cases("cumsum", torch.cumsum, 0) + [
    OpCase(
        "cumsum",
        {"X": np.array([[1, 2, 3], [4, 5, 6]], np.int32)},
        {"axis": 1},
        reference=_scan_reference(torch.cumsum, 0),
        grad=False,
        name="int32",
    ),
]

# Zeros at different places in each row (none, one, two), so the gradient's every branch runs.
_ZEROS = _with_zeros((3, 5), 6, 10, 13)

CUMPROD = _scan_cases("cumprod", torch.cumprod, 1) + [
    OpCase(
        "cumprod",
        {"X": _ZEROS},
        {"axis": 1, **flags},
        reference=_scan_reference(torch.cumprod, 1),
        double_grad=True,
        name=f"zeros_exclusive{int(flags['exclusive'])}_reverse{int(flags['reverse'])}",
    )
    for flags in [{"exclusive": e, "reverse": r} for e in (False, True) for r in (False, True)]
]


def _cumprod_grad(t, gout, axis, exclusive=False, reverse=False):
    t = t.clone().requires_grad_(True)
    out = _flags(t, axis, exclusive, reverse, torch.cumprod, 1)
    (gx,) = torch.autograd.grad(out, t, gout)
    return gx


CUMPROD_GRAD = [
    OpCase(
        "cumprod_grad",
        {"X": _ZEROS, "Out@GRAD": (3, 5)},
        {"axis": 1, **flags},
        reference=torch_reference(_cumprod_grad),
        grad=False,
        name=f"exclusive{int(flags['exclusive'])}_reverse{int(flags['reverse'])}",
    )
    for flags in [{"exclusive": e, "reverse": r} for e in (False, True) for r in (False, True)]
] + [
    OpCase(
        "cumprod_grad",
        {"X": (2, 3), "Out@GRAD": (2, 3)},
        {"axis": 0},
        reference=torch_reference(_cumprod_grad),
        grad=False,
        name="no_zeros",
    ),
    OpCase(
        "cumprod_grad",
        {"X": (), "Out@GRAD": ()},
        {"axis": 0},
        reference=torch_reference(_cumprod_grad),
        grad=False,
        name="0d",
    ),
]


def _logcumsumexp(t, axis, reverse=False):
    return _flags(t, axis, False, reverse, torch.logcumsumexp, None)


_LCSE = torch_reference(_logcumsumexp)


def _spread(rng, dtype):
    """Values 80 apart: exp overflows or underflows float32 without the shift of logaddexp."""
    return (rng.standard_normal((2, 6)) + 80.0 * rng.integers(-3, 4, (2, 6))).astype(dtype)


LOGCUMSUMEXP = [
    OpCase("logcumsumexp", {"X": (3, 4)}, {"axis": 1}, reference=_LCSE, double_grad=True),
    OpCase(
        "logcumsumexp",
        {"X": (3, 5)},
        {"axis": 0, "reverse": True},
        reference=_LCSE,
        double_grad=True,
        name="reverse",
    ),
    OpCase(
        "logcumsumexp",
        {"X": _spread},
        {"axis": -1},
        reference=_LCSE,
        double_grad=True,
        name="spread",
    ),
    OpCase("logcumsumexp", {"X": ()}, {"axis": 0}, reference=_LCSE, double_grad=True, name="0d"),
    OpCase("logcumsumexp", {"X": (2, 0)}, {"axis": 1}, reference=_LCSE, name="size0"),
    OpCase(
        "logcumsumexp",
        {"X": np.array([[-np.inf, 0.0, -np.inf, np.inf, 1.0], [-np.inf] * 5])},
        {"axis": 1},
        reference=_LCSE,
        grad=False,
        name="infinities",
    ),
]


def _distinct(shape):
    """Values at least 0.3 apart, so no running extreme is tied within a finite-difference step."""

    def make(rng, dtype):
        size = int(np.prod(shape))
        return (rng.permutation(size) * 0.3 - 0.15 * size).reshape(shape).astype(dtype)

    return make


def _cumextreme_cases(op, fn):
    ref = torch_reference(lambda t, axis: tuple(fn(t, axis)))
    return [
        OpCase(op, {"X": _distinct((3, 5))}, {"axis": 1}, reference=ref, double_grad=True),
        OpCase(
            op,
            {"X": _distinct((4, 2))},
            {"axis": -2},
            reference=ref,
            double_grad=True,
            name="axis0",
        ),
        OpCase(op, {"X": ()}, {"axis": -1}, reference=ref, double_grad=True, name="0d"),
        OpCase(op, {"X": (2, 0)}, {"axis": 1}, reference=ref, name="size0"),
        # Ties take the last index, and NaN propagates from where it appears (as PyTorch).
        OpCase(
            op,
            {
                "X": np.array(
                    [[1.0, 1.0, 0.0, 2.0, 2.0, -1.0], [0.0, np.nan, 3.0, np.nan, 5.0, 0.0]]
                )
            },
            {"axis": 1},
            reference=ref,
            grad=False,
            name="ties_nan",
        ),
        OpCase(
            op,
            {"X": np.array([[3, 1, 3, 5], [0, 0, -2, 7]], np.int64)},
            {"axis": 1},
            reference=ref,
            grad=False,
            name="int64",
        ),
    ]


CUMEXTREMES = _cumextreme_cases("cummax", torch.cummax) + _cumextreme_cases("cummin", torch.cummin)

CASES = CUMSUM + CUMPROD + CUMPROD_GRAD + LOGCUMSUMEXP + CUMEXTREMES
