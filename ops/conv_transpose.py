"""Transposed convolutions (conv_transpose1d/2d/3d), PyTorch's, as the adjoint of a convolution.

``conv_transpose<n>d(X, W)`` is the input gradient of the convolution of its output Y with W
(W's layout (C_in, C_out/groups, *kernel) is exactly that convolution's filter layout), so its
kernel is the col2im of ``ops.conv_kernels`` and its gradients are the convolution ops:
dX = conv<n>d(dY, W), dW = conv<n>d_grad_filter(dY, X). ``output_padding`` extends Y's end; the
convolution that reads Y back pads that end by ``padding - output_padding`` (negative: it leaves
those positions unread), which gives exactly X's length.
"""

from __future__ import annotations

from ops.conv import WORDS, family, float_result, like
from ops.conv_kernels import SPATIAL, transposed
from ops.registry import Attr, register
from tape.errors import ShapeError
from tape.tape import apply


def transpose_attrs(nd):
    def ints(minimum, default):
        return Attr(
            "ints",
            (default,) * nd,
            check=lambda v: len(v) == nd and min(v) >= minimum,
            rule=f"{WORDS[nd]} >= {minimum}",
        )

    return {
        "strides": ints(1, 1),
        "paddings": ints(0, 0),
        "output_padding": ints(0, 0),
        "dilations": ints(1, 1),
        "groups": Attr("int", 1, check=lambda v: v >= 1, rule=">= 1"),
    }


def conv_of(attrs):
    """The attributes of the convolution this transposed convolution is the adjoint of."""
    pads = []
    for p, extra in zip(attrs["paddings"], attrs["output_padding"]):
        pads += [p, p - extra]
    return {
        "strides": attrs["strides"],
        "paddings": tuple(pads),
        "dilations": attrs["dilations"],
        "groups": attrs["groups"],
    }


def transposed_size(size, kernel, attrs):
    """PyTorch's output length: (L - 1) * stride - 2 * padding + dilation * (k - 1) +
    output_padding + 1 along each axis."""
    return tuple(
        (n - 1) * s - 2 * p + d * (k - 1) + extra + 1
        for n, k, s, p, d, extra in zip(
            size,
            kernel,
            attrs["strides"],
            attrs["paddings"],
            attrs["dilations"],
            attrs["output_padding"],
        )
    )


def _infer(attrs, x, w):
    dtype = float_result(x, w, "Input", "Filter")
    nd = len(attrs["strides"])
    shapes = f"Input.shape={x.shape}, Filter.shape={w.shape}"
    if len(x.shape) != nd + 2 or len(w.shape) != nd + 2:
        raise ShapeError(
            None,
            f"Input and Filter must be {nd + 2}-D",
            expected=f"Input (N, C_in, {SPATIAL[nd]}) and Filter (C_in, C_out/groups, *kernel)",
            actual=shapes,
        )
    (n, c, *size), (cw, og, *kernel), groups = x.shape, w.shape, attrs["groups"]
    if min(kernel) < 1:
        raise ShapeError(
            None, "Filter has an empty kernel", expected="kernel sizes >= 1", actual=shapes
        )
    if c != cw or c % groups:
        raise ShapeError(
            None,
            "Input channels do not match the Filter",
            expected=f"Input.shape[1] == Filter.shape[0], divisible by groups={groups}",
            actual=shapes,
        )
    _check_output_padding(attrs)
    out = transposed_size(size, kernel, attrs)
    if min(out, default=1) < 1:
        raise ShapeError(
            None,
            "the output would be empty",
            expected="(L - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1 "
            ">= 1 along each axis",
            actual=f"{out} ({shapes}, paddings={attrs['paddings']})",
        )
    return (n, og * groups) + out, dtype


def _check_output_padding(attrs):
    for extra, s, d in zip(attrs["output_padding"], attrs["strides"], attrs["dilations"]):
        if extra >= max(s, d):
            raise ShapeError(
                None,
                "output_padding must be smaller than the stride or the dilation",
                expected=f"output_padding < max(stride, dilation) = {max(s, d)}",
                actual=f"output_padding={attrs['output_padding']}",
            )


def _kernel(xp, attrs, x, w):
    (n, _, *size), (_, og, *kernel) = x.shape, w.shape
    shape = (n, og * attrs["groups"]) + transposed_size(size, kernel, attrs)
    return transposed(xp, w, x, shape, conv_of(attrs))


def _gradient(g):
    (x, w), (gout,) = g.inputs, g.gouts
    conv, _, grad_filter = family(g.attrs)
    attrs = conv_of(g.attrs)
    gx = gw = None
    if g.needs(0):
        gx = like(x, apply(conv, (gout, w), attrs))
    if g.needs(1):
        gw = like(w, apply(grad_filter, (gout, x), {**attrs, "filter_shape": w.shape}))
    return gx, gw


_DOC = """Output = the {nd}-D transposed convolution of Input (N, C_in, {spatial}) with Filter
(C_in, C_out/groups, *kernel), PyTorch's conv_transpose{nd}d: each input position scatters
Filter times its value into the output window it would have been read from by conv{nd}d, so
Output's length is (L - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1.

dInput = conv{nd}d(dOutput, Filter), dFilter = conv{nd}d_grad_filter(dOutput, Input) (the
convolution padding its end by padding - output_padding); gradients of any order work.
{example}"""

_EXAMPLES = {
    1: """
>>> import numpy as np, tape, ops
>>> x = tape.Variable(np.array([[[1.0, 2.0]]], np.float32))
>>> ops.conv_transpose1d(x, np.ones((1, 1, 3), np.float32), strides=[2]).numpy()
array([[[1., 1., 3., 2., 2.]]], dtype=float32)
""",
    2: """
>>> import numpy as np, tape, ops
>>> x = tape.Variable(np.ones((1, 4, 5, 5), np.float32))
>>> w = np.ones((4, 3, 3, 3), np.float32)
>>> ops.conv_transpose2d(x, w, strides=[2, 2], paddings=[1, 1], output_padding=[1, 1]).shape
(1, 3, 10, 10)
""",
    3: "",
}


def _register(nd):
    op = register(
        f"conv_transpose{nd}d",
        inputs=("Input", "Filter"),
        outputs=("Output",),
        attrs=transpose_attrs(nd),
        infer=_infer,
        doc=_DOC.format(nd=nd, spatial=SPATIAL[nd], example=_EXAMPLES[nd]),
    )(_kernel)
    op.gradient(_gradient)
    return op


conv_transpose1d = _register(1)
conv_transpose2d = _register(2)
conv_transpose3d = _register(3)
