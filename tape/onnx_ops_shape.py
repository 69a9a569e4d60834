"""ONNX forms of the shape, indexing, gathering and sorting ops (part of ``tape.onnx_ops``)."""

from __future__ import annotations

import numpy as np

from tape.onnx_export import ExportError
from tape.onnx_ops import NOT_EXPORTABLE, onnx, out_input, scalar
from tape.onnx_ops import _type_code as _code

_BIG = np.iinfo(np.int64).max


@onnx("reshape")
def _(g):
    shape = g.shape(g.y())
    target = g.target_shape(shape, g.op.inputs["X"][0])
    g.node("Reshape", [g.x("X"), target], g.y(), allowzero=int(0 in shape))


@onnx("transpose")
def _(g):
    perm = g.attrs["perm"]
    rank = len(g.shape(g.y()))
    if perm is None:
        perm = tuple(reversed(range(rank)))
    g.node("Transpose", [g.x("X")], g.y(), perm=[int(p) % rank for p in perm])


@onnx("squeeze")
def _(g):
    shape = g.shape(g.op.inputs["X"][0])
    axes = [a % len(shape) for a in g.attrs["axes"]] or [i for i, d in enumerate(shape) if d == 1]
    axes = [a for a in axes if shape[a] == 1]
    g.node("Squeeze" if axes else "Identity", [g.x("X")] + ([g.const(axes)] if axes else []), g.y())


@onnx("unsqueeze")
def _(g):
    rank = len(g.shape(g.y()))
    axes = sorted(a % rank for a in g.attrs["axes"])
    g.node("Unsqueeze", [g.x("X"), g.const(axes)], g.y())


def _cast_all(g, slot="X"):
    dtype = g.dtype(g.y() if g.op.outputs.get("Out") else next(iter(g.op.outputs.values()))[0])
    return [g.cast(x, dtype, g.dtype(n)) for x, n in zip(g.xs(slot), g.op.inputs[slot])]


@onnx("concat")
def _(g):
    rank = len(g.shape(g.y()))
    g.node("Concat", _cast_all(g), g.y(), axis=int(g.attrs["axis"]) % rank)


@onnx("stack")
def _(g):
    axis = int(g.attrs["axis"]) % len(g.shape(g.y()))
    parts = [g.node("Unsqueeze", [x, g.const([axis])]) for x in _cast_all(g)]
    g.node("Concat", parts, g.y(), axis=axis)


@onnx("split")
def _(g):
    outputs = g.ys("Out")
    axis = int(g.attrs["axis"]) % len(g.shape(g.op.inputs["X"][0]))
    sizes = [g.shape(name)[axis] for name in outputs]
    g.node("Split", [g.x("X"), g.const(sizes)], outputs, axis=axis)


@onnx("slice")
def _(g):
    axes, starts, ends = g.attrs["axes"], g.attrs["starts"], g.attrs["ends"]
    if not axes:
        g.node("Identity", [g.x("X")], g.y())
        return
    steps = g.attrs["strides"] or (1,) * len(axes)
    sliced = g.node(
        "Slice",
        [g.x("X"), g.const(list(starts)), g.const(list(ends)), g.const(list(axes))]
        + [g.const(list(steps))],
    )
    decrease = list(g.attrs["decrease_axis"])
    if decrease:
        g.node("Squeeze", [sliced, g.const(decrease)], g.y())
    else:
        g.node("Identity", [sliced], g.y())


@onnx("flip")
def _(g):
    rank = len(g.shape(g.y()))
    axes = list(range(rank)) if g.attrs["axis"] is None else [a % rank for a in g.attrs["axis"]]
    n = len(axes)
    if not n:
        g.node("Identity", [g.x("X")], g.y())
        return
    g.node(
        "Slice",
        [g.x("X"), g.const([-1] * n), g.const([-_BIG] * n), g.const(axes), g.const([-1] * n)],
        g.y(),
    )


def _rolled(g, x, shape, shift, axis):
    size = shape[axis]
    shift = shift % size if size else 0
    if not shift:
        return x
    tail = g.node("Slice", [x, g.const([size - shift]), g.const([size]), g.const([axis])])
    head = g.node("Slice", [x, g.const([0]), g.const([size - shift]), g.const([axis])])
    return g.node("Concat", [tail, head], axis=axis)


