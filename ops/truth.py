"""Reductions and tests without a gradient: argmax, argmin, any, all, isclose and allclose.

Their outputs are indices or booleans, so they record no gradient (PyTorch has none either).
"""

from __future__ import annotations

import numpy as np

from ops.infer import broadcast_shapes, kernel_axes, normalize_axes, normalize_axis
from ops.reduce import REDUCE_ATTRS, reduced_shape
from ops.registry import Attr, register
from tape.errors import ShapeError

_INT64, _BOOL = np.dtype(np.int64), np.dtype(bool)

# ---- argmax and argmin ------------------------------------------------------------------------


def _infer_arg_extreme(attrs, x):
    axis, ndim = attrs["axis"], len(x.shape)
    axes = tuple(range(ndim)) if axis is None else (normalize_axis(None, axis, ndim),)
    axes = axes if ndim else ()
    # (``any`` below is the op; a list test here instead of the builtin.)
    if 0 in [x.shape[i] for i in axes]:
        raise ShapeError(
            None,
            "cannot take the argmax or argmin over an empty axis",
            expected="every reduced axis has extent > 0",
            actual=f"X.shape={x.shape}, axis={axis}",
        )
    return reduced_shape(x.shape, axes, attrs["keepdim"]), _INT64


_ARG_ATTRS = {"axis": Attr("int", None), "keepdim": Attr("bool", False)}


def _arg_extreme(op_type, word):
    def kernel(xp, attrs, x):
        if x.ndim == 0:
            return xp.zeros((), dtype=np.int64)
        found = getattr(xp, op_type)(x, axis=attrs["axis"], keepdims=attrs["keepdim"])
        return found.astype(np.int64, copy=False)

    kernel.__doc__ = f"""Out = the index of the {word} of X along ``axis`` (int64), or its flat
    position when ``axis`` is None; the first one among ties, and the first NaN if there is
    one, as PyTorch. With ``keepdim`` and no axis every dimension is kept as 1. No gradient."""
    return register(
        op_type, inputs=("X",), attrs=_ARG_ATTRS, infer=_infer_arg_extreme, differentiable=False
    )(kernel)


argmax = _arg_extreme("argmax", "maximum")
argmin = _arg_extreme("argmin", "minimum")

# ---- any and all ------------------------------------------------------------------------------


def _infer_truth(attrs, x):
    axes = normalize_axes(None, attrs["axis"], len(x.shape))
    return reduced_shape(x.shape, axes, attrs["keepdim"]), _BOOL


@register("any", inputs=("X",), attrs=REDUCE_ATTRS, infer=_infer_truth, differentiable=False)
def any(xp, attrs, x):  # noqa: A001  (the public name, as in numpy and PyTorch)
    """Out = whether any element of X over ``axis`` (all when None) is nonzero (bool; NaN counts
    as nonzero; False over an empty axis). No gradient."""
    return x.any(axis=kernel_axes(attrs["axis"], x.ndim), keepdims=attrs["keepdim"])


@register("all", inputs=("X",), attrs=REDUCE_ATTRS, infer=_infer_truth, differentiable=False)
def all(xp, attrs, x):  # noqa: A001
    """Out = whether every element of X over ``axis`` (all when None) is nonzero (bool; True over
    an empty axis). No gradient."""
    return x.all(axis=kernel_axes(attrs["axis"], x.ndim), keepdims=attrs["keepdim"])


# ---- isclose and allclose ---------------------------------------------------------------------

_CLOSE_ATTRS = {
    "rtol": Attr("float", 1e-5, check=lambda v: v >= 0, rule=">= 0"),
    "atol": Attr("float", 1e-8, check=lambda v: v >= 0, rule=">= 0"),
    "equal_nan": Attr("bool", False),
}


def _infer_isclose(attrs, x, y):
    return broadcast_shapes(None, x.shape, y.shape), _BOOL


@register(
    "isclose",
    inputs=("X", "Y"),
    attrs=_CLOSE_ATTRS,
    infer=_infer_isclose,
    elementwise=True,
    differentiable=False,
)
def isclose(xp, attrs, x, y):
    """Out = |X - Y| <= atol + rtol * |Y| elementwise (broadcast; bool), as PyTorch and numpy:
    equal infinities are close, NaN is close to NaN only with ``equal_nan``. No gradient.

    >>> import numpy as np, tape, ops
    >>> ops.isclose(tape.Variable(np.array([1.0, 2.0])), np.array([1.0 + 1e-9, 2.1])).numpy()
    array([ True, False])
    """
    return xp.isclose(x, y, rtol=attrs["rtol"], atol=attrs["atol"], equal_nan=attrs["equal_nan"])


def _infer_allclose(attrs, x, y):
    broadcast_shapes(None, x.shape, y.shape)
    return (), _BOOL


@register(
    "allclose", inputs=("X", "Y"), attrs=_CLOSE_ATTRS, infer=_infer_allclose, differentiable=False
)
def allclose(xp, attrs, x, y):
    """Out = whether ``isclose(X, Y)`` holds everywhere (a 0-d bool; ``bool(out)`` and
    ``Variable.allclose`` give a Python bool, as ``torch.allclose``). No gradient."""
    return isclose.kernel(xp, attrs, x, y).all()
