"""ONNX forms of the products, linear algebra (Det, trace), reductions and creation ops (part of
``tape.onnx_ops``)."""

from __future__ import annotations

import math

import numpy as np

from tape.onnx_ops import (
    NOT_EXPORTABLE,
    _as_bool,
    _type_code,
    onnx,
    out_input,
    scalar,
)

# ---- products ---------------------------------------------------------------------------------


def _transposed(g, slot, flag):
    x = out_input(g, slot)
    rank = len(g.shape(g.op.inputs[slot][0]))
    if not g.attrs[flag] or rank < 2:
        return x
    return g.node("Transpose", [x], perm=list(range(rank - 2)) + [rank - 1, rank - 2])


@onnx("matmul")
def _(g):
    if len(g.shape(g.op.inputs["Y"][0])) == 1 and len(g.shape(g.op.inputs["X"][0])) >= 2:
        # X^T y as y X: onnxruntime 1.32 fuses Transpose into MatMul wrongly when the second
        # operand is 1-D (checked here against its unoptimised run)
        x = out_input(g, "X")
        if g.attrs["transpose_x"]:
            g.node("MatMul", [out_input(g, "Y"), x], g.y())
            return
    x, y = _transposed(g, "X", "transpose_x"), _transposed(g, "Y", "transpose_y")
    g.node("MatMul", [x, y], g.y())


@onnx("outer")
def _(g):  # X[:, None] * Y[None, :]
    x = g.node("Unsqueeze", [out_input(g, "X"), g.const([1])])
    y = g.node("Unsqueeze", [out_input(g, "Y"), g.const([0])])
    g.node("Mul", [x, y], g.y())


@onnx("mul")
def _(g):  # X flattened to 2-D at x_num_col_dims, Y at y_num_col_dims, multiplied, unflattened
    a = g.attrs
    x = g.node("Flatten", [out_input(g, "X")], axis=int(a["x_num_col_dims"]))
    y = g.node("Flatten", [out_input(g, "Y")], axis=int(a["y_num_col_dims"]))
    product = g.node("MatMul", [x, y])
    shape = g.shape(g.y())
    if len(shape) == 2:
        g.node("Identity", [product], g.y())
        return
    g.node("Reshape", [product, g.target_shape(shape, g.op.inputs["X"][0])], g.y())


# ---- linear algebra (ops/linalg.py, ops/determinant.py) ------------------------------------------


@onnx("det")
def _(g):
    g.node("Det", [out_input(g, "A")], g.y())


@onnx("trace")
def _(g):  # the matrices times an identity (m, n), summed over the last two axes
    rows, columns = g.shape(g.op.inputs["X"][0])[-2:]
    identity = g.const(np.eye(rows, columns, dtype=g.dtype(g.y())))
    diagonal = g.node("Mul", [out_input(g, "X"), identity])
    g.node("ReduceSum", [diagonal, g.const([-2, -1])], g.y(), keepdims=0)


# ---- reductions -------------------------------------------------------------------------------


def axes_input(g, axis, slot="X"):
    """The reduction axes as an initializer (None: all axes); ``()`` stays empty."""
    if axis is None:
        return None
    rank = max(len(g.shape(g.op.inputs[slot][0])), 1)
    return g.const([a % rank for a in axis])


def reduces_nothing(g, slot="X"):
    """A reduction over no axes (``axis=()``) or of a 0-d input: the input itself."""
    return g.attrs.get("axis") == () or not g.shape(g.op.inputs[slot][0])


def _reduce(onnx_type):
    def emit(g):
        x = out_input(g, "X")
        if reduces_nothing(g):
            g.node("Identity", [x], g.y())
            return
        axes = axes_input(g, g.attrs["axis"])
        g.node(onnx_type, [x, axes], g.y(), keepdims=int(g.attrs["keepdim"]))

    return emit


_REDUCE = {
    "reduce_sum": "ReduceSum",
    "reduce_mean": "ReduceMean",
    "reduce_max": "ReduceMax",
    "reduce_min": "ReduceMin",
    "prod": "ReduceProd",
    "logsumexp": "ReduceLogSumExp",
}
for _type, _onnx_type in _REDUCE.items():
    onnx(_type)(_reduce(_onnx_type))


@onnx("mean")
def _(g):
    g.node("ReduceMean", [g.x("X")], g.y(), keepdims=0)


