"""Similarity and distance ops with PyTorch's formulas: cosine_similarity, pairwise_distance
and cdist, each one kernel with a gradient composed from registered ops (differentiable again).
Inputs broadcast against each other; the output dtype is numpy's promotion of theirs.
"""

from __future__ import annotations

import math

import numpy as np

from ops.compose import NO_ATTRS
from ops.compose import mul as _mul
from ops.compose import neg as _neg
from ops.compose import scale as _scale
from ops.compose import sub as _sub
from ops.compose import sum_keep as _sum_keep
from ops.infer import broadcast_shapes, normalize_axis, require_float, result_dtype
from ops.reduce import sum_to
from ops.registry import REGISTRY, Attr, register
from ops.xp import promote
from tape.constants import constant
from tape.errors import ShapeError
from tape.tape import apply


def _op(name, *args, **attrs):
    defn = REGISTRY[name]
    return apply(defn, args, defn.check_attrs(attrs) if attrs else defn.defaults)


def _div(x, y):
    return _op("elementwise_div", x, y)


def _to(grad, var):
    grad = sum_to(grad, var.shape)
    if grad.dtype != var.dtype:
        grad = _op("cast", grad, out_dtype=var.dtype.name)
    return grad


def _pair_shape(x1, x2):
    require_float(None, x1, "X1")
    require_float(None, x2, "X2")
    return broadcast_shapes(None, tuple(x1.shape), tuple(x2.shape), "X1", "X2")


def _expanded(var, shape):
    return var if tuple(var.shape) == tuple(shape) else _op("broadcast_to", var, shape=shape)


def _keep(gout, axis):
    """A reduced gradient with its reduced axis back as size 1."""
    return _op("unsqueeze", gout, axes=[axis])


# ---- cosine similarity -----------------------------------------------------------------------


def _infer_cosine(attrs, x1, x2):
    shape = _pair_shape(x1, x2)
    axis = normalize_axis(None, attrs["axis"], len(shape))
    return shape[:axis] + shape[axis + 1 :], result_dtype(x1, x2)


@register(
    "cosine_similarity",
    inputs=("X1", "X2"),
    attrs={
        "axis": Attr("int", 1),
        "eps": Attr("float", 1e-8, check=lambda v: v >= 0, rule=">= 0"),
    },
    infer=_infer_cosine,
)
def cosine_similarity(xp, attrs, x1, x2):
    """Out = sum((X1 / max(|X1|, eps)) * (X2 / max(|X2|, eps)), axis), the norms |.| taken along
    ``axis`` after broadcasting (PyTorch's cosine_similarity; ``axis`` is its ``dim``).

    dX1 = dOut / N1 * (X2 / N2 - Out * X1 / |X1|) with N = max(|X|, eps), and likewise dX2. As in
    PyTorch the clamp is not differentiated (norms below eps still pass their gradient), and
    X / |X| is 0 for a zero vector.

    >>> import numpy as np, tape, ops
    >>> a, b = np.array([[1.0, 0.0], [1.0, 1.0]]), np.array([[0.0, 2.0], [2.0, 2.0]])
    >>> ops.cosine_similarity(tape.Variable(a), b).numpy().round(4)
    array([0., 1.])
    """
    axis = attrs["axis"]
    x1, x2 = xp.broadcast_arrays(*promote(x1, x2))
    n1 = xp.sqrt((x1 * x1).sum(axis=axis, keepdims=True))
    n2 = xp.sqrt((x2 * x2).sum(axis=axis, keepdims=True))
    xp.maximum(n1, attrs["eps"], out=n1)
    xp.maximum(n2, attrs["eps"], out=n2)
    return ((x1 / n1) * (x2 / n2)).sum(axis=axis)


def _norms(x, axis):
    """(max(|X|, eps) without eps yet, max(|X|, tiny)): the norm along ``axis`` (kept)."""
    norm = _op("sqrt", _sum_keep(_mul(x, x), axis))
    tiny = float(np.finfo(x.dtype).tiny)
    return norm, _op("elementwise_max", norm, constant(tiny, norm))


@cosine_similarity.gradient
def _(g):
    (x1, x2), (out,), (gout,) = g.inputs, g.outputs, g.gouts
    shape = broadcast_shapes(None, tuple(x1.shape), tuple(x2.shape))
    axis = normalize_axis(None, g.attrs["axis"], len(shape))
    a, b = _expanded(x1, shape), _expanded(x2, shape)
    eps = g.attrs["eps"]
    norm_a, safe_a = _norms(a, axis)
    norm_b, safe_b = _norms(b, axis)
    clamped_a = _op("elementwise_max", norm_a, constant(eps, norm_a))
    clamped_b = _op("elementwise_max", norm_b, constant(eps, norm_b))
    gk, outk = _keep(gout, axis), _keep(out, axis)

    def part(this, this_clamped, this_safe, other, other_clamped):
        inner = _sub(_div(other, other_clamped), _mul(outk, _div(this, this_safe)))
        return _mul(_div(gk, this_clamped), inner)

    g1 = _to(part(a, clamped_a, safe_a, b, clamped_b), x1) if g.needs(0) else None
    g2 = _to(part(b, clamped_b, safe_b, a, clamped_a), x2) if g.needs(1) else None
    return g1, g2


