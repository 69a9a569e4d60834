"""Unary elementwise ops (activations and math functions) and their gradient ops.

Where a gradient is cheaper from the output (tanh, sigmoid, relu) it is a dedicated ``*_grad``
op that reads Out, so X's buffer can be freed early; those grad ops are differentiable too, so
gradients of gradients work.
"""

from __future__ import annotations

import numpy as np

from ops.infer import require_float, same_as_input
from ops.registry import Attr, register
from tape.tape import apply


def _float_same(attrs, x, *rest):
    require_float(None, x)
    return x.shape, x.dtype


@register("neg", inputs=("X",), infer=same_as_input, elementwise=True, no_need_buffer=("X",))
def neg(xp, attrs, x):
    """Out = -X.  dX = -dOut."""
    return -x


@neg.gradient
def _(g):
    return (apply(neg, (g.gouts[0],), {}),)


@register("relu", inputs=("X",), infer=same_as_input, elementwise=True, no_need_buffer=("X",))
def relu(xp, attrs, x):
    """Out = max(X, 0).  dX = dOut * (Out > 0)."""
    return xp.maximum(x, 0)


@relu.gradient
def _(g):
    return (apply(relu_grad, (g.outputs[0], g.gouts[0]), {}),)


@register("relu_grad", inputs=("Out", "Out@GRAD"), infer=lambda attrs, out, gout: (
    gout.shape, gout.dtype), elementwise=True)
def relu_grad(xp, attrs, out, gout):
    """X@GRAD = Out@GRAD * (Out > 0).  d(Out@GRAD) = dX@GRAD * (Out > 0); Out gets none."""
    return gout * (out > 0)


@relu_grad.gradient
def _(g):
    out, _ = g.inputs
    return None, apply(relu_grad, (out, g.gouts[0]), {})


@register("log", inputs=("X",), infer=_float_same, elementwise=True)
def log(xp, attrs, x):
    """Out = ln(X).  dX = dOut / X."""
    return xp.log(x)


@log.gradient
def _(g):
    from ops.elementwise import elementwise_div

    return (apply(elementwise_div, (g.gouts[0], g.inputs[0]), {"axis": -1}),)


def _infer_cast(attrs, x):
    return x.shape, np.dtype(attrs["out_dtype"])


@register("cast", inputs=("X",), attrs={"out_dtype": Attr("dtype", required=True)},
          infer=_infer_cast, elementwise=True, no_need_buffer=("X",))
def cast(xp, attrs, x):
    """Out = X converted to ``out_dtype``.  dX = dOut cast back to X's dtype."""
    return x.astype(attrs["out_dtype"], copy=False)


@cast.gradient
def _(g):
    x = g.inputs[0]
    if x.dtype.kind not in "fc":
        return (None,)
    return (apply(cast, (g.gouts[0],), {"out_dtype": x.dtype.name}),)
