"""MultiheadAttention with PyTorch's arguments, masks and parameter layout, on the composed
``ops.attention`` (scaled dot-product attention per head).

Parameters and how a ``torch.nn.MultiheadAttention`` state dict maps onto ``named_params()``:

- ``in_proj_weight`` (3E, E) and ``in_proj_bias`` (3E,): as PyTorch, rows [q; k; v] stacked, so
  they copy as they are (the projection is ``x @ in_proj_weight^T``).
- ``out_proj.weight``: fluidtape's ``Linear`` keeps its weight as (in, out), so it holds
  PyTorch's ``out_proj.weight`` (out, in) **transposed**; ``out_proj.bias`` copies as it is.
"""

from __future__ import annotations

import math

from layers import init
from layers.arguments import size
from layers.function import Function
from layers.linear import Linear
from ops.attention import attention, causal_mask
from ops.registry import REGISTRY
from tape.constants import as_variable, constant
from tape.errors import ShapeError, user_location
from tape.tape import apply

_MATMUL = REGISTRY["matmul"]
_TRANSPOSE_Y = _MATMUL.check_attrs({"transpose_y": True})


def _op(name, *args, **attrs):
    defn = REGISTRY[name]
    return apply(defn, args, defn.check_attrs(attrs) if attrs else defn.defaults)


def _additive(mask, like):
    """A PyTorch-style MultiheadAttention mask as an additive float mask in ``like``'s dtype:
    boolean True (= may not attend) becomes -inf, False 0; a float mask is cast."""
    mask = as_variable(mask)
    if mask.dtype.kind == "b":
        blocked, free = constant(-math.inf, like), constant(0.0, like)
        return apply(REGISTRY["where"], (mask, blocked, free), {})
    return mask if mask.dtype == like.dtype else _op("cast", mask, out_dtype=like.dtype.name)


