"""Sibling fusion: independent fused groups that stream the same buffer become one kernel with
several outputs (DESIGN pass 5, after ``rematerialise``).

Gradient groups often read the same inputs without reading each other: a broadcast input's
gradient (a column sum), the full-size gradient of another input, each recomputing the same
forward values. Run apart, each streams the shared buffers from memory and recomputes what the
others recompute; run as one kernel, the buffers are read once and every common step runs once
(``ops.fused_edits.Builder`` merges identical steps), with all their outputs and reductions.

A fused op ``A`` merges into a later fused op ``B`` when both have the same shape, they read a
common full-size input, and moving ``A`` down to ``B`` changes nothing: no op between them reads
or writes what ``A`` writes, or writes what ``A`` reads (so ``B`` does not depend on ``A``
either); the merged kernel must stay within ``fusion``'s caps. Each op looks back at the last
``WINDOW`` fused ops not yet merged (the scan stays linear in long chains). Merging only
computes elementwise values in one loop instead of two, and reductions as before, so ``exact``
plans stay bit for bit.
"""

from __future__ import annotations

import bisect
import math

from ops.fused_edits import Builder
from tape.ir import Block, OpDesc, freeze
from tape.passes import fusion
from tape.passes.dependencies import written_names

WINDOW = 8
FUSED = "fused_elementwise"


def rewrite(block) -> Block:
    """``block`` with sibling fused groups merged (itself when none is)."""
    ops = list(block.ops)
    if sum(op.type == FUSED for op in ops) < 2:
        return block
    touched = {}  # name -> sorted positions of the ops reading or writing it
    written = {}  # name -> sorted positions of the ops writing it
    for index, op in enumerate(ops):
        for name in op.input_names():
            touched.setdefault(name, []).append(index)
        for name in written_names(op):
            touched.setdefault(name, []).append(index)
            written.setdefault(name, []).append(index)
    for positions in touched.values():
        positions.sort()
    open_, merged_any = [], False
    for index, op in enumerate(ops):
        if op.type != FUSED:
            continue
        for earlier in reversed(open_[max(0, len(open_) - WINDOW) :]):
            if _movable(ops, earlier, index, touched, written) and _shares(ops[earlier], op):
                merged = _merge(ops[earlier], op)
                if merged is not None:
                    ops[index], ops[earlier], op = merged, None, merged
                    open_.remove(earlier)
                    merged_any = True
        open_.append(index)
    if not merged_any:
        return block
    return Block(dict(block.vars), [op for op in ops if op is not None], block.idx)


def _shares(a, b):
    """Same shape and a common input with as many elements."""
    shape = a.attrs["expression"].shape
    if b.attrs["expression"].shape != shape:
        return False
    size = math.prod(shape)
    full = {
        name
        for name, (s, _) in zip(a.inputs["X"], a.attrs["expression"].inputs)
        if math.prod(s) == size
    }
    return any(name in full for name in b.inputs["X"])


def _movable(ops, earlier, later, touched, written):
    """Whether ``ops[earlier]`` may run at ``later`` instead: nothing in between (``later``
    included) touches what it writes, nothing in between writes what it reads."""
    op = ops[earlier]
    for name in op.output_names():
        if _between(touched.get(name, ()), earlier, later + 1):
            return False
    return not any(_between(written.get(name, ()), earlier, later) for name in op.input_names())


def _between(positions, after, before):
    return bisect.bisect_left(positions, before) > bisect.bisect_right(positions, after)


def _merge(a, b):
    """The fused op computing ``a``'s and ``b``'s outputs in one kernel, or None over a cap."""
    ea, eb = a.attrs["expression"], b.attrs["expression"]
    built = Builder(ea.shape)
    ra, rb = built.add(ea, a.inputs["X"]), built.add(eb, b.inputs["X"])
    na, nb = len(ea.outputs), len(eb.outputs)
    expression, names = built.finish(
        [ra[j] for j in ea.outputs] + [rb[j] for j in eb.outputs],
        [(ra[r.step], r) for r in ea.reductions] + [(rb[r.step], r) for r in eb.reductions],
        ea.dtypes[:na] + eb.dtypes[:nb] + ea.dtypes[na:] + eb.dtypes[nb:],
    )
    if len(expression.steps) > fusion.MAX_STEPS or len(names) > fusion.MAX_INPUTS:
        return None
    oa, ob = a.outputs["Out"], b.outputs["Out"]
    return OpDesc(
        FUSED,
        {"X": list(names)},
        {"Out": list(oa[:na]) + list(ob[:nb]) + list(oa[na:]) + list(ob[nb:])},
        freeze({**b.attrs, "expression": expression}),
        name=f"{a.name} + {b.name}",
        location=a.location,
    )


__all__ = ["rewrite", "WINDOW"]