@onnx("sum")
def _(g):
    dtype = g.dtype(g.y())
    names = g.op.inputs["X"]
    inputs = [g.cast(x, dtype, g.dtype(n)) for x, n in zip(g.xs("X"), names)]
    g.node("Sum" if len(inputs) > 1 else "Identity", inputs, g.y())


@onnx("all", "any")
def _(g):  # any: a count of true entries > 0; all: a count of false entries == 0 (empty too)
    truth = _as_bool(g, "X")
    if reduces_nothing(g):
        g.node("Identity", [truth], g.y())
        return
    counted = truth if g.op.type == "any" else g.node("Not", [truth])
    ints = g.node("Cast", [counted], to=_type_code(np.int64))
    axes = axes_input(g, g.attrs["axis"])
    count = g.node("ReduceSum", [ints, axes], keepdims=int(g.attrs["keepdim"]))
    test = "Greater" if g.op.type == "any" else "Equal"
    g.node(test, [count, g.const(np.array(0, np.int64))], g.y())


def _arg(onnx_type):
    def emit(g):
        x, axis, keep = g.x("X"), g.attrs["axis"], int(g.attrs["keepdim"])
        if not g.shape(g.op.inputs["X"][0]):
            g.node("Reshape", [g.const(np.zeros((), np.int64)), g.const([])], g.y())
            return
        if axis is None:
            flat = g.node("Reshape", [x, g.const([-1])])
            index = g.node(onnx_type, [flat], axis=0, keepdims=0)
            g.node("Reshape", [index, g.const(list(g.shape(g.y())))], g.y())
            return
        g.node(onnx_type, [x], g.y(), axis=int(axis), keepdims=keep)

    return emit


onnx("argmax")(_arg("ArgMax"))
onnx("argmin")(_arg("ArgMin"))


def _moments(g, slot="X"):
    """(mean kept as a broadcastable array, the variance with ``correction``)."""
    x, axes = g.x(slot), axes_input(g, g.attrs["axis"])
    keep = int(g.attrs["keepdim"])
    mean = g.node("ReduceMean", [x, axes], keepdims=1)
    deviation = g.node("Sub", [x, mean])
    squares = g.node("ReduceSum", [g.node("Mul", [deviation, deviation]), axes], keepdims=keep)
    dtype = g.dtype(g.op.inputs[slot][0])
    sizes = [g.cast(g.node("Size", [v]), dtype, np.int64) for v in (x, mean)]
    count = g.node("Div", sizes)
    denominator = g.node(
        "Max",
        [g.node("Sub", [count, scalar(g, g.attrs["correction"], g.op.inputs[slot][0])])]
        + [scalar(g, 0.0, g.op.inputs[slot][0])],
    )
    return mean, g.node("Div", [squares, denominator])


def _squeezed_mean(g, mean, out):
    if g.attrs["keepdim"]:
        return g.node("Identity", [mean], out)
    axes = axes_input(g, g.attrs["axis"])
    return g.node("Squeeze" if axes is not None else "Reshape", [mean, axes or g.const([])], out)


@onnx("var")
def _(g):
    _, variance = _moments(g)
    g.node("Identity", [variance], g.y())


@onnx("std")
def _(g):
    _, variance = _moments(g)
    g.node("Sqrt", [variance], g.y())


@onnx("var_mean")
def _(g):
    mean, variance = _moments(g)
    g.node("Identity", [variance], g.y("Var"))
    _squeezed_mean(g, mean, g.y("Mean"))


@onnx("std_mean")
def _(g):
    mean, variance = _moments(g)
    g.node("Sqrt", [variance], g.y("Std"))
    _squeezed_mean(g, mean, g.y("Mean"))


@onnx("norm")
def _(g):
    x, keep = g.x("X"), int(g.attrs["keepdim"])
    if not g.shape(g.op.inputs["X"][0]):
        x = g.node("Reshape", [x, g.const([1])])
        keep = 0
    axes = None if g.attrs["axis"] is None or keep == 0 and x != g.x("X") else None
    if g.attrs["axis"] is not None and g.shape(g.op.inputs["X"][0]):
        axes = axes_input(g, g.attrs["axis"])
    p = 2.0 if g.attrs["p"] == "fro" else float(g.attrs["p"])
    magnitude = g.node("Abs", [x])
    if p == 2.0:
        g.node("ReduceL2", [x, axes], g.y(), keepdims=keep)
    elif p == 1.0:
        g.node("ReduceL1", [x, axes], g.y(), keepdims=keep)
    elif math.isinf(p):
        g.node("ReduceMax" if p > 0 else "ReduceMin", [magnitude, axes], g.y(), keepdims=keep)
    elif p == 0.0:
        nonzero = g.node("Not", [g.node("Equal", [x, scalar(g, 0.0, g.y())])])
        ones = g.cast(nonzero, g.dtype(g.y()), np.bool_)
        g.node("ReduceSum", [ones, axes], g.y(), keepdims=keep)
    else:
        powered = g.node("Pow", [magnitude, scalar(g, p, g.y())])
        total = g.node("ReduceSum", [powered, axes], keepdims=keep)
        g.node("Pow", [total, scalar(g, 1.0 / p, g.y())], g.y())