# ---- pairwise distance -----------------------------------------------------------------------


def _infer_pairwise(attrs, x1, x2):
    shape = _pair_shape(x1, x2)
    if not shape:
        raise ShapeError(
            None,
            "pairwise_distance needs inputs with at least one axis",
            expected="X1 and X2 broadcasting to (..., D)",
            actual=f"X1.shape={x1.shape}, X2.shape={x2.shape}",
        )
    out = shape[:-1] + ((1,) if attrs["keepdim"] else ())
    return out, result_dtype(x1, x2)


@register(
    "pairwise_distance",
    inputs=("X1", "X2"),
    attrs={
        "p": Attr("float", 2.0, check=lambda v: v >= 0, rule=">= 0 (math.inf for the max norm)"),
        "eps": Attr("float", 1e-6),
        "keepdim": Attr("bool", False),
    },
    infer=_infer_pairwise,
)
def pairwise_distance(xp, attrs, x1, x2):
    """Out = ||X1 - X2 + eps||_p along the last axis (PyTorch's pairwise_distance): p = inf is
    the largest |entry|, p = 0 counts the non-zero entries, otherwise (sum |D|**p)**(1/p).

    With D = X1 - X2 + eps, s = sign(D) and G = dOut: dX1 = -dX2 = G * s * |D|**(p-1) /
    Out**(p-1) (p = 2: G * D / Out; p = 1: G * s; 0 where Out = 0); p = inf: G * s on the
    entries where |D| is the maximum, shared equally between ties; p = 0: no gradient.

    >>> import numpy as np, tape, ops
    >>> ops.pairwise_distance(tape.Variable(np.array([[3.0, 4.0]])), np.zeros(2), eps=0.0).numpy()
    array([5.])
    """
    diff = x1 - x2
    diff += attrs["eps"]
    return _p_norm(xp, diff, attrs["p"], attrs["keepdim"])


def _p_norm(xp, diff, p, keep):
    """The p-norm of ``diff`` along its last axis (p = inf: the max, p = 0: the non-zero count;
    0 over an empty axis)."""
    size = xp.abs(diff)
    if diff.shape[-1] == 0:
        out = size.sum(axis=-1, keepdims=keep)
    elif p == math.inf:
        out = size.max(axis=-1, keepdims=keep)
    elif p == 0:
        out = (size != 0).sum(axis=-1, keepdims=keep).astype(diff.dtype)
    elif p == 1:
        out = size.sum(axis=-1, keepdims=keep)
    elif p == 2:
        out = xp.sqrt((diff * diff).sum(axis=-1, keepdims=keep))
    else:
        out = (size**p).sum(axis=-1, keepdims=keep) ** (1.0 / p)
    return out


def _sign(d):
    """sign(D) as a constant (comparisons carry no gradient, and it is locally constant)."""
    positive = _op("cast", _op("greater_than", d, constant(0.0, d)), out_dtype=d.dtype.name)
    negative = _op("cast", _op("less_than", d, constant(0.0, d)), out_dtype=d.dtype.name)
    return _sub(positive, negative)


def _nonzero(norm):
    """The norm with its zeros replaced by 1 (where D = 0 and its gradient is 0 anyway)."""
    zero = _op("equal", norm, constant(0.0, norm))
    return apply(REGISTRY["where"], (zero, constant(1.0, norm), norm), NO_ATTRS)


@pairwise_distance.gradient
def _(g):
    (x1, x2), (out,), (gout,) = g.inputs, g.outputs, g.gouts
    p = g.attrs["p"]
    if p == 0:
        return None, None
    diff = _scale(_sub(x1, x2), 1.0, g.attrs["eps"])
    last = len(diff.shape) - 1
    if not g.attrs["keepdim"]:
        out, gout = _keep(out, last), _keep(gout, last)
    if p == 2:
        gdiff = _mul(gout, _div(diff, _nonzero(out)))
    elif p == 1:
        gdiff = _mul(gout, _sign(diff))
    elif p == math.inf:
        size = _mul(diff, _sign(diff))
        peak = _op("cast", _op("equal", size, out), out_dtype=diff.dtype.name)
        share = _div(peak, _sum_keep(peak, last))
        gdiff = _mul(gout, _mul(_sign(diff), share))
    else:
        sign = _sign(diff)
        power = _op("elementwise_pow", _mul(diff, sign), constant(p - 1.0, diff))
        scale = _op("elementwise_pow", _nonzero(out), constant(p - 1.0, out))
        gdiff = _mul(gout, _div(_mul(sign, power), scale))
    g1 = _to(gdiff, x1) if g.needs(0) else None
    g2 = _to(_neg(gdiff), x2) if g.needs(1) else None
    return g1, g2


