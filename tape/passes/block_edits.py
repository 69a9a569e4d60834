"""Editing a block by index: ops inserted before, replaced or removed, fresh variables, and who
reads and writes each variable -- what a rewriting pass needs, with the block left untouched
until ``apply`` builds the new one -- and ``remove_dead``, which drops what a rewrite left
unread. Cost: O(ops + variables) each (one scan for the readers and writers, one reverse pass
for the dead ops)."""

from __future__ import annotations

import collections
import dataclasses
import itertools

from ops.registry import REGISTRY
from tape.ir import Block, OpDesc, VarDesc, freeze
from tape.passes.dependencies import ordered_kind, written_names


def remove_dead(block, keep=()) -> Block:
    """Drops pure ops none of whose results is read or kept (what a rewrite left unused): one
    reverse pass, as every reader of a result comes after the op writing it."""
    needed = set(keep) | {n for n, v in block.vars.items() if v.persistable}
    alive = []
    for op in reversed(block.ops):
        if (
            op.is_target
            or ordered_kind(REGISTRY[op.type])
            or any(name in needed for name in op.output_names())
        ):
            alive.append(op)
            needed.update(op.input_names())
    alive.reverse()
    used = {name for op in alive for name in op.input_names() + op.output_names()}
    variables = {n: v for n, v in block.vars.items() if n in used or n in keep}
    return Block(variables, alive, block.idx)


@dataclasses.dataclass
class Edits:
    """Pending changes to a block: ops to insert before an index, ops replaced or removed."""

    block: Block
    before: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(list))
    replaced: dict = dataclasses.field(default_factory=dict)
    new_vars: dict = dataclasses.field(default_factory=dict)

    def var(self, name):
        return self.new_vars.get(name) or self.block.vars[name]

    def fresh(self, prefix, shape, dtype):
        for n in itertools.count(len(self.new_vars)):
            name = f"{prefix}@batched{n}"
            if name not in self.block.vars and name not in self.new_vars:
                self.new_vars[name] = VarDesc(name, tuple(shape), dtype)
                return name
        raise AssertionError("unreachable")

    def op(self, type, inputs, outputs, attrs, like):
        """A new OpDesc recorded where ``like`` was (its location names the user's line)."""
        full = freeze(REGISTRY[type].check_attrs(attrs))
        return OpDesc(
            type, inputs, outputs, full, name=f"{like.name}/batched_{type}", location=like.location
        )

    def apply(self):
        if not self.before and not self.replaced:
            return self.block
        ops = []
        for index, op in enumerate(self.block.ops):
            ops.extend(self.before.get(index, ()))
            ops.extend(self.replaced.get(index, [op]))
        ops.extend(self.before.get(len(self.block.ops), ()))
        return Block({**self.block.vars, **self.new_vars}, ops, self.block.idx)


class Scan(Edits):
    """A block with who writes and who reads each variable."""

    def __init__(self, block, keep):
        super().__init__(block)
        self.keep = keep | {n for n, v in block.vars.items() if v.persistable}
        self.writers, self.readers = collections.defaultdict(list), collections.defaultdict(list)
        for index, op in enumerate(block.ops):
            for name in written_names(op):
                self.writers[name].append(index)
            for name in op.input_names():
                self.readers[name].append(index)

    def producer(self, name):
        """The index of the one op writing ``name``, or None (a leaf, or written twice)."""
        writers = self.writers.get(name, ())
        return writers[0] if len(writers) == 1 else None

    def unchanged(self, name, start, end):
        """Whether no op strictly between ``start`` and ``end`` writes ``name``."""
        low, high = min(start, end), max(start, end)
        return not any(low < w < high for w in self.writers.get(name, ()))

    def two_d(self, *names):
        return all(len(self.var(n).shape) == 2 for n in names)


__all__ = ["Edits", "Scan", "remove_dead"]