def _flat_axis(g):
    """(input in the output's dtype, axis) for ops whose ``axis=None`` means the flattened
    input (a 0-d input is one element)."""
    axis, x = g.attrs["axis"], out_input(g, "X")
    if axis is None or not g.shape(g.op.inputs["X"][0]):
        return g.node("Reshape", [x, g.const([-1])]), 0
    return x, int(axis) % len(g.shape(g.op.inputs["X"][0]))


def _unflatten(g, value, out):
    if g.attrs["axis"] is None or not g.shape(out):
        return g.node("Reshape", [value, g.const(list(g.shape(out)))], out)
    return g.node("Identity", [value], out)


@onnx("cumsum")
def _(g):
    x, axis = _flat_axis(g)
    exclusive, reverse = int(g.attrs["exclusive"]), int(g.attrs["reverse"])
    total = g.node("CumSum", [x, g.const(axis)], exclusive=exclusive, reverse=reverse)
    _unflatten(g, total, g.y())


@onnx("logcumsumexp")
def _(g):  # log(cumsum(exp(X - max))) + max, with the max of the whole axis
    x, axis = _flat_axis(g)
    dtype = g.dtype(g.y())
    x = g.cast(x, np.float64, dtype)  # float32's exp underflows for a spread over ~88
    top = g.node("ReduceMax", [x, g.const([axis])], keepdims=1)
    zero = g.const(np.array(0.0))
    top = g.node("Where", [g.node("IsInf", [top]), zero, top])  # all -inf, or an inf
    exp = g.node("Exp", [g.node("Sub", [x, top])])
    total = g.node("CumSum", [exp, g.const(axis)], reverse=int(g.attrs["reverse"]))
    value = g.node("Add", [g.node("Log", [total]), top])
    _unflatten(g, g.node("Cast", [value], to=_type_code(dtype)), g.y())


# ---- creation ---------------------------------------------------------------------------------


@onnx("fill_constant", "arange", "linspace", "logspace", "eye")
def _(g):
    """Ops of attributes only: their value, computed by their own kernel, is a constant."""
    from ops.registry import lookup

    value = lookup(g.op.type).kernel(np, g.attrs)
    g.node("Identity", [g.const(np.asarray(value, g.dtype(g.y())))], g.y())


def _filled(g, value, dtype):
    from onnx import numpy_helper

    tensor = numpy_helper.from_array(np.array([value], dtype))
    g.node("ConstantOfShape", [g.node("Shape", [g.x("X")])], g.y(), value=tensor)


@onnx("fill_zeros_like")
def _(g):
    _filled(g, 0, g.dtype(g.y()))


@onnx("fill_ones_like")
def _(g):
    _filled(g, 1, g.dtype(g.y()))


@onnx("full_like")
def _(g):
    _filled(g, g.attrs["value"], g.dtype(g.y()))


_NO_SOLVER = "ONNX has no matrix inverse or linear solver (only Det)"
NOT_EXPORTABLE.update(
    {
        "inverse": _NO_SOLVER,
        "solve": _NO_SOLVER,
        "solve_triangular": _NO_SOLVER,
        "cholesky": "ONNX has no matrix factorization (Cholesky, LU or SVD)",
        "cofactor": "ONNX has no SVD or inverse to build the cofactor matrix from",
        "eigh": "ONNX has no eigendecomposition",
        "slogdet": "ONNX has Det but no log-determinant; log|Det| overflows where slogdet is "
        "used instead",
        "svdvals": "ONNX has no singular value decomposition",
        "svd": "ONNX has no singular value decomposition",
        "qr": "ONNX has no QR decomposition (nor Householder reflections)",
        "pinv": "ONNX has no singular value decomposition to build a pseudo-inverse from",
    }
)