@onnx("roll")
def _(g):
    shape, shifts = g.shape(g.y()), list(g.attrs["shifts"])
    x = g.x("X")
    if g.attrs["axis"] is None:
        flat = g.node("Reshape", [x, g.const([-1])])
        rolled = _rolled(g, flat, (int(np.prod(shape)),), shifts[0], 0)
        g.node("Reshape", [rolled, g.const(list(shape))], g.y())
        return
    for shift, axis in zip(shifts, g.attrs["axis"]):
        x = _rolled(g, x, shape, shift, axis % len(shape))
    g.node("Identity", [x], g.y())


@onnx("tile")
def _(g):
    x, repeats = g.x("X"), list(g.attrs["repeats"])
    rank = len(g.shape(g.op.inputs["X"][0]))
    if len(repeats) > rank:
        x = g.node("Unsqueeze", [x, g.const(list(range(len(repeats) - rank)))])
    repeats = [1] * (rank - len(repeats)) + repeats
    g.node("Tile", [x, g.const(repeats)], g.y())


@onnx("broadcast_to")
def _(g):
    source = g.op.inputs["X"][0]
    shape = list(g.shape(g.y()))
    if g.is_batched(source) and len(g.shape(source)) == len(shape):
        shape[0] = 1  # Expand broadcasts both ways: the input's batch axis is kept
    g.node("Expand", [g.x("X"), g.const(shape)], g.y())


@onnx("sum_to_shape")
def _(g):
    source, target = g.shape(g.op.inputs["X"][0]), tuple(g.attrs["shape"])
    lead = len(source) - len(target)
    axes = list(range(lead)) + [
        lead + i for i, d in enumerate(target) if d == 1 and source[lead + i] != 1
    ]
    summed = g.node("ReduceSum", [g.x("X"), g.const(axes)], keepdims=1) if axes else g.x("X")
    g.node("Reshape", [summed, g.const(list(g.shape(g.y())))], g.y())


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


