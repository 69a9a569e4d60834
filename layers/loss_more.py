"""Regression and distribution losses with PyTorch's arguments: MSELoss, HuberLoss,
SmoothL1Loss and KLDivLoss, each one elementwise op (``mse``, ``huber_loss``, ``kl_div``) and a
reduction ("mean", "sum" or "none"; KLDivLoss also "batchmean")."""

from __future__ import annotations

from layers.loss import _as_variable, _Loss, _op, same_shape
from tape.errors import ShapeError, user_location


class MSELoss(_Loss):
    """(input - target)**2, reduced (op ``mse``).

    >>> import numpy as np, tape, layers
    >>> layers.MSELoss()(tape.Variable(np.array([1.0, 3.0])), np.array([0.0, 1.0])).numpy()
    array(2.5)
    """

    def forward(self, input, target):
        target = same_shape(self, input, _as_variable(target, input.dtype))
        return _op("mse")(input, target, reduction=self.reduction)


class HuberLoss(_Loss):
    """0.5 * d**2 where |d| < delta, else delta * (|d| - 0.5 * delta), d = input - target, as
    ``torch.nn.HuberLoss(reduction, delta)`` (op ``huber_loss``; target of the input's shape).

    >>> import numpy as np, tape, layers
    >>> layers.HuberLoss(delta=1.0)(tape.Variable(np.array([0.5, 3.0])), np.zeros(2)).numpy()
    array(1.3125)
    """

    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction)
        if not delta > 0:
            raise ValueError(f"delta must be > 0, got {delta}")
        self.delta = float(delta)

    def forward(self, input, target):
        target = same_shape(self, input, _as_variable(target, input.dtype))
        return self._reduce(_op("huber_loss")(input, target, delta=self.delta))

    def __repr__(self):
        return f"HuberLoss(reduction={self.reduction!r}, delta={self.delta})"


class SmoothL1Loss(_Loss):
    """0.5 * d**2 / beta where |d| < beta, else |d| - 0.5 * beta, d = input - target, as
    ``torch.nn.SmoothL1Loss(reduction, beta)``: huber_loss(delta=beta) / beta, and the L1 loss
    |d| for beta = 0.

    >>> import numpy as np, tape, layers
    >>> layers.SmoothL1Loss(beta=2.0)(tape.Variable(np.array([1.0, 3.0])), np.zeros(2)).numpy()
    array(1.125)
    """

    def __init__(self, reduction="mean", beta=1.0):
        super().__init__(reduction)
        if not beta >= 0:
            raise ValueError(f"beta must be >= 0, got {beta}")
        self.beta = float(beta)

    def forward(self, input, target):
        target = same_shape(self, input, _as_variable(target, input.dtype))
        if self.beta == 0.0:
            return self._reduce(_op("abs")(input - target))
        loss = _op("huber_loss")(input, target, delta=self.beta)
        return self._reduce(_op("scale")(loss, scale=1.0 / self.beta))

    def __repr__(self):
        return f"SmoothL1Loss(reduction={self.reduction!r}, beta={self.beta})"


class KLDivLoss(_Loss):
    """target * (log(target) - input) for log-probabilities ``input`` (0 where target is 0), or
    exp(target) * (target - input) with ``log_target``, as ``torch.nn.KLDivLoss`` (op
    ``kl_div``). ``reduction`` "batchmean" divides the sum by the batch size input.shape[0]
    (the true KL divergence per sample); "mean" divides by the number of elements, as PyTorch.

    >>> import numpy as np, tape, layers
    >>> log_q = tape.Variable(np.log(np.array([[0.5, 0.5]])))
    >>> float(layers.KLDivLoss(reduction="batchmean")(log_q, np.array([[1.0, 0.0]])).numpy())
    0.6931471805599453
    """

    def __init__(self, reduction="mean", log_target=False):
        super().__init__("sum" if reduction == "batchmean" else reduction)
        self.reduction, self.log_target = reduction, bool(log_target)

    def forward(self, input, target):
        target = same_shape(self, input, _as_variable(target, input.dtype))
        loss = _op("kl_div")(input, target, log_target=self.log_target)
        if self.reduction != "batchmean":
            return self._reduce(loss)
        if not input.shape:
            raise ShapeError(
                "kl_div",
                "reduction 'batchmean' needs a batch axis",
                expected="input (N, ...)",
                actual=f"input.shape={input.shape}",
                location=user_location(),
            )
        total = _op("reduce_sum")(loss)
        return _op("scale")(total, scale=1.0 / input.shape[0])

    def __repr__(self):
        return f"KLDivLoss(reduction={self.reduction!r}, log_target={self.log_target})"


__all__ = ["MSELoss", "HuberLoss", "SmoothL1Loss", "KLDivLoss"]
