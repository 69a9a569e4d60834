"""Adam and AdamW over the ``adam`` and ``adamw`` ops."""

from __future__ import annotations

import numpy as np

from optim.optimizer import Optimizer, check_hyper


def _betas(optimizer, betas):
    beta1, beta2 = betas
    check = dict(check=lambda v: 0.0 <= v < 1.0)
    return (
        check_hyper(optimizer, "betas[0]", beta1, rule="0 <= betas[0] < 1", **check),
        check_hyper(optimizer, "betas[1]", beta2, rule="0 <= betas[1] < 1", **check),
    )


class Adam(Optimizer):
    """Adam (PyTorch's update: bias-corrected moments, eps added after the root).

    Args:
        lr: learning rate (a float or a schedule).
        betas: decay rates of the first and second moments.
        eps: added to the denominator.
        weight_decay: L2 coefficient added to the gradient (coupled, as ``torch.optim.Adam``),
            or an ``optim.L1Decay``/``L2Decay``.
        grad_clip: a gradient-clipping object from ``optim.clip``.

    State per parameter: Moment1, Moment2 (the parameter's shape and dtype) and Beta1Pow,
    Beta2Pow (beta**t in float64, as PyTorch computes the bias corrections in double).

    >>> import numpy as np, tape, optim
    >>> w = tape.Variable(np.array([1.0, -1.0], np.float32), requires_grad=True)
    >>> tape.backward((w * w).sum())
    >>> optim.Adam(lr=0.1)([w])
    >>> w.numpy().round(6)  # the first step moves each weight by lr against its gradient
    array([ 0.9, -0.9], dtype=float32)
    """

    op_type = "adam"
    hyper = ("betas", "eps")

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, grad_clip=None):
        super().__init__(lr, weight_decay, grad_clip)
        self.betas = _betas(self, betas)
        self.eps = check_hyper(self, "eps", eps)

    def _slots(self, param):
        like = (param.shape, param.dtype, 0.0)
        float64 = np.dtype(np.float64)
        return {
            "Moment1": like,
            "Moment2": like,
            "Beta1Pow": ((1,), float64, self.betas[0]),
            "Beta2Pow": ((1,), float64, self.betas[1]),
        }

    def _attrs(self):
        return {"beta1": self.betas[0], "beta2": self.betas[1], "epsilon": self.eps}


class AdamW(Adam):
    """Adam with decoupled weight decay: ``param *= 1 - lr * weight_decay`` before each Adam
    step (``torch.optim.AdamW``); same arguments as Adam, ``weight_decay`` a float.

    >>> import numpy as np, tape, optim
    >>> w = tape.Variable(np.array([2.0]), requires_grad=True)
    >>> tape.backward((w * 0.0).sum())
    >>> optim.AdamW(lr=0.1, weight_decay=0.5)([w])  # zero gradient: only the decay acts
    >>> w.numpy()
    array([1.9])
    """

    op_type = "adamw"
    hyper = ("betas", "eps", "weight_decay")

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, grad_clip=None):
        super().__init__(lr, betas, eps, 0.0, grad_clip)
        self.weight_decay = check_hyper(self, "weight_decay", weight_decay)

    def _attrs(self):
        return {**super()._attrs(), "coeff": self.weight_decay}
