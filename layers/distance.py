"""CosineSimilarity and PairwiseDistance: PyTorch's layers over the ops of ``ops.distance``."""

from __future__ import annotations

import math

from layers.function import Function
from ops.registry import REGISTRY
from tape.constants import as_variable


class CosineSimilarity(Function):
    """Cosine similarity of x1 and x2 along ``dim``, each norm clamped at ``eps``, as
    ``torch.nn.CosineSimilarity(dim=1, eps=1e-8)`` (op ``cosine_similarity``).

    >>> import numpy as np, tape, layers
    >>> x = tape.Variable(np.array([[1.0, 0.0], [3.0, 4.0]]))
    >>> layers.CosineSimilarity()(x, np.array([[1.0, 1.0], [3.0, 4.0]])).numpy().round(4)
    array([0.7071, 1.    ])
    """

    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim, self.eps = int(dim), float(eps)

    def forward(self, x1, x2):
        x1 = as_variable(x1)
        x2 = as_variable(x2, x1)
        return REGISTRY["cosine_similarity"](x1, x2, axis=self.dim, eps=self.eps)

    def __repr__(self):
        return f"CosineSimilarity(dim={self.dim}, eps={self.eps})"


class PairwiseDistance(Function):
    """The p-norm of x1 - x2 + eps along the last axis, as ``torch.nn.PairwiseDistance(p=2.0,
    eps=1e-6, keepdim=False)`` (op ``pairwise_distance``; p = math.inf for the max norm).

    >>> import numpy as np, tape, layers
    >>> x = tape.Variable(np.array([[3.0, 4.0]]))
    >>> layers.PairwiseDistance(eps=0.0)(x, np.zeros((1, 2))).numpy()
    array([5.])
    """

    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        super().__init__()
        self.p, self.eps, self.keepdim = float(p), float(eps), bool(keepdim)

    def forward(self, x1, x2):
        x1 = as_variable(x1)
        x2 = as_variable(x2, x1)
        return REGISTRY["pairwise_distance"](x1, x2, p=self.p, eps=self.eps, keepdim=self.keepdim)

    def __repr__(self):
        p = "math.inf" if self.p == math.inf else self.p
        return f"PairwiseDistance(p={p}, eps={self.eps}, keepdim={self.keepdim})"


__all__ = ["CosineSimilarity", "PairwiseDistance"]
