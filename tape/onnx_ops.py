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
    from tape import (  # noqa: F401  (they fill the table)
        onnx_ops_math,
        onnx_ops_nn,
        onnx_ops_reduce,
        onnx_ops_shape,
    )


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
        "fused_elementwise": "a lazy plan's fused group, never on a recorded tape: export the ops",
        "batched_call": "a lazy plan's autobatched group, never on a recorded tape: export the ops",
        "call": "a tape.traced function's call (recorded lazily only): export the model eagerly",
        "call_region": "a lazy step's traced calls as one op (lazily only): export eagerly",
        "call_region_grad": "the gradient of a lazy step's traced calls, never exported",
        "gather_rows": "a lazy plan's gather for an autobatched group, never on a recorded tape",
    }
)
_COLLECTIVE = "a communication op (MPI): an exported model runs in one process"
NOT_EXPORTABLE.update(
    {
        name: _COLLECTIVE
        for name in ("c_allreduce_sum", "c_broadcast", "c_allgather", "send", "recv")
    }
)
GRADIENT_NOTE = _GRADIENT

__all__ = ["ONNX_OPS", "NOT_EXPORTABLE", "onnx", "mapping", "check_exportable"]
