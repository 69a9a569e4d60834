"""The negative log-likelihood op (nll_loss) with class weights and ignored targets, and its
gradient op; both are linear in their float input, so each is the other's adjoint.

Cross-entropy with ``weight=`` or label smoothing is ``log_softmax`` followed by ``nll_loss``
(``layers.CrossEntropyLoss``); plain cross-entropy keeps the fused ``softmax_with_cross_entropy``.
"""

from __future__ import annotations

import numpy as np

from ops.infer import normalize_axis, require_float, result_dtype
from ops.nn import check_classes
from ops.registry import REGISTRY, Attr, register
from tape.errors import DTypeError, ShapeError
from tape.tape import apply

_NLL_ATTRS = {"axis": Attr("int", 1), "ignore_index": Attr("int", -100)}


def _class_axis(attrs, x_shape):
    """The class axis of X (PyTorch: 1, or 0 for an unbatched (C,) input)."""
    if len(x_shape) == 1:
        return 0
    return normalize_axis(None, attrs["axis"], len(x_shape))


def _check_label_and_weight(label, weight, classes, expected_label):
    if label.dtype.kind not in "iu":
        raise DTypeError(
            None,
            "Label must hold integer class indices",
            expected="an integer dtype",
            actual=str(label.dtype),
        )
    if tuple(label.shape) != expected_label:
        raise ShapeError(
            None,
            "Label must have X's shape without the class axis",
            expected=f"Label.shape == {expected_label}",
            actual=f"Label.shape={label.shape}",
        )
    if weight is not None:
        if tuple(weight.shape) != (classes,):
            raise ShapeError(
                None,
                "Weight must hold one weight per class",
                expected=f"Weight.shape == ({classes},)",
                actual=f"Weight.shape={weight.shape}",
            )
        require_float(None, weight, "Weight")


def _infer_nll(attrs, x, label, weight):
    require_float(None, x, "X")
    if not x.shape:
        raise ShapeError(None, "X needs a class axis", expected="X (C,) or (N, C, ...)")
    axis = _class_axis(attrs, x.shape)
    label_shape = tuple(d for i, d in enumerate(x.shape) if i != axis)
    _check_label_and_weight(label, weight, x.shape[axis], label_shape)
    return label_shape, x.dtype if weight is None else result_dtype(x, weight)


def _picked_weights(xp, attrs, label, weight, classes, dtype):
    """(the targets with ignored ones pointing at class 0, W[target] with 0 where ignored), the
    weights in numpy's promotion of ``dtype`` and Weight's."""
    ignored = label == attrs["ignore_index"]
    safe = xp.where(ignored, 0, label)
    check_classes(xp, safe, classes)
    if weight is None:
        return safe, xp.where(ignored, 0, xp.ones(label.shape, dtype))
    picked = weight[safe].astype(np.result_type(dtype, weight.dtype), copy=False)
    return safe, xp.where(ignored, 0, picked)


@register(
    "nll_loss",
    inputs=("X", "Label", "Weight?"),
    attrs=_NLL_ATTRS,
    infer=_infer_nll,
    no_need_buffer=("X",),
)
def nll_loss(xp, attrs, x, label, weight):
    """Out[n, d...] = -Weight[c] * X[n, c, d...] with c = Label[n, d...] (PyTorch's nll_loss
    with reduction "none"); 0 where Label == ignore_index. X holds log-probabilities with the
    classes on ``axis`` (1; an unbatched (C,) X has them on 0), Weight (C,) defaults to ones.

    dX = nll_loss_grad(Label, Weight, dOut): -Weight[c] * dOut at the target class, 0 elsewhere.
    Label and Weight get no gradient (PyTorch does not differentiate the class weights either).
    Out's dtype is numpy's promotion of X's and Weight's.

    >>> import numpy as np, tape, ops
    >>> logp = tape.Variable(np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.6, 0.3]])))
    >>> ops.nll_loss(logp, np.array([0, 2]), np.array([1.0, 1.0, 2.0])).numpy().round(4)
    array([0.6931, 2.4079])
    """
    axis = _class_axis(attrs, x.shape)
    safe, picked = _picked_weights(xp, attrs, label, weight, x.shape[axis], x.dtype)
    chosen = xp.take_along_axis(x, xp.expand_dims(safe, axis), axis=axis)
    return -xp.squeeze(chosen, axis=axis) * picked


@nll_loss.gradient
def _(g):
    x, label, weight = g.inputs
    axis = _class_axis(g.attrs, x.shape)
    attrs = {**g.attrs, "axis": axis, "depth": x.shape[axis]}
    gx = apply(nll_loss_grad, (label, weight, g.gouts[0]), attrs)
    if gx.dtype != x.dtype:  # a float64 Weight promotes; the gradient keeps X's dtype
        gx = apply(REGISTRY["cast"], (gx,), {"out_dtype": x.dtype.name})
    return gx, None, None


def _infer_nll_grad(attrs, label, weight, gout):
    require_float(None, gout, "Out@GRAD")
    axis, depth = attrs["axis"], attrs["depth"]
    if not 0 <= axis <= len(gout.shape):
        raise ShapeError(
            None,
            f"axis {axis} is out of range",
            expected=f"0 <= axis <= Out@GRAD.ndim == {len(gout.shape)}",
            actual=str(axis),
        )
    _check_label_and_weight(label, weight, depth, tuple(gout.shape))
    dtype = gout.dtype if weight is None else result_dtype(gout, weight)
    return tuple(gout.shape[:axis]) + (depth,) + tuple(gout.shape[axis:]), dtype


@register(
    "nll_loss_grad",
    inputs=("Label", "Weight?", "Out@GRAD"),
    attrs={
        "axis": Attr("int", 1, check=lambda v: v >= 0, rule=">= 0"),
        "ignore_index": Attr("int", -100),
        "depth": Attr("int", required=True, check=lambda v: v >= 1, rule=">= 1"),
    },
    infer=_infer_nll_grad,
)
def nll_loss_grad(xp, attrs, label, weight, gout):
    """Out (dX) = -Weight[Label] * G placed at the target class along ``axis`` (``depth``
    classes), zeros elsewhere and where Label == ignore_index; G = Out@GRAD.

    It is linear in G and its adjoint is nll_loss: dG = nll_loss(H, Label, Weight) for the
    gradient H of Out.
    """
    axis, depth = attrs["axis"], attrs["depth"]
    safe, picked = _picked_weights(xp, attrs, label, weight, depth, gout.dtype)
    shape = tuple(gout.shape[:axis]) + (depth,) + tuple(gout.shape[axis:])
    gx = xp.zeros(shape, dtype=np.result_type(gout.dtype, picked.dtype))
    xp.put_along_axis(gx, xp.expand_dims(safe, axis), xp.expand_dims(-picked * gout, axis), axis)
    return gx


@nll_loss_grad.gradient
def _(g):
    label, weight, gout = g.inputs
    attrs = {"axis": g.attrs["axis"], "ignore_index": g.attrs["ignore_index"]}
    ggout = apply(nll_loss, (g.gouts[0], label, weight), attrs)
    if ggout.dtype != gout.dtype:
        ggout = apply(REGISTRY["cast"], (ggout,), {"out_dtype": gout.dtype.name})
    return None, None, ggout
