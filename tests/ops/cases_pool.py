"""Cases for pool2d, pool2d_grad and max_pool2d_select, against per-window loop references."""

import itertools
import math

import numpy as np

from tape.testing import OpCase


def distinct(shape):
    """Values at least 0.05 apart, shuffled: no window has a tie, so max pooling's gradient is
    the same on both sides of a finite-difference step."""

    def make(rng, dtype):
        size = math.prod(shape)
        return (rng.permutation(size).reshape(shape) * 0.05 - 1.0).astype(dtype)

    return make


def _out_size(size, lo, hi, k, s, ceil_mode):
    out = (size + lo + hi - k + (s - 1 if ceil_mode else 0)) // s + 1
    return out - 1 if ceil_mode and (out - 1) * s >= size + lo else out


def _windows(shape, ksize, strides=None, paddings=(0, 0), ceil_mode=False, **_):
    """(n, c, oh, ow, real rows, real columns, padded window area) of every window."""
    strides = strides or ksize
    pads = tuple(paddings) if len(paddings) == 4 else (paddings[0],) * 2 + (paddings[1],) * 2
    n, c, h, w = shape
    oh = _out_size(h, pads[0], pads[1], ksize[0], strides[0], ceil_mode)
    ow = _out_size(w, pads[2], pads[3], ksize[1], strides[1], ceil_mode)
    for b, ch, r, q in itertools.product(range(n), range(c), range(oh), range(ow)):
        r0, q0 = r * strides[0] - pads[0], q * strides[1] - pads[2]
        r1, q1 = min(r0 + ksize[0], h + pads[1]), min(q0 + ksize[1], w + pads[3])
        rows, cols = range(max(r0, 0), min(r1, h)), range(max(q0, 0), min(q1, w))
        yield (b, ch, r, q, oh, ow), rows, cols, (r1 - r0) * (q1 - q0)


def _argmax(x, b, ch, rows, cols):
    """First maximum in row-major order."""
    return max(
        ((i, j) for i in rows for j in cols),
        key=lambda ij: (x[b, ch, ij[0], ij[1]], -ij[0], -ij[1]),
    )


def pool_reference(x, pooling_type="max", exclusive=True, **attrs):
    out = None
    for (b, ch, r, q, oh, ow), rows, cols, area in _windows(x.shape, **attrs):
        if out is None:
            out = np.zeros(x.shape[:2] + (oh, ow))
        values = [x[b, ch, i, j] for i in rows for j in cols]
        if pooling_type == "max":
            out[b, ch, r, q] = max(values)
        else:
            out[b, ch, r, q] = sum(values) / (len(values) if exclusive else area)
    return out


def pool_grad_reference(x, gout, out=None, pooling_type="max", exclusive=True, **attrs):
    """The first maximum is found from X alone: Out, when given, must not change the result."""
    gx = np.zeros(x.shape)
    for (b, ch, r, q, _, _), rows, cols, area in _windows(x.shape, **attrs):
        if pooling_type == "max":
            i, j = _argmax(x, b, ch, rows, cols)
            gx[b, ch, i, j] += gout[b, ch, r, q]
            continue
        for i, j in itertools.product(rows, cols):
            gx[b, ch, i, j] += gout[b, ch, r, q] / (len(rows) * len(cols) if exclusive else area)
    return gx


def select_reference(x, y, **attrs):
    out = pool_reference(x, **attrs)
    for (b, ch, r, q, _, _), rows, cols, _ in _windows(x.shape, **attrs):
        out[b, ch, r, q] = y[(b, ch) + _argmax(x, b, ch, rows, cols)]
    return out


def _gout(x_shape, attrs):
    *_, (index, *_rest) = _windows(x_shape, **attrs)
    return x_shape[:2] + index[4:]


# (name, X shape, window attributes): overlap, padding, ceil mode, size-1 dims, and windows
# that tile X, leave rows and columns out, leave gaps or end past X (max pool2d_grad's paths).
GEOMETRIES = [
    ("plain", (1, 2, 4, 6), {"ksize": [2, 2]}),
    ("overlap_pad", (1, 2, 5, 4), {"ksize": [3, 3], "strides": [1, 2], "paddings": [1, 1]}),
    ("ceil", (2, 1, 5, 4), {"ksize": [2, 3], "strides": [2, 2], "ceil_mode": True}),
    (
        "ceil_pad4",
        (1, 1, 6, 7),
        {"ksize": [3, 2], "strides": [2, 3], "paddings": [1, 0, 0, 1], "ceil_mode": True},
    ),
    ("size1", (1, 1, 1, 5), {"ksize": [1, 2], "strides": [1, 1]}),
    ("ragged", (1, 2, 5, 7), {"ksize": [2, 2]}),
    ("gaps", (2, 1, 5, 7), {"ksize": [2, 1], "strides": [3, 2]}),
    ("ceil_partial", (1, 2, 5, 5), {"ksize": [2, 2], "ceil_mode": True}),
]


def _cases():
    cases = []
    for (name, shape, window), kind in itertools.product(GEOMETRIES, ("max", "avg")):
        attrs = {"pooling_type": kind, **window}
        cases.append(
            OpCase(
                "pool2d",
                {"X": distinct(shape)},
                attrs,
                reference=pool_reference,
                double_grad=name == "overlap_pad",
                name=f"{kind}_{name}",
            )
        )
        cases.append(
            OpCase(
                "pool2d_grad",
                {"X": distinct(shape), "Out@GRAD": _gout(shape, window)},
                attrs,
                reference=pool_grad_reference,
                double_grad=name == "ceil",
                name=f"{kind}_{name}",
            )
        )
    for name, shape, window in GEOMETRIES[1:4]:
        attrs = {"pooling_type": "avg", "exclusive": False, **window}
        cases.append(
            OpCase(
                "pool2d",
                {"X": shape},
                attrs,
                reference=pool_reference,
                name=f"avg_inclusive_{name}",
            )
        )
        cases.append(
            OpCase(
                "pool2d_grad",
                {"X": shape, "Out@GRAD": _gout(shape, window)},
                attrs,
                reference=pool_grad_reference,
                name=f"avg_inclusive_{name}",
            )
        )
        cases.append(
            OpCase(
                "max_pool2d_select",
                {"X": distinct(shape), "Y": shape},
                window,
                reference=select_reference,
                double_grad=True,
                name=name,
            )
        )
    return cases + _cases_with_out()


def _ties(shape):
    """Small integers: most windows hold their maximum more than once."""
    return np.random.default_rng(7).integers(0, 3, shape).astype(np.float64)


def _cases_with_out():
    """pool2d_grad given pool2d's Out (as the pool2d gradient passes it), on distinct values and
    on ties; X is not differentiated, since the given Out stays fixed while X moves."""
    cases = []
    for (name, shape, window), values in itertools.product(GEOMETRIES, ("distinct", "ties")):
        x = (
            _ties(shape)
            if values == "ties"
            else distinct(shape)(np.random.default_rng(3), np.float64)
        )
        attrs = {"pooling_type": "max", **window}
        cases.append(
            OpCase(
                "pool2d_grad",
                {"X": x, "Out@GRAD": _gout(shape, window), "Out": pool_reference(x, **attrs)},
                attrs,
                reference=pool_grad_reference,
                grad_inputs=("Out@GRAD",),
                double_grad=name == "plain",
                name=f"max_{name}_given_out_{values}",
            )
        )
    return cases


CASES = _cases()
