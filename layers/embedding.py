"""Embedding: a table of vectors looked up by integer id (op ``lookup_table``)."""

from __future__ import annotations

import numpy as np

from layers import init
from layers.arguments import size
from layers.function import Function
from ops.registry import REGISTRY
from tape.tape import apply
from tape.variable import Variable


class Embedding(Function):
    """``weight[ids]`` for integer ``ids`` of any shape; ``weight`` is (num_embeddings, dim).

    Args:
        num_embeddings, embedding_dim: the table's rows and row length.
        padding_idx: a row (negative counts from the end) that is initialised to zeros and never
            receives a gradient, as in PyTorch; None for none.
        weight_init: the initializer; default N(0, 1) as in PyTorch.
        dtype: the table's dtype.

    >>> import numpy as np, tape, layers
    >>> emb = layers.Embedding(10, 3, padding_idx=0)
    >>> out = emb(np.array([[1, 0], [4, 4]]))
    >>> out.shape, out.numpy()[0, 1].tolist()
    ((2, 2, 3), [0.0, 0.0, 0.0])
    """

    def __init__(
        self, num_embeddings, embedding_dim, padding_idx=None, weight_init=None, dtype="float32"
    ):
        super().__init__()
        self.num_embeddings = size(num_embeddings, "num_embeddings")
        self.embedding_dim = size(embedding_dim, "embedding_dim")
        if padding_idx is not None:
            if not -self.num_embeddings <= padding_idx < self.num_embeddings:
                raise ValueError(
                    f"padding_idx must be within num_embeddings "
                    f"({self.num_embeddings}), got {padding_idx}"
                )
            padding_idx %= self.num_embeddings
        self.padding_idx = padding_idx
        self.weight = self.create_parameter(
            (self.num_embeddings, self.embedding_dim),
            self._initializer(weight_init or init.normal()),
            dtype,
            name="EmbeddingWeight",
        )
        self._attrs = {"padding_idx": -1 if padding_idx is None else padding_idx}

    def _initializer(self, weight_init):
        if self.padding_idx is None:
            return weight_init

        def with_zero_padding_row(shape, dtype):
            table = weight_init(shape, dtype)
            table = np.array(table.numpy() if isinstance(table, Variable) else table)
            table[self.padding_idx] = 0
            return table

        return with_zero_padding_row

    def forward(self, ids):
        if not isinstance(ids, Variable):
            ids = Variable(np.asarray(ids, dtype=np.int64))
        return apply(_LOOKUP, (self.weight, ids), self._attrs)

    def __repr__(self):
        padding = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"Embedding({self.num_embeddings}, {self.embedding_dim}{padding})"


_LOOKUP = REGISTRY["lookup_table"]
