"""Weight-decay regularizers: ops added to each gradient before the update (Paddle's
``append_regularization_ops``)."""

from __future__ import annotations

import numbers

from tape.errors import AttrError


class WeightDecayRegularizer:
    """Base: ``regularized(param, grad)`` returns ``grad`` plus this penalty's gradient.

    Args:
        coeff: the penalty's weight (>= 0).
    """

    def __init__(self, coeff=0.0):
        if isinstance(coeff, bool) or not isinstance(coeff, numbers.Real) or not coeff >= 0:
            raise AttrError(
                None,
                f"{type(self).__name__}: invalid 'coeff'",
                expected="a number >= 0",
                actual=repr(coeff),
            )
        self.coeff = float(coeff)

    def regularized(self, param, grad):
        raise NotImplementedError

    def state_dict(self):
        return {"type": type(self).__name__, "coeff": self.coeff}

    def __repr__(self):
        return f"{type(self).__name__}(coeff={self.coeff!r})"


class L2Decay(WeightDecayRegularizer):
    """Penalty ``coeff / 2 * ||param||^2``: Grad + coeff * Param (PyTorch's ``weight_decay``).

    >>> import numpy as np, tape, optim
    >>> p = tape.Variable(np.array([1.0, -2.0], np.float32))
    >>> g = tape.Variable(np.zeros(2, np.float32))
    >>> optim.L2Decay(0.5).regularized(p, g).numpy()
    array([ 0.5, -1. ], dtype=float32)
    """

    def regularized(self, param, grad):
        from ops import scale, sum

        return sum([grad, scale(param, scale=self.coeff)])


class L1Decay(WeightDecayRegularizer):
    """Penalty ``coeff * ||param||_1``: Grad + coeff * sign(Param).

    >>> import numpy as np, tape, optim
    >>> p = tape.Variable(np.array([3.0, -2.0, 0.0], np.float32))
    >>> g = tape.Variable(np.ones(3, np.float32))
    >>> optim.L1Decay(0.1).regularized(p, g).numpy()
    array([1.1, 0.9, 1. ], dtype=float32)
    """

    def regularized(self, param, grad):
        from ops import scale, sign, sum

        return sum([grad, scale(sign(param), scale=self.coeff)])


_TYPES = {"L1Decay": L1Decay, "L2Decay": L2Decay}


def as_regularizer(weight_decay):
    """None for no decay; a float becomes L2Decay (PyTorch's coupled ``weight_decay``)."""
    if weight_decay is None or isinstance(weight_decay, WeightDecayRegularizer):
        return weight_decay if weight_decay is None or weight_decay.coeff else None
    if isinstance(weight_decay, dict):  # a regularizer's state_dict
        try:
            return as_regularizer(_TYPES[weight_decay["type"]](weight_decay["coeff"]))
        except (KeyError, TypeError):
            raise ValueError(f"not a regularizer's state: {weight_decay!r}") from None
    return as_regularizer(L2Decay(weight_decay))


def regularize(params_grads, regularizer):
    """(param, grad) pairs with the regularizer's term added to each gradient."""
    if regularizer is None:
        return params_grads
    return [(param, regularizer.regularized(param, grad)) for param, grad in params_grads]
