"""Cases for the convolution ops (conv1d/2d/3d, their gradient ops, conv_transpose1d/2d/3d),
against references written as plain loops over every multiply of the convolution."""

import itertools

import numpy as np

from tape.testing import OpCase


def _pairs(paddings, nd):
    paddings = tuple(paddings)
    if len(paddings) == nd:
        return tuple((p, p) for p in paddings)
    return tuple(zip(paddings[0::2], paddings[1::2]))


def _geometry(attrs, nd):
    return (
        tuple(attrs.get("strides", (1,) * nd)),
        _pairs(attrs.get("paddings", (0,) * nd), nd),
        tuple(attrs.get("dilations", (1,) * nd)),
        attrs.get("groups", 1),
    )


def out_shape(x_shape, w_shape, **attrs):
    """Whole windows that fit: (padded - dilated kernel) // stride + 1 along each axis."""
    nd = len(x_shape) - 2
    strides, pads, dilations, _ = _geometry(attrs, nd)
    spatial = tuple(
        (n + lo + hi - d * (k - 1) - 1) // s + 1
        for n, (lo, hi), k, s, d in zip(x_shape[2:], pads, w_shape[2:], strides, dilations)
    )
    return (x_shape[0], w_shape[0]) + spatial


def _taps(x_shape, w_shape, **attrs):
    """Every multiply: (n, o, input channel, filter channel, output position, kernel offset,
    position in the padded input)."""
    nd = len(x_shape) - 2
    strides, _, dilations, groups = _geometry(attrs, nd)
    n, o, *out = out_shape(x_shape, w_shape, **attrs)
    _, cg, *kernel = w_shape
    for b, oc, p, k, kk in itertools.product(
        range(n), range(o), np.ndindex(*out), range(cg), np.ndindex(*kernel)
    ):
        ic = oc // (o // groups) * cg + k
        pos = tuple(q * s + j * d for q, j, s, d in zip(p, kk, strides, dilations))
        yield b, oc, ic, k, p, kk, pos


def _pad(x, attrs):
    """x padded by (start, end) per spatial axis; a negative end drops trailing positions."""
    pads = _geometry(attrs, x.ndim - 2)[1]
    padded = np.pad(x, ((0, 0), (0, 0)) + tuple((lo, max(hi, 0)) for lo, hi in pads))
    keep = tuple(slice(0, padded.shape[2 + a] + min(hi, 0)) for a, (_, hi) in enumerate(pads))
    return padded[(slice(None), slice(None), *keep)]


def _crop(padded, shape, attrs):
    pads = _geometry(attrs, len(shape) - 2)[1]
    return padded[
        (slice(None), slice(None), *(slice(lo, lo + n) for (lo, _), n in zip(pads, shape[2:])))
    ]


def conv_reference(x, w, **attrs):
    padded = _pad(x, attrs)
    out = np.zeros(out_shape(x.shape, w.shape, **attrs))
    for b, oc, ic, k, p, kk, pos in _taps(x.shape, w.shape, **attrs):
        out[(b, oc) + p] += w[(oc, k) + kk] * padded[(b, ic) + pos]
    return out


def grad_input_reference(w, gout, input_shape, **attrs):
    pads = _geometry(attrs, len(input_shape) - 2)[1]
    extent = tuple(n + lo + max(hi, 0) for n, (lo, hi) in zip(input_shape[2:], pads))
    padded = np.zeros(tuple(input_shape[:2]) + extent)
    for b, oc, ic, k, p, kk, pos in _taps(input_shape, w.shape, **attrs):
        padded[(b, ic) + pos] += w[(oc, k) + kk] * gout[(b, oc) + p]
    return _crop(padded, input_shape, attrs)


def grad_filter_reference(x, gout, filter_shape, **attrs):
    padded = _pad(x, attrs)
    out = np.zeros(filter_shape)
    for b, oc, ic, k, p, kk, pos in _taps(x.shape, filter_shape, **attrs):
        out[(oc, k) + kk] += gout[(b, oc) + p] * padded[(b, ic) + pos]
    return out


