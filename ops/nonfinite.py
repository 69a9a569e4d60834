"""Non-finite values: the tests isnan, isinf, isfinite (bool, no gradient) and nan_to_num.

Integers and bools are always finite: the tests answer for them too, and nan_to_num returns them
unchanged, as PyTorch does.
"""

from __future__ import annotations

import numpy as np

from ops.compose import NO_ATTRS as _NO_ATTRS
from ops.compose import mul as _mul
from ops.registry import Attr, register
from tape.errors import DTypeError
from tape.tape import apply

_BOOL = np.dtype(bool)


def _require_real(x):
    if x.dtype.kind not in "biuf":
        raise DTypeError(
            None,
            "input X must hold real numbers",
            expected="a bool, integer or real floating-point dtype",
            actual=str(x.dtype),
        )


def _infer_test(attrs, x):
    _require_real(x)
    return x.shape, _BOOL


_TEST = dict(inputs=("X",), infer=_infer_test, elementwise=True, differentiable=False)


@register("isnan", **_TEST)
def isnan(xp, attrs, x):
    """Out = X is NaN (bool); no gradient."""
    return xp.isnan(x)


@register("isinf", **_TEST)
def isinf(xp, attrs, x):
    """Out = X is +inf or -inf (bool); no gradient."""
    return xp.isinf(x)


@register("isfinite", **_TEST)
def isfinite(xp, attrs, x):
    """Out = X is neither NaN nor infinite (bool); no gradient."""
    return xp.isfinite(x)


def _infer_nan_to_num(attrs, x):
    _require_real(x)
    return x.shape, x.dtype


@register(
    "nan_to_num",
    inputs=("X",),
    attrs={
        "nan": Attr("float", 0.0),
        "posinf": Attr("float", None),
        "neginf": Attr("float", None),
    },
    infer=_infer_nan_to_num,
    elementwise=True,
)
def nan_to_num(xp, attrs, x):
    """Out = X with NaN replaced by ``nan``, +inf by ``posinf`` and -inf by ``neginf`` (the
    dtype's largest and smallest finite values when None).  dX = dOut where X is finite, else 0.

    >>> import numpy as np, tape, ops
    >>> ops.nan_to_num(tape.Variable(np.array([np.nan, -np.inf, 1.5])), neginf=-9.0).numpy()
    array([ 0. , -9. ,  1.5])
    """
    if x.dtype.kind != "f":
        return x.copy()
    return xp.nan_to_num(x, nan=attrs["nan"], posinf=attrs["posinf"], neginf=attrs["neginf"])


@nan_to_num.gradient
def _(g):
    from ops.unary import cast

    (x,) = g.inputs
    finite = apply(cast, (apply(isfinite, (x,), _NO_ATTRS),), {"out_dtype": x.dtype.name})
    return (_mul(g.gouts[0], finite),)
