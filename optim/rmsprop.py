"""RMSProp over the ``rmsprop`` op."""

from __future__ import annotations

from optim.optimizer import Optimizer, check_hyper


class RMSProp(Optimizer):
    """RMSProp as ``torch.optim.RMSprop``: divide by a running RMS of the gradients.

    Args:
        lr: learning rate (a float or a schedule).
        alpha: decay of the running mean of squared gradients.
        eps: added to the root (outside it, as PyTorch).
        momentum: momentum of the scaled step (state Moment only when > 0).
        centered: subtract the squared running mean of the gradients (state MeanGrad).
        weight_decay: L2 coefficient added to the gradient, or an ``optim.L1Decay``/``L2Decay``.
        grad_clip: a gradient-clipping object from ``optim.clip``.

    >>> import numpy as np, tape, optim
    >>> w = tape.Variable(np.array([1.0]), requires_grad=True)
    >>> tape.backward((w * 2.0).sum())
    >>> optim.RMSProp(lr=0.01, alpha=0.75, eps=0.0)([w])
    >>> w.numpy()  # g / sqrt(0.25 * g**2) = 2
    array([0.98])
    """

    op_type = "rmsprop"
    hyper = ("alpha", "eps", "momentum", "centered")

    def __init__(
        self,
        lr=0.01,
        alpha=0.99,
        eps=1e-8,
        momentum=0.0,
        centered=False,
        weight_decay=0.0,
        grad_clip=None,
    ):
        super().__init__(lr, weight_decay, grad_clip)
        self.alpha = check_hyper(
            self, "alpha", alpha, check=lambda v: 0.0 <= v < 1.0, rule="0 <= alpha < 1"
        )
        self.eps = check_hyper(self, "eps", eps)
        self.momentum = check_hyper(self, "momentum", momentum)
        self.centered = bool(centered)

    def _slots(self, param):
        like = (param.shape, param.dtype, 0.0)
        slots = {"MeanSquare": like}
        if self.momentum > 0:
            slots["Moment"] = like
        if self.centered:
            slots["MeanGrad"] = like
        return slots

    def _attrs(self):
        return {
            "decay": self.alpha,
            "epsilon": self.eps,
            "momentum": self.momentum,
            "centered": self.centered,
        }


RMSprop = RMSProp  # PyTorch's spelling
