"""Scaled dot-product attention, composed from registered ops (PyTorch's semantics).

``scaled_dot_product_attention`` records two batched ``matmul``s, a ``scale``, a ``softmax``
and, where asked, a mask (``where`` or ``elementwise_add``) and a ``dropout``. It is composed
rather than one fused op: the work is in the two products and the softmax, which are already
single ops with their own fused gradients, so a fused op would save only the recording of the
three or four small ops around them (about 10 us each, measured here: ~0.1 ms a call, against
~60 ms for a training step of examples/char_transformer.py) and would need a gradient op and a
second-order gradient of its own; composed, gradients of any order and lazy mode's elementwise
fusion come for free.
"""

from __future__ import annotations

import math

import numpy as np

from ops.compose import NO_ATTRS
from ops.registry import REGISTRY
from ops.xp import array_module, default_module
from tape.constants import as_variable, constant
from tape.errors import DTypeError, ShapeError, user_location
from tape.tape import apply
from tape.variable import Variable


def _op(name, *args, **attrs):
    defn = REGISTRY[name]
    return apply(defn, args, defn.check_attrs(attrs) if attrs else defn.defaults)


def _check_qkv(q, k, v):
    for slot, var in (("query", q), ("key", k), ("value", v)):
        if var.dtype.kind != "f":
            raise DTypeError(
                "scaled_dot_product_attention",
                f"{slot} must be floating point",
                expected="float32 or float64",
                actual=str(var.dtype),
                location=user_location(),
            )
        if len(var.shape) < 2:
            raise ShapeError(
                "scaled_dot_product_attention",
                f"{slot} needs a sequence and a feature axis",
                expected=f"{slot} (..., length, features)",
                actual=f"{slot}.shape={var.shape}",
                location=user_location(),
            )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(
            "scaled_dot_product_attention",
            "query, key and value do not fit together",
            expected="query (..., L, E), key (..., S, E), value (..., S, Ev)",
            actual=f"query.shape={q.shape}, key.shape={k.shape}, value.shape={v.shape}",
            location=user_location(),
        )


def causal_mask(length, source_length, like=None):
    """A constant boolean (L, S) mask, True on and below the diagonal (PyTorch's ``is_causal``:
    position i attends to positions j <= i, aligned at the top left)."""
    value = like._value if like is not None else None
    xp = array_module(value) if value is not None else default_module()
    return Variable(xp.asarray(np.tril(np.ones((length, source_length), dtype=bool))))


def _fully_masked_rows(mask, allowed):
    """Whether some row of the mask may allow nothing: True unless the mask's value is known
    and every row allows at least one position (an eager or constant mask)."""
    value = mask._value
    if value is None or mask._pending is not None:
        return True
    xp = array_module(value)
    if allowed:
        return bool(xp.any(~xp.any(value, axis=-1)))
    return bool(xp.any(xp.all(xp.isneginf(value), axis=-1)))


def _apply_mask(scores, mask):
    """(masked scores, a 0/1 factor zeroing rows that attend to nothing, or None).

    A boolean mask keeps the scores where True; a float mask is added. Positions left at -inf
    are set to the dtype's lowest finite value, so a row with nothing to attend to softmaxes
    to a finite uniform row instead of NaN, and the factor then zeroes it (PyTorch's output and
    gradient for such rows are 0 too).
    """
    if mask.dtype.kind == "b":
        allowed, fully = mask, _fully_masked_rows(mask, allowed=True)
    else:
        if mask.dtype != scores.dtype:
            mask = _op("cast", mask, out_dtype=scores.dtype.name)
        scores = _op("elementwise_add", scores, mask)
        fully = _fully_masked_rows(mask, allowed=False)
        if not fully:
            return scores, None
        allowed = _op("not_equal", mask, constant(-math.inf, mask))
    lowest = constant(float(np.finfo(scores.dtype).min), scores)
    scores = apply(REGISTRY["where"], (allowed, scores, lowest), NO_ATTRS)
    if not fully:
        return scores, None
    attends = _op("cast", allowed, out_dtype=scores.dtype.name)
    return scores, _op("reduce_max", attends, axis=[-1], keepdim=True)


def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """(output, attention weights): what ``scaled_dot_product_attention`` computes, with the
    weights (after dropout) that ``layers.MultiheadAttention`` can return."""
    q, k, v = (as_variable(t) for t in (query, key, value))
    _check_qkv(q, k, v)
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    factor = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = _op("matmul", q, k, transpose_x=False, transpose_y=True)
    scores = _op("scale", scores, scale=factor)
    mask = causal_mask(q.shape[-2], k.shape[-2], q) if is_causal else attn_mask
    keep = None
    if mask is not None:
        scores, keep = _apply_mask(scores, as_variable(mask))
    weights = _op("softmax", scores, axis=-1)
    if keep is not None:
        weights = _op("elementwise_mul", weights, keep)
    if dropout_p > 0.0:
        weights, _ = _op("dropout", weights, dropout_prob=float(dropout_p))
    return _op("matmul", weights, v), weights


def scaled_dot_product_attention(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None
):
    """softmax(query @ key^T * scale + mask) @ value, as ``torch.nn.functional.
    scaled_dot_product_attention``.

    Args:
        query, key, value: (..., L, E), (..., S, E) and (..., S, Ev); leading axes broadcast.
        attn_mask: None; a boolean mask broadcasting to (..., L, S), True where a query may
            attend; or a float mask added to the scores (-inf forbids). A row that may attend to
            nothing gives 0 (and gradient 0), as PyTorch.
        dropout_p: dropout on the attention weights (a ``dropout`` op, so ``tape.seed`` makes
            it reproducible); applied whenever it is > 0, as in the functional PyTorch call.
        is_causal: attend only to positions j <= i (a lower-triangular mask); not together
            with ``attn_mask``.
        scale: the factor on the scores; default 1 / sqrt(E).

    Returns the (..., L, Ev) output. Gradients flow to query, key, value and a float mask.

    >>> import numpy as np, tape, ops
    >>> q = tape.Variable(np.ones((1, 2, 4), np.float32))
    >>> v = tape.Variable(np.arange(8, dtype=np.float32).reshape(1, 2, 4))
    >>> ops.scaled_dot_product_attention(q, q, v, is_causal=True).numpy()
    array([[[0., 1., 2., 3.],
            [2., 3., 4., 5.]]], dtype=float32)
    """
    return attention(query, key, value, attn_mask, dropout_p, is_causal, scale)[0]


__all__ = ["scaled_dot_product_attention", "causal_mask"]