@onnx("pad")
def _(g):
    pad, mode = list(g.attrs["pad"]), g.attrs["mode"]
    rank = len(g.shape(g.y()))
    begins, ends = [0] * rank, [0] * rank
    for k in range(len(pad) // 2):  # torch order: (before, after) of the last axis first
        begins[rank - 1 - k], ends[rank - 1 - k] = pad[2 * k], pad[2 * k + 1]
    if mode not in _PAD_MODES:
        raise ExportError(
            "pad",
            f"pad mode '{mode}' is not exported",
            hint="constant, reflect, replicate",
            name=g.op.name,
        )
    inputs = [g.x("X"), g.const(begins + ends)]
    if mode == "constant":
        inputs.append(scalar(g, g.attrs["value"], g.y()))
    g.node("Pad", inputs, g.y(), mode=_PAD_MODES[mode])


@onnx("tril", "triu")
def _(g):
    upper = int(g.op.type == "triu")
    g.node("Trilu", [g.x("X"), g.const(int(g.attrs["diagonal"]))], g.y(), upper=upper)


@onnx("diagonal")
def _(g):  # the two axes moved last and flattened; the diagonal's flat positions gathered
    shape = g.shape(g.op.inputs["X"][0])
    rank = len(shape)
    first, second = g.attrs["axis1"] % rank, g.attrs["axis2"] % rank
    rest = [a for a in range(rank) if a not in (first, second)]
    moved = g.node("Transpose", [g.x("X")], perm=rest + [first, second])
    rows, cols, offset = shape[first], shape[second], int(g.attrs["offset"])
    positions = [
        (i - min(offset, 0)) * cols + i + max(offset, 0) for i in range(g.shape(g.y())[-1])
    ]
    flat = g.node("Reshape", [moved, g.const([0] * len(rest) + [rows * cols])])
    g.node("Gather", [flat, g.const(np.array(positions, np.int64))], g.y(), axis=len(rest))


@onnx("gather")
def _(g):
    rank = len(g.shape(g.op.inputs["X"][0]))
    g.node("Gather", [g.x("X"), g.x("Index")], g.y(), axis=int(g.attrs["axis"]) % rank)


@onnx("lookup_table")
def _(g):
    g.node("Gather", [g.x("W"), g.x("Ids")], g.y(), axis=0)


@onnx("take_along_dim")
def _(g):
    x, index, axis = g.x("X"), g.x("Index"), g.attrs["axis"]
    if axis is None:
        flat = g.node("Reshape", [x, g.const([-1])])
        index = g.node("Reshape", [index, g.const([-1])])
        g.node("GatherElements", [flat, index], g.y(), axis=0)
        return
    out_shape = list(g.shape(g.y()))
    rank = len(out_shape)
    axis %= rank
    x_shape = list(out_shape)
    x_shape[axis] = g.shape(g.op.inputs["X"][0])[axis]
    x = g.node("Expand", [x, g.const(x_shape)])
    index = g.node("Expand", [index, g.const(out_shape)])
    g.node("GatherElements", [x, index], g.y(), axis=axis)


@onnx("pick_along")
def _(g):
    rank = len(g.shape(g.y()))
    g.node("GatherElements", [g.x("X"), g.x("Indices")], g.y(), axis=int(g.attrs["axis"]) % rank)


@onnx("plane_gather")
def _(g):
    planes = g.node("Reshape", [g.x("X"), g.const([0, 0, -1])])
    index = g.node("Reshape", [g.x("Indices"), g.const([0, 0, -1])])
    picked = g.node("GatherElements", [planes, index], axis=2)
    g.node("Reshape", [picked, g.target_shape(g.shape(g.y()), g.op.inputs["X"][0])], g.y())


@onnx("one_hot")
def _(g):  # X[..., None] == arange(depth), in the output dtype
    x = g.cast(g.x("X"), np.int64, g.dtype(g.op.inputs["X"][0]))
    classes = g.const(np.arange(int(g.attrs["depth"]), dtype=np.int64))
    hits = g.node("Equal", [g.node("Unsqueeze", [x, g.const([-1])]), classes])
    g.node("Cast", [hits], g.y(), to=_code(g.dtype(g.y())))


@onnx("masked_select")
def _(g):
    shape = list(np.broadcast_shapes(g.shape(g.op.inputs["X"][0]), g.shape(g.op.inputs["Mask"][0])))
    flat = [
        g.node("Reshape", [g.node("Expand", [v, g.const(shape)]), g.const([-1])])
        for v in (g.x("X"), g.x("Mask"))
    ]
    g.node("Compress", flat, g.y(), axis=0)


@onnx("repeat_interleave")
def _(g):
    x, axis = g.x("X"), g.attrs["axis"]
    if axis is None:
        x, axis = g.node("Reshape", [x, g.const([-1])]), 0
        size = int(np.prod(g.shape(g.op.inputs["X"][0])))
    else:
        axis %= len(g.shape(g.op.inputs["X"][0]))
        size = g.shape(g.op.inputs["X"][0])[axis]
    repeats = np.broadcast_to(np.asarray(g.attrs["repeats"], np.int64), (size,))
    index = np.repeat(np.arange(size, dtype=np.int64), repeats)
    g.node("Gather", [x, g.const(index)], g.y(), axis=axis)


def _topk(g, k, axis, largest):
    return g.node("TopK", [g.x("X"), g.const([k])], 2, axis=axis, largest=largest, sorted=1)


def _axis_and_size(g):
    shape = g.shape(g.op.inputs["X"][0])
    if not shape:
        raise ExportError(g.op.type, "sorting a 0-d array is not exported", name=g.op.name)
    axis = int(g.attrs["axis"]) % len(shape)
    return axis, shape[axis]


@onnx("sort")
def _(g):
    axis, size = _axis_and_size(g)
    values, indices = _topk(g, size, axis, int(g.attrs["descending"]))
    g.node("Identity", [values], g.y("Out"))
    g.node("Identity", [indices], g.y("Indices"))


@onnx("argsort")
def _(g):
    axis, size = _axis_and_size(g)
    _, indices = _topk(g, size, axis, int(g.attrs["descending"]))
    g.node("Identity", [indices], g.y())


@onnx("topk")
def _(g):
    axis, _ = _axis_and_size(g)
    values, indices = _topk(g, int(g.attrs["k"]), axis, int(g.attrs["largest"]))
    g.node("Identity", [values], g.y("Out"))
    g.node("Identity", [indices], g.y("Indices"))


def _kth(g, x, k, axis, keep, names=None):
    """The k-th smallest (k from 1) along ``axis`` and its index, the axis kept or not."""
    values, indices = g.node("TopK", [x, g.const([k])], 2, axis=axis, largest=0, sorted=1)
    picked = [
        g.node("Slice", [v, g.const([k - 1]), g.const([k]), g.const([axis])])
        for v in (values, indices)
    ]
    for value, slot in zip(picked, ("Out", "Indices")):
        name = names[slot] if names else g.y(slot)
        if keep:
            g.node("Identity", [value], name)
        else:
            g.node("Squeeze", [value, g.const([axis])], name)


@onnx("kthvalue")
def _(g):
    axis, _ = _axis_and_size(g)
    _kth(g, g.x("X"), int(g.attrs["k"]), axis, g.attrs["keepdim"])


@onnx("median")
def _(g):
    x, axis, keep = g.x("X"), g.attrs["axis"], g.attrs["keepdim"]
    shape = g.shape(g.op.inputs["X"][0])
    if not shape:
        _axis_and_size(g)  # raises: 0-d
    if axis is None:
        size = int(np.prod(shape))
        x, axis, keep = g.node("Reshape", [x, g.const([-1])]), 0, False
    else:
        axis = int(axis[0] if isinstance(axis, tuple) else axis) % len(shape)
        size = shape[axis]
    if g.attrs["axis"] is None and g.attrs["keepdim"]:
        flat_out = {slot: g.temp() for slot in ("Out", "Indices")}
        _kth(g, x, (size - 1) // 2 + 1, axis, False, flat_out)
        for slot, name in flat_out.items():
            g.node("Reshape", [name, g.const(list(g.shape(g.y(slot))))], g.y(slot))
        return
    _kth(g, x, (size - 1) // 2 + 1, axis, keep)


@onnx("einsum")
def _(g):
    equation = g.attrs["equation"].replace(" ", "")
    inputs, _, output = equation.partition("->")
    letters = [c for c in output if c.isalpha()]
    if len(set(letters)) != len(letters) or (
        "..." in inputs and "->" in equation and "..." not in output
    ):
        raise ExportError(
            "einsum", "onnxruntime refuses this equation", actual=equation, name=g.op.name
        )
    dtype = g.dtype(g.y())
    inputs = [g.cast(x, dtype, g.dtype(n)) for x, n in zip(g.xs("X"), g.op.inputs["X"])]
    g.node("Einsum", inputs, g.y(), equation=g.attrs["equation"].replace(" ", ""))


_SCATTER = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min"}


def _scatter(g, reduction):
    index_shape = list(g.shape(g.op.inputs["Index"][0]))
    src_shape = list(g.shape(g.op.inputs["Src"][0]))
    src = out_input(g, "Src")
    if len(src_shape) == len(index_shape) and src_shape != index_shape:  # the leading part
        src = g.node("Slice", [src, g.const([0] * len(index_shape)), g.const(index_shape)])
    elif src_shape != index_shape:  # a scalar, broadcast
        src = g.node("Expand", [src, g.const(index_shape)])
    rank = len(g.shape(g.y()))
    g.node(
        "ScatterElements",
        [out_input(g, "X"), g.x("Index"), src],
        g.y(),
        axis=int(g.attrs["axis"]) % rank,
        reduction=reduction,
    )


@onnx("scatter")
def _(g):
    _scatter(g, "none")


@onnx("scatter_add")
def _(g):
    _scatter(g, "add")


@onnx("scatter_reduce")
def _(g):
    reduce = g.attrs["reduce"]
    if reduce not in _SCATTER or not g.attrs["include_self"]:
        raise ExportError(
            "scatter_reduce",
            "this reduction has no ONNX form",
            expected="reduce sum, prod, amax or amin with include_self=True",
            actual=f"reduce={reduce!r}, include_self={g.attrs['include_self']}",
            name=g.op.name,
        )
    _scatter(g, _SCATTER[reduce])


NOT_EXPORTABLE.update(
    {
        "index": "numpy advanced indexing (slices, None, ellipsis and integer arrays mixed) is "
        "not mapped yet; slice, gather and take_along_dim cover the common cases",
        "index_put": "indexed assignment with numpy's mixed index kinds is not mapped yet",
        "cdist": "ONNX has no all-pairs distance; the pairwise difference and p-norm are not "
        "composed yet",
        "searchsorted": "ONNX has no binary search over a sorted sequence (nor a stable sort "
        "to merge one with)",
        "bucketize": "ONNX has no binary search over sorted boundaries; bucketize is searchsorted",
        "kron": "ONNX has no Kronecker product; the interleaving reshape of an outer product "
        "is not composed yet",
        "cross": "ONNX has no cross product; its three products of gathered components are not "
        "composed yet",
    }
)

__all__ = []
