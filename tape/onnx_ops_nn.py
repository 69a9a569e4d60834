"""ONNX forms of the neural-network ops: convolution, pooling, normalisation, dropout, the
recurrent cells, softmax and activations with weights, simple losses (part of
``tape.onnx_ops``); and the list of gradient ops, which have no inference form."""

from __future__ import annotations

import numpy as np

from ops.registry import REGISTRY
from tape.onnx_export import ExportError
from tape.onnx_ops import GRADIENT_NOTE, NOT_EXPORTABLE, onnx, out_input, scalar
from tape.onnx_ops import _type_code as _code


def _window(g, paddings, strides=None, dilations=None):
    """ONNX window attributes; ``paddings`` as fluidtape's: one per axis, or (start, end) per
    axis interleaved (ONNX wants all starts, then all ends)."""
    nd = len(strides) if strides is not None else len(paddings)
    if len(paddings) == nd:
        pads = list(paddings) * 2
    else:
        pads = list(paddings[0::2]) + list(paddings[1::2])
    if any(p < 0 for p in pads):
        raise ExportError(
            g.op.type,
            "negative padding (cropping) has no ONNX form",
            actual=f"paddings={tuple(paddings)}",
            name=g.op.name,
        )
    attrs = {"pads": pads}
    if strides is not None:
        attrs["strides"] = list(strides)
    if dilations is not None and any(d != 1 for d in dilations):
        attrs["dilations"] = list(dilations)
    return attrs


@onnx("conv1d", "conv2d", "conv3d")
def _(g):
    a = g.attrs
    window = _window(g, a["paddings"], a["strides"], a["dilations"])
    window["dilations"] = list(a["dilations"])
    g.node(
        "Conv",
        [out_input(g, "Input"), out_input(g, "Filter")],
        g.y("Output"),
        group=int(a["groups"]),
        **window,
    )


