"""Shape and dtype inference helpers shared by op registrations.

Infer functions receive Variables (only ``.shape`` and ``.dtype`` are read) and return
``(shape, dtype)`` per output; they raise the library's errors naming the op and the inputs.
"""

from __future__ import annotations

import numpy as np

from tape.errors import AxisError, DTypeError, ShapeError


def broadcast_shapes(op, x_shape, y_shape, x_name="X", y_name="Y"):
    """numpy broadcasting of two shapes, or a ShapeError naming the op and both inputs."""
    if x_shape == y_shape:
        return x_shape
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
    """For ``*_grad`` ops: X@GRAD is like Out@GRAD; the forward tensor read must match its shape."""
    if forward.shape != gout.shape:
        raise ShapeError(
            None,
            "Out@GRAD must have the shape of the forward tensor",
            expected=str(forward.shape),
            actual=str(gout.shape),
        )
    return gout.shape, gout.dtype


def check_list_inputs(xs, axis_of=None, what=""):
    """The checks of a list input X (sum, concat, stack): non-empty, one dtype, equal shapes
    except along ``axis_of`` (``what`` says so in the message)."""
    if not xs:
        raise ShapeError(None, "input X is an empty list", expected="at least one Variable")
    first = xs[0]
    for i, x in enumerate(xs[1:], 1):
        if x.dtype != first.dtype:
            raise DTypeError(
                None,
                "all inputs X must have the same dtype",
                expected=str(first.dtype),
                actual=f"X[{i}].dtype == {x.dtype}",
            )
        off_axis = [k for k in range(len(first.shape)) if k != axis_of]
        if len(x.shape) != len(first.shape) or any(x.shape[k] != first.shape[k] for k in off_axis):
            raise ShapeError(
                None,
                f"inputs X must have equal shapes{what}",
                expected=f"X[{i}].shape like X[0].shape == {first.shape}",
                actual=f"X[{i}].shape == {x.shape}",
            )
