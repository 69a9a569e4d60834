"""Cases for ``call``: a traced function (``tape.traced``) run as one op, against the function's
own arithmetic in numpy; gradients (and gradients of gradients) through the traced gradient
program. Traced in float64 (a program is traced for one dtype)."""

import numpy as np

import ops
import tape
from tape.testing import OpCase


def _cell(x, y, w):
    """Two results of one dtype: they leave the call packed."""
    h = ops.tanh(ops.matmul(x, w)) * y
    return h, ops.reduce_sum(h * h, axis=[0], keepdim=True) + y[:1]


def _one(x, w):
    return ops.sigmoid(ops.matmul(x, w)).sum()


def _program(fn, *shapes):
    return tape.traced(fn).program_for(*(tape.Variable(np.zeros(s)) for s in shapes))


def _cell_reference(xs, fn):
    """Out packs both results; the Parts are each of them."""
    x, y, w = xs
    h = np.tanh(x @ w) * y
    total = (h * h).sum(axis=0, keepdims=True) + y[:1]
    return np.concatenate([h, total]), [h, total]


def _one_reference(xs, fn):
    """One result: Out itself, no Parts."""
    x, w = xs
    return np.asarray((1 / (1 + np.exp(-(x @ w)))).sum()), []


CASES = [
    OpCase(
        "call",
        {"X": [(3,), (4,), (3, 4)]},
        {"fn": _program(_cell, (3,), (4,), (3, 4))},
        reference=_cell_reference,
        dtypes=("float64",),
        double_grad=True,
        name="packed-results",
    ),
    OpCase(
        "call",
        {"X": [(2, 3), (3, 5)]},
        {"fn": _program(_one, (2, 3), (3, 5))},
        reference=_one_reference,
        dtypes=("float64",),
        name="one-result",
    ),
]