def transpose_reference(x, w, **attrs):
    """Each input value times the filter, scattered into the output window it would have been
    read from (PyTorch's conv_transpose, written from its definition)."""
    nd = x.ndim - 2
    strides, pads, dilations, groups = _geometry(attrs, nd)
    extra = tuple(attrs.get("output_padding", (0,) * nd))
    (n, c, *size), (_, og, *kernel) = x.shape, w.shape
    full = tuple(
        (m - 1) * s + d * (k - 1) + 1 + e
        for m, s, d, k, e in zip(size, strides, dilations, kernel, extra)
    )
    out = np.zeros((n, og * groups) + full)
    for b, ic, i, oc, kk in itertools.product(
        range(n), range(c), np.ndindex(*size), range(og), np.ndindex(*kernel)
    ):
        pos = tuple(q * s + j * d for q, j, s, d in zip(i, kk, strides, dilations))
        out[(b, ic // (c // groups) * og + oc) + pos] += x[(b, ic) + i] * w[(ic, oc) + kk]
    return out[(slice(None), slice(None), *(slice(lo, m - lo) for (lo, _), m in zip(pads, full)))]


# (name, Input shape, Filter shape, attrs): strides, paddings, dilations, groups, size-1 axes.
GEOMETRIES = {
    1: [
        ("plain", (2, 2, 6), (3, 2, 3), {}),
        (
            "stride_pad_dilation",
            (1, 2, 9),
            (2, 2, 3),
            {"strides": [2], "paddings": [2], "dilations": [2]},
        ),
        ("groups_pad2", (2, 4, 5), (4, 2, 2), {"groups": 2, "paddings": [1, 0]}),
        ("negative_end", (1, 1, 7), (2, 1, 2), {"strides": [2], "paddings": [1, -2]}),
    ],
    2: [
        ("plain", (2, 2, 4, 4), (3, 2, 3, 3), {}),
        ("stride_pad", (1, 2, 5, 4), (2, 2, 2, 3), {"strides": [2, 1], "paddings": [1, 2]}),
        ("dilation", (1, 1, 6, 5), (2, 1, 2, 2), {"dilations": [2, 3], "paddings": [1, 0]}),
        (
            "groups",
            (2, 4, 3, 3),
            (4, 2, 2, 2),
            {"groups": 2, "paddings": [1, 1], "strides": [2, 2]},
        ),
        ("depthwise", (1, 3, 4, 3), (3, 1, 3, 2), {"groups": 3, "paddings": [0, 1, 1, 0]}),
        ("pointwise_size1", (3, 2, 1, 1), (4, 2, 1, 1), {}),
        ("uneven_stride", (1, 1, 7, 6), (1, 1, 3, 2), {"strides": [3, 4], "dilations": [2, 1]}),
    ],
    3: [
        ("plain", (1, 2, 3, 3, 3), (2, 2, 2, 2, 2), {}),
        (
            "stride_pad_groups",
            (1, 2, 4, 3, 3),
            (2, 1, 2, 1, 2),
            {"strides": [2, 1, 2], "paddings": [1, 0, 1], "groups": 2, "dilations": [1, 2, 1]},
        ),
    ],
}

# (name, Input shape, Filter shape (C_in, C_out/groups, *kernel), attrs) for the transposed ones.
TRANSPOSED = {
    1: [
        ("plain", (2, 2, 4), (2, 3, 3), {}),
        (
            "stride_pad_out",
            (1, 2, 3),
            (2, 1, 3),
            {"strides": [2], "paddings": [1], "output_padding": [1]},
        ),
        ("dilation_out_gt_pad", (1, 1, 3), (1, 2, 2), {"dilations": [3], "output_padding": [2]}),
        ("groups", (1, 4, 3), (4, 1, 2), {"groups": 2, "strides": [3], "paddings": [1]}),
    ],
    2: [
        ("plain", (1, 2, 3, 3), (2, 2, 2, 2), {}),
        (
            "stride_pad_out_groups",
            (1, 4, 3, 2),
            (4, 1, 3, 2),
            {"strides": [2, 2], "paddings": [1, 0], "output_padding": [1, 1], "groups": 2},
        ),
    ],
    3: [
        ("stride", (1, 2, 2, 2, 2), (2, 1, 2, 1, 2), {"strides": [2, 1, 1], "paddings": [0, 0, 1]})
    ],
}


def _conv_cases(nd):
    name = f"conv{nd}d"
    cases = [
        OpCase(
            name,
            {"Input": xs, "Filter": ws},
            attrs,
            reference=conv_reference,
            double_grad=True,
            name=label,
        )
        for label, xs, ws, attrs in GEOMETRIES[nd]
    ]
    for i, (label, xs, ws, attrs) in enumerate(GEOMETRIES[nd][:5]):
        gs = out_shape(xs, ws, **attrs)
        double = i in (0, 3)
        cases.append(
            OpCase(
                f"{name}_grad_input",
                {"Filter": ws, "Output@GRAD": gs},
                {**attrs, "input_shape": xs},
                reference=grad_input_reference,
                double_grad=double,
                name=label,
            )
        )
        cases.append(
            OpCase(
                f"{name}_grad_filter",
                {"Input": xs, "Output@GRAD": gs},
                {**attrs, "filter_shape": ws},
                reference=grad_filter_reference,
                double_grad=double,
                name=label,
            )
        )
    empty = (0, 2) + (3,) * nd
    cases.append(
        OpCase(
            name,
            {"Input": empty, "Filter": (2, 2) + (2,) * nd},
            reference=conv_reference,
            grad=False,
            name="empty_batch",
        )
    )
    return cases


def _transposed_cases(nd):
    return [
        OpCase(
            f"conv_transpose{nd}d",
            {"Input": xs, "Filter": ws},
            attrs,
            reference=transpose_reference,
            double_grad=True,
            name=label,
        )
        for label, xs, ws, attrs in TRANSPOSED[nd]
    ]


CASES = [case for nd in (1, 2, 3) for case in _conv_cases(nd) + _transposed_cases(nd)]
