"""Shape and dtype inference helpers shared by op registrations, and the library's dtype rule.

Infer functions receive Variables (only ``.shape`` and ``.dtype`` are read) and return
``(shape, dtype)`` per output; they raise the library's errors naming the op and the inputs.

The dtype rule (numpy 2, NEP 50), held by every op and checked for all of them by
``tests/ops/test_dtype_rule.py``: an op's output has numpy's promotion of its inputs' dtypes
(``np.result_type``): float32 with float64 gives float64, int32 with float32 gives float64, two
integer types the wider one (``promoted``). True division of integers gives float64; floor
division and remainder keep integers. A Python scalar never promotes an array: it takes the dtype
of the Variables beside it (``x * 2.0`` stays float32; ``int32_x + 2.5`` is float64, as numpy),
and one the dtype cannot hold (``int32_x + 10**12``) is an OverflowError naming the op. Inputs
that are positions rather than values (indices, labels, masks, conditions) take no part.
Comparisons and predicates give bool, casts and creation ops the dtype asked for, and an output
written in place keeps its buffer's dtype (batch norm's running statistics; an optimizer update,
which requires the gradient and state to have the parameter's dtype). Float-valued functions
(sin, log, softmax, ...) refuse integer and bool inputs with a DTypeError; integer-only ops
(bitwise, shifts) refuse floats. Every gradient has its variable's dtype: where mixed inputs
promote, backward casts each input's gradient back to that input's dtype (a recorded ``cast``),
so a float32 weight fed float64 data gets a float32 gradient.
"""

from __future__ import annotations

import numpy as np

from tape.errors import AxisError, DTypeError, ShapeError


def broadcast_shapes(op, x_shape, y_shape, x_name="X", y_name="Y"):
    """numpy broadcasting of two shapes, or a ShapeError naming the op and both inputs."""
    if x_shape == y_shape or not y_shape:
        return x_shape
    if not x_shape:
        return y_shape
    nx, ny = len(x_shape), len(y_shape)
    n = max(nx, ny)
    out = []
    for i in range(n):
        a = x_shape[i - n + nx] if i >= n - nx else 1
        b = y_shape[i - n + ny] if i >= n - ny else 1
        if a != b and a != 1 and b != 1:
            raise ShapeError(
                op,
                f"inputs {x_name} and {y_name} cannot be broadcast together",
                expected="equal dimensions, or 1, aligned from the right",
                actual=f"{x_name}.shape={x_shape}, {y_name}.shape={y_shape}",
            )
        out.append(a if b == 1 else b)
    return tuple(out)


def result_dtype(x, y):
    """numpy's promotion of two Variables' dtypes (constants were already weakly typed)."""
    if x.dtype is y.dtype or x.dtype == y.dtype:
        return x.dtype
    return np.result_type(x.dtype, y.dtype)


def promoted(*variables):
    """numpy's promotion of the dtypes of the given Variables (None skipped)."""
    dtypes = {v.dtype for v in variables if v is not None}
    return dtypes.pop() if len(dtypes) == 1 else np.result_type(*dtypes)


def promoted_float(slots):
    """The promoted dtype of (slot, Variable) pairs that must all be real floating point (None
    skipped), or a DTypeError naming the first that is not."""
    for slot, var in slots:
        if var is not None and var.dtype.kind != "f":
            raise DTypeError(
                None,
                f"input {slot} must be floating point",
                expected="float16, float32 or float64",
                actual=str(var.dtype),
            )
    return promoted(*(var for _, var in slots))


def same_as_input(attrs, x, *rest):
    """Output shape and dtype equal to the first input's."""
    return x.shape, x.dtype


def require_float(op, var, slot="X"):
    if var.dtype.kind not in "fc":
        raise DTypeError(
            op,
            f"input {slot} must be floating point",
            expected="float16, float32 or float64",
            actual=str(var.dtype),
        )


def require_real(var, slot="X"):
    """Integers or floats (no booleans, no complex): the inputs of ops that compare or multiply
    numbers whatever their kind (searchsorted, kron, cross)."""
    if var.dtype.kind not in "iuf":
        raise DTypeError(
            None,
            f"input {slot} must hold real numbers",
            expected="an integer or floating-point dtype",
            actual=str(var.dtype),
        )


