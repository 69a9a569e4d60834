"""Gradient clipping, applied to (param, grad) pairs before regularization and the update
(Paddle's ``append_gradient_clip_ops``); every step is a registered op."""

from __future__ import annotations

import numbers

import numpy as np

from tape.errors import AttrError


def _number(owner, name, value, positive=False):
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or (positive and not value > 0)
    ):
        raise AttrError(
            None,
            f"{owner}: invalid '{name}'",
            expected="a number > 0" if positive else "a number",
            actual=repr(value),
        )
    return float(value)


class ClipGradByValue:
    """Clips every gradient element into [min, max].

    >>> import numpy as np, tape, optim
    >>> p, g = tape.Variable(np.zeros(3)), tape.Variable(np.array([-2.0, 0.5, 3.0]))
    >>> optim.ClipGradByValue(-1.0, 1.0)([(p, g)])[0][1].numpy()
    array([-1. ,  0.5,  1. ])
    """

    def __init__(self, min, max):  # noqa: A002  (Paddle's and numpy's names)
        self.min = _number("ClipGradByValue", "min", min)
        self.max = _number("ClipGradByValue", "max", max)
        if self.min > self.max:
            raise AttrError(
                None,
                "ClipGradByValue: min is greater than max",
                expected="min <= max",
                actual=f"min={self.min}, max={self.max}",
            )

    def __call__(self, params_grads):
        from ops import clip

        return [(p, clip(g, min=self.min, max=self.max)) for p, g in params_grads]

    def __repr__(self):
        return f"ClipGradByValue(min={self.min!r}, max={self.max!r})"


class ClipGradByNorm:
    """Rescales each gradient whose L2 norm exceeds ``max_norm`` to norm ``max_norm``.

    grad * max_norm / max(||grad||, max_norm), per tensor (Paddle's ``clip_by_norm``).

    >>> import numpy as np, tape, optim
    >>> p, g = tape.Variable(np.zeros(2)), tape.Variable(np.array([3.0, 4.0]))
    >>> optim.ClipGradByNorm(1.0)([(p, g)])[0][1].numpy()
    array([0.6, 0.8])
    """

    def __init__(self, max_norm):
        self.max_norm = _number("ClipGradByNorm", "max_norm", max_norm, positive=True)

    def __call__(self, params_grads):
        from ops import elementwise_max, reduce_sum, sqrt, square

        out = []
        for param, grad in params_grads:
            norm = sqrt(reduce_sum(square(grad)))
            out.append((param, grad * (self.max_norm / elementwise_max(norm, self.max_norm))))
        return out

    def __repr__(self):
        return f"ClipGradByNorm(max_norm={self.max_norm!r})"


class ClipGradByGlobalNorm:
    """Scales all gradients together so their joint L2 norm is at most ``max_norm``.

    Every gradient is multiplied by min(1, max_norm / (global_norm + 1e-6)), PyTorch's
    ``clip_grad_norm_``; the norm is accumulated in the widest of the gradients' dtypes.

    >>> import numpy as np, tape, optim
    >>> pairs = [(tape.Variable(np.zeros(1)), tape.Variable(np.array([3.0]))),
    ...          (tape.Variable(np.zeros(1)), tape.Variable(np.array([4.0])))]
    >>> [g.numpy().round(6) for _, g in optim.ClipGradByGlobalNorm(1.0)(pairs)]
    [array([0.6]), array([0.8])]
    """

    def __init__(self, max_norm):
        self.max_norm = _number("ClipGradByGlobalNorm", "max_norm", max_norm, positive=True)

    def __call__(self, params_grads):
        from ops import cast, elementwise_min, reduce_sum, sqrt, square, sum

        if not params_grads:
            return params_grads
        dtype = np.result_type(*[g.dtype for _, g in params_grads]).name
        squares = [reduce_sum(square(g)) for _, g in params_grads]
        squares = [s if s.dtype == dtype else cast(s, out_dtype=dtype) for s in squares]
        total = sqrt(sum(squares))
        coef = elementwise_min(self.max_norm / (total + 1e-6), 1.0)
        return [
            (p, g * (coef if g.dtype == dtype else cast(coef, out_dtype=g.dtype.name)))
            for p, g in params_grads
        ]

    def __repr__(self):
        return f"ClipGradByGlobalNorm(max_norm={self.max_norm!r})"
