"""Rematerialisation: a fused group's cheap value is recomputed by the groups reading it instead
of being written to memory and read back (DESIGN pass 5, after ``fusion``).

A training step's forward group materialises what its gradient groups read (``tanh(x*a+b)``,
``sigmoid(x)``, ...), and gradient groups hand values to one another: each such value costs a
full-size write and a read per reader, where recomputing it from the inputs it came from costs a
few arithmetic steps on values a reader usually streams anyway. As Inductor does for pointwise
ops, such a value is recomputed inside every group reading it, and no longer materialised, when:

- it has at least ``MIN_BYTES`` (a smaller value stays in the cache between its writer and
  its readers -- 1 MiB of L2 per core on the machine measured -- where the round trip costs
  less than recomputing, and the tiny values of a long chain of small ops are not worth the
  analysis);
- it is a full output of a ``fused_elementwise`` op (not a reduction) that nobody keeps (fetched,
  held by the user, persistable), and every op reading it is a later ``fused_elementwise`` op of
  the same shape (a value any other op reads stays materialised, as ``fusion`` guarantees);
- its *cone* -- the steps it depends on inside its group, earlier recomputations included --
  has at most ``MAX_STEPS`` steps, at most ``MAX_LIBM`` of them transcendental (exp, tanh, log,
  ... or without a generated form: see ``ops.fused_edits.libm_steps``), so a reading group
  recomputes few costly functions per value (each once: identical steps merge);
- the inputs of its cone still hold the same values where each reader runs (nothing writes them
  in between: an optimizer update, an in-place op);
- every reader stays within ``fusion``'s caps and reads no more full-size buffers than before
  (the memory traffic of a reader never grows; that of the producer shrinks by one write).

Values one reading group needs several times are recomputed once (``ops.fused_edits.Builder``
merges identical steps). A group left without outputs is dropped. Recomputation runs the same
steps on the same inputs with the same kernels, so ``exact`` plans stay bit for bit.

Cost: each reader is rebuilt once per round; a round that finds values over a cap keeps them
materialised and starts again (a value whose cone is over a cap before any recomputation is
never a candidate; usually one or two rounds).
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from ops.fused_edits import Builder, cone, cone_inputs, libm_steps
from tape.ir import Block, OpDesc, freeze
from tape.passes import fusion
from tape.passes.dependencies import written_names

MIN_BYTES = 1 << 20
MAX_STEPS = 16
MAX_LIBM = 2
FUSED = "fused_elementwise"


def rewrite(block, keep=()) -> Block:
    """``block`` with cheap fused values recomputed by their readers (itself when none is)."""
    ops = block.ops
    fused = [i for i, op in enumerate(ops) if op.type == FUSED]
    if len(fused) < 2:
        return block
    keep = set(keep) | {n for n, v in block.vars.items() if v.persistable}
    readers, writers = {}, {}
    for index, op in enumerate(ops):
        for name in op.input_names():
            readers.setdefault(name, []).append(index)
        for name in written_names(op):
            writers.setdefault(name, []).append(index)
    candidates = _candidates(ops, fused, readers, keep)
    while candidates:
        built, refused = _build(ops, fused, candidates, writers)
        if not refused:
            return _emit(block, built, candidates)
        for name in refused:
            del candidates[name]
    return block


def _candidates(ops, fused, readers, keep):
    """{value name: (producing op, output position)} of the values that may be recomputed."""
    found = {}
    for index in fused:
        expression = ops[index].attrs["expression"]
        for position, name in enumerate(ops[index].outputs["Out"][: len(expression.outputs)]):
            step = expression.outputs[position]
            if name in keep or _bytes(expression, position) < MIN_BYTES:
                continue
            if expression.step_shapes[step] != expression.shape:
                continue
            users = readers.get(name, ())
            if not users or not all(
                user > index
                and ops[user].type == FUSED
                and ops[user].attrs["expression"].shape == expression.shape
                for user in users
            ):
                continue
            steps = cone(expression, step, MAX_STEPS)
            if len(steps) <= MAX_STEPS and libm_steps(expression, steps) <= MAX_LIBM:
                found[name] = (index, position)  # (recomputing others only adds to a cone)
    return found


def _build(ops, fused, candidates, writers):
    """(rebuilt, refused): {op index: (Expression, input names)} for every fused op, readers
    rebuilt with the candidates recomputed, and the set of candidates found to stay
    materialised (over a cap of their own, or the costliest of a reader over a cap); when that
    set is not empty, the round is to be run again without them."""
    current, refused = {}, set()
    for index in fused:
        expression, names = ops[index].attrs["expression"], ops[index].inputs["X"]
        reads = [k for k, name in enumerate(names) if name in candidates]
        while True:
            rebuilt, sizes = _recompute(ops, current, candidates, writers, index, reads, refused)
            if sizes and (
                len(rebuilt[0].steps) > fusion.MAX_STEPS
                or len(rebuilt[1]) > fusion.MAX_INPUTS
                or _full_reads(*rebuilt) > _full_reads(expression, names)
            ):
                refused.add(max(sizes, key=sizes.get))  # the costliest stays a buffer
                continue
            break
        current[index] = rebuilt
    return current, refused


def _recompute(ops, current, candidates, writers, index, reads, refused):
    """Fused op ``index`` rebuilt with its inputs ``reads`` recomputed (those not refused and
    within the caps: the others are added to ``refused``), and {name: cone size} of those
    recomputed."""
    expression, names = ops[index].attrs["expression"], ops[index].inputs["X"]
    built, substitute, sizes = Builder(expression.shape), {}, {}
    for k in reads:
        if names[k] in refused:
            continue
        producer, position = candidates[names[k]]
        source, source_names = current[producer]
        step = source.outputs[position]
        steps = cone(source, step, MAX_STEPS)
        inputs = [source_names[i] for i in cone_inputs(source, steps)]
        if (
            len(steps) > MAX_STEPS
            or libm_steps(source, steps) > MAX_LIBM
            or any(_written_between(writers, name, producer, index) for name in inputs)
        ):
            refused.add(names[k])
            continue
        substitute[k] = built.add(source, source_names, only=steps)[step]
        sizes[names[k]] = len(steps)
    if not substitute:
        return (expression, names), sizes
    refs = built.add(expression, names, substitute)
    rebuilt = built.finish(
        [refs[j] for j in expression.outputs],
        [(refs[r.step], r) for r in expression.reductions],
        expression.dtypes,
    )
    return rebuilt, sizes


def _bytes(expression, position):
    """The size of full output ``position`` at the expression's shape, in bytes."""
    return math.prod(expression.shape) * np.dtype(expression.dtypes[position]).itemsize


