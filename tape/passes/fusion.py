"""Fusion: chains of elementwise ops become one ``fused_elementwise`` op (DESIGN pass 5).

A group is built in program order: an elementwise op (the registry's ``elementwise`` fact, pure,
one output) joins the group of the op producing one of its inputs when every input it reads is
written by a member, or last written before the group's first op, or never written (a leaf).
That keeps each group convex -- nothing outside it runs between two of its members on a path
from one to the other -- so the fused op can stand where the group's first member stood: every
external input exists there already. A trailing sum or mean over a member's full-shape value
(``reduce_sum``, ``reduce_mean``, ``mean``, ``sum_to_shape``: a broadcast gradient's reduction,
a loss) closes the group as one of its outputs, except with ``exact`` (a blocked sum is a
reordered sum). Binary ops join only where Paddle's ``axis`` means numpy broadcasting. With
``exact`` the fused kernels give every value bit for bit as the unfused ops do
(``ops.fused``).

A member's value is materialised (an output of the fused op) when a later op outside the group
reads it or the caller keeps it (fetches, what the user holds, what a later backward needs);
every other intermediate never exists as a buffer. Caps: ``MAX_STEPS`` ops and ``MAX_INPUTS``
external inputs per group (the blocked backend keeps one scratch block per live step, and
generated kernels take every input as an argument).

Cost: O(n + reads) with dictionaries of last writers; each op is looked at once.
"""

from __future__ import annotations

import numpy as np

from ops.fused_expression import Expression, Reduction, Step
from ops.registry import REGISTRY
from tape.ir import Block, OpDesc, freeze
from tape.passes.dependencies import written_names

MAX_STEPS = 64
MAX_INPUTS = 32
REDUCTIONS = ("reduce_sum", "reduce_mean", "mean", "sum_to_shape")


def fusable(defn):
    """Whether an op of this definition may be a step of a fused group."""
    return (
        defn.elementwise
        and defn.single_output
        and not defn.random
        and not defn.side_effect
        and not defn.inplace
    )


class _Group:
    __slots__ = ("start", "members", "reductions", "closed", "inputs", "shape", "writers")

    def __init__(self, start, shape):
        self.start, self.members, self.reductions = start, [start], []
        self.closed, self.inputs, self.shape = False, set(), shape
        self.writers = set()  # the ops writing the group's external inputs


def rewrite(block, keep=(), exact=False) -> Block:
    """``block`` with its elementwise groups fused (itself when nothing is fused)."""
    ops = block.ops
    groups = _groups(block, exact)
    fused = [g for g in groups if g.members and len(g.members) + len(g.reductions) >= 2]
    if not fused:
        return block
    keep = set(keep) | {n for n, v in block.vars.items() if v.persistable}
    member_of = {i: g for g in fused for i in g.members + g.reductions}
    readers = {}
    for index, op in enumerate(ops):
        for name in op.input_names():
            readers.setdefault(name, []).append(index)
    replacement = {id(g): _fused_op(block, g, readers, keep, exact) for g in fused}
    out = []
    for index, op in enumerate(ops):
        group = member_of.get(index)
        if group is None:
            out.append(op)
        elif index == group.start:
            out.append(replacement[id(group)])
    return Block(dict(block.vars), out, block.idx)


def _groups(block, exact):
    ops, variables = block.ops, block.vars
    group_of, groups, last_writer = {}, [], {}
    for index, op in enumerate(ops):
        defn = REGISTRY[op.type]
        reads = op.input_names()
        if fusable(defn) and _numpy_aligned(op, variables):
            shape = tuple(variables[op.output_names()[0]].shape)
            _merge_readable(reads, group_of, last_writer)
            group = _joinable(reads, group_of, last_writer)
            together = None if group is None else _broadcast(group.shape, shape)
            if together is not None and len(group.members) < MAX_STEPS:
                external = {n for n in reads if group_of.get(last_writer.get(n, -1)) is not group}
                if len(group.inputs | external) <= MAX_INPUTS:
                    group.members.append(index)
                    group.inputs |= external
                    group.writers.update(last_writer[n] for n in external if n in last_writer)
                    group.shape = together
                    group_of[index] = group
                else:
                    group = None
            else:
                group = None
            if group is None:
                group = _Group(index, shape)
                group.inputs = set(reads)
                group.writers = {last_writer[n] for n in reads if n in last_writer}
                groups.append(group)
                group_of[index] = group
        elif op.type in REDUCTIONS and not exact:
            source = reads[0]
            group = group_of.get(last_writer.get(source, -1))
            if (
                group is not None
                and not group.closed
                and len(reads) == 1
                and tuple(variables[source].shape) == group.shape
            ):
                group.reductions.append(index)
                group.closed = True  # (the reduction's axes refer to the shape so far)
                group_of[index] = group
        for name in written_names(op):
            last_writer[name] = index
    return groups


