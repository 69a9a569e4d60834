"""Cases for pool1d/2d/3d, their gradient ops and max_pool<n>d_select, against per-window loop
references (N-d, with dilation, padding and ceil mode)."""

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


def _out_size(size, lo, hi, k, s, d, ceil_mode):
    out = (size + lo + hi - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    return out - 1 if ceil_mode and (out - 1) * s >= size + lo else out


def _windows(shape, ksize, strides=None, paddings=None, dilations=None, ceil_mode=False, **_):
    """(n, c, output position, output spatial shape), the window's real positions in row-major
    order of its offsets, and its area clipped to the padded input, for every window."""
    nd = len(shape) - 2
    strides, dilations = strides or ksize, dilations or (1,) * nd
    paddings = tuple(paddings or (0,) * nd)
    pads = (
        tuple((p, p) for p in paddings)
        if len(paddings) == nd
        else tuple(zip(paddings[0::2], paddings[1::2]))
    )
    (n, c, *size) = shape
    outs = tuple(
        _out_size(*args, ceil_mode) for args in zip(size, *zip(*pads), ksize, strides, dilations)
    )
    for b, ch, p in itertools.product(range(n), range(c), np.ndindex(*outs)):
        starts = [q * s - lo for q, s, (lo, _) in zip(p, strides, pads)]
        axes = [
            [t + j * d for j in range(k) if 0 <= t + j * d < m]
            for t, k, d, m in zip(starts, ksize, dilations, size)
        ]
        area = math.prod(
            min(t + k, m + hi) - t for t, k, m, (_, hi) in zip(starts, ksize, size, pads)
        )
        yield (b, ch, p, outs), list(itertools.product(*axes)), area


def _argmax(x, b, ch, positions):
    """The first maximum in row-major order (a NaN counts as the maximum)."""
    best = positions[0]
    for pos in positions[1:]:
        if x[(b, ch) + pos] > x[(b, ch) + best] or (
            np.isnan(x[(b, ch) + pos]) and not np.isnan(x[(b, ch) + best])
        ):
            best = pos
    return best


def pool_reference(x, pooling_type="max", exclusive=True, **attrs):
    out = None
    for (b, ch, p, outs), positions, area in _windows(x.shape, **attrs):
        if out is None:
            out = np.zeros(x.shape[:2] + outs, dtype=x.dtype if x.dtype.kind in "iu" else None)
        values = [x[(b, ch) + pos] for pos in positions]
        if pooling_type == "max":
            out[(b, ch) + p] = x[(b, ch) + _argmax(x, b, ch, positions)]
        else:
            out[(b, ch) + p] = sum(values) / (len(values) if exclusive else area)
    return out


def pool_grad_reference(x, gout, out=None, pooling_type="max", exclusive=True, **attrs):
    """The first maximum is found from X alone: Out, when given, must not change the result."""
    gx = np.zeros(x.shape)
    for (b, ch, p, _), positions, area in _windows(x.shape, **attrs):
        if pooling_type == "max":
            gx[(b, ch) + _argmax(x, b, ch, positions)] += gout[(b, ch) + p]
            continue
        for pos in positions:
            gx[(b, ch) + pos] += gout[(b, ch) + p] / (len(positions) if exclusive else area)
    return gx


def select_reference(x, y, **attrs):
    out = pool_reference(x, **attrs)
    for (b, ch, p, _), positions, _ in _windows(x.shape, **attrs):
        out[(b, ch) + p] = y[(b, ch) + _argmax(x, b, ch, positions)]
    return out


def index_reference(x, **attrs):
    """(max pooling, the flat position of each window's first maximum within its plane)."""
    out, index = pool_reference(x, **attrs), None
    for (b, ch, p, outs), positions, _ in _windows(x.shape, **attrs):
        if index is None:
            index = np.zeros(x.shape[:2] + outs, dtype=np.int64)
        index[(b, ch) + p] = np.ravel_multi_index(_argmax(x, b, ch, positions), x.shape[2:])
    return out, index


def _gout(x_shape, attrs):
    (_, _, _, outs), _, _ = next(_windows(x_shape, **attrs))
    return x_shape[:2] + outs


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


# (rank, name, X shape, window attributes): 1-D and 3-D, and dilation (max pooling only).
GEOMETRIES_ND = [
    (1, "plain", (2, 3, 7), {"ksize": [2]}),
    (
        1,
        "dilation_pad_ceil",
        (1, 2, 9),
        {"ksize": [3], "strides": [2], "paddings": [1], "dilations": [2], "ceil_mode": True},
    ),
    (
        2,
        "dilation",
        (1, 2, 7, 6),
        {"ksize": [2, 3], "strides": [1, 2], "paddings": [1, 1], "dilations": [2, 2]},
    ),
    (3, "plain", (1, 2, 4, 4, 3), {"ksize": [2, 2, 2]}),
    (
        3,
        "overlap_pad_ceil",
        (1, 1, 4, 3, 5),
        {"ksize": [3, 2, 3], "strides": [2, 1, 2], "paddings": [1, 1, 1], "ceil_mode": True},
    ),
]


def _nd_cases():
    cases = []
    for nd, name, shape, window in GEOMETRIES_ND:
        kinds = ("max",) if "dilations" in window else ("max", "avg")
        for kind in kinds:
            attrs = {"pooling_type": kind, **window}
            cases.append(
                OpCase(
                    f"pool{nd}d",
                    {"X": distinct(shape)},
                    attrs,
                    reference=pool_reference,
                    double_grad=True,
                    name=f"{kind}_{name}",
                )
            )
            cases.append(
                OpCase(
                    f"pool{nd}d_grad",
                    {"X": distinct(shape), "Out@GRAD": _gout(shape, window)},
                    attrs,
                    reference=pool_grad_reference,
                    double_grad=True,
                    name=f"{kind}_{name}",
                )
            )
        cases.append(
            OpCase(
                f"max_pool{nd}d_select",
                {"X": distinct(shape), "Y": shape},
                window,
                reference=select_reference,
                double_grad=True,
                name=name,
            )
        )
        integers = np.random.default_rng(nd).integers(-50, 50, shape)
        cases.append(
            OpCase(
                f"pool{nd}d",
                {"X": integers},
                window,
                reference=pool_reference,
                grad=False,
                name=f"max_integers_{name}",
            )
        )
    return cases


CASES = _cases() + _nd_cases()
