"""ONNX forms of the elementwise ops that take several ONNX operators (part of
``tape.onnx_ops``)."""

from __future__ import annotations

import math

import numpy as np

from tape.onnx_ops import (
    _type_code,
    common_inputs,
    onnx,
    out_input,
    scalar,
)

# ---- elementwise compositions -----------------------------------------------------------------


@onnx("exp2")
def _(g):
    g.node("Pow", [scalar(g, 2.0, g.y()), g.x("X")], g.y())


@onnx("expm1")
def _(g):  # Kahan: u = exp(x); x where u == 1, else (u - 1) * x / log(u), exact to rounding
    x, one = g.x("X"), scalar(g, 1.0, g.y())
    u = g.node("Exp", [x])
    less = g.node("Sub", [u, one])
    ratio = g.node("Div", [g.node("Mul", [less, x]), g.node("Log", [u])])
    # where exp overflows or underflows to -1, u - 1 itself is exact
    plain = g.node("Or", [g.node("IsInf", [u]), g.node("Equal", [less, scalar(g, -1.0, g.y())])])
    value = g.node("Where", [plain, less, ratio])
    g.node("Where", [g.node("Equal", [u, one]), x, value], g.y())


@onnx("log1p")
def _(g):  # Kahan: u = 1 + x; x where u == 1, else log(u) * x / (u - 1)
    x, one = g.x("X"), scalar(g, 1.0, g.y())
    u = g.node("Add", [x, one])
    log = g.node("Log", [u])
    ratio = g.node("Div", [g.node("Mul", [log, x]), g.node("Sub", [u, one])])
    plain = g.node("Or", [g.node("IsInf", [u]), g.node("Equal", [u, scalar(g, 0.0, g.y())])])
    value = g.node("Where", [plain, log, ratio])
    g.node("Where", [g.node("Equal", [u, one]), x, value], g.y())


for _type, _base in {"log2": 2.0, "log10": 10.0}.items():
    onnx(_type)(
        lambda g, b=_base: g.node(
            "Div", [g.node("Log", [g.x("X")]), scalar(g, math.log(b), g.y())], g.y()
        )
    )


@onnx("rsqrt")
def _(g):
    g.node("Reciprocal", [g.node("Sqrt", [g.x("X")])], g.y())


@onnx("square")
def _(g):
    g.node("Mul", [g.x("X"), g.x("X")], g.y())


def _trunc(g, x, out=1):
    negative = g.node("Less", [x, scalar(g, 0, g.y())])
    return g.node("Where", [negative, g.node("Ceil", [x]), g.node("Floor", [x])], out)


@onnx("trunc")
def _(g):
    if g.dtype(g.op.inputs["X"][0]).kind != "f":
        g.node("Identity", [g.x("X")], g.y())
        return
    _trunc(g, g.x("X"), g.y())


@onnx("frac")
def _(g):
    g.node("Sub", [g.x("X"), _trunc(g, g.x("X"))], g.y())


@onnx("round")
def _(g):
    decimals, x = g.attrs["decimals"], g.x("X")
    if g.dtype(g.op.inputs["X"][0]).kind != "f":
        g.node("Identity", [x], g.y())
        return
    if decimals == 0:
        g.node("Round", [x], g.y())
        return
    factor = scalar(g, 10.0 ** abs(decimals), g.y())
    inner, outer = ("Mul", "Div") if decimals > 0 else ("Div", "Mul")
    g.node(outer, [g.node("Round", [g.node(inner, [x, factor])]), factor], g.y())


@onnx("scale")
def _(g):
    x, out = g.x("X"), g.y()
    dtype = g.dtype(out)
    work = dtype if dtype.kind == "f" else np.dtype(np.float64)
    x = g.cast(x, work, g.dtype(g.op.inputs["X"][0]))
    scale, bias = (
        g.const(np.array(g.attrs["scale"], work)),
        g.const(np.array(g.attrs["bias"], work)),
    )
    if g.attrs["bias_after_scale"]:
        value = g.node("Add", [g.node("Mul", [x, scale]), bias])
    else:
        value = g.node("Mul", [g.node("Add", [x, bias]), scale])
    g.node("Identity" if work == dtype else "Cast", [value], out, **_to(dtype, work))


