"""Dropout: zeroes random elements while training (op ``dropout``); the identity in eval mode."""

from __future__ import annotations

from layers.function import Function
from ops.registry import REGISTRY
from tape.tape import apply


class Dropout(Function):
    """Zeroes each element with probability ``p`` and scales the rest by 1/(1-p) (PyTorch's
    inverted dropout), drawing from the generator ``tape.seed`` re-seeds. After
    ``layer.eval()`` it returns its input unchanged and records nothing.

    >>> import numpy as np, tape, layers
    >>> drop = layers.Dropout(0.5)
    >>> x = tape.Variable(np.ones(6, np.float32))
    >>> sorted(set(drop(x).numpy().tolist())) in ([0.0, 2.0], [0.0], [2.0])
    True
    >>> drop.eval()(x) is x
    True
    """

    def __init__(self, p=0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be between 0 and 1, got {p}")
        self.p = float(p)
        if self.p < 1.0:
            self._attrs = _DROPOUT.check_attrs({"dropout_prob": self.p})

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        if self.p == 1.0:  # everything dropped; the op's 1/(1-p) scale is undefined here
            return x * 0.0
        out, _mask = apply(_DROPOUT, (x,), self._attrs)
        return out

    def __repr__(self):
        return f"Dropout(p={self.p})"


_DROPOUT = REGISTRY["dropout"]
