"""Embedding lookup (Paddle's ``lookup_table``) and its row scatter-add gradient op."""

from __future__ import annotations

import numpy as np

from ops import batching
from ops.compose import NUMPY_AXIS
from ops.infer import result_dtype
from ops.registry import Attr, register
from ops.xp import scatter_add
from tape.errors import DTypeError, IndexingError, ShapeError
from tape.tape import apply

_PADDING = {"padding_idx": Attr("int", -1, check=lambda v: v >= -1, rule=">= -1 (-1: none)")}


def _check_table(w, ids, padding_idx):
    if len(w.shape) != 2:
        raise ShapeError(
            None,
            "input W must be a 2-D table (num_embeddings, embedding_dim)",
            actual=f"W.shape={w.shape}",
        )
    if w.dtype.kind not in "fc":
        raise DTypeError(None, "input W must be floating point", actual=str(w.dtype))
    if ids.dtype.kind not in "iu":
        raise DTypeError(
            None,
            "input Ids must hold integer row indices",
            expected="an integer dtype",
            actual=str(ids.dtype),
        )
    rows = w.shape[0]
    if padding_idx >= rows:
        raise ShapeError(
            None,
            f"padding_idx {padding_idx} is not a row of W",
            expected=f"-1 <= padding_idx < {rows}",
            actual=str(padding_idx),
        )
    known = ids._value
    if known is not None and known.size:
        _check_ids(known, rows, IndexingError)


def _check_ids(ids, rows, error):
    if ids.size == 1:  # (one id, as a per-example model looks up: no reductions)
        low = high = int(ids.item())
    else:
        low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= rows:
        bad = low if low < 0 else high
        message = f"id {bad} is outside the table's rows [0, {rows})"
        if error is IndexingError:
            raise IndexingError(
                None, message, expected=f"0 <= Ids < {rows}", actual=f"Ids in [{low}, {high}]"
            )
        raise IndexError(message)


def _infer_lookup(attrs, w, ids):
    _check_table(w, ids, attrs["padding_idx"])
    return tuple(ids.shape) + (w.shape[1],), w.dtype


@register(
    "lookup_table",
    inputs=("W", "Ids"),
    attrs=_PADDING,
    infer=_infer_lookup,
    no_need_buffer=("W",),
    batch=batching.ROWS,
)
def lookup_table(xp, attrs, w, ids):
    """Out = W[Ids]: one row of W per id, Out.shape = Ids.shape + (embedding_dim,).

    dW = lookup_table_grad(W, Ids, dOut): each dOut row added into the row of its id; rows of
    ``padding_idx`` (-1: none) get no gradient, as in PyTorch (their forward rows are W's).
    """
    if ids.size:
        _check_ids(ids, w.shape[0], IndexError)  # lazy runs reach here with unchecked ids
    return xp.take(w, ids, axis=0)


@lookup_table.gradient
def _(g):
    w, ids = g.inputs
    return apply(lookup_table_grad, (w, ids, g.gouts[0]), g.attrs), None


def _infer_lookup_grad(attrs, w, ids, gout):
    if tuple(gout.shape) != tuple(ids.shape) + (w.shape[1],):
        raise ShapeError(
            None,
            "Out@GRAD must have the lookup's output shape",
            expected=str(tuple(ids.shape) + (w.shape[1],)),
            actual=str(gout.shape),
        )
    return w.shape, result_dtype(w, gout)


@register(
    "lookup_table_grad",
    inputs=("W", "Ids", "Out@GRAD"),
    outputs=("W@GRAD",),
    attrs=_PADDING,
    infer=_infer_lookup_grad,
    no_need_buffer=("W",),
)
def lookup_table_grad(xp, attrs, w, ids, gout):
    """W@GRAD = zeros of W's shape with row Ids[k] += Out@GRAD[k] (repeated ids accumulate),
    and the ``padding_idx`` row zero. W's values are not read.

    Linear in Out@GRAD: d(Out@GRAD) = lookup_table(dW@GRAD with the padding row zeroed, Ids).
    """
    flat_ids = ids.reshape(-1)
    gw = xp.zeros(w.shape, dtype=np.result_type(w.dtype, gout.dtype))
    rows = gout.reshape(flat_ids.size, w.shape[1]).astype(gw.dtype, copy=False)
    if flat_ids.size:
        _scatter_add_rows(gw, flat_ids, rows)
    if attrs["padding_idx"] >= 0:
        gw[attrs["padding_idx"]] = 0
    return gw


def _scatter_add_rows(out, ids, rows):
    """out[ids[k]] += rows[k] for all k, into zeros ``out``.

    Sort the ids once; ids seen once are written by one fancy assignment and only the repeated
    ones are summed with ``add.reduceat`` over their sorted segments. Measured here 2-4x faster
    than ``np.add.at`` (which pays per index) on 1k-4k ids into 10k-50k rows, uniform or Zipf.
    """
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    first = np.empty(sorted_ids.size, dtype=bool)
    first[0] = True
    np.not_equal(sorted_ids[1:], sorted_ids[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    if starts.size == ids.size:  # no repeats: a plain scatter
        out[ids] = rows
        return
    counts = np.diff(np.append(starts, ids.size))
    single = counts == 1
    out[sorted_ids[starts[single]]] = rows[order[starts[single]]]
    repeated = ~single
    members = order[np.repeat(repeated, counts)]
    offsets = np.concatenate(([0], np.cumsum(counts[repeated])[:-1]))
    out[sorted_ids[starts[repeated]]] = np.add.reduceat(rows[members], offsets, axis=0)


@lookup_table_grad.kernel_for("gpu")
def _(xp, attrs, w, ids, gout):
    # Atomic adds are the fast path on a GPU.
    gw = xp.zeros(w.shape, dtype=np.result_type(w.dtype, gout.dtype))
    scatter_add(xp, gw, ids.reshape(-1), gout.reshape(-1, w.shape[1]).astype(gw.dtype, copy=False))
    if attrs["padding_idx"] >= 0:
        gw[attrs["padding_idx"]] = 0
    return gw


@lookup_table_grad.gradient
def _(g):
    w, ids, _ = g.inputs
    (hess,) = g.gouts
    padding_idx = g.attrs["padding_idx"]
    if padding_idx >= 0:
        from ops.elementwise import elementwise_mul
        from ops.xp import array_module, default_module
        from tape.variable import Variable

        xp = array_module(ids._value) if ids._value is not None else default_module()
        keep = xp.ones((w.shape[0], 1), dtype=hess.dtype)
        keep[padding_idx] = 0
        hess = apply(elementwise_mul, (hess, Variable(keep)), NUMPY_AXIS)
    return None, None, apply(lookup_table, (hess, ids), {"padding_idx": -1})
