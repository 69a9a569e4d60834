"""Prune (seed "Prune"): keep the ops that are targets or write a variable a kept op reads.

Walking the ops in reverse, an op is kept when ``is_target`` is set or it writes a variable some
kept op still needs; a kept op's inputs become needed. A kept op that overwrites a variable
without reading it satisfies that need, so earlier writers of the same name are not kept for it
(in-place updates read what they write, so they keep their producers). The result holds exactly
the targets and their ancestors under read-after-write.
"""

from __future__ import annotations

import dataclasses

from tape.ir import Block, Program


@dataclasses.dataclass(frozen=True)
class Pruned:
    """The pruned program and, for each of its ops, the index it had in the input block."""

    program: Program
    kept: tuple


def prune(program, targets=(), block=0) -> Pruned:
    """Keeps the ops needed to compute the variables named in ``targets`` and to run the ops
    marked ``is_target``; returns the pruned program (its variables cut to those still used)."""
    source = program.blocks[block]
    needed = set(targets)
    kept = []
    for index in range(len(source.ops) - 1, -1, -1):
        op = source.ops[index]
        writes = op.output_names()
        if op.is_target or any(name in needed for name in writes):
            kept.append(index)
            reads = op.input_names()
            needed.difference_update(writes)
            needed.update(reads)
    kept.reverse()
    ops = [source.ops[i] for i in kept]
    used = {name for op in ops for name in op.input_names() + op.output_names()}
    used.update(name for name in targets if name in source.vars)
    variables = {name: desc for name, desc in source.vars.items() if name in used}
    blocks = list(program.blocks)
    blocks[block] = Block(variables, ops, source.idx)
    return Pruned(Program(blocks, program.bindings), tuple(kept))


__all__ = ["prune", "Pruned"]
