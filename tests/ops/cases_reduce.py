"""Cases for the axis reductions (reduce_sum, reduce_mean, reduce_max, reduce_min, logsumexp) and
the ones cases_core.py leaves out for sum, mean and sum_to_shape (0-d, size-0, extra axes)."""

import numpy as np

from tape.testing import OpCase


def _distinct(shape):
    """Values at least 0.3 apart, so no max/min is tied within a finite-difference step."""

    def make(rng, dtype):
        size = int(np.prod(shape))
        return (rng.permutation(size) * 0.3 - 0.15 * size).reshape(shape).astype(dtype)

    return make


def _reduce(fn):
    def reference(x, axis=None, keepdim=False):
        return fn(x, axis=None if axis is None else tuple(np.atleast_1d(axis)), keepdims=keepdim)

    return reference


def _logsumexp(x, axis=None, keepdims=False):
    shift = np.max(x, axis=axis, keepdims=True, initial=-np.inf)  # -inf over empty axes
    shift = np.where(np.isfinite(shift), shift, 0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - shift), axis=axis, keepdims=True)) + shift
    return out if keepdims else np.squeeze(out, axis=axis)


def _cases(op, fn, make=None, double=True):
    """The shared sweep of one reduction: an axis, kept dims, negative axes, all axes, 0-d."""
    make = make or (lambda shape: shape)
    ref = _reduce(fn)
    return [
        OpCase(op, {"X": make((3, 4))}, {"axis": 1}, reference=ref, double_grad=double),
        OpCase(
            op,
            {"X": make((2, 3, 4))},
            {"axis": [0, 2], "keepdim": True},
            reference=ref,
            double_grad=double,
            name="keepdim",
        ),
        OpCase(
            op,
            {"X": make((2, 3, 4))},
            {"axis": [-1, -3]},
            reference=ref,
            double_grad=double,
            name="negative_axes",
        ),
        OpCase(op, {"X": make((2, 3))}, {}, reference=ref, double_grad=double, name="all"),
        OpCase(
            op,
            {"X": make((2, 3))},
            {"keepdim": True},
            reference=ref,
            double_grad=double,
            name="all_keepdim",
        ),
        OpCase(op, {"X": make(())}, {}, reference=ref, double_grad=double, name="0d"),
        OpCase(
            op, {"X": make((0, 3))}, {"axis": 1}, reference=ref, double_grad=double, name="size0"
        ),
    ]


# Two tied maxima (and minima) per row: central differences see slope 1/2 at each, which is
# exactly the evenly shared gradient.
_TIES = np.array([[1.0, 3.0, 3.0, 0.5], [2.0, -1.0, 0.0, 2.0], [-1.0, 4.0, -1.0, 0.0]])

REDUCE_SUM = _cases("reduce_sum", np.sum) + [
    OpCase(
        "reduce_sum",
        {"X": (0, 3)},
        {"axis": 0},
        reference=_reduce(np.sum),
        double_grad=True,
        name="over_size0",
    ),
]

REDUCE_MEAN = _cases("reduce_mean", np.mean) + [
    OpCase(
        "reduce_mean",
        {"X": (2, 3)},
        {"axis": []},
        reference=lambda x, **a: x,
        double_grad=True,
        name="no_axes",
    ),
]

EXTREMES = (
    _cases("reduce_max", np.max, _distinct)
    + _cases("reduce_min", np.min, _distinct)
    + [
        OpCase("reduce_max", {"X": _TIES}, {"axis": 1}, reference=_reduce(np.max), name="ties"),
        OpCase("reduce_min", {"X": _TIES}, {"axis": 1}, reference=_reduce(np.min), name="ties"),
    ]
)

LOGSUMEXP = _cases("logsumexp", _logsumexp) + [
    OpCase(
        "logsumexp",
        {"X": lambda rng, dt: (rng.standard_normal((2, 5)) + 1000).astype(dt)},
        {"axis": 1},
        reference=_reduce(_logsumexp),
        double_grad=True,
        name="large",
    ),
    OpCase(
        "logsumexp",
        {"X": lambda rng, dt: (rng.standard_normal((2, 5)) - 1000).astype(dt)},
        {"axis": 1},
        reference=_reduce(_logsumexp),
        double_grad=True,
        name="tiny",
    ),
    OpCase(
        "logsumexp",
        {"X": np.array([[-np.inf, -np.inf], [0.0, -np.inf]])},
        {"axis": 1},
        reference=_reduce(_logsumexp),
        grad=False,
        name="minus_inf",
    ),
    OpCase(
        "logsumexp",
        {"X": (2, 0)},
        {"axis": 1},
        reference=_reduce(_logsumexp),
        grad=False,
        name="empty_axis",
    ),
]

SEED_OPS = [
    OpCase("mean", {"X": ()}, reference=lambda x: np.mean(x), double_grad=True, name="0d"),
    OpCase("sum", {"X": [(), ()]}, reference=lambda xs: xs[0] + xs[1], double_grad=True, name="0d"),
    OpCase(
        "sum",
        {"X": [(0, 2), (0, 2)]},
        reference=lambda xs: xs[0] + xs[1],
        double_grad=True,
        name="size0",
    ),
    OpCase(
        "sum_to_shape",
        {"X": (2, 3, 4)},
        {"shape": [1, 4]},
        reference=lambda x, shape: x.sum(axis=(0, 1)).reshape(1, 4),
        double_grad=True,
        name="extra_and_kept_axes",
    ),
    OpCase(
        "sum_to_shape",
        {"X": (2, 3)},
        {"shape": []},
        reference=lambda x, shape: x.sum(),
        double_grad=True,
        name="to_0d",
    ),
    OpCase(
        "sum_to_shape",
        {"X": (0, 3)},
        {"shape": [1, 3]},
        reference=lambda x, shape: x.sum(axis=0, keepdims=True),
        double_grad=True,
        name="size0",
    ),
]

CASES = REDUCE_SUM + REDUCE_MEAN + EXTREMES + LOGSUMEXP + SEED_OPS