class MultiheadAttention(Function):
    """Multi-head attention as ``torch.nn.MultiheadAttention(embed_dim, num_heads, dropout,
    bias, batch_first)``: the query, key and value are projected by ``in_proj_weight``, split
    into ``num_heads`` heads of embed_dim / num_heads features, attended per head
    (softmax(q k^T / sqrt(head_dim) + mask) v) and joined by ``out_proj``.

    ``mha(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False) -> (output, weights or None)``.

    - Shapes: (L, N, E) query and (S, N, E) key/value, or (N, L, E) / (N, S, E) with
      ``batch_first``, or unbatched (L, E) / (S, E). Output as the query.
    - ``attn_mask`` (L, S) or (N * num_heads, L, S): boolean True where a query may NOT attend
      (PyTorch's convention here, the opposite of scaled_dot_product_attention's), or a float
      mask added to the scores. ``key_padding_mask`` (N, S): True marks padding keys.
      ``is_causal`` without ``attn_mask`` applies the causal mask (PyTorch requires the mask
      and treats is_causal as a hint; here the mask is built for you).
    - ``weights``: (N, L, S) averaged over heads, or (N, num_heads, L, S), taken after dropout
      (as PyTorch). A query whose every key is masked gets 0 output and weights (PyTorch's
      need_weights path gives NaN there).
    - dropout applies to the attention weights in training mode only.

    >>> import numpy as np, tape, layers
    >>> mha = layers.MultiheadAttention(8, 2, batch_first=True)
    >>> x = tape.Variable(np.ones((3, 5, 8), np.float32))
    >>> out, weights = mha(x, x, x)
    >>> out.shape, weights.shape
    ((3, 5, 8), (3, 5, 5))
    >>> [name for name, _ in mha.named_params()]
    ['in_proj_weight', 'in_proj_bias', 'out_proj.weight', 'out_proj.bias']
    """

    def __init__(
        self, embed_dim, num_heads, dropout=0.0, bias=True, batch_first=False, dtype="float32"
    ):
        super().__init__()
        self.embed_dim = size(embed_dim, "embed_dim")
        self.num_heads = size(num_heads, "num_heads")
        if self.num_heads < 1 or self.embed_dim % self.num_heads:
            raise ValueError(
                f"embed_dim ({self.embed_dim}) must be divisible by num_heads ({self.num_heads})"
            )
        self.head_dim = self.embed_dim // self.num_heads
        self.dropout, self.batch_first = float(dropout), bool(batch_first)
        width = 3 * self.embed_dim
        # PyTorch: xavier_uniform on (3E, E), zero biases, out_proj weight as a Linear's.
        bound = math.sqrt(6.0 / (self.embed_dim + width))
        self.in_proj_weight = self.create_parameter(
            (width, self.embed_dim), init.uniform(-bound, bound), dtype, name="in_proj_weight"
        )
        self.in_proj_bias = None
        if bias:
            self.in_proj_bias = self.create_parameter(
                (width,), init.zeros(), dtype, name="in_proj_bias"
            )
        self.out_proj = Linear(
            self.embed_dim, self.embed_dim, bias=bias, bias_init=init.zeros(), dtype=dtype
        )

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights=True,
        attn_mask=None,
        average_attn_weights=True,
        is_causal=False,
    ):
        unbatched = len(query.shape) == 2
        q_in, k_in, v_in = (self._batch_major(t, unbatched) for t in (query, key, value))
        batch, length, source = q_in.shape[0], q_in.shape[1], k_in.shape[1]
        q, k, v = self._project(q_in, k_in, v_in, query is key and key is value)
        causal = is_causal and attn_mask is None and key_padding_mask is None
        mask = None
        if not causal:
            mask = self._mask(attn_mask, key_padding_mask, is_causal, q, batch, length, source)
        dropout = self.dropout if self.training else 0.0
        out, weights = attention(q, k, v, mask, dropout_p=dropout, is_causal=causal)
        out = _op("transpose", out, perm=(0, 2, 1, 3))
        out = self.out_proj(_op("reshape", out, shape=(batch, length, self.embed_dim)))
        out = self._output_layout(out, unbatched)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = _op("reduce_mean", weights, axis=[1])
        return out, (_op("squeeze", weights, axes=[0]) if unbatched else weights)

    def _batch_major(self, x, unbatched):
        if len(x.shape) != (2 if unbatched else 3) or x.shape[-1] != self.embed_dim:
            layout = "(N, L, E)" if self.batch_first else "(L, N, E)"
            raise ShapeError(
                "matmul",
                f"{self!r} expects query, key and value {layout} or (L, E), E = {self.embed_dim}",
                expected=f"the query's rank {2 if unbatched else 3} and last axis {self.embed_dim}",
                actual=f"shape={x.shape}",
                location=user_location(),
            )
        if unbatched:
            return _op("unsqueeze", x, axes=[0])
        return x if self.batch_first else _op("transpose", x, perm=(1, 0, 2))

    def _output_layout(self, out, unbatched):
        if unbatched:
            return _op("squeeze", out, axes=[0])
        return out if self.batch_first else _op("transpose", out, perm=(1, 0, 2))

    def _linear(self, x, weight, bias):
        """x (N, T, E) @ weight^T + bias as one 2-D product (its weight gradient is one too)."""
        batch, steps = x.shape[0], x.shape[1]
        flat = _op("reshape", x, shape=(batch * steps, x.shape[2]))
        out = apply(_MATMUL, (flat, weight), _TRANSPOSE_Y)
        if bias is not None:
            out = _op("elementwise_add", out, bias)
        return _op("reshape", out, shape=(batch, steps, out.shape[-1]))

    def _heads(self, x):
        """(N, T, E) -> (N, heads, T, head_dim)."""
        split = _op("reshape", x, shape=(x.shape[0], x.shape[1], self.num_heads, self.head_dim))
        return _op("transpose", split, perm=(0, 2, 1, 3))

    def _project(self, q, k, v, self_attention):
        if self_attention:  # one product for the three projections
            joint = self._linear(q, self.in_proj_weight, self.in_proj_bias)
            parts = _op("split", joint, num=3, axis=-1)
        else:
            weights = _op("split", self.in_proj_weight, num=3, axis=0)
            biases = [None] * 3
            if self.in_proj_bias is not None:
                biases = _op("split", self.in_proj_bias, num=3, axis=0)
            parts = [self._linear(x, w, b) for x, w, b in zip((q, k, v), weights, biases)]
        return tuple(self._heads(part) for part in parts)

    def _mask(self, attn_mask, key_padding_mask, is_causal, like, batch, length, source):
        """One additive float mask broadcasting to (N, heads, L, S), or None."""
        mask = None
        if attn_mask is None and is_causal:
            allowed = causal_mask(length, source, like)
            free, blocked = constant(0.0, like), constant(-math.inf, like)
            mask = apply(REGISTRY["where"], (allowed, free, blocked), {})
        if attn_mask is not None:
            mask = _additive(attn_mask, like)
            if len(mask.shape) == 3:
                shape = (batch, self.num_heads, length, source)
                mask = _op("reshape", mask, shape=shape)
        if key_padding_mask is not None:
            padding = _additive(key_padding_mask, like)
            padding = _op("reshape", padding, shape=(batch, 1, 1, source))
            mask = padding if mask is None else _op("elementwise_add", mask, padding)
        return mask

    def __repr__(self):
        return (
            f"MultiheadAttention({self.embed_dim}, {self.num_heads}, dropout={self.dropout}, "
            f"batch_first={self.batch_first})"
        )


__all__ = ["MultiheadAttention"]
