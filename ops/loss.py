"""Loss ops: softmax cross-entropy (hard, soft and ignored labels), sigmoid cross-entropy with
logits and mean squared error, each with a differentiable gradient op.

Kernels are written for few array passes (the softmax cross-entropy step of an MLP must cost no
more than careful hand-written numpy): intermediates are updated in place and the gradient ops
read the saved Softmax instead of recomputing it.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ops import batching, buffers
from ops.compose import NUMPY_AXIS as _NUMPY
from ops.compose import mul as _mul
from ops.compose import neg as _neg
from ops.compose import sub as _sub
from ops.compose import sum_keep as _sum_keep
from ops.fusion_backends import softmax_rows
from ops.infer import (
    broadcast_shapes,
    normalize_axis,
    promoted_float,
    require_float,
    result_dtype,
)
from ops.nn import check_classes as _check_classes
from ops.nn import log_softmax, softmax_grad
from ops.reduce import reduce_sum, sum_to
from ops.registry import REGISTRY, Attr, register
from ops.xp import promote
from tape.constants import constant
from tape.errors import DTypeError, ShapeError
from tape.tape import apply

# ---- softmax cross-entropy -----------------------------------------------------------------


def _binary(xp, ufunc, x, y):
    """``ufunc(x, y)``, in an ``ops.buffers`` array where the result is large and has x's shape
    and dtype (a language model's logits: no page faults per step)."""
    out = buffers.binary_out(x, y)
    return ufunc(x, y) if out is None else ufunc(x, y, out=out)


SoftmaxCrossEntropy = namedtuple("SoftmaxCrossEntropy", ["softmax", "loss"])

_SWCE_ATTRS = {
    "axis": Attr("int", -1),
    "ignore_index": Attr("int", -100),
    "soft_label": Attr("bool", False),
    # The softmax by ``ops.fusion_backends.softmax_rows`` where it applies: faster, equal to
    # numpy's within rounding. Lazy plans set it unless exact (``tape.passes.fast_kernels``);
    # the gradient op ignores it.
    "fast_exp": Attr("bool", False),
}


def _infer_swce(attrs, logits, label):
    require_float(None, logits, "Logits")
    shape = tuple(logits.shape)
    axis = normalize_axis(None, attrs["axis"], len(shape))
    loss_shape = shape[:axis] + (1,) + shape[axis + 1 :]
    if shape[axis] == 0:
        raise ShapeError(
            None,
            "Logits has no classes",
            expected=f"Logits.shape[{axis}] >= 1",
            actual=f"Logits.shape={shape}",
        )
    dtype = logits.dtype
    if attrs["soft_label"]:
        dtype = promoted_float((("Logits", logits), ("Label", label)))
        if tuple(label.shape) != shape:
            raise ShapeError(
                None,
                "soft labels must have Logits' shape",
                expected=str(shape),
                actual=f"Label.shape={label.shape}",
            )
    else:
        if label.dtype.kind not in "iu":
            raise DTypeError(
                None,
                "Label must hold integer class indices",
                expected="an integer dtype",
                actual=str(label.dtype),
                hint="pass soft_label=True for probabilities",
            )
        dropped = shape[:axis] + shape[axis + 1 :]
        if tuple(label.shape) not in (loss_shape, dropped):
            raise ShapeError(
                None,
                "Label does not match Logits",
                expected=f"Label.shape == {loss_shape} or {dropped} "
                f"(Logits.shape={shape}, axis={attrs['axis']})",
                actual=f"Label.shape={label.shape}",
            )
    return (shape, dtype), (loss_shape, dtype)


def _class_index(xp, label, attrs, logits_shape):
    """Hard labels as indices with a size-1 class axis, ignored entries pointing at class 0;
    and the boolean mask of ignored entries (None when there are none)."""
    axis = attrs["axis"] % len(logits_shape)
    if label.ndim < len(logits_shape):
        label = xp.expand_dims(label, axis)
    ignored = label == attrs["ignore_index"]
    if ignored.any():
        label = xp.where(ignored, 0, label)
    else:
        ignored = None
    _check_classes(xp, label, logits_shape[axis])
    return label, ignored


@register(
    "softmax_with_cross_entropy",
    inputs=("Logits", "Label"),
    outputs=("Softmax", "Loss"),
    attrs=_SWCE_ATTRS,
    infer=_infer_swce,
    returns=lambda results: SoftmaxCrossEntropy(*results),
    batch=batching.ROWS_ALONG_AXIS,
)
def softmax_with_cross_entropy(xp, attrs, logits, label):
    """Softmax = softmax(Logits) along ``axis``; Loss = -log(Softmax[Label]) with a size-1 class
    axis (Paddle's layout). Label holds class indices, with or without that size-1 axis; entries
    equal to ``ignore_index`` get loss 0 and no gradient. With ``soft_label`` Label holds
    probabilities of Logits' shape and Loss = -sum(Label * log(Softmax), axis).

    dLogits = (Softmax - onehot(Label)) * dLoss (soft: (sum(Label) * Softmax - Label) * dLoss),
    by ``softmax_with_cross_entropy_grad``, plus softmax_grad(Softmax, dSoftmax) when the Softmax
    output received a gradient. dLabel (soft labels only) = -log_softmax(Logits) * dLoss.

    ``fast_exp`` (hard labels, last axis): the softmax as ``ops.fusion_backends.softmax_rows``
    computes it where that applies, equal to the default within rounding; off by default, so
    eager mode keeps numpy's bits (lazy plans that may round differently turn it on).

    The functional call returns the namedtuple ``SoftmaxCrossEntropy(softmax, loss)``.
    """
    axis = attrs["axis"]
    if attrs["fast_exp"] and not attrs["soft_label"] and axis in (-1, logits.ndim - 1):
        rows = softmax_rows.rows(logits)
        if rows is not None:
            prob, shift, total = rows
            index, ignored = _class_index(xp, label, attrs, logits.shape)
            return prob, _hard_loss(xp, logits, index, ignored, shift, total, axis)
    if attrs["soft_label"]:
        logits, label = promote(logits, label)
    shift = logits.max(axis=axis, keepdims=True)
    prob = _binary(xp, xp.subtract, logits, shift)
    if attrs["soft_label"]:
        loss = -(label * prob).sum(axis=axis, keepdims=True)
        xp.exp(prob, out=prob)
        total = prob.sum(axis=axis, keepdims=True)
        loss += xp.log(total) * label.sum(axis=axis, keepdims=True)
    else:
        index, ignored = _class_index(xp, label, attrs, logits.shape)
        xp.exp(prob, out=prob)
        total = prob.sum(axis=axis, keepdims=True)
        loss = _hard_loss(xp, logits, index, ignored, shift, total, axis)
    prob /= total
    return prob, loss


def _hard_loss(xp, logits, index, ignored, shift, total, axis):
    """-log(softmax[label]) = log(total) - (logits[label] - shift): finite even where the
    picked probability underflows to 0; 0 where the label is ignored."""
    loss = xp.log(total)
    loss += shift
    loss -= xp.take_along_axis(logits, index, axis=axis)
    if ignored is not None:
        loss[ignored] = 0
    return loss


@softmax_with_cross_entropy.gradient
def _(g):
    (logits, label), (prob, _) = g.inputs, g.outputs
    gprob, gloss = g.gouts
    glogits = glabel = None
    if g.needs(0):
        parts = []
        if gloss is not None:
            parts.append(apply(softmax_with_cross_entropy_grad, (label, prob, gloss), g.attrs))
        if gprob is not None:
            parts.append(apply(softmax_grad, (prob, gprob), {"axis": g.attrs["axis"]}))
        glogits = parts[0] if len(parts) == 1 else apply(REGISTRY["sum"], (parts,), {})
    if g.needs(1) and gloss is not None:
        logp = apply(log_softmax, (logits,), {"axis": g.attrs["axis"]})
        glabel = _neg(_mul(logp, gloss))
    return glogits, glabel


def _infer_swce_grad(attrs, label, prob, gloss):
    (shape, dtype), (loss_shape, _) = _infer_swce(attrs, prob, label)
    if tuple(gloss.shape) != loss_shape:
        raise ShapeError(
            None,
            "Loss@GRAD must have Loss's shape",
            expected=str(loss_shape),
            actual=str(gloss.shape),
        )
    return shape, np.result_type(dtype, gloss.dtype)


@register(
    "softmax_with_cross_entropy_grad",
    inputs=("Label", "Softmax", "Loss@GRAD"),
    attrs=_SWCE_ATTRS,
    infer=_infer_swce_grad,
    batch=batching.ROWS_ALONG_AXIS,
)
def softmax_with_cross_entropy_grad(xp, attrs, label, prob, gloss):
    """Out (dLogits) = (Softmax - onehot(Label)) * G, zero where Label == ignore_index;
    soft labels: (sum(Label) * Softmax - Label) * G, with G = Loss@GRAD (size-1 class axis).

    Out is affine in Softmax and linear in G, so its gradient along H is
    dSoftmax = f(H) - f(0), dG = sum(H * f(Softmax, G=1), axis), and for soft labels
    dLabel = G * (sum(H * Softmax, axis) - H).
    """
    axis = attrs["axis"]
    if attrs["soft_label"]:
        label, prob, gloss = promote(label, prob, gloss)
        gx = prob * (label.sum(axis=axis, keepdims=True) * gloss)
        gx -= label * gloss
        return gx
    index, ignored = _class_index(xp, label, attrs, prob.shape)
    if ignored is not None:
        gloss = xp.where(ignored, 0, gloss)
    # One full-size pass: scale the copy of Softmax, then fix the label entries in place.
    gx = _binary(xp, xp.multiply, prob, gloss)
    picked = xp.take_along_axis(gx, index, axis=axis)
    xp.put_along_axis(gx, index, picked - gloss, axis=axis)
    return gx


@softmax_with_cross_entropy_grad.gradient
def _(g):
    (label, prob, gloss), (hess,) = g.inputs, g.gouts
    axis = g.attrs["axis"]
    grad_op = softmax_with_cross_entropy_grad
    d_label = d_prob = d_gloss = None
    if g.needs(0):
        d_label = _mul(gloss, _sub(_sum_keep(_mul(hess, prob), axis), hess))
    if g.needs(1):
        zeros = apply(REGISTRY["fill_zeros_like"], (hess,), {})
        d_prob = _sub(
            apply(grad_op, (label, hess, gloss), g.attrs),
            apply(grad_op, (label, zeros, gloss), g.attrs),
        )
    if g.needs(2):
        ones = apply(REGISTRY["fill_ones_like"], (gloss,), {})
        d_gloss = _sum_keep(_mul(hess, apply(grad_op, (label, prob, ones), g.attrs)), axis)
    return d_label, d_prob, d_gloss


# ---- sigmoid cross-entropy and mean squared error ------------------------------------------

_SCE_ATTRS = {"ignore_index": Attr("int", -100), "normalize": Attr("bool", False)}


def _infer_sce(attrs, x, label, *rest):
    dtype = promoted_float((("X", x), ("Label", label), *(("Out@GRAD", g) for g in rest)))
    if tuple(label.shape) != tuple(x.shape):
        raise ShapeError(
            None,
            "Label must have X's shape",
            expected=str(x.shape),
            actual=str(label.shape),
        )
    return x.shape, dtype


def _scale_kept(xp, out, label, attrs):
    """Zeroes entries whose label is ``ignore_index``; with ``normalize`` divides by the number
    of the others (at least 1). Updates ``out`` in place."""
    ignored = label == attrs["ignore_index"]
    if ignored.any():
        out[ignored] = 0
    if attrs["normalize"]:
        out /= max(ignored.size - int(ignored.sum()), 1)
    return out


@register(
    "sigmoid_cross_entropy_with_logits", inputs=("X", "Label"), attrs=_SCE_ATTRS, infer=_infer_sce
)
def sigmoid_cross_entropy_with_logits(xp, attrs, x, label):
    """Out = max(X, 0) - X * Label + log(1 + exp(-|X|)) elementwise (stable binary cross-entropy
    of sigmoid(X) against probabilities Label); 0 where Label == ignore_index, and divided by
    the number of other entries when ``normalize``.

    dX = (sigmoid(X) - Label) * dOut and dLabel = -X * dOut, with the same mask and scale;
    dX comes from ``sigmoid_cross_entropy_with_logits_grad``.
    """
    x, label = promote(x, label)
    out = xp.maximum(x, 0)
    out -= x * label
    soft = xp.exp(-xp.abs(x))
    out += xp.log1p(soft, out=soft)
    return _scale_kept(xp, out, label, attrs)


def _kept_scale(label, attrs):
    """As a Variable: 1 (or 1/count with ``normalize``) where Label != ignore_index, else 0."""
    ignore_index = constant(float(attrs["ignore_index"]), label)
    kept = apply(REGISTRY["not_equal"], (label, ignore_index), _NUMPY)
    kept = apply(REGISTRY["cast"], (kept,), {"out_dtype": label.dtype.name})
    if not attrs["normalize"]:
        return kept
    count = apply(reduce_sum, (kept,), {"axis": None, "keepdim": False})
    count = apply(REGISTRY["elementwise_max"], (count, constant(1.0, count)), _NUMPY)
    return apply(REGISTRY["elementwise_div"], (kept, count), _NUMPY)


@sigmoid_cross_entropy_with_logits.gradient
def _(g):
    (x, label), (gout,) = g.inputs, g.gouts
    gx = glabel = None
    if g.needs(0):
        gx = apply(sigmoid_cross_entropy_with_logits_grad, (x, label, gout), g.attrs)
    if g.needs(1):
        glabel = _neg(_mul(_mul(x, gout), _kept_scale(label, g.attrs)))
    return gx, glabel


@register(
    "sigmoid_cross_entropy_with_logits_grad",
    inputs=("X", "Label", "Out@GRAD"),
    attrs=_SCE_ATTRS,
    infer=_infer_sce,
)
def sigmoid_cross_entropy_with_logits_grad(xp, attrs, x, label, gout):
    """Out (dX) = (sigmoid(X) - Label) * G * s, with G = Out@GRAD and s the ignore/normalize
    scale of the forward op.

    Its gradient along H: dX = H * G * s * sigmoid'(X), dLabel = -H * G * s, and (linear in G)
    dG = sigmoid_cross_entropy_with_logits_grad(X, Label, H).
    """
    x, label, gout = promote(x, label, gout)
    # sigmoid(x) = (1 + tanh(x / 2)) / 2 never overflows.
    gx = xp.tanh(x * 0.5)
    gx *= 0.5
    gx += 0.5
    gx -= label
    gx *= gout
    return _scale_kept(xp, gx, label, attrs)


@sigmoid_cross_entropy_with_logits_grad.gradient
def _(g):
    (x, label, gout), (hess,) = g.inputs, g.gouts
    d_x = d_label = d_gout = None
    if g.needs(0) or g.needs(1):
        scaled = _mul(_mul(hess, gout), _kept_scale(label, g.attrs))
        if g.needs(0):
            sig = apply(REGISTRY["sigmoid"], (x,), {})
            slope = _mul(sig, _sub(constant(1.0, sig), sig))
            d_x = _mul(scaled, slope)
        if g.needs(1):
            d_label = _neg(scaled)
    if g.needs(2):
        d_gout = apply(sigmoid_cross_entropy_with_logits_grad, (x, label, hess), g.attrs)
    return d_x, d_label, d_gout


_REDUCTIONS = ("mean", "sum", "none")


def _infer_mse(attrs, x, y):
    require_float(None, x, "X")
    require_float(None, y, "Y")
    shape = broadcast_shapes(None, tuple(x.shape), tuple(y.shape))
    return (shape if attrs["reduction"] == "none" else ()), result_dtype(x, y)


@register(
    "mse",
    inputs=("X", "Y"),
    attrs={
        "reduction": Attr("str", "mean", choices=_REDUCTIONS),
    },
    infer=_infer_mse,
)
def mse(xp, attrs, x, y):
    """Out = (X - Y)**2, then its mean (``reduction="mean"``), sum ("sum") or nothing ("none"),
    as PyTorch's MSELoss; X and Y broadcast.

    dX = 2 * (X - Y) * dOut / n (n = the number of elements for "mean", else 1), dY = -dX, each
    summed back to its input's shape.
    """
    out = x - y
    xp.square(out, out=out)
    reduction = attrs["reduction"]
    if reduction == "mean":
        return out.mean()
    return out.sum() if reduction == "sum" else out


@mse.gradient
def _(g):
    (x, y), (gout,) = g.inputs, g.gouts
    factor = 2.0
    if g.attrs["reduction"] == "mean":
        factor /= max(int(np.prod(broadcast_shapes(None, x.shape, y.shape))), 1)
    diff = _sub(x, y)
    gdiff = _mul(diff, _mul(gout, constant(factor, gout)))
    gx = sum_to(gdiff, x.shape) if g.needs(0) else None
    gy = _neg(sum_to(gdiff, y.shape)) if g.needs(1) else None
    return gx, gy
