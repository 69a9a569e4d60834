"""Cases for the ops of autobatched plans (ops/batched_call.py): ``batched_call`` against each
member's op run alone, ``gather_rows`` against indexing by hand. Not differentiable (the pass
runs after backward was built), so forward checks only; float64, as their ``dtype`` attribute
fixes the output's."""

import numpy as np

from tape.testing import OpCase

_MATMUL = (("transpose_x", False), ("transpose_y", False))


def _products(xs, **_):
    x, w = xs
    rows = [member @ w for member in x]
    return np.stack(rows), rows


def _tanh(xs, **_):
    (x,) = xs
    rows = [np.tanh(member) for member in x]
    return np.stack(rows), rows


def _sums(xs, **_):
    a, b, c = xs
    rows = [a[i] + b[i] + c[i] for i in range(len(a))]
    return np.stack(rows), rows


def _call(op, attrs, inputs, each, count, shape, reference, name, lists=False):
    return OpCase(
        "batched_call",
        {"X": inputs},
        {
            "op": op,
            "attrs": attrs,
            "each": each,
            "lists": lists,
            "count": count,
            "shape": shape,
            "dtype": "float64",
            "origins": tuple((f"{op}_{i}", None) for i in range(count)),
        },
        reference=reference,
        grad=False,
        dtypes=("float64",),
        name=name,
    )


def _gathered(xs, **_):
    a, b, loose = xs
    out = np.empty((5, 2, 3))
    out[0], out[1] = a[2], b[0]
    out[2] = loose
    out[3:5] = a[0:2]
    return out


CASES = [
    _call(
        "matmul",
        _MATMUL,
        [(3, 2, 4), (4, 5)],
        (True, False),
        3,
        (2, 5),
        _products,
        "shared-weight",
    ),
    _call("tanh", (), [(4, 1, 3)], (True,), 4, (1, 3), _tanh, "elementwise"),
    _call(
        "sum",
        (),
        [(2, 3), (2, 3), (2, 3)],
        (True, True, True),
        2,
        (3,),
        _sums,
        "list-slot",
        lists=True,
    ),
    OpCase(
        "gather_rows",
        {"X": [(3, 2, 3), (1, 2, 3), (2, 3)]},
        {
            # rows 2 and 0, 1 of source 0 (a run), row 0 of source 1, source 2 whole
            "pieces": ((0, (0, 3, 4), (2, 0, 1)), (1, (1,), (0,)), (2, (2,), None)),
            "count": 5,
            "shape": (2, 3),
            "dtype": "float64",
        },
        reference=_gathered,
        grad=False,
        dtypes=("float64",),
        name="rows-and-whole",
    ),
]
