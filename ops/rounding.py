"""Rounding ops: floor, ceil, round (half to even, optional decimals), trunc and frac.

floor, ceil, round and trunc keep X's dtype; on integers they return X unchanged (a copy), as
PyTorch does, and bool is refused. They are piecewise constant, so their gradient is zeros
(PyTorch's ``zeros_like(grad)``); frac = X - trunc(X) passes the gradient through.
"""

from __future__ import annotations

from ops.compose import NO_ATTRS as _NO_ATTRS
from ops.fill import fill_zeros_like
from ops.infer import real_float_same as _real_float_same
from ops.registry import Attr, register
from tape.errors import DTypeError
from tape.tape import apply


def _infer_rounding(attrs, x):
    if x.dtype.kind not in "iuf":
        raise DTypeError(
            None,
            "input X must hold real numbers",
            expected="an integer or real floating-point dtype",
            actual=str(x.dtype),
        )
    return x.shape, x.dtype


_ROUNDING = dict(inputs=("X",), infer=_infer_rounding, elementwise=True, no_need_buffer=("X",))


def _zero_gradient(g):
    """Zeros like X (a constant: nothing flows through it to a second derivative)."""
    return (apply(fill_zeros_like, (g.gouts[0],), _NO_ATTRS),)


def _rounded(xp, x, fn):
    return fn(x) if x.dtype.kind == "f" else x.copy()


@register("floor", **_ROUNDING)
def floor(xp, attrs, x):
    """Out = the largest integer <= X.  dX = 0."""
    return _rounded(xp, x, xp.floor)


@register("ceil", **_ROUNDING)
def ceil(xp, attrs, x):
    """Out = the smallest integer >= X.  dX = 0."""
    return _rounded(xp, x, xp.ceil)


@register("trunc", **_ROUNDING)
def trunc(xp, attrs, x):
    """Out = X rounded towards zero.  dX = 0."""
    return _rounded(xp, x, xp.trunc)


def _infer_round(attrs, x):
    shape, dtype = _infer_rounding(attrs, x)
    if attrs["decimals"] and dtype.kind != "f":
        raise DTypeError(
            None,
            "attribute 'decimals' needs floating-point input X",
            expected="decimals == 0 for integer X (as in PyTorch)",
            actual=f"decimals={attrs['decimals']}, X.dtype={dtype}",
        )
    return shape, dtype


@register(
    "round",
    inputs=("X",),
    attrs={"decimals": Attr("int", 0)},
    infer=_infer_round,
    elementwise=True,
    no_need_buffer=("X",),
)
def round(xp, attrs, x):  # noqa: A001  (the public name, as in numpy and PyTorch)
    """Out = X rounded to ``decimals`` places, halves to even (PyTorch and numpy): with d > 0,
    rint(X * 10^d) / 10^d; with d < 0, rint(X / 10^-d) * 10^-d.  dX = 0.

    >>> import numpy as np, tape, ops
    >>> ops.round(tape.Variable(np.array([0.5, 1.5, 2.5, -0.5]))).numpy()
    array([ 0.,  2.,  2., -0.])
    >>> ops.round(tape.Variable(np.array([1234.5678])), decimals=-2).numpy()
    array([1200.])
    """
    if x.dtype.kind != "f":
        return x.copy()
    decimals = attrs["decimals"]
    return xp.round(x, decimals) if decimals else xp.rint(x)


for _piecewise_constant in (floor, ceil, trunc, round):
    _piecewise_constant.gradient(_zero_gradient)
del _piecewise_constant


@register("frac", inputs=("X",), infer=_real_float_same, elementwise=True, no_need_buffer=("X",))
def frac(xp, attrs, x):
    """Out = X - trunc(X), with the sign of X.  dX = dOut."""
    return x - xp.trunc(x)


@frac.gradient
def _(g):
    return (g.gouts[0],)
