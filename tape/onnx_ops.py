"""The ONNX form of each op: op type -> a function emitting ONNX nodes (``tape.onnx_export``).

A mapping function gets the ``Graph`` being built, positioned on one op: ``g.x(slot)`` names an
input, ``g.y(slot)`` an output, ``g.attrs`` holds the op's attributes, ``g.node(type, inputs,
outputs, **attrs)`` appends an ONNX node and ``g.const(value)`` an initializer. ONNX does no
type promotion, so mappings cast inputs to the op's output dtype (numpy's promotion, decided
at record time). This module holds elementwise math, comparisons, reductions and creation;
``onnx_ops_shape`` (shapes, indexing, sorting) and ``onnx_ops_nn`` (convolution, pooling,
normalisation, recurrent cells, losses) add theirs to the same table.

``NOT_EXPORTABLE`` lists, with the reason, every registered op without an ONNX form; the
registry sweep (``tests/interop/test_onnx_ops.py``) fails for an op in neither table.
"""

from __future__ import annotations

import math

import numpy as np

from tape.onnx_export import ExportError

ONNX_OPS = {}
NOT_EXPORTABLE = {}


def onnx(*op_types):
    """Decorator: registers ``fn(g)`` as the ONNX form of each of ``op_types``."""

    def register(fn):
        for op_type in op_types:
            if op_type in ONNX_OPS:
                raise ValueError(f"op '{op_type}' has two ONNX mappings")
            ONNX_OPS[op_type] = fn
        return fn

    return register


def mapping(op_type):
    _load()
    return ONNX_OPS[op_type]


# Ops whose ONNX form makes only some outputs (the others are state for their gradient or
# running statistics): the exporter raises if another one is asked for.
EXPORTED_OUTPUTS = {"batch_norm": ("Y",), "layer_norm": ("Y",)}
# Ops exported except for some attribute values, which raise ExportError naming the op.
LIMITS = {
    "dropout": "training mode (random)",
    "scatter_reduce": "reduce='mean' or include_self=False",
    "pad": "mode 'circular'",
    "conv1d": "negative padding",
    "conv2d": "negative padding",
    "conv3d": "negative padding",
    "conv_transpose1d": "output_padding >= stride (onnxruntime refuses it)",
    "conv_transpose2d": "output_padding >= stride (onnxruntime refuses it)",
    "conv_transpose3d": "output_padding >= stride (onnxruntime refuses it)",
    "einsum": "an output label repeated, or an ellipsis summed away (onnxruntime refuses them)",
    "sort": "0-d input",
    "argsort": "0-d input",
    "topk": "0-d input",
    "kthvalue": "0-d input",
    "median": "0-d input",
    **{
        f"adaptive_{kind}_pool{nd}d": "output sizes that do not divide the input's"
        for kind in ("avg", "max")
        for nd in (1, 2, 3)
    },
}


def check_exportable(ops):
    """Raises ExportError naming every op (type, name, line) without an ONNX form."""
    _load()
    bad = [op for op in ops if op.type not in ONNX_OPS]
    if bad:
        lines = [
            f"{op.name}: {NOT_EXPORTABLE.get(op.type, 'no ONNX mapping')}"
            + (f" (recorded at {op.location})" if op.location else "")
            for op in bad
        ]
        raise ExportError(
            bad[0].type,
            f"{len(bad)} op(s) have no ONNX form: {', '.join(sorted({op.type for op in bad}))}",
            hint="; ".join(lines[:5]),
        )


def _load():
    from tape import onnx_ops_nn, onnx_ops_shape  # noqa: F401  (they fill the table)


def scalar(g, value, like):
    """A 0-d initializer of ``like``'s dtype (ONNX does not broadcast dtypes)."""
    return g.const(np.array(value, dtype=g.dtype(like)))


def out_input(g, slot="X"):
    """Input ``slot`` cast to the dtype of the op's first output."""
    first = next(iter(g.op.outputs.values()))[0]
    return g.cast(g.x(slot), g.dtype(first), g.dtype(g.op.inputs[slot][0]))


# ---- elementwise: one ONNX operator ---------------------------------------------------------

_UNARY = {
    "abs": "Abs",
    "acos": "Acos",
    "acosh": "Acosh",
    "asin": "Asin",
    "asinh": "Asinh",
    "atan": "Atan",
    "atanh": "Atanh",
    "cos": "Cos",
    "cosh": "Cosh",
    "erf": "Erf",
    "exp": "Exp",
    "log": "Log",
    "neg": "Neg",
    "reciprocal": "Reciprocal",
    "relu": "Relu",
    "sigmoid": "Sigmoid",
    "sign": "Sign",
    "sin": "Sin",
    "sinh": "Sinh",
    "sqrt": "Sqrt",
    "tan": "Tan",
    "tanh": "Tanh",
    "softsign": "Softsign",
    "mish": "Mish",
    "hardswish": "HardSwish",
}


def _unary(onnx_type):
    return lambda g: g.node(onnx_type, [g.x("X")], g.y())


for _type, _onnx_type in _UNARY.items():
    onnx(_type)(_unary(_onnx_type))


def _rounding(onnx_type):
    def emit(g):
        if g.dtype(g.op.inputs["X"][0]).kind != "f":  # integers are whole already
            g.node("Identity", [g.x("X")], g.y())
            return
        g.node(onnx_type, [g.x("X")], g.y())

    return emit


onnx("floor")(_rounding("Floor"))
onnx("ceil")(_rounding("Ceil"))

_UNARY_ATTRS = {
    "leaky_relu": ("LeakyRelu", {"alpha": "alpha"}),
    "elu": ("Elu", {"alpha": "alpha"}),
    "celu": ("Celu", {"alpha": "alpha"}),
}


