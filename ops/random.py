"""Random ops: uniform and Gaussian fills (parameter initializers) and dropout.

They draw from ``tape.random_state.generator(xp)``, so ``tape.seed(n)`` makes a run reproducible;
an op whose ``seed`` attribute is non-zero instead draws from a private generator seeded with it
every time it runs (Paddle's rule), so it repeats the same numbers. All are flagged random, which
keeps them in program order under the scheduler. Samples are generated directly in float32 where
numpy allows it (never drawn as float64 and cast).
"""

from __future__ import annotations

import numpy as np

from ops.compose import NUMPY_AXIS
from ops.infer import require_float
from ops.registry import Attr, register
from tape import random_state
from tape.errors import ShapeError

_FLOAT_DTYPE = Attr(
    "dtype", "float32", check=lambda v: np.dtype(v).kind == "f", rule="a floating-point dtype"
)
_SEED = Attr("int", 0)


def _generator(xp, seed):
    if seed == 0:
        return random_state.generator(xp)
    return xp.random.default_rng(seed)


def _draw(xp, attrs, shape, dtype, normal):
    """Standard uniform [0, 1) or normal samples of ``shape`` in ``dtype``, drawn natively in
    float32/float64 (numpy's generators have no float16: those are drawn in float32)."""
    gen = _generator(xp, attrs["seed"])
    native = dtype if np.dtype(dtype) in (np.float32, np.float64) else np.float32
    sample = gen.standard_normal(shape, dtype=native) if normal else gen.random(shape, dtype=native)
    return sample if native == dtype else sample.astype(dtype)


def _infer_fill(attrs):
    shape = attrs["shape"]
    if any(d < 0 for d in shape):
        raise ShapeError(
            None,
            "attribute 'shape' has a negative dimension",
            expected="dimensions >= 0",
            actual=str(shape),
        )
    return tuple(shape), np.dtype(attrs["dtype"])


@register(
    "uniform_random",
    attrs={
        "shape": Attr("ints", required=True),
        "min": Attr("float", -1.0),
        "max": Attr("float", 1.0),
        "dtype": _FLOAT_DTYPE,
        "seed": _SEED,
    },
    infer=_infer_fill,
    random=True,
    differentiable=False,
)
def uniform_random(xp, attrs):
    """Out = samples of ``shape`` uniform in [min, max) (up to rounding), as ``dtype``.

    No inputs, no gradient.
    """
    out = _draw(xp, attrs, attrs["shape"], attrs["dtype"], normal=False)
    low, high = attrs["min"], attrs["max"]
    if (low, high) != (0.0, 1.0):
        out *= high - low
        out += low
    return out


@register(
    "gaussian_random",
    attrs={
        "shape": Attr("ints", required=True),
        "mean": Attr("float", 0.0),
        "std": Attr("float", 1.0, check=lambda v: v >= 0, rule=">= 0"),
        "dtype": _FLOAT_DTYPE,
        "seed": _SEED,
    },
    infer=_infer_fill,
    random=True,
    differentiable=False,
)
def gaussian_random(xp, attrs):
    """Out = samples of ``shape`` from Normal(mean, std**2), as ``dtype``.

    No inputs, no gradient.
    """
    out = _draw(xp, attrs, attrs["shape"], attrs["dtype"], normal=True)
    if attrs["std"] != 1.0:
        out *= attrs["std"]
    if attrs["mean"] != 0.0:
        out += attrs["mean"]
    return out


def _infer_dropout(attrs, x):
    require_float(None, x)
    return (x.shape, x.dtype), (x.shape, x.dtype)


@register(
    "dropout",
    inputs=("X",),
    outputs=("Out", "Mask"),
    attrs={
        "dropout_prob": Attr("float", 0.5, check=lambda p: 0.0 <= p < 1.0, rule="0 <= p < 1"),
        "is_test": Attr("bool", False),
        "mode": Attr("str", "upscale_in_train", choices=("upscale_in_train", "downgrade_in_infer")),
        "seed": _SEED,
    },
    infer=_infer_dropout,
    random=True,
    no_need_buffer=("X",),
)
def dropout(xp, attrs, x):
    """Out = X * Mask, where Mask holds the factor each element was multiplied by.

    Training: each element is dropped with probability p = ``dropout_prob``; Mask is 0 for
    dropped elements and 1/(1-p) for kept ones in mode "upscale_in_train" (PyTorch's dropout),
    1 in "downgrade_in_infer". With ``is_test``: Out = X in "upscale_in_train" (identity) and
    X * (1-p) in "downgrade_in_infer"; Mask is that constant factor (a broadcast view).
    The functional call returns (Out, Mask).

    dX = dOut * Mask.  Mask does not depend on X: no gradient flows through it.
    """
    p, upscale = attrs["dropout_prob"], attrs["mode"] == "upscale_in_train"
    if attrs["is_test"] or p == 0.0:
        factor = 1.0 if upscale or p == 0.0 else 1.0 - p
        mask = xp.broadcast_to(xp.asarray(factor, dtype=x.dtype), x.shape)
        return (x if factor == 1.0 else x * factor), mask
    draw = _draw(xp, attrs, x.shape, x.dtype, normal=False)
    # Kept with probability 1 - p; the comparison is written into the draw's own buffer.
    mask = xp.greater_equal(draw, p, out=draw)
    if upscale:
        mask *= 1.0 / (1.0 - p)
    return x * mask, mask


@dropout.gradient
def _(g):
    from ops.elementwise import elementwise_mul
    from tape.tape import apply

    gout = g.gouts[0]
    if gout is None:
        return (None,)
    return (apply(elementwise_mul, (gout, g.outputs[1]), NUMPY_AXIS),)
