"""Optimizer update ops: one op per parameter, updating it in place (ParamOut is Param)."""

from __future__ import annotations

from ops.registry import register
from tape.errors import ShapeError


def _infer_sgd(attrs, param, grad, lr):
    if grad.shape != param.shape:
        raise ShapeError(None, "Grad must have Param's shape",
                         expected=str(param.shape), actual=str(grad.shape))
    if lr.shape not in ((), (1,)):
        raise ShapeError(None, "LearningRate must hold one value", actual=str(lr.shape))
    return param.shape, param.dtype


@register("sgd", inputs=("Param", "Grad", "LearningRate"), outputs=("ParamOut",),
          infer=_infer_sgd, differentiable=False, side_effect=True,
          inplace={"ParamOut": "Param"})
def sgd(xp, attrs, param, grad, lr):
    """ParamOut = Param - LearningRate * Grad, written into Param's buffer (no gradient)."""
    step = lr.reshape(()).astype(param.dtype, copy=False) * grad
    return xp.subtract(param, step, out=param)