# ---- cdist -----------------------------------------------------------------------------------


def _infer_cdist(attrs, x1, x2):
    require_float(None, x1, "X1")
    require_float(None, x2, "X2")
    shapes = f"X1.shape={x1.shape}, X2.shape={x2.shape}"
    if len(x1.shape) < 2 or len(x2.shape) < 2:
        raise ShapeError(
            None,
            "cdist needs inputs with at least two axes",
            expected="X1 of shape (..., P, M) and X2 of shape (..., R, M)",
            actual=shapes,
        )
    if x1.shape[-1] != x2.shape[-1]:
        raise ShapeError(
            None,
            "X1 and X2 must have the same number of columns",
            expected="X1.shape[-1] == X2.shape[-1]",
            actual=f"{x1.shape[-1]} != {x2.shape[-1]} ({shapes})",
        )
    try:
        batch = broadcast_shapes(None, tuple(x1.shape[:-2]), tuple(x2.shape[:-2]))
    except ShapeError:
        raise ShapeError(
            None,
            "the batch dimensions of X1 and X2 cannot be broadcast together",
            expected="X1.shape[:-2] and X2.shape[:-2] equal, or 1, aligned from the right",
            actual=shapes,
        ) from None
    return batch + (x1.shape[-2], x2.shape[-2]), result_dtype(x1, x2)


@register(
    "cdist",
    inputs=("X1", "X2"),
    attrs={
        "p": Attr("float", 2.0, check=lambda v: v >= 0, rule=">= 0 (math.inf for the max norm)"),
    },
    infer=_infer_cdist,
)
def cdist(xp, attrs, x1, x2):
    """Out[..., i, j] = ||X1[..., i, :] - X2[..., j, :]||_p for X1 of shape (..., P, M) and X2
    of shape (..., R, M), the batch dimensions broadcast: Out has shape (..., P, R)
    (torch.cdist, computed from the differences, as its exact mode). p = inf is the largest
    |entry|, p = 0 counts the non-zero entries.

    With D = X1[..., i, :] - X2[..., j, :], s = sign(D) and G = dOut[..., i, j], each pair adds
    dX1[..., i, :] += E and dX2[..., j, :] -= E with E = G * s * |D|**(p-1) / Out**(p-1)
    (p = 2: G * D / Out; p = 1: G * s); E = 0 where Out = 0, and where D = 0 for p < 1 (as
    PyTorch); p = inf: G * s on every entry where |D| is the maximum (ties each get it all, as
    PyTorch); p = 0: no gradient.

    >>> import numpy as np, tape, ops
    >>> a, b = np.array([[0.0, 0.0], [1.0, 1.0]]), np.array([[3.0, 4.0]])
    >>> ops.cdist(tape.Variable(a), b).numpy().round(4)
    array([[5.    ],
           [3.6056]])
    """
    x1, x2 = promote(x1, x2)
    diff = x1[..., :, None, :] - x2[..., None, :, :]
    return _p_norm(xp, diff, attrs["p"], False)


def _magnitude_power(diff, sign, exponent):
    """sign * |D|**exponent, 0 where D = 0 (|D| is replaced by 1 there, where sign is 0)."""
    safe = _nonzero(_mul(diff, sign))
    return _mul(sign, _op("elementwise_pow", safe, constant(exponent, safe)))


@cdist.gradient
def _(g):
    (x1, x2), (out,), (gout,) = g.inputs, g.outputs, g.gouts
    p = g.attrs["p"]
    if p == 0:
        return None, None
    rows, cols = len(x1.shape) - 1, len(x2.shape) - 2
    diff = _sub(_op("unsqueeze", x1, axes=[rows]), _op("unsqueeze", x2, axes=[cols]))
    last = len(diff.shape) - 1
    out, gout = _keep(out, last), _keep(gout, last)
    if p == 2:
        gdiff = _mul(gout, _div(diff, _nonzero(out)))
    elif p == 1:
        gdiff = _mul(gout, _sign(diff))
    elif p == math.inf:
        sign = _sign(diff)
        peak = _op("cast", _op("equal", _mul(diff, sign), out), out_dtype=diff.dtype.name)
        gdiff = _mul(gout, _mul(sign, peak))
    else:
        scale = _op("elementwise_pow", _nonzero(out), constant(p - 1.0, out))
        gdiff = _mul(gout, _div(_magnitude_power(diff, _sign(diff), p - 1.0), scale))
    g1 = _to(_op("reduce_sum", gdiff, axis=[last - 1]), x1) if g.needs(0) else None
    g2 = _to(_neg(_op("reduce_sum", gdiff, axis=[last - 2])), x2) if g.needs(1) else None
    return g1, g2