def _merge_readable(reads, group_of, last_writer):
    """When an op reads from several open groups, folds the later ones into the earliest where
    that keeps it convex (nothing a later group reads is written, outside the earliest, after it
    started): one kernel instead of several, and no buffer between them."""
    groups = {}
    for name in reads:
        group = group_of.get(last_writer.get(name, -1))
        if group is not None and not group.closed and not group.reductions:
            groups[id(group)] = group
    if len(groups) < 2:
        return
    ordered = sorted(groups.values(), key=lambda g: g.start)
    first = ordered[0]
    for other in ordered[1:]:
        if len(first.members) + len(other.members) > MAX_STEPS:
            continue
        if _broadcast(first.shape, other.shape) is None:
            continue
        if all(w < first.start or group_of.get(w) is first for w in other.writers):
            for index in other.members:
                group_of[index] = first
            first.members = sorted(first.members + other.members)
            first.inputs |= other.inputs
            first.writers |= {w for w in other.writers if group_of.get(w) is not first}
            first.shape = _broadcast(first.shape, other.shape)
            other.members = []  # (emptied: skipped when the groups are fused)


def _joinable(reads, group_of, last_writer):
    """The group an op reading ``reads`` can join, or None (see the module docstring)."""
    candidate = None
    for name in reads:
        group = group_of.get(last_writer.get(name, -1))
        if group is not None and not group.closed and group.reductions == []:
            if candidate is None or group.start > candidate.start:
                candidate = group
    if candidate is None:
        return None
    for name in reads:
        writer = last_writer.get(name)
        if writer is None or writer < candidate.start or group_of.get(writer) is candidate:
            continue
        return None  # written inside the group's span by an op outside it
    return candidate


def _numpy_aligned(op, variables):
    """Whether a binary op's Paddle ``axis`` means plain numpy broadcasting."""
    axis = op.attrs.get("axis", -1) if isinstance(op.attrs, dict) else -1
    if axis == -1 or "X" not in op.inputs or "Y" not in op.inputs:
        return True
    x = variables[op.inputs["X"][0]].shape
    y = variables[op.inputs["Y"][0]].shape
    return len(y) >= len(x) or axis == len(x) - len(y)


def _broadcast(a, b):
    """The broadcast of shapes ``a`` and ``b``, or None where they do not broadcast."""
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


def _fused_op(block, group, readers, keep, exact):
    ops, variables = block.ops, block.vars
    step_of, inputs, steps = {}, [], []

    def ref(name):
        step = step_of.get(name)
        if step is not None:
            return ("step", step)
        if name not in inputs:
            inputs.append(name)
        return ("in", inputs.index(name))

    for index in group.members:
        op = ops[index]
        defn = REGISTRY[op.type]
        args = tuple(
            tuple(ref(n) for n in op.inputs[slot])
            if slot in defn.duplicable_inputs
            else (ref(op.inputs[slot][0]) if slot in op.inputs else None)
            for slot in defn.input_slots
        )
        attrs = dict(op.attrs)
        if "axis" in attrs:
            attrs["axis"] = -1
        steps.append(Step(op.type, tuple(sorted(attrs.items())), args, _origin(op, index)))
        step_of[op.output_names()[0]] = len(steps) - 1
    members = set(group.members) | set(group.reductions)
    outputs, names = [], []
    for index in group.members:
        name = ops[index].output_names()[0]
        outside = any(r not in members for r in readers.get(name, ()))
        if outside or name in keep:
            outputs.append(step_of[name])
            names.append(name)
    shape = group.shape
    reductions = []
    for index in group.reductions:
        op = ops[index]
        source, target = op.input_names()[0], op.output_names()[0]
        axes, keepdims = _reduced_axes(op, shape, tuple(variables[target].shape))
        reductions.append(
            Reduction(
                step=step_of[source],
                axes=axes,
                keepdims=keepdims,
                mean=op.type in ("reduce_mean", "mean"),
                shape=tuple(variables[target].shape),
            )
        )
        names.append(target)
    expression = Expression(
        inputs=tuple((tuple(variables[n].shape), _dtype(variables[n])) for n in inputs),
        shape=shape,
        steps=tuple(steps),
        outputs=tuple(outputs),
        reductions=tuple(reductions),
        dtypes=tuple(_dtype(variables[n]) for n in names),
    )
    first = ops[group.start]
    kinds = "+".join(ops[i].type for i in group.members + group.reductions)
    return OpDesc(
        "fused_elementwise",
        {"X": inputs},
        {"Out": names},
        freeze({"expression": expression, "exact": bool(exact)}),
        name=f"{first.name or first.type}/fused[{kinds}]",
        location=first.location,
    )


def _origin(op, index):
    return (op.type, op.name or f"{op.type}_{index}", op.location)


def _reduced_axes(op, shape, target):
    """(axes of ``shape`` reduced, keepdims) for a reduction op producing ``target``."""
    ndim = len(shape)
    if op.type == "mean":
        return tuple(range(ndim)), False
    if op.type == "sum_to_shape":
        lead = ndim - len(target)
        axes = list(range(lead))
        axes += [lead + i for i, d in enumerate(target) if d == 1 and shape[lead + i] != 1]
        return tuple(axes), False
    axis = op.attrs.get("axis")
    if axis is None:
        axes = tuple(range(ndim))
    else:
        axes = tuple(sorted(a % ndim if ndim else 0 for a in axis))
    return axes, bool(op.attrs.get("keepdim", False))


def _dtype(var):
    return np.dtype(var.dtype).name


__all__ = ["rewrite", "fusable", "MAX_STEPS", "MAX_INPUTS"]
