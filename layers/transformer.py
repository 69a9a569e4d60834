"""TransformerEncoderLayer with PyTorch's arguments, sub-layer names and equations.

Its ``named_params()`` are PyTorch's state-dict keys in PyTorch's order:
``self_attn.in_proj_weight``, ``self_attn.in_proj_bias``, ``self_attn.out_proj.weight``,
``self_attn.out_proj.bias``, ``linear1.weight``, ``linear1.bias``, ``linear2.weight``,
``linear2.bias``, ``norm1.weight``, ``norm1.bias``, ``norm2.weight``, ``norm2.bias``. Every
``Linear`` weight (``self_attn.out_proj``, ``linear1``, ``linear2``) is (in, out), PyTorch's
transposed; everything else copies as it is.
"""

from __future__ import annotations

from layers.arguments import size
from layers.attention import MultiheadAttention
from layers.dropout import Dropout
from layers.function import Function
from layers.linear import Linear
from layers.norm import LayerNorm
from ops.registry import REGISTRY

_ACTIVATIONS = {"relu": "relu", "gelu": "gelu"}


class TransformerEncoderLayer(Function):
    """Self-attention and a feed-forward block, each with a residual connection and LayerNorm,
    as ``torch.nn.TransformerEncoderLayer``::

        norm_first=False:  x = norm1(x + sa(x));  x = norm2(x + ff(x))
        norm_first=True:   x = x + sa(norm1(x));  x = x + ff(norm2(x))
        sa(x) = dropout1(self_attn(x, x, x, mask)[0]);
        ff(x) = dropout2(linear2(dropout(activation(linear1(x)))))

    Args:
        d_model, nhead: the model width and the number of attention heads.
        dim_feedforward: the feed-forward block's hidden width.
        dropout: the probability of every dropout (and of the attention weights').
        activation: "relu", "gelu" (exact, erf-based) or a function of one Variable.
        layer_norm_eps: LayerNorm's eps.
        batch_first: (N, T, d_model) instead of (T, N, d_model).
        norm_first: pre-norm instead of post-norm.
        bias: biases in the linear layers and LayerNorms.
        dtype: the parameters' dtype.

    ``layer(src, src_mask=None, src_key_padding_mask=None, is_causal=False)``; masks as in
    ``MultiheadAttention`` (boolean True = may not attend).

    >>> import numpy as np, tape, layers
    >>> layer = layers.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    >>> layer(tape.Variable(np.ones((2, 5, 8), np.float32)), is_causal=True).shape
    (2, 5, 8)
    """

    def __init__(
        self,
        d_model,
        nhead,
        dim_feedforward=2048,
        dropout=0.1,
        activation="relu",
        layer_norm_eps=1e-5,
        batch_first=False,
        norm_first=False,
        bias=True,
        dtype="float32",
    ):
        super().__init__()
        if isinstance(activation, str) and activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be 'relu', 'gelu' or a function, got {activation!r}")
        size(dim_feedforward, "dim_feedforward")
        self.self_attn = MultiheadAttention(d_model, nhead, dropout, bias, batch_first, dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, dtype=dtype)
        if not bias:
            self.norm1.bias = self.norm2.bias = None
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self.norm_first, self.activation = bool(norm_first), activation

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        masks = (src_mask, src_key_padding_mask, is_causal)
        if self.norm_first:
            x = x + self._attention_block(self.norm1(x), *masks)
            return x + self._feed_forward_block(self.norm2(x))
        x = self.norm1(x + self._attention_block(x, *masks))
        return self.norm2(x + self._feed_forward_block(x))

    def _attention_block(self, x, attn_mask, key_padding_mask, is_causal):
        out, _ = self.self_attn(
            x,
            x,
            x,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            attn_mask=attn_mask,
            is_causal=is_causal,
        )
        return self.dropout1(out)

    def _feed_forward_block(self, x):
        hidden = self.linear1(x)
        if callable(self.activation):
            hidden = self.activation(hidden)
        else:
            hidden = REGISTRY[_ACTIVATIONS[self.activation]](hidden)
        return self.dropout2(self.linear2(self.dropout(hidden)))

    def __repr__(self):
        return (
            f"TransformerEncoderLayer({self.self_attn.embed_dim}, {self.self_attn.num_heads}, "
            f"dim_feedforward={self.linear1.out_dim}, norm_first={self.norm_first})"
        )


__all__ = ["TransformerEncoderLayer"]
