"""SGD (the seed's optimizer) and SGD with momentum, over the ``sgd`` and ``momentum`` ops."""

from __future__ import annotations

from optim.optimizer import Optimizer, check_hyper
from tape.errors import AttrError


class SGD(Optimizer):
    """``param -= lr * grad``; with ``momentum`` > 0, PyTorch's SGD with (Nesterov) momentum.

    Args:
        lr: learning rate (a float or a schedule; 1e-3 by default, as PyTorch).
        momentum: velocity decay mu; 0 records plain ``sgd`` ops, > 0 ``momentum`` ops.
        nesterov: Nesterov momentum (needs momentum > 0).
        weight_decay: L2 coefficient added to the gradient, or an ``optim.L1Decay``/``L2Decay``.
        grad_clip: a gradient-clipping object from ``optim.clip``.

    >>> import numpy as np, tape, optim
    >>> w = tape.Variable(np.ones(2, np.float32), requires_grad=True)
    >>> tape.backward((w * w).sum())
    >>> optim.SGD(lr=0.5)([w])
    >>> w.numpy(), w.grad
    (array([0., 0.], dtype=float32), None)
    """

    hyper = ("momentum", "nesterov")

    def __init__(self, lr=1e-3, momentum=0.0, nesterov=False, weight_decay=0.0, grad_clip=None):
        super().__init__(lr, weight_decay, grad_clip)
        self.momentum = check_hyper(self, "momentum", momentum)
        self.nesterov = bool(nesterov)
        if self.nesterov and self.momentum == 0:
            raise AttrError(
                None,
                f"{type(self).__name__}: Nesterov momentum needs momentum > 0",
                actual="momentum=0",
            )

    @property
    def op_type(self):
        return "momentum" if self.momentum > 0 else "sgd"

    def _slots(self, param):
        if self.momentum > 0:
            return {"Velocity": (param.shape, param.dtype, 0.0)}
        return {}

    def _attrs(self):
        if self.momentum > 0:
            return {"mu": self.momentum, "use_nesterov": self.nesterov}
        return {}


class Momentum(SGD):
    """SGD with momentum (Paddle's name): ``v = momentum * v + grad; param -= lr * v``.

    >>> import numpy as np, tape, optim
    >>> w = tape.Variable(np.array([1.0]), requires_grad=True)
    >>> opt = optim.Momentum(lr=0.1, momentum=0.5)
    >>> for _ in range(2):
    ...     tape.backward((w * 1.0).sum())
    ...     opt([w])
    >>> w.numpy()  # 1 - 0.1 * 1 - 0.1 * (0.5 + 1)
    array([0.75])
    """

    def __init__(self, lr=1e-3, momentum=0.9, nesterov=False, weight_decay=0.0, grad_clip=None):
        super().__init__(lr, momentum, nesterov, weight_decay, grad_clip)
