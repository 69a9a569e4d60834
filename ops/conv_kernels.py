"""The N-d convolution kernels behind conv1d/2d/3d, their gradient ops and the transposed
convolutions: window geometry, im2col, col2im and the filter gradient, written once against ``xp``.

Spatial axes are the trailing ones (N, C, *spatial). ``paddings`` holds one int per spatial axis
(both ends) or two, (start, end) per axis; an end padding may be negative, which leaves that many
trailing input positions unread (the transposed convolutions' gradients need it when their
``output_padding`` exceeds ``padding``). The forward gathers every receptive field (a strided
window view of the input, or one clipped strided copy per kernel offset when padded; no Python
loop over positions) and multiplies the columns by the flattened filter in one batched matmul.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ops import buffers

SPATIAL = {1: "L", 2: "H, W", 3: "D, H, W"}


def axis_pads(paddings, nd):
    """((start, end) per spatial axis) from ``nd`` ints (both ends) or ``2 * nd`` ints."""
    if len(paddings) == nd:
        return tuple((p, p) for p in paddings)
    return tuple((paddings[2 * a], paddings[2 * a + 1]) for a in range(nd))


def output_size(size, pad_lo, pad_hi, kernel, stride, dilation):
    """Output length along one axis (floor mode): the number of whole windows that fit."""
    return (size + pad_lo + pad_hi - dilation * (kernel - 1) - 1) // stride + 1


def output_spatial(attrs, size, kernel):
    """The output's spatial shape for an input of spatial shape ``size``."""
    pads = axis_pads(attrs["paddings"], len(size))
    return tuple(
        output_size(size[a], *pads[a], kernel[a], attrs["strides"][a], attrs["dilations"][a])
        for a in range(len(size))
    )


def columns(xp, x, kernel, attrs):
    """Every receptive field of ``x``: shape (N, groups, C/groups * prod(kernel), prod(out)), a
    copy; axis 2 runs over (channel, *kernel offset) and axis 3 over output positions."""
    n, c, *size = x.shape
    nd, groups = len(size), attrs["groups"]
    pads = axis_pads(attrs["paddings"], nd)
    strides, dilations = attrs["strides"], attrs["dilations"]
    out = output_spatial(attrs, size, kernel)
    if any(lo or hi > 0 for lo, hi in pads):
        cols = _padded_columns(xp, x, kernel, out, pads, attrs)
    else:
        s_n, s_c, *steps = x.strides
        # Axes (N, C, *kernel, *out): kernel offsets step by the dilation, windows by stride.
        windows = xp.lib.stride_tricks.as_strided(
            x,
            (n, c, *kernel, *out),
            (
                s_n,
                s_c,
                *(s * d for s, d in zip(steps, dilations)),
                *(s * t for s, t in zip(steps, strides)),
            ),
        )
        cols = buffers.empty(xp, windows.shape, x.dtype)  # (the copy the reshape would make)
        cols[...] = windows
    return cols.reshape(n, groups, c // groups * math.prod(kernel), math.prod(out))


def _valid(count, size, pad, offset, stride):
    """Window positions [first, stop) whose tap at ``offset`` reads the input (not padding), and
    the input index the first one reads."""
    first = max(0, -((offset - pad) // stride))
    stop = min(count, (size - 1 + pad - offset) // stride + 1)
    return first, stop, first * stride + offset - pad


def _padded_columns(xp, x, kernel, out, pads, attrs):
    """Columns of a padded input without materialising it: zeros, then one clipped strided copy
    per kernel offset (measured 1.5x faster than padding, then copying a window view)."""
    size = x.shape[2:]
    strides, dilations = attrs["strides"], attrs["dilations"]
    cols = buffers.zeros(xp, x.shape[:2] + tuple(kernel) + tuple(out), x.dtype)
    every = slice(None)
    for offset in itertools.product(*map(range, kernel)):
        dst, src = [], []
        for a, k in enumerate(offset):
            first, stop, start = _valid(out[a], size[a], pads[a][0], k * dilations[a], strides[a])
            if stop <= first:
                break
            dst.append(slice(first, stop))
            src.append(slice(start, start + (stop - first - 1) * strides[a] + 1, strides[a]))
        else:
            cols[(every, every, *offset, *dst)] = x[(every, every, *src)]
    return cols


def _product(w, x):
    """The dtype of a matmul of ``w`` and columns of ``x``."""
    return np.result_type(w.dtype, x.dtype)


def convolve(xp, x, w, attrs):
    """Output = Filter (per group) @ columns(Input): already in (N, O, *out) order."""
    (o, _, *kernel), groups = w.shape, attrs["groups"]
    cols = columns(xp, x, kernel, attrs)
    # (groups, O/groups, K) @ (N, groups, K, L) -> (N, groups, O/groups, L).
    taps = w.reshape(groups, o // groups, cols.shape[2])
    out = buffers.empty(xp, (cols.shape[0], groups, o // groups, cols.shape[3]), _product(w, x))
    xp.matmul(taps, cols, out=out)
    return out.reshape((x.shape[0], o) + output_spatial(attrs, x.shape[2:], kernel))


def transposed(xp, w, gout, input_shape, attrs):
    """The transposed convolution: the columns Filter^T @ Output@GRAD added back into the
    (padded) input positions they were read from (col2im), then cropped to ``input_shape``."""
    (n, c, *size), (o, cg, *kernel) = input_shape, w.shape
    nd, groups, out = len(size), attrs["groups"], gout.shape[2:]
    pads = axis_pads(attrs["paddings"], nd)
    strides, dilations = attrs["strides"], attrs["dilations"]
    # Per group: (C/groups, O/groups) filter taps, one matrix per kernel offset.
    taps = w.reshape((groups, o // groups, cg) + tuple(kernel))
    taps = taps.transpose(*range(3, 3 + nd), 0, 2, 1)
    g4 = gout.reshape(n, groups, o // groups, math.prod(out))
    extent = tuple(size[a] + pads[a][0] + max(pads[a][1], 0) for a in range(nd))
    dtype = np.result_type(w.dtype, gout.dtype)
    padded = buffers.zeros(xp, (n, c) + extent, dtype)
    every = slice(None)
    # col2im one kernel offset at a time: its columns come out of the matmul contiguous, and
    # overlapping windows scatter-add through one strided slice (measured 1.6x faster than
    # building all columns first and adding their strided views). The offsets share one
    # buffer for their columns.
    part = buffers.empty(xp, (n, groups, c // groups, math.prod(out)), dtype)
    for offset in itertools.product(*map(range, kernel)):
        window = tuple(
            slice(k * d, k * d + (m - 1) * s + 1, s)
            for k, d, m, s in zip(offset, dilations, out, strides)
        )
        xp.matmul(taps[offset], g4, out=part)
        padded[(every, every, *window)] += part.reshape((n, c) + tuple(out))
    crop = tuple(slice(lo, lo + length) for (lo, _), length in zip(pads, size))
    return padded[(every, every, *crop)]


def filter_gradient(xp, x, gout, filter_shape, attrs):
    """Filter@GRAD = Output@GRAD @ columns(Input)^T per group, summed over the batch."""
    (o, _, *kernel), groups, n = filter_shape, attrs["groups"], x.shape[0]
    cols = columns(xp, x, kernel, attrs)  # (N, groups, K, L)
    g4 = gout.reshape(n, groups, o // groups, math.prod(gout.shape[2:]))
    return xp.matmul(g4, cols.swapaxes(2, 3)).sum(axis=0).reshape(filter_shape)