def _to(dtype, work):
    return {} if dtype == work else {"to": _type_code(dtype)}


@onnx("clip")
def _(g):
    bounds = [None if g.attrs[k] is None else scalar(g, g.attrs[k], g.y()) for k in ("min", "max")]
    g.node("Clip", [g.x("X")] + bounds, g.y())


@onnx("hardtanh")
def _(g):
    low, high = scalar(g, g.attrs["min_val"], g.y()), scalar(g, g.attrs["max_val"], g.y())
    g.node("Clip", [g.x("X"), low, high], g.y())


@onnx("relu6")
def _(g):
    g.node("Clip", [g.x("X"), scalar(g, 0.0, g.y()), scalar(g, 6.0, g.y())], g.y())


@onnx("hardsigmoid")
def _(g):  # PyTorch's relu6(x + 3) / 6
    g.node("HardSigmoid", [g.x("X")], g.y(), alpha=1.0 / 6.0, beta=0.5)


@onnx("silu")
def _(g):
    g.node("Mul", [g.x("X"), g.node("Sigmoid", [g.x("X")])], g.y())


@onnx("quick_gelu")
def _(g):
    x = g.x("X")
    g.node("Mul", [x, g.node("Sigmoid", [g.node("Mul", [x, scalar(g, 1.702, g.y())])])], g.y())


@onnx("gelu")
def _(g):
    x, out = g.x("X"), g.y()
    if g.attrs["approximate"]:  # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        cube = g.node("Mul", [g.node("Mul", [x, x]), x])
        inner = g.node("Add", [x, g.node("Mul", [cube, scalar(g, 0.044715, out)])])
        inner = g.node("Mul", [inner, scalar(g, math.sqrt(2.0 / math.pi), out)])
        bracket = g.node("Add", [g.node("Tanh", [inner]), scalar(g, 1.0, out)])
    else:  # 0.5 x (1 + erf(x / sqrt(2)))
        erf = g.node("Erf", [g.node("Mul", [x, scalar(g, math.sqrt(0.5), out)])])
        bracket = g.node("Add", [erf, scalar(g, 1.0, out)])
    g.node("Mul", [g.node("Mul", [x, scalar(g, 0.5, out)]), bracket], out)


@onnx("softplus")
def _(g):  # softplus(beta x) / beta, x itself where beta x > threshold
    x, out = g.x("X"), g.y()
    scaled = g.node("Mul", [x, scalar(g, g.attrs["beta"], out)])
    soft = g.node("Div", [g.node("Softplus", [scaled]), scalar(g, g.attrs["beta"], out)])
    linear = g.node("Greater", [scaled, scalar(g, g.attrs["threshold"], out)])
    g.node("Where", [linear, x, soft], out)


@onnx("logsigmoid")
def _(g):
    g.node("Neg", [g.node("Softplus", [g.node("Neg", [g.x("X")])])], g.y())


@onnx("atan2")
def _(g):  # atan(X / Y), moved by pi into the quadrant where Y < 0
    x, y = out_input(g, "X"), out_input(g, "Y")
    base = g.node("Atan", [g.node("Div", [x, y])])
    zero = scalar(g, 0.0, g.y())
    turn = g.node(
        "Where", [g.node("Less", [x, zero]), scalar(g, -math.pi, g.y()), scalar(g, math.pi, g.y())]
    )
    moved = g.node("Add", [base, turn])
    g.node("Where", [g.node("Less", [y, zero]), moved, base], g.y())


@onnx("copysign")
def _(g):
    magnitude, y = g.node("Abs", [out_input(g, "X")]), out_input(g, "Y")
    zero = scalar(g, 0.0, g.y())
    inverse = g.node("Div", [scalar(g, 1.0, g.y()), y])  # -inf for -0.0
    negative = g.node("Or", [g.node("Less", [y, zero]), g.node("Less", [inverse, zero])])
    g.node("Where", [negative, g.node("Neg", [magnitude]), magnitude], g.y())


@onnx("fmod")
def _(g):
    g.node("Mod", [out_input(g, "X"), out_input(g, "Y")], g.y(), fmod=1)