def _written_between(writers, name, after, before):
    """Whether an op strictly between positions ``after`` and ``before`` writes ``name``."""
    found = writers.get(name, ())
    return bisect.bisect_left(found, before) > bisect.bisect_right(found, after)


def _full_reads(expression, names):
    """The distinct inputs with as many elements as the expression's shape."""
    size = math.prod(expression.shape)
    return len({n for n, (shape, _) in zip(names, expression.inputs) if math.prod(shape) == size})


def _emit(block, current, candidates):
    """The block with each fused op's rebuilt expression, recomputed values dropped from their
    producers' outputs, and producers left without outputs removed."""
    out = []
    for index, op in enumerate(block.ops):
        if index not in current:
            out.append(op)
            continue
        expression, names = current[index]
        n_full = len(expression.outputs)
        outs = op.outputs["Out"]
        kept = [p for p, name in enumerate(outs[:n_full]) if name not in candidates]
        if not kept and not expression.reductions:
            continue
        if len(kept) == n_full and expression is op.attrs["expression"]:
            out.append(op)  # (unchanged)
            continue
        built = Builder(expression.shape)
        refs = built.add(expression, names)
        expression, names = built.finish(
            [refs[expression.outputs[p]] for p in kept],
            [(refs[r.step], r) for r in expression.reductions],
            [expression.dtypes[p] for p in kept] + list(expression.dtypes[n_full:]),
        )
        attrs = freeze({**op.attrs, "expression": expression})
        out.append(
            OpDesc(
                FUSED,
                {"X": list(names)},
                {"Out": [outs[p] for p in kept] + list(outs[n_full:])},
                attrs,
                name=op.name,
                location=op.location,
            )
        )
    return Block(dict(block.vars), out, block.idx)


__all__ = ["rewrite", "MIN_BYTES", "MAX_STEPS", "MAX_LIBM"]
