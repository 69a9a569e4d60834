"""Cases for conv2d and its gradient ops, against references written as plain loops over taps."""

import itertools

import numpy as np

from tape.testing import OpCase


def _four(paddings):
    return tuple(paddings) if len(paddings) == 4 else (paddings[0],) * 2 + (paddings[1],) * 2


def _taps(x_shape, w_shape, strides=(1, 1), paddings=(0, 0), dilations=(1, 1), groups=1):
    """Every multiply of the convolution: (n, o, input channel, filter channel, oh, ow, i, j,
    row and column in the padded input)."""
    n, _, oh, ow = _out_shape(x_shape, w_shape, strides, paddings, dilations)
    o, cg, kh, kw = w_shape
    per_group = o // groups
    for b, oc, r, q, k, i, j in itertools.product(
        range(n), range(o), range(oh), range(ow), range(cg), range(kh), range(kw)
    ):
        ic = oc // per_group * cg + k
        yield (
            b,
            oc,
            ic,
            k,
            r,
            q,
            i,
            j,
            r * strides[0] + i * dilations[0],
            q * strides[1] + j * dilations[1],
        )


def _out_shape(x_shape, w_shape, strides=(1, 1), paddings=(0, 0), dilations=(1, 1), groups=1):
    """Whole windows that fit: (padded - dilated kernel) // stride + 1 along each axis."""
    (n, _, h, w), (o, _, kh, kw) = x_shape, w_shape
    top, bottom, left, right = _four(paddings)
    oh = (h + top + bottom - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + left + right - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    return n, o, oh, ow


def _pad(x, paddings):
    top, bottom, left, right = _four(paddings)
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))


def conv_reference(x, w, **attrs):
    padded = _pad(x, attrs.get("paddings", (0, 0)))
    out = np.zeros(_out_shape(x.shape, w.shape, **attrs))
    for b, oc, ic, k, r, q, i, j, hp, wp in _taps(x.shape, w.shape, **attrs):
        out[b, oc, r, q] += w[oc, k, i, j] * padded[b, ic, hp, wp]
    return out


def grad_input_reference(w, gout, input_shape, **attrs):
    top, bottom, left, right = _four(attrs.get("paddings", (0, 0)))
    n, c, h, width = input_shape
    padded = np.zeros((n, c, h + top + bottom, width + left + right))
    for b, oc, ic, k, r, q, i, j, hp, wp in _taps(input_shape, w.shape, **attrs):
        padded[b, ic, hp, wp] += w[oc, k, i, j] * gout[b, oc, r, q]
    return padded[:, :, top : top + h, left : left + width]


def grad_filter_reference(x, gout, filter_shape, **attrs):
    padded = _pad(x, attrs.get("paddings", (0, 0)))
    out = np.zeros(filter_shape)
    for b, oc, ic, k, r, q, i, j, hp, wp in _taps(x.shape, filter_shape, **attrs):
        out[oc, k, i, j] += gout[b, oc, r, q] * padded[b, ic, hp, wp]
    return out


# (name, Input shape, Filter shape, attrs): strides, paddings, dilations, groups and size-1 dims.
GEOMETRIES = [
    ("plain", (2, 2, 4, 4), (3, 2, 3, 3), {}),
    ("stride_pad", (1, 2, 5, 4), (2, 2, 2, 3), {"strides": [2, 1], "paddings": [1, 2]}),
    ("dilation", (1, 1, 6, 5), (2, 1, 2, 2), {"dilations": [2, 3], "paddings": [1, 0]}),
    ("groups", (2, 4, 3, 3), (4, 2, 2, 2), {"groups": 2, "paddings": [1, 1], "strides": [2, 2]}),
    ("depthwise", (1, 3, 4, 3), (3, 1, 3, 2), {"groups": 3, "paddings": [0, 1, 1, 0]}),
    ("pointwise_size1", (3, 2, 1, 1), (4, 2, 1, 1), {}),
    ("uneven_stride", (1, 1, 7, 6), (1, 1, 3, 2), {"strides": [3, 4], "dilations": [2, 1]}),
]


def _cases():
    cases = [
        OpCase(
            "conv2d",
            {"Input": xs, "Filter": ws},
            attrs,
            reference=conv_reference,
            double_grad=True,
            name=name,
        )
        for name, xs, ws, attrs in GEOMETRIES
    ]
    for name, xs, ws, attrs in GEOMETRIES[:5]:
        gs = _out_shape(xs, ws, **attrs)
        cases.append(
            OpCase(
                "conv2d_grad_input",
                {"Filter": ws, "Output@GRAD": gs},
                {**attrs, "input_shape": xs},
                reference=grad_input_reference,
                double_grad=name in ("plain", "groups"),
                name=name,
            )
        )
        cases.append(
            OpCase(
                "conv2d_grad_filter",
                {"Input": xs, "Output@GRAD": gs},
                {**attrs, "filter_shape": ws},
                reference=grad_filter_reference,
                double_grad=name in ("plain", "groups"),
                name=name,
            )
        )
    cases.append(
        OpCase(
            "conv2d",
            {"Input": (0, 2, 3, 3), "Filter": (2, 2, 2, 2)},
            reference=conv_reference,
            grad=False,
            name="empty_batch",
        )
    )
    return cases


CASES = _cases()
