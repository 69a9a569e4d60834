"""Free batch axes: a Program whose inputs have -1 in their shape runs with any size there.

A Program recorded from a tape has the shapes of the batch it was recorded with.
``Program.from_tape(tape, dynamic_batch=True)`` frees the leading axis of every input the
program must be fed (read by an op, written by none, not persistable, not a parameter or a
constant) by declaring it -1; a Program built directly may declare -1 in any input's shape.
``Executor.run`` then ``specialize``s the program to the fed shapes: every op's output shapes
are inferred again from them, so a shape an attribute fixed at the recorded batch size (a
reshape's target shape, a constant's shape) is an error naming that op and its line. The
specialized program is scheduled like any other; its plan is cached per fed shape.
Shapes inferred from -1 are not trusted (inference treats -1 as a size): only fed shapes are.

Free axes suit inference programs. Gradient makers build constants from the recorded shapes
(a mean's 1/n, broadcast shapes), so a training program recorded with backward meets them as
a shape error at the first op combining one with a value of the new batch size.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ops.registry import REGISTRY
from tape.errors import FluidError, InputError, ShapeError


def free_inputs(program):
    """Names of the inputs (variables no op writes) whose declared shape has a free axis."""
    block = program.global_block()
    free = [name for name, desc in block.vars.items() if -1 in desc.shape]
    if not free:
        return free
    written = {name for op in block.ops for name in op.output_names()}
    return [name for name in free if name not in written]


def free_batch(program):
    """Declares -1 as the leading axis of each input ``program`` must be fed (in place)."""
    from tape.constants import is_constant

    block = program.global_block()
    written = {name for op in block.ops for name in op.output_names()}
    freed = 0
    for op in block.ops:
        for name in op.input_names():
            desc, bound = block.vars[name], program.bindings.get(name)
            if name in written or desc.persistable or not desc.shape or -1 in desc.shape:
                continue
            if bound is not None and (bound.requires_grad or is_constant(bound)):
                continue
            block.vars[name] = dataclasses.replace(desc, shape=(-1,) + tuple(desc.shape[1:]))
            freed += 1
    if not freed:
        raise InputError(
            "Program.from_tape",
            "dynamic_batch=True: the program reads no input it must be fed",
            hint="the inputs whose leading axis becomes free are the Variables the recorded "
            "ops read that are not parameters, persistable state or constants",
        )
    return program


def specialize(program, feed):
    """``program`` with its free axes set from the fed shapes (``feed``: name -> array) and
    every op's outputs inferred again; ``program`` itself when nothing is free."""
    from tape.ir import Block, Program, describe_inputs, infer_outputs

    names = free_inputs(program)
    if not names:
        return program
    block = program.global_block()
    fixed = Block(vars=dict(block.vars), ops=block.ops, idx=block.idx)
    for name in names:
        fixed.vars[name] = dataclasses.replace(
            block.vars[name], shape=_fed_shape(block, name, feed)
        )
    for op in block.ops:
        defn = REGISTRY[op.type]
        try:
            descs = infer_outputs(defn, op.attrs, describe_inputs(defn, op.inputs, fixed))
        except FluidError as err:
            raise ShapeError(
                op.type,
                f"cannot run with the fed shapes: {err.headline}",
                expected=err.expected,
                actual=err.actual,
                hint="an attribute or constant recorded with the batch size fixes it (a "
                "reshape's shape, a constant, or a gradient op's 1/n and broadcast shapes): "
                "record that op from the input's shape, or record one program per batch size",
                name=op.name,
                location=op.location,
            ) from None
        for slot, desc in zip(defn.output_slots, descs, strict=True):
            entries = desc if isinstance(desc, list) else [desc]
            for name, (shape, _) in zip(op.outputs.get(slot, ()), entries, strict=False):
                fixed.vars[name] = dataclasses.replace(fixed.vars[name], shape=tuple(shape))
    return Program([fixed] + program.blocks[1:], program.bindings, program.loaded)


def _fed_shape(block, name, feed):
    declared = tuple(block.vars[name].shape)
    if name not in feed:
        raise InputError(
            "feed",
            f"no value was fed for '{name}'",
            hint=f"its shape {declared} has a free axis (-1): pass it in feed={{...}}",
        )
    actual = tuple(np.shape(feed[name]))
    if len(actual) != len(declared) or any(d != -1 and d != a for d, a in zip(declared, actual)):
        raise InputError(
            "feed",
            f"fed value for '{name}' has the wrong shape",
            expected=f"{declared} (-1: any size)",
            actual=str(actual),
        )
    return actual


__all__ = ["free_inputs", "free_batch", "specialize"]