@onnx("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
def _(g):
    a = g.attrs
    window = _window(g, a["paddings"], a["strides"], a["dilations"])
    window["dilations"] = list(a["dilations"])
    if any(p >= s for p, s in zip(a["output_padding"], a["strides"])):
        raise ExportError(
            g.op.type,
            "output_padding >= stride is refused by onnxruntime",
            actual=f"output_padding={a['output_padding']}, strides={a['strides']}",
            name=g.op.name,
        )
    g.node(
        "ConvTranspose",
        [out_input(g, "Input"), out_input(g, "Filter")],
        g.y("Output"),
        group=int(a["groups"]),
        output_padding=list(a["output_padding"]),
        **window,
    )


def _pool(g, out, indices=None):
    a = g.attrs
    ksize = list(a["ksize"])
    strides = list(a["strides"] or ksize)
    window = _window(g, a["paddings"], strides, a["dilations"])
    common = {"kernel_shape": ksize, "ceil_mode": int(a["ceil_mode"]), **window}
    if a.get("pooling_type", "max") == "max":
        x, dtype = g.x("X"), g.dtype(g.op.inputs["X"][0])
        if dtype.kind != "f":  # ONNX pools floats: exact for integers below 2**53
            x = g.cast(x, np.float64, dtype)
            pooled = g.temp()
            outputs = [pooled] if indices is None else [pooled, indices]
            g.node("MaxPool", [x], outputs, **common)
            return g.node("Cast", [pooled], out, to=_code(dtype))
        outputs = [out] if indices is None else [out, indices]
        return g.node("MaxPool", [x], outputs, **common)
    if "dilations" in common:
        raise ExportError(
            g.op.type, "average pooling with dilation is not exported", name=g.op.name
        )
    include = 0 if a["exclusive"] else 1
    return g.node("AveragePool", [g.x("X")], out, count_include_pad=include, **common)


@onnx("pool1d", "pool2d", "pool3d")
def _(g):
    _pool(g, g.y())


def _plane_mask(g, flat_indices, spatial):
    """ONNX MaxPool's indices count over the whole tensor; PyTorch's (Mask) within a plane."""
    plane = int(np.prod(spatial))
    g.node("Mod", [flat_indices, g.const(np.array(plane, np.int64))], g.y("Mask"))


@onnx("max_pool1d_with_index", "max_pool2d_with_index", "max_pool3d_with_index")
def _(g):
    if not g.needs("Mask"):
        _pool(g, g.y("Out"))
        return
    indices = g.temp()
    _pool(g, g.y("Out"), indices)
    _plane_mask(g, indices, g.shape(g.op.inputs["X"][0])[2:])


def _adaptive(g, kind):
    spatial = g.shape(g.op.inputs["X"][0])[2:]
    sizes = list(g.attrs["output_size"])
    if any(out == 0 or size % out for size, out in zip(spatial, sizes)):
        raise ExportError(
            g.op.type,
            "adaptive pooling exports only when each output size divides the input size",
            actual=f"input {tuple(spatial)}, output_size {tuple(sizes)}",
            name=g.op.name,
        )
    kernel = [size // out for size, out in zip(spatial, sizes)]
    common = {"kernel_shape": kernel, "strides": kernel}
    if kind == "AveragePool":
        g.node("AveragePool", [g.x("X")], g.y(), **common)
        return
    if not g.needs("Mask"):
        g.node("MaxPool", [g.x("X")], g.y("Out"), **common)
        return
    out, indices = g.node("MaxPool", [g.x("X")], [g.y("Out"), g.temp()], **common)
    _plane_mask(g, indices, spatial)


for _nd in (1, 2, 3):
    onnx(f"adaptive_avg_pool{_nd}d")(lambda g: _adaptive(g, "AveragePool"))
    onnx(f"adaptive_max_pool{_nd}d")(lambda g: _adaptive(g, "MaxPool"))


@onnx("batch_norm")
def _(g):
    a = g.attrs
    x = g.x("X")
    nhwc = a["data_layout"] == "NHWC"
    rank = len(g.shape(g.op.inputs["X"][0]))
    if nhwc:
        x = g.node("Transpose", [x], perm=[0, rank - 1] + list(range(1, rank - 1)))
    params = [g.x(s) for s in ("Scale", "Bias", "Mean", "Variance")]
    if a["is_test"]:
        y = g.node("BatchNormalization", [x] + params, epsilon=float(a["epsilon"]))
    else:  # the batch's own (biased) statistics over every axis but the channels
        axes = g.const([0] + list(range(2, rank)))
        mean = g.node("ReduceMean", [x, axes], keepdims=1)
        centered = g.node("Sub", [x, mean])
        variance = g.node("ReduceMean", [g.node("Mul", [centered, centered]), axes], keepdims=1)
        inverse = g.node(
            "Reciprocal",
            [g.node("Sqrt", [g.node("Add", [variance, scalar(g, a["epsilon"], g.y("Y"))])])],
        )
        shape = g.const([-1] + [1] * (rank - 2))
        scale, bias = (g.node("Reshape", [p, shape]) for p in params[:2])
        y = g.node("Add", [g.node("Mul", [g.node("Mul", [centered, inverse]), scale]), bias])
    if nhwc:
        g.node("Transpose", [y], g.y("Y"), perm=[0] + list(range(2, rank)) + [1])
    else:
        g.node("Identity", [y], g.y("Y"))


@onnx("layer_norm")
def _(g):
    a = g.attrs
    x_name = g.op.inputs["X"][0]
    axis = int(a["begin_norm_axis"])
    normalised = g.shape(x_name)[axis:]
    scale = g.x("Scale") or g.const(np.ones(normalised, g.dtype(x_name)))
    inputs = [g.x("X"), scale] + ([g.x("Bias")] if g.x("Bias") else [])
    for k, slot in ((1, "Scale"), (2, "Bias")):  # Scale and Bias may come flattened
        if g.x(slot) and g.shape(g.op.inputs[slot][0]) != tuple(normalised):
            inputs[k] = g.node("Reshape", [inputs[k], g.const(list(normalised))])
    g.node("LayerNormalization", inputs, g.y("Y"), axis=axis, epsilon=float(a["epsilon"]))


@onnx("dropout")
def _(g):
    a = g.attrs
    p, upscale = a["dropout_prob"], a["mode"] == "upscale_in_train"
    if not (a["is_test"] or p == 0.0):
        raise ExportError(
            "dropout",
            "dropout in training mode is random and has no inference form",
            hint="call model.eval() before recording the program to export",
            name=g.op.name,
            location=g.op.location,
        )
    factor = 1.0 if upscale or p == 0.0 else 1.0 - p
    g.node("Mul", [g.x("X"), scalar(g, factor, g.y("Out"))], g.y("Out"))
    if g.needs("Mask"):
        _like = g.node("Shape", [g.x("X")])
        g.node("Expand", [scalar(g, factor, g.y("Out")), _like], g.y("Mask"))


def _gate_sum(g):
    """Gi + Gh + the biases that are given."""
    total = g.node("Add", [out_input(g, "Gi"), out_input(g, "Gh")])
    for slot in ("BiasIh", "BiasHh"):
        if g.x(slot) is not None:
            total = g.node("Add", [total, out_input(g, slot)])
    return total


@onnx("lstm_cell")
def _(g):
    hidden = g.shape(g.y("Cout"))[-1]
    z = _gate_sum(g)
    i, f, gate, o = g.node("Split", [z, g.const([hidden] * 4)], 4, axis=-1)
    i, f, o = (g.node("Sigmoid", [v]) for v in (i, f, o))
    gate = g.node("Tanh", [gate])
    cout = g.node(
        "Add", [g.node("Mul", [f, out_input(g, "C")]), g.node("Mul", [i, gate])], g.y("Cout")
    )
    g.node("Mul", [o, g.node("Tanh", [cout])], g.y("Hout"))
    if g.needs("Gates"):
        g.node("Concat", [i, f, gate, o], g.y("Gates"), axis=-1)


@onnx("gru_cell")
def _(g):
    hidden = g.shape(g.y("Hout"))[-1]
    sizes = g.const([hidden] * 3)
    gi_r, gi_z, gi_n = g.node("Split", [out_input(g, "Gi")] + [sizes], 3, axis=-1)
    gh_r, gh_z, gh_n = g.node("Split", [out_input(g, "Gh")] + [sizes], 3, axis=-1)
    biases = {}
    for slot in ("BiasIh", "BiasHh"):
        if g.x(slot) is not None:
            biases[slot] = g.node("Split", [out_input(g, slot), sizes], 3, axis=-1)

    def plus(value, slot, k):
        return g.node("Add", [value, biases[slot][k]]) if slot in biases else value

    r = g.node("Sigmoid", [plus(plus(g.node("Add", [gi_r, gh_r]), "BiasIh", 0), "BiasHh", 0)])
    z = g.node("Sigmoid", [plus(plus(g.node("Add", [gi_z, gh_z]), "BiasIh", 1), "BiasHh", 1)])
    ghn = plus(gh_n, "BiasHh", 2)
    n = g.node("Tanh", [g.node("Add", [plus(gi_n, "BiasIh", 2), g.node("Mul", [r, ghn])])])
    h = out_input(g, "H")
    g.node("Add", [n, g.node("Mul", [z, g.node("Sub", [h, n])])], g.y("Hout"))
    for slot, value in (("N", n), ("Ghn", ghn)):
        if g.needs(slot):
            g.node("Identity", [value], g.y(slot))
    if g.needs("RZ"):
        g.node("Concat", [r, z], g.y("RZ"), axis=-1)


@onnx("softmax")
def _(g):
    g.node("Softmax", [g.x("X")], g.y(), axis=int(g.attrs["axis"]))


@onnx("log_softmax")
def _(g):
    g.node("LogSoftmax", [g.x("X")], g.y(), axis=int(g.attrs["axis"]))


@onnx("prelu")
def _(g):
    x_rank = len(g.shape(g.op.inputs["X"][0]))
    weight = out_input(g, "Weight")
    if x_rank >= 2 and int(np.prod(g.shape(g.op.inputs["Weight"][0]))) > 1:
        weight = g.node("Reshape", [weight, g.const([-1] + [1] * (x_rank - 2))])
    g.node("PRelu", [out_input(g, "X"), weight], g.y())


@onnx("glu")
def _(g):
    axis = int(g.attrs["dim"]) % len(g.shape(g.op.inputs["X"][0]))
    first, second = g.node("Split", [g.x("X")], 2, axis=axis, num_outputs=2)
    g.node("Mul", [first, g.node("Sigmoid", [second])], g.y())


@onnx("mse")
def _(g):
    diff = g.node("Sub", [out_input(g, "X"), out_input(g, "Y")])
    squares = g.node("Mul", [diff, diff])
    reduction = g.attrs["reduction"]
    if reduction == "none":
        g.node("Identity", [squares], g.y())
    else:
        g.node("ReduceMean" if reduction == "mean" else "ReduceSum", [squares], g.y(), keepdims=0)


@onnx("huber_loss")
def _(g):
    out, delta = g.y(), g.attrs["delta"]
    gap = g.node("Abs", [g.node("Sub", [out_input(g, "X"), out_input(g, "Y")])])
    quadratic = g.node("Mul", [scalar(g, 0.5, out), g.node("Mul", [gap, gap])])
    linear = g.node(
        "Mul", [scalar(g, delta, out), g.node("Sub", [gap, scalar(g, 0.5 * delta, out)])]
    )
    g.node("Where", [g.node("Less", [gap, scalar(g, delta, out)]), quadratic, linear], out)


@onnx("kl_div")
def _(g):
    x, target, out = out_input(g, "X"), out_input(g, "Target"), g.y()
    if g.attrs["log_target"]:
        g.node("Mul", [g.node("Exp", [target]), g.node("Sub", [target, x])], out)
        return
    value = g.node("Mul", [target, g.node("Sub", [g.node("Log", [target]), x])])
    zero = scalar(g, 0.0, out)
    g.node("Where", [g.node("Equal", [target, zero]), zero, value], out)


@onnx("bce_loss")
def _(g):
    x, y, out = out_input(g, "X"), out_input(g, "Y"), g.y()
    floor = scalar(g, -100.0, out)
    log_x = g.node("Max", [g.node("Log", [x]), floor])
    log_rest = g.node("Max", [g.node("Log", [g.node("Sub", [scalar(g, 1.0, out), x])]), floor])
    rest = g.node("Sub", [scalar(g, 1.0, out), y])
    total = g.node("Add", [g.node("Mul", [y, log_x]), g.node("Mul", [rest, log_rest])])
    g.node("Neg", [total], out)


_NOT_YET = "not mapped yet (a composition of ONNX ops exists)"
NOT_EXPORTABLE.update(
    {
        "interpolate": _NOT_YET + ": Resize with PyTorch's coordinate rules per mode",
        "max_unpool1d": _NOT_YET + ": MaxUnpool with plane indices made tensor-wide",
        "max_unpool2d": _NOT_YET + ": MaxUnpool with plane indices made tensor-wide",
        "max_unpool3d": _NOT_YET + ": MaxUnpool with plane indices made tensor-wide",
        "nll_loss": _NOT_YET + ": GatherElements with weights and ignore_index",
        "softmax_with_cross_entropy": _NOT_YET + ": LogSoftmax and a gather",
        "sigmoid_cross_entropy_with_logits": _NOT_YET + ": elementwise with ignore_index",
        "cosine_similarity": _NOT_YET + ": norms, clamp and a sum",
        "pairwise_distance": _NOT_YET + ": a p-norm of the difference",
    }
)

# Ops that exist only inside gradients (their forward counterparts are exported).
_GRADIENT_ONLY = {
    "max_pool1d_select",
    "max_pool2d_select",
    "max_pool3d_select",
    "plane_scatter_add",
}
NOT_EXPORTABLE.update(
    {
        name: GRADIENT_NOTE
        for name in REGISTRY
        if name.endswith(("_grad", "_grad_filter", "_grad_input")) or name in _GRADIENT_ONLY
    }
)

__all__ = []
