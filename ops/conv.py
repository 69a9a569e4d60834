"""N-d convolutions, channels first (conv1d, conv2d, conv3d), each with its two gradient ops.

For every rank there are three ops: ``conv<n>d`` (im2col and one batched matmul),
``conv<n>d_grad_input`` (the transposed convolution: per kernel offset a matmul whose columns are
added back through a strided slice, col2im) and ``conv<n>d_grad_filter`` (a matmul of gout with
the columns). The three are adjoint to each other, so each one's gradient is built from the other
two and derivatives of any order work. The kernels, shared by all ranks and by the transposed
convolutions (``ops.conv_transpose``), are in ``ops.conv_kernels``.
"""

from __future__ import annotations

import numpy as np

from ops.conv_kernels import (
    SPATIAL,
    axis_pads,
    convolve,
    filter_gradient,
    output_spatial,
    transposed,
)
from ops.registry import REGISTRY, Attr, register
from tape.errors import DTypeError, ShapeError
from tape.tape import apply

# How many ints an attribute takes, in words (for the rules in error messages).
WORDS = {1: "one int", 2: "two ints", 3: "three ints", 4: "four ints", 6: "six ints"}


def _paddings_ok(value, nd):
    if len(value) == nd:
        return min(value) >= 0
    return len(value) == 2 * nd and min(value[0::2]) >= 0


def conv_attrs(nd):
    """The attributes of the rank-``nd`` convolution ops (PyTorch's arguments, Paddle's names)."""
    return {
        "strides": Attr(
            "ints",
            (1,) * nd,
            check=lambda v: len(v) == nd and min(v) >= 1,
            rule=f"{WORDS[nd]} >= 1",
        ),
        "paddings": Attr(
            "ints",
            (0,) * nd,
            check=lambda v: _paddings_ok(v, nd),
            rule=f"{WORDS[nd]} >= 0, or {WORDS[2 * nd]} (start, end per axis) with starts "
            ">= 0 (a negative end leaves trailing input positions unread)",
        ),
        "dilations": Attr(
            "ints",
            (1,) * nd,
            check=lambda v: len(v) == nd and min(v) >= 1,
            rule=f"{WORDS[nd]} >= 1",
        ),
        "groups": Attr("int", 1, check=lambda v: v >= 1, rule=">= 1"),
    }


_CONV_KEYS = ("strides", "paddings", "dilations", "groups")


def conv_only(attrs):
    """The convolution attributes of a family op's attributes (drops input/filter shapes)."""
    return {key: attrs[key] for key in _CONV_KEYS}


def float_result(x, w, x_slot, w_slot):
    """numpy's promotion of two floating-point inputs, or a DTypeError naming the other one."""
    for var, slot in ((x, x_slot), (w, w_slot)):
        if var.dtype.kind != "f":
            raise DTypeError(
                None,
                f"input {slot} must be floating point",
                expected="float16, float32 or float64",
                actual=str(var.dtype),
            )
    return x.dtype if x.dtype == w.dtype else np.result_type(x.dtype, w.dtype)


def conv_shape(attrs, x_shape, w_shape):
    """Output's shape from Input's and Filter's, or a ShapeError saying which rule failed."""
    nd = len(attrs["strides"])
    x_shape, w_shape = tuple(x_shape), tuple(w_shape)
    shapes = f"Input.shape={x_shape}, Filter.shape={w_shape}"
    if len(x_shape) != nd + 2 or len(w_shape) != nd + 2:
        raise ShapeError(
            None,
            f"Input and Filter must be {nd + 2}-D",
            expected=f"Input (N, C, {SPATIAL[nd]}) and Filter (O, C/groups, *kernel)",
            actual=shapes,
        )
    (n, c, *size), (o, cg, *kernel), groups = x_shape, w_shape, attrs["groups"]
    if min(kernel) < 1:
        raise ShapeError(
            None, "Filter has an empty kernel", expected="kernel sizes >= 1", actual=shapes
        )
    if c % groups or o % groups:
        raise ShapeError(
            None,
            "channels are not divisible by groups",
            expected=f"Input channels ({c}) and Filter.shape[0] ({o}) divisible by groups={groups}",
            actual=shapes,
        )
    if c != cg * groups:
        raise ShapeError(
            None,
            "Input channels do not match the Filter",
            expected=f"Input.shape[1] == Filter.shape[1] * groups "
            f"({cg} * {groups} = {cg * groups})",
            actual=f"Input.shape[1] = {c} ({shapes})",
        )
    _check_span(attrs, size, kernel, shapes)
    return (n, o) + output_spatial(attrs, size, kernel)