def normalize_axis(op, axis, ndim, what="axis"):
    """``axis`` in [-ndim, ndim) -> [0, ndim), or an AxisError (a ValueError and an IndexError).

    A 0-d array takes ``axis`` 0 or -1, as in PyTorch (which gives a scalar one axis); both
    give 0, which names no dimension of its shape, so callers handle 0-d inputs themselves.
    """
    extent = max(ndim, 1)
    if not -extent <= axis < extent:
        raise AxisError(
            op,
            f"{what} {axis} is out of range",
            expected=f"-{extent} <= {what} < {extent}",
            actual=str(axis),
        )
    return axis % extent


def normalize_axes(op, axes, ndim):
    """A sorted tuple of distinct axes in [0, ndim); None means all axes.

    A 0-d array takes 0 and -1 (see ``normalize_axis``) and has no dimension to name: its axes
    normalize to ``()``, so a reduction over them leaves the scalar as it is (as PyTorch).
    """
    if axes is None:
        return tuple(range(ndim))
    out = tuple(sorted(normalize_axis(op, a, ndim) for a in axes))
    if len(set(out)) != len(out):
        raise ShapeError(op, "repeated axis", actual=str(axes))
    return out if ndim else ()


def kernel_axes(axes, ndim):
    """The ``axis`` argument an array reduction takes for the attribute ``axes`` (None: all).

    Checked axes pass through as they are (numpy and cupy take negatives), except that a 0-d
    array's axes name no dimension: ``()``.
    """
    return axes if axes is None or ndim else ()


def align_y(x_shape, y_shape, axis):
    """Paddle's ``axis`` rule: Y's dims match X's starting at ``axis`` (-1: numpy alignment).

    Returns Y's shape padded with trailing ones so that numpy broadcasting applies.
    """
    if axis == -1 or len(y_shape) >= len(x_shape):
        return y_shape
    return tuple(y_shape) + (1,) * (len(x_shape) - axis - len(y_shape))


def float_same(attrs, x, *rest):
    """Output like X, which must be floating point (real or complex)."""
    require_float(None, x)
    return x.shape, x.dtype


def real_float_same(attrs, x, *rest):
    """Output like X, which must be real floating point (for kernels that compare or clamp)."""
    if x.dtype.kind != "f":
        raise DTypeError(
            None,
            "input X must be real floating point",
            expected="float16, float32 or float64",
            actual=str(x.dtype),
        )
    return x.shape, x.dtype


def same_as_gradient(attrs, forward, gout):
    """For ``*_grad`` ops: X@GRAD has Out@GRAD's shape, which the forward tensor read must have,
    and the promotion of both dtypes."""
    if forward.shape != gout.shape:
        raise ShapeError(
            None,
            "Out@GRAD must have the shape of the forward tensor",
            expected=str(forward.shape),
            actual=str(gout.shape),
        )
    return gout.shape, result_dtype(forward, gout)


def check_list_inputs(xs, axis_of=None, what=""):
    """The checks of a list input X (sum, concat, stack): non-empty, equal shapes except along
    ``axis_of`` (``what`` says so in the message). Returns the promotion of their dtypes."""
    if not xs:
        raise ShapeError(None, "input X is an empty list", expected="at least one Variable")
    first = xs[0]
    shape, dtype, mixed = first.shape, first.dtype, False
    # (tuple comparisons, no generator per input: concat's inference is on a Tree-LSTM's path)
    if axis_of is None:
        head, tail, ndim = shape, (), len(shape)
    else:
        head, tail, ndim = shape[:axis_of], shape[axis_of + 1 :], len(shape)
    for i, x in enumerate(xs):
        other = x.shape
        if other is not shape and (
            len(other) != ndim
            or (axis_of is None and other != shape)
            or (axis_of is not None and (other[:axis_of] != head or other[axis_of + 1 :] != tail))
        ):
            raise ShapeError(
                None,
                f"inputs X must have equal shapes{what}",
                expected=f"X[{i}].shape like X[0].shape == {shape}",
                actual=f"X[{i}].shape == {other}",
            )
        if x.dtype is not dtype:
            mixed = True
    return promoted(*xs) if mixed else dtype