def _unary_attrs(onnx_type, names):
    return lambda g: g.node(
        onnx_type, [g.x("X")], g.y(), **{k: float(g.attrs[v]) for k, v in names.items()}
    )


for _type, (_onnx_type, _names) in _UNARY_ATTRS.items():
    onnx(_type)(_unary_attrs(_onnx_type, _names))


@onnx("selu")
def _(g):  # PyTorch's constants in full (ONNX's defaults are float32-rounded)
    g.node("Selu", [g.x("X")], g.y(), alpha=1.6732632423543772, gamma=1.0507009873554805)


_BINARY = {
    "elementwise_add": "Add",
    "elementwise_sub": "Sub",
    "elementwise_mul": "Mul",
    "elementwise_div": "Div",
    "elementwise_pow": "Pow",
    "elementwise_max": "Max",
    "elementwise_min": "Min",
}


def aligned_y(g, y):
    """Y under Paddle's ``axis`` rule: trailing unit axes so numpy broadcasting applies."""
    axis = g.attrs.get("axis", -1)
    x_rank, y_rank = len(g.shape(g.op.inputs["X"][0])), len(g.shape(g.op.inputs["Y"][0]))
    if axis == -1 or y_rank >= x_rank or x_rank - axis == y_rank:
        return y
    return g.node("Unsqueeze", [y, g.const(list(range(y_rank, x_rank - axis)))])


def _binary(onnx_type):
    def emit(g):
        g.node(onnx_type, [out_input(g, "X"), aligned_y(g, out_input(g, "Y"))], g.y())

    return emit


for _type, _onnx_type in _BINARY.items():
    onnx(_type)(_binary(_onnx_type))


def common_inputs(g, first="X", second="Y"):
    """Both inputs cast to numpy's promotion of their dtypes (for ops with bool outputs)."""
    x_name, y_name = g.op.inputs[first][0], g.op.inputs[second][0]
    dtype = np.result_type(g.dtype(x_name), g.dtype(y_name))
    return g.cast(g.x(first), dtype, g.dtype(x_name)), g.cast(g.x(second), dtype, g.dtype(y_name))


_COMPARE = {
    "equal": "Equal",
    "greater_than": "Greater",
    "greater_equal": "GreaterOrEqual",
    "less_than": "Less",
    "less_equal": "LessOrEqual",
}


def _compare(onnx_type):
    def emit(g):
        x, y = common_inputs(g)
        g.node(onnx_type, [x, aligned_y(g, y)], g.y())

    return emit


for _type, _onnx_type in _COMPARE.items():
    onnx(_type)(_compare(_onnx_type))


@onnx("not_equal")
def _(g):
    x, y = common_inputs(g)
    g.node("Not", [g.node("Equal", [x, aligned_y(g, y)])], g.y())


def _as_bool(g, slot):
    return g.cast(g.x(slot), np.bool_, g.dtype(g.op.inputs[slot][0]))


for _type, _onnx_type in {"logical_and": "And", "logical_or": "Or", "logical_xor": "Xor"}.items():
    onnx(_type)(lambda g, t=_onnx_type: g.node(t, [_as_bool(g, "X"), _as_bool(g, "Y")], g.y()))


@onnx("logical_not")
def _(g):
    g.node("Not", [_as_bool(g, "X")], g.y())


def _bitwise(onnx_type, logical):
    def emit(g):
        x, y = out_input(g, "X"), out_input(g, "Y")
        g.node(logical if g.dtype(g.y()) == np.bool_ else onnx_type, [x, y], g.y())

    return emit


@onnx("bitwise_not")
def _(g):
    g.node("Not" if g.dtype(g.y()) == np.bool_ else "BitwiseNot", [g.x("X")], g.y())


onnx("bitwise_and")(_bitwise("BitwiseAnd", "And"))
onnx("bitwise_or")(_bitwise("BitwiseOr", "Or"))
onnx("bitwise_xor")(_bitwise("BitwiseXor", "Xor"))


@onnx("where")
def _(g):
    g.node("Where", [_as_bool(g, "Condition"), out_input(g, "X"), out_input(g, "Y")], g.y())


@onnx("cast")
def _(g):
    g.node("Cast", [g.x("X")], g.y(), to=_type_code(g.dtype(g.y())))


def _type_code(dtype):
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


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


_GRADIENT = "a gradient op: export the forward program (its gradient is not inference)"
_UPDATE = "an optimizer update (training state, not inference)"
_RANDOM = "random: ONNX's generators cannot reproduce fluidtape's stream"
NOT_EXPORTABLE.update(
    {name: _UPDATE for name in ("sgd", "momentum", "adam", "adamw", "rmsprop", "adagrad")}
)
NOT_EXPORTABLE.update({name: _RANDOM for name in ("gaussian_random", "uniform_random", "randint")})
NOT_EXPORTABLE.update(
    {
        "feed": "an Executor io op: export_onnx takes graph inputs directly",
        "fetch": "an Executor io op: export_onnx takes graph outputs directly",
        "save": "writes a file (a side effect with no ONNX form)",
        "bitwise_left_shift": "ONNX BitShift takes unsigned integers only",
        "bitwise_right_shift": "ONNX BitShift takes unsigned integers only",
        "cumprod": "ONNX has no cumulative product",
        "cummax": "ONNX has no cumulative maximum",
        "cummin": "ONNX has no cumulative minimum",
    }
)
GRADIENT_NOTE = _GRADIENT

__all__ = ["ONNX_OPS", "NOT_EXPORTABLE", "onnx", "mapping", "check_exportable"]
