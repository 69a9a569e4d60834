"""Elementwise loss ops with PyTorch's formulas: binary cross-entropy on probabilities
(bce_loss), KL divergence (kl_div) and the Huber loss (huber_loss; smooth L1 is Huber / beta).

Each is one elementwise kernel (per-element loss, reduction "none"; the layers in
``layers.loss`` reduce) whose gradient is composed from registered ops, so it is differentiable
again. Inputs broadcast; the output dtype is numpy's promotion of the two inputs' dtypes.
"""

from __future__ import annotations

import numpy as np

from ops.compose import mul as _mul
from ops.compose import neg as _neg
from ops.compose import scale as _scale
from ops.compose import sub as _sub
from ops.infer import broadcast_shapes, require_float, result_dtype
from ops.reduce import sum_to
from ops.registry import REGISTRY, Attr, register
from ops.xp import promote
from tape.constants import constant
from tape.tape import apply


def _infer_pair(attrs, x, y):
    require_float(None, x, "X")
    require_float(None, y, "Y")
    return broadcast_shapes(None, tuple(x.shape), tuple(y.shape)), result_dtype(x, y)


def _to(grad, var):
    """A broadcast gradient summed to ``var``'s shape and given its dtype."""
    grad = sum_to(grad, var.shape)
    if grad.dtype != var.dtype:
        grad = apply(REGISTRY["cast"], (grad,), {"out_dtype": var.dtype.name})
    return grad


def _op(name, *args):
    defn = REGISTRY[name]
    return apply(defn, args, defn.defaults)


# ---- binary cross-entropy on probabilities -------------------------------------------------

# PyTorch's floor of x * (1 - x) in the gradient: 1e-12 rounded to float32, as its kernel uses it
_BCE_EPSILON = float(np.float32(1e-12))


def check_probabilities(xp, x):
    """Raises when an entry of ``x`` lies outside [0, 1], as PyTorch's BCELoss does (the layer
    calls it on values it can see; the kernel itself gives NaN there, as log does)."""
    if x.size and not (float(x.min()) >= 0.0 and float(x.max()) <= 1.0):
        raise ValueError("all elements of the input (probabilities) must be between 0 and 1")


@register("bce_loss", inputs=("X", "Y"), infer=_infer_pair, elementwise=True)
def bce_loss(xp, attrs, x, y):
    """Out = -(Y * max(log X, -100) + (1 - Y) * max(log(1 - X), -100)) elementwise, PyTorch's
    binary_cross_entropy (reduction "none") of probabilities X in [0, 1] against targets Y; the
    logs are clamped at -100 so that X = 0 or 1 gives a finite loss; X outside [0, 1] gives NaN
    (``layers.BCELoss`` raises there, as PyTorch, when it can see the values).

    dX = dOut * (X - Y) / max(X * (1 - X), 1e-12);  dY = dOut * (log(1 - X) - log(X)) (unclamped,
    as PyTorch).

    >>> import numpy as np, tape, ops
    >>> ops.bce_loss(tape.Variable(np.array([0.5, 0.0])), np.array([1.0, 1.0])).numpy().round(4)
    array([  0.6931, 100.    ])
    """
    x, y = promote(x, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_x = xp.maximum(xp.log(x), -100.0)
        log_rest = xp.maximum(xp.log1p(-x), -100.0)
    out = log_x - log_rest
    out *= y
    out += log_rest
    return -out


@bce_loss.gradient
def _(g):
    (x, y), (gout,) = g.inputs, g.gouts
    gx = gy = None
    rest = _scale(x, -1.0, 1.0)  # 1 - X
    if g.needs(0):
        floor = _op("elementwise_max", _mul(x, rest), constant(_BCE_EPSILON, x))
        gx = _to(_op("elementwise_div", _mul(gout, _sub(x, y)), floor), x)
    if g.needs(1):
        logs = _sub(_op("log", rest), _op("log", x))
        gy = _to(_mul(gout, logs), y)
    return gx, gy


# ---- KL divergence ---------------------------------------------------------------------------


@register(
    "kl_div",
    inputs=("X", "Target"),
    attrs={"log_target": Attr("bool", False)},
    infer=_infer_pair,
    elementwise=True,
)
def kl_div(xp, attrs, x, target):
    """Out = Target * (log(Target) - X) elementwise, 0 where Target == 0 (PyTorch's kl_div with
    reduction "none": X holds log-probabilities); with ``log_target`` Target holds
    log-probabilities too and Out = exp(Target) * (Target - X).

    dX = -dOut * Target (log_target: -dOut * exp(Target));
    dTarget = dOut * (log(Target) + 1 - X) (log_target: dOut * exp(Target) * (Target - X + 1)).

    >>> import numpy as np, tape, ops
    >>> ops.kl_div(tape.Variable(np.log([0.5, 0.5])), np.array([1.0, 0.0])).numpy().round(4)
    array([0.6931, 0.    ])
    """
    x, target = promote(x, target)
    if attrs["log_target"]:
        return xp.exp(target) * (target - x)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = xp.where(target == 0, 0.0, target * xp.log(target))
    return entropy - target * x


@kl_div.gradient
def _(g):
    (x, target), (gout,) = g.inputs, g.gouts
    log_target = g.attrs["log_target"]
    weight = _op("exp", target) if log_target else target
    gx = _to(_neg(_mul(gout, weight)), x) if g.needs(0) else None
    gt = None
    if g.needs(1):
        if log_target:
            gt = _mul(_mul(gout, weight), _scale(_sub(target, x), 1.0, 1.0))
        else:
            gt = _mul(gout, _scale(_sub(_op("log", target), x), 1.0, 1.0))
        gt = _to(gt, target)
    return gx, gt


# ---- Huber (and smooth L1) -------------------------------------------------------------------


@register(
    "huber_loss",
    inputs=("X", "Y"),
    attrs={"delta": Attr("float", 1.0, check=lambda v: v > 0, rule="> 0")},
    infer=_infer_pair,
    elementwise=True,
)
def huber_loss(xp, attrs, x, y):
    """Out = 0.5 * D**2 where |D| < delta, else delta * (|D| - 0.5 * delta), with D = X - Y
    (PyTorch's huber_loss, reduction "none"). Smooth L1 with beta > 0 is huber_loss(delta=beta)
    / beta.

    dX = dOut * clip(D, -delta, delta);  dY = -dX (each summed to its input's shape).

    >>> import numpy as np, tape, ops
    >>> ops.huber_loss(tape.Variable(np.array([0.5, 3.0])), np.zeros(2)).numpy()
    array([0.125, 2.5  ])
    """
    delta = attrs["delta"]
    diff = x - y
    size = xp.abs(diff)
    quadratic = diff * diff
    quadratic *= 0.5
    size -= 0.5 * delta
    size *= delta
    return xp.where(xp.abs(diff) < delta, quadratic, size)


@huber_loss.gradient
def _(g):
    (x, y), (gout,) = g.inputs, g.gouts
    delta = g.attrs["delta"]
    slope = apply(REGISTRY["clip"], (_sub(x, y),), {"min": -delta, "max": delta})
    gdiff = _mul(gout, slope)
    gx = _to(gdiff, x) if g.needs(0) else None
    gy = _to(_neg(gdiff), y) if g.needs(1) else None
    return gx, gy
