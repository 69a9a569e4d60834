"""Vector p-norms over axes: ``norm`` (PyTorch's ``torch.norm`` / ``linalg.vector_norm``).

The gradient follows PyTorch's formulas case by case (p = 1, 2, inf, below 1, between 1 and 2,
above 2), including its values where X or the norm is zero, composed from registered ops so it
differentiates again. Masked divisors are made 1 before dividing, so the branch a mask drops
gets no NaN gradient either.
"""

from __future__ import annotations

import math

import numpy as np

from ops.infer import kernel_axes, normalize_axes
from ops.reduce import keep_dims, reduced_shape
from ops.registry import REGISTRY, Attr, register
from tape.constants import constant
from tape.errors import DTypeError, ShapeError
from tape.tape import apply


def _valid_order(value):
    if value == "fro":
        return True
    return (
        isinstance(value, (int, float, np.number))
        and not isinstance(value, bool)
        and not (math.isnan(value))
    )


def order(attrs):
    """The attribute ``p`` as a float ('fro' is 2: the 2-norm of the flattened axes)."""
    return 2.0 if attrs["p"] == "fro" else float(attrs["p"])


def _infer_norm(attrs, x):
    if x.dtype.kind != "f":
        raise DTypeError(
            None,
            "input X must be real floating point",
            expected="float16, float32 or float64",
            actual=str(x.dtype),
        )
    axes = normalize_axes(None, attrs["axis"], len(x.shape))
    p = order(attrs)
    if (p < 0 or math.isinf(p)) and 0 in [x.shape[i] for i in axes]:
        raise ShapeError(
            None,
            f"cannot take the {p} norm over an empty axis",
            expected="every reduced axis has extent > 0 (or p >= 0 and finite)",
            actual=f"X.shape={x.shape}, axis={attrs['axis']}",
        )
    return reduced_shape(x.shape, axes, attrs["keepdim"]), x.dtype


@register(
    "norm",
    inputs=("X",),
    attrs={
        "p": Attr("any", "fro", check=_valid_order, rule="'fro' or a number (inf and -inf too)"),
        "axis": Attr("axes", None),
        "keepdim": Attr("bool", False),
    },
    infer=_infer_norm,
)
def norm(xp, attrs, x):
    """Out = (sum |X|^p)^(1/p) over ``axis`` (all when None); p = inf: max |X|, -inf: min |X|,
    0: the count of nonzeros, 'fro' (the default): p = 2 over the axes, as ``torch.norm``.

    dX, with N = Out and G = dOut broadcast back (PyTorch's cases): p = 0: none; p = 1:
    sign(X) G; p = 2: X / N * G (0 where N = 0); p = +-inf: sign(X) G shared equally among the
    entries with |X| = N (or NaN); p < 1: sign(X) |X|^(p-1) N^(1-p) G (0 where X = 0);
    1 < p < 2: sign(X) |X|^(p-1) / N^(p-1) G and p > 2: X |X|^(p-2) / N^(p-1) G (0 where N = 0).

    >>> import numpy as np, tape, ops
    >>> ops.norm(tape.Variable(np.array([[3.0, 4.0], [1.0, -1.0]])), p=1, axis=1).numpy()
    array([7., 2.])
    """
    p, axes, keepdim = order(attrs), kernel_axes(attrs["axis"], x.ndim), attrs["keepdim"]
    magnitude = xp.abs(x)
    if p == math.inf:
        return magnitude.max(axis=axes, keepdims=keepdim)
    if p == -math.inf:
        return magnitude.min(axis=axes, keepdims=keepdim)
    if p == 0:
        return (x != 0).sum(axis=axes, keepdims=keepdim, dtype=x.dtype)
    if p == 1:
        return magnitude.sum(axis=axes, keepdims=keepdim)
    if p == 2:
        return xp.sqrt((magnitude * magnitude).sum(axis=axes, keepdims=keepdim))
    with np.errstate(divide="ignore"):  # |0|^p = inf for p < 0, whose norm is then 0
        return ((magnitude**p).sum(axis=axes, keepdims=keepdim)) ** (1.0 / p)


def _op(name, *args, **attrs):
    return apply(REGISTRY[name], args, attrs)


def _masked_where(condition, value_fn, divisor):
    """where(condition, 0, value_fn(divisor)) with the divisor made 1 where condition holds."""
    safe = _op("where", condition, constant(1, divisor), divisor)
    return _op("where", condition, constant(0, divisor), value_fn(safe))


@norm.gradient
def _(g):
    (x,), (out,), (gout,) = g.inputs, g.outputs, g.gouts
    p = order(g.attrs)
    if p == 0:
        return (None,)
    out, gout = keep_dims(out, x, g.attrs), keep_dims(gout, x, g.attrs)
    sign = _op("sign", x)
    if p == 1:
        return (sign * gout,)
    zero = constant(0, x)
    if p == 2:
        at_zero = _op("equal", out, zero, axis=-1)
        return (gout * _masked_where(at_zero, lambda n: x / n, out),)
    magnitude = _op("abs", x)
    if math.isinf(p):
        # The entries attaining the norm, or NaN (PyTorch's mask): never both, so a sum.
        hits = [
            _op("equal", magnitude, out, axis=-1),
            _op("not_equal", magnitude, magnitude, axis=-1),
        ]
        hits = _op("cast", hits[0], out_dtype=x.dtype.name) + _op(
            "cast", hits[1], out_dtype=x.dtype.name
        )
        count = _op("reduce_sum", hits, axis=g.attrs["axis"], keepdim=True)
        return (sign * (gout / count) * hits,)
    x_zero = _op("equal", x, zero, axis=-1)
    if p < 1:
        scaled = _masked_where(x_zero, lambda a: a ** (p - 1.0), magnitude)
        return (sign * scaled * gout * out ** (1.0 - p),)
    scaled = sign * magnitude ** (p - 1.0) if p < 2 else x * magnitude ** (p - 2.0)
    norm_zero = _op("equal", out, zero, axis=-1)
    return (scaled * _masked_where(norm_zero, lambda n: gout / n ** (p - 1.0), out),)