def _check_span(attrs, size, kernel, shapes):
    pads = axis_pads(attrs["paddings"], len(size))
    span = tuple(d * (k - 1) + 1 for k, d in zip(kernel, attrs["dilations"]))
    padded = tuple(s + lo + hi for s, (lo, hi) in zip(size, pads))
    if any(a > b for a, b in zip(span, padded)):
        raise ShapeError(
            None,
            "kernel is larger than the padded input",
            expected=f"dilated kernel {_tuple(span)} <= padded input {_tuple(padded)}",
            actual=f"{shapes}, paddings={attrs['paddings']}, dilations={attrs['dilations']}",
        )


def _tuple(values):
    return f"({values[0]})" if len(values) == 1 else str(tuple(values))


def _infer_conv(attrs, x, w):
    dtype = float_result(x, w, "Input", "Filter")
    return conv_shape(attrs, x.shape, w.shape), dtype


def _check_gout(attrs, x_shape, w_shape, gout):
    expected = conv_shape(attrs, x_shape, w_shape)
    if tuple(gout.shape) != expected:
        raise ShapeError(
            None,
            "Output@GRAD does not have the convolution's output shape",
            expected=f"{expected} (Input.shape={tuple(x_shape)}, Filter.shape={tuple(w_shape)})",
            actual=str(gout.shape),
        )


def _infer_grad_input(attrs, w, gout):
    dtype = float_result(gout, w, "Output@GRAD", "Filter")
    _check_gout(attrs, attrs["input_shape"], w.shape, gout)
    return tuple(attrs["input_shape"]), dtype


def _infer_grad_filter(attrs, x, gout):
    dtype = float_result(x, gout, "Input", "Output@GRAD")
    _check_gout(attrs, x.shape, attrs["filter_shape"], gout)
    return tuple(attrs["filter_shape"]), dtype


def _conv_kernel(xp, attrs, x, w):
    return convolve(xp, x, w, attrs)


def _grad_input_kernel(xp, attrs, w, gout):
    return transposed(xp, w, gout, attrs["input_shape"], attrs)


def _grad_filter_kernel(xp, attrs, x, gout):
    return filter_gradient(xp, x, gout, attrs["filter_shape"], attrs)


def like(var, grad):
    """The gradient ``grad`` of ``var`` in var's dtype: with mixed input dtypes a gradient op
    computes in the promoted dtype, and a float32 variable still gets a float32 gradient."""
    if grad.dtype == var.dtype:
        return grad
    return apply(REGISTRY["cast"], (grad,), {"out_dtype": var.dtype.name})


# rank -> (conv<n>d, conv<n>d_grad_input, conv<n>d_grad_filter)
FAMILIES = {}


def family(attrs):
    """The three convolution ops of the rank the attributes describe."""
    return FAMILIES[len(attrs["strides"])]


def _conv_gradient(g):
    (x, w), (gout,) = g.inputs, g.gouts
    _, grad_input, grad_filter = family(g.attrs)
    attrs = conv_only(g.attrs)
    gx = gw = None
    if g.needs(0):
        gx = like(x, apply(grad_input, (w, gout), {**attrs, "input_shape": x.shape}))
    if g.needs(1):
        gw = like(w, apply(grad_filter, (x, gout), {**attrs, "filter_shape": w.shape}))
    return gx, gw


def _grad_input_gradient(g):
    (w, gout), (upstream,) = g.inputs, g.gouts
    conv, _, grad_filter = family(g.attrs)
    attrs = conv_only(g.attrs)
    gw = ggout = None
    if g.needs(0):
        gw = like(w, apply(grad_filter, (upstream, gout), {**attrs, "filter_shape": w.shape}))
    if g.needs(1):
        ggout = like(gout, apply(conv, (upstream, w), attrs))
    return gw, ggout


def _grad_filter_gradient(g):
    (x, gout), (upstream,) = g.inputs, g.gouts
    conv, grad_input, _ = family(g.attrs)
    attrs = conv_only(g.attrs)
    gx = ggout = None
    if g.needs(0):
        gx = like(x, apply(grad_input, (upstream, gout), {**attrs, "input_shape": x.shape}))
    if g.needs(1):
        ggout = like(gout, apply(conv, (x, upstream), attrs))
    return gx, ggout


