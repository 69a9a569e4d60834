"""Stochastic gradient descent (the seed's SGD)."""

from __future__ import annotations

import numpy as np

import tape
from ops.registry import REGISTRY


class SGD:
    """``param -= lr * grad`` for every parameter with a gradient; consumes the gradients.

    >>> import numpy as np, tape, optim
    >>> w = tape.Variable(np.ones(2, np.float32), requires_grad=True)
    >>> tape.backward((w * w).sum())
    >>> optim.SGD(lr=0.5)([w])
    >>> w.numpy(), w.grad()
    (array([0., 0.], dtype=float32), None)
    """

    def __init__(self, lr):
        self.lr = float(lr)

    def __call__(self, params):
        sgd = REGISTRY["sgd"]
        with tape.no_grad():
            for param in params:
                grad = param.grad()
                if grad is None:
                    continue
                lr = tape.Variable(np.asarray(self.lr, dtype=param.dtype))
                sgd(param, grad, lr)
                param.clear_grad()
