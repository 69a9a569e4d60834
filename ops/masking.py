"""Boolean masks and index lists: ``masked_select`` (a data-dependent shape) with its gradient
op, and the compositions ``masked_fill`` (op 'where') and ``index_select`` (op 'gather').

``masked_select`` is the one op here whose output shape depends on values: its length is the
number of True elements of the (broadcast) mask, so recording it needs the mask's value. In
eager mode the mask is already computed; in lazy mode recording ``masked_select`` (or ``x[mask]``)
realizes the mask first, running the pending ops it depends on, and only then records the op.
A Program loaded from text cannot infer it without a value, so it refuses such programs.
"""

from __future__ import annotations

import math

import numpy as np

from ops.infer import broadcast_shapes, result_dtype
from ops.registry import REGISTRY, register
from tape.constants import as_variable
from tape.errors import DTypeError, InputError, ShapeError, user_location
from tape.tape import apply


def _selected(mask, shape):
    """How many True elements ``mask`` has once broadcast to ``shape`` (realizing it)."""
    value = getattr(mask, "_value", None)
    if value is None and hasattr(mask, "value"):
        value = mask.value()
    if value is None:
        raise ShapeError(
            None,
            "masked_select's output length depends on Mask's values, which are not known here",
            hint="record masked_select on a tape (eager or lazy), not in a loaded Program",
        )
    count = int(value.sum())
    return count * (math.prod(shape) // max(math.prod(mask.shape), 1))


def _broadcast(x, mask):
    if mask.dtype.kind != "b":
        raise DTypeError(
            None, "input Mask must be boolean", expected="bool", actual=str(mask.dtype)
        )
    return broadcast_shapes(None, x.shape, mask.shape, "X", "Mask")


def _infer_masked_select(attrs, x, mask):
    shape = _broadcast(x, mask)
    return (_selected(mask, shape),), x.dtype


@register(
    "masked_select",
    inputs=("X", "Mask"),
    infer=_infer_masked_select,
    no_need_buffer=("X",),
)
def masked_select(xp, attrs, x, mask):
    """Out = the elements of X where Mask is True (both broadcast), in row-major order, as a 1-d
    array (torch.masked_select; ``x[mask]`` for a mask of X's shape). Its length depends on
    Mask's values: lazy mode realizes Mask when the op is recorded (see the module docstring).

    dX = masked_select_grad(X, Mask, dOut): dOut written back at the selected positions (summed
    over axes where X was broadcast).

    >>> import numpy as np, tape, ops
    >>> x = tape.Variable(np.array([[1.0, -2.0], [-3.0, 4.0]], np.float32))
    >>> ops.masked_select(x, x > 0).numpy()
    array([1., 4.], dtype=float32)
    """
    shape = broadcast_shapes(None, x.shape, mask.shape)
    return xp.broadcast_to(x, shape)[xp.broadcast_to(mask, shape)]


@masked_select.gradient
def _(g):
    x, mask = g.inputs
    return apply(masked_select_grad, (x, mask, g.gouts[0]), {}), None


def _infer_masked_select_grad(attrs, x, mask, gout):
    shape = _broadcast(x, mask)
    if len(gout.shape) != 1:
        raise ShapeError(None, "Out@GRAD must be 1-d", actual=f"Out@GRAD.shape={gout.shape}")
    if _selected(mask, shape) != gout.shape[0]:
        raise ShapeError(
            None,
            "Out@GRAD's length is not the number of selected elements",
            expected=str(_selected(mask, shape)),
            actual=str(gout.shape[0]),
        )
    return x.shape, result_dtype(x, gout)


@register(
    "masked_select_grad",
    inputs=("X", "Mask", "Out@GRAD"),
    infer=_infer_masked_select_grad,
    no_need_buffer=("X",),
)
def masked_select_grad(xp, attrs, x, mask, gout):
    """Out = zeros of X's shape with Out@GRAD written (in order) where Mask is True, summed over
    the axes where X was broadcast (X's values are unused).

    d(Out@GRAD) = masked_select(dOut, Mask); X and Mask get none.
    """
    shape = broadcast_shapes(None, x.shape, mask.shape)
    full = xp.zeros(shape, dtype=np.result_type(x.dtype, gout.dtype))
    full[xp.broadcast_to(mask, shape)] = gout
    extra = len(shape) - x.ndim
    axes = tuple(range(extra)) + tuple(
        extra + d for d, n in enumerate(x.shape) if n == 1 and shape[extra + d] != 1
    )
    return full.sum(axis=axes, keepdims=True).reshape(x.shape) if axes else full


@masked_select_grad.gradient
def _(g):
    from ops.select import _to_input

    _, mask, gout = g.inputs
    return None, None, _to_input(apply(masked_select, (g.gouts[0], mask), {}), gout)


def masked_fill(x, mask, value):
    """X with ``value`` where the boolean ``mask`` (broadcast to X's shape) is True
    (torch.masked_fill), as op 'where'; ``value`` is a number (taking X's dtype) or a 0-d
    Variable (which receives the gradient of the filled positions).

    dX = dOut where mask is False, else 0.

    >>> import numpy as np, tape, ops
    >>> x = tape.Variable(np.array([1.0, -2.0, 3.0], np.float32))
    >>> ops.masked_fill(x, x < 0, 0.0).numpy()
    array([1., 0., 3.], dtype=float32)
    """
    x, mask = as_variable(x), as_variable(mask)
    if mask.dtype.kind != "b":
        raise DTypeError(
            "masked_fill", "mask must be boolean", actual=str(mask.dtype), location=user_location()
        )
    if broadcast_shapes("masked_fill", x.shape, mask.shape, "X", "mask") != x.shape:
        raise ShapeError(
            "masked_fill",
            "mask must broadcast to X's shape",
            expected=f"a shape that broadcasts to {x.shape}",
            actual=f"mask.shape={mask.shape}",
            location=user_location(),
        )
    value = as_variable(value, x, "masked_fill", "value")
    if value.shape:
        raise ShapeError(
            "masked_fill",
            "value must be a number or 0-d",
            actual=f"value.shape={value.shape}",
            location=user_location(),
        )
    if value.dtype != x.dtype:
        value = REGISTRY["cast"](value, out_dtype=x.dtype.name)
    return REGISTRY["where"](mask, value, x)


def index_select(x, index, axis=0):
    """The slices of X at the positions of the 1-d integer ``index`` along ``axis``
    (torch.index_select), as op 'gather' (which also takes indices of any shape).

    >>> import numpy as np, tape, ops
    >>> x = tape.Variable(np.arange(6).reshape(2, 3))
    >>> ops.index_select(x, np.array([2, 0]), axis=1).numpy()
    array([[2, 0],
           [5, 3]])
    """
    if isinstance(index, (int, float)):
        raise InputError(
            "index_select",
            "index must be an integer array or Variable",
            actual=repr(index),
            hint="ops.index_select(x, index, axis=...) (the method is x.index_select(dim, index))",
            location=user_location(),
        )
    index = as_variable(index)
    if len(index.shape) != 1:
        raise ShapeError(
            "index_select",
            "index must be 1-d",
            actual=f"index.shape={index.shape}",
            hint="ops.gather takes indices of any shape",
            location=user_location(),
        )
    return REGISTRY["gather"](as_variable(x), index, axis=axis)


__all__ = ["masked_fill", "index_select"]