_CONV_DOC = """Output[n, o, *p] = sum over c and kernel offsets k of Filter[o, c, *k] *
pad(Input)[n, g * C/groups + c, *(p * strides + k * dilations)] for the group g of o: the
{nd}-D cross-correlation of PyTorch's conv{nd}d, Input (N, C, {spatial}), Filter (O, C/groups,
*kernel). ``paddings`` pads both ends of each axis, or (start, end) per axis.

Gradients: dInput = conv{nd}d_grad_input(Filter, dOutput) (the transposed convolution),
dFilter = conv{nd}d_grad_filter(Input, dOutput) (dOutput correlated with the input's columns).
Mixed float dtypes promote as numpy does.
{example}"""

_EXAMPLES = {
    1: """
>>> import numpy as np, tape, ops
>>> x = tape.Variable(np.arange(5, dtype=np.float32).reshape(1, 1, 5))
>>> ops.conv1d(x, np.ones((1, 1, 2), np.float32), strides=[2], paddings=[1]).numpy()
array([[[0., 3., 7.]]], dtype=float32)
""",
    2: """
>>> import numpy as np, tape, ops
>>> x = tape.Variable(np.ones((1, 1, 3, 3), np.float32))
>>> ops.conv2d(x, np.ones((1, 1, 2, 2), np.float32), paddings=[1, 1]).numpy()[0, 0]
array([[1., 2., 2., 1.],
       [2., 4., 4., 2.],
       [2., 4., 4., 2.],
       [1., 2., 2., 1.]], dtype=float32)
""",
    3: """
>>> import numpy as np, tape, ops
>>> x = tape.Variable(np.ones((2, 4, 5, 5, 5), np.float32))
>>> ops.conv3d(x, np.ones((6, 2, 3, 3, 3), np.float32), groups=2).shape
(2, 6, 3, 3, 3)
""",
}

_GRAD_INPUT_DOC = """Input@GRAD = the transposed {nd}-D convolution of Output@GRAD with Filter: the
columns Filter^T @ Output@GRAD added back into the (padded) input positions they were read from.

Linear in both inputs and adjoint to conv{nd}d, so for an upstream gradient G:
dFilter = conv{nd}d_grad_filter(G, Output@GRAD), d(Output@GRAD) = conv{nd}d(G, Filter).
"""

_GRAD_FILTER_DOC = """Filter@GRAD[o, c, *k] = sum over n and output positions p of
Output@GRAD[n, o, *p] times the input value Filter[o, c, *k] multiplied in conv{nd}d
(Output@GRAD @ columns^T, per group).

Bilinear and adjoint to conv{nd}d, so for an upstream gradient G:
dInput = conv{nd}d_grad_input(G, Output@GRAD), d(Output@GRAD) = conv{nd}d(Input, G).
"""


def _register_family(nd):
    schema = conv_attrs(nd)
    shape = dict(check=lambda v: len(v) == nd + 2, rule=WORDS.get(nd + 2, f"{nd + 2} ints"))
    words = dict(nd=nd, spatial=SPATIAL[nd])
    conv = register(
        f"conv{nd}d",
        inputs=("Input", "Filter"),
        outputs=("Output",),
        attrs=schema,
        infer=_infer_conv,
        doc=_CONV_DOC.format(example=_EXAMPLES[nd], **words),
    )(_conv_kernel)
    grad_input = register(
        f"conv{nd}d_grad_input",
        inputs=("Filter", "Output@GRAD"),
        outputs=("Input@GRAD",),
        attrs={**schema, "input_shape": Attr("ints", required=True, **shape)},
        infer=_infer_grad_input,
        doc=_GRAD_INPUT_DOC.format(**words),
    )(_grad_input_kernel)
    grad_filter = register(
        f"conv{nd}d_grad_filter",
        inputs=("Input", "Output@GRAD"),
        outputs=("Filter@GRAD",),
        attrs={**schema, "filter_shape": Attr("ints", required=True, **shape)},
        infer=_infer_grad_filter,
        doc=_GRAD_FILTER_DOC.format(**words),
    )(_grad_filter_kernel)
    conv.gradient(_conv_gradient)
    grad_input.gradient(_grad_input_gradient)
    grad_filter.gradient(_grad_filter_gradient)
    FAMILIES[nd] = (conv, grad_input, grad_filter)
    return conv, grad_input, grad_filter


conv1d, conv1d_grad_input, conv1d_grad_filter = _register_family(1)
conv2d, conv2d_grad_input, conv2d_grad_filter = _register_family(2)
conv3d, conv3d_grad_input, conv3d_grad_filter = _register_family(3)