def _floored(g, x, y):
    """(fmod(x, y), whether its sign differs from y's): numpy's remainder and floor_divide."""
    rest = g.node("Mod", [x, y], fmod=1)
    zero = scalar(g, 0, g.y())
    differs = g.node(
        "And",
        [
            g.node("Not", [g.node("Equal", [rest, zero])]),
            g.node("Xor", [g.node("Less", [rest, zero]), g.node("Less", [y, zero])]),
        ],
    )
    return rest, differs


@onnx("remainder")
def _(g):
    x, y = out_input(g, "X"), out_input(g, "Y")
    rest, differs = _floored(g, x, y)
    g.node("Where", [differs, g.node("Add", [rest, y]), rest], g.y())


@onnx("floor_divide")
def _(g):  # numpy: (x - fmod(x, y)) / y, one less where the signs differ, then rounded
    x, y = out_input(g, "X"), out_input(g, "Y")
    rest, differs = _floored(g, x, y)
    quotient = g.node("Div", [g.node("Sub", [x, rest]), y])
    one = scalar(g, 1, g.y())
    quotient = g.node("Where", [differs, g.node("Sub", [quotient, one]), quotient])
    if g.dtype(g.y()).kind != "f":
        g.node("Identity", [quotient], g.y())
        return
    low = g.node("Floor", [quotient])
    up = g.node("Greater", [g.node("Sub", [quotient, low]), scalar(g, 0.5, g.y())])
    g.node("Where", [up, g.node("Add", [low, one]), low], g.y())


@onnx("lerp")
def _(g):
    x, end, weight = out_input(g, "X"), out_input(g, "End"), out_input(g, "Weight")
    g.node("Add", [x, g.node("Mul", [weight, g.node("Sub", [end, x])])], g.y())


def _float_test(onnx_type, negate=False):
    def emit(g):
        x = g.x("X")
        if g.dtype(g.op.inputs["X"][0]).kind != "f":  # integers are never NaN or infinite
            same = g.node("Equal", [x, x])
            g.node("Identity" if negate else "Not", [same], g.y())
            return
        g.node(onnx_type, [x], g.y())

    return emit


onnx("isnan")(_float_test("IsNaN"))
onnx("isinf")(_float_test("IsInf"))


@onnx("isfinite")
def _(g):
    x = g.x("X")
    if g.dtype(g.op.inputs["X"][0]).kind != "f":
        g.node("Equal", [x, x], g.y())
        return
    g.node("Not", [g.node("Or", [g.node("IsNaN", [x]), g.node("IsInf", [x])])], g.y())


@onnx("nan_to_num")
def _(g):
    x, out = g.x("X"), g.y()
    if g.dtype(out).kind != "f":
        g.node("Identity", [x], out)
        return
    info = np.finfo(g.dtype(out))
    values = [g.attrs[k] for k in ("nan", "posinf", "neginf")]
    nan, posinf, neginf = (
        scalar(g, v if v is not None else d, out) for v, d in zip(values, (0.0, info.max, info.min))
    )
    y = g.node("Where", [g.node("IsNaN", [x]), nan, x])
    y = g.node("Where", [g.node("IsInf", [x], detect_negative=0), posinf, y])
    g.node("Where", [g.node("IsInf", [x], detect_positive=0), neginf, y], out)


def _close(g):
    x, y = common_inputs(g)
    out_dtype = g.dtype(g.op.inputs["X"][0])
    dtype = np.result_type(out_dtype, g.dtype(g.op.inputs["Y"][0]))
    rtol, atol = (g.const(np.array(g.attrs[k], dtype)) for k in ("rtol", "atol"))
    gap = g.node("Abs", [g.node("Sub", [x, y])])
    bound = g.node("Add", [atol, g.node("Mul", [rtol, g.node("Abs", [y])])])
    close = g.node("Or", [g.node("LessOrEqual", [gap, bound]), g.node("Equal", [x, y])])
    if g.attrs["equal_nan"]:
        both = g.node("And", [g.node("IsNaN", [x]), g.node("IsNaN", [y])])
        close = g.node("Or", [close, both])
    return close


@onnx("isclose")
def _(g):
    g.node("Identity", [_close(g)], g.y())


@onnx("allclose")
def _(g):
    count = g.node("ReduceMin", [g.node("Cast", [_close(g)], to=_type_code(np.int32))], keepdims=0)
    g.node("Cast", [count], g.y(), to=_type_code(np.bool_))
