"""Adagrad over the ``adagrad`` op."""

from __future__ import annotations

from optim.optimizer import Optimizer, check_hyper


class Adagrad(Optimizer):
    """Adagrad as ``torch.optim.Adagrad``: divide by the root of the summed squared gradients.

    Args:
        lr: learning rate (a float or a schedule).
        lr_decay: the k-th update (k = 0, 1, ...) of a parameter uses lr / (1 + k * lr_decay).
        eps: added to the root (outside it).
        initial_accumulator_value: the sum's starting value.
        weight_decay: L2 coefficient added to the gradient, or an ``optim.L1Decay``/``L2Decay``.
        grad_clip: a gradient-clipping object from ``optim.clip``.

    >>> import numpy as np, tape, optim
    >>> w = tape.Variable(np.array([1.0]), requires_grad=True)
    >>> tape.backward((w * 3.0).sum())
    >>> optim.Adagrad(lr=0.1, eps=0.0)([w])
    >>> w.numpy()  # 3 / sqrt(9) = 1
    array([0.9])
    """

    op_type = "adagrad"
    hyper = ("lr_decay", "eps", "initial_accumulator_value")

    def __init__(
        self,
        lr=0.01,
        lr_decay=0.0,
        eps=1e-10,
        initial_accumulator_value=0.0,
        weight_decay=0.0,
        grad_clip=None,
    ):
        super().__init__(lr, weight_decay, grad_clip)
        self.lr_decay = check_hyper(self, "lr_decay", lr_decay)
        self.eps = check_hyper(self, "eps", eps)
        self.initial_accumulator_value = check_hyper(
            self, "initial_accumulator_value", initial_accumulator_value
        )

    def _slots(self, param):
        return {"Moment": (param.shape, param.dtype, self.initial_accumulator_value)}

    def _attrs(self):
        return {"epsilon": self.eps}

    def _rate(self, state):
        return self.lr / (1.0 + state.step * self.lr_decay)
