"""Dependencies (seed: the standalone executor's dependency builder): the op DAG and its order.

For each variable, an op that reads it runs after its last writer (read after write), an op that
writes it runs after the readers since that write (write after read) and after that writer
(write after write). Random ops keep their program order among themselves, so a seeded run draws
the same numbers; ops with side effects (``side_effect`` or in-place outputs: saves, prints,
optimizer updates) keep theirs too. Every edge points forward in program order, so program order
is a valid schedule and "happens before" is one pass of bitset unions. The transitive reduction
drops a -> c when a -> b -> c: the schedule only needs the edges that remain.
"""

from __future__ import annotations

import dataclasses

from ops.registry import REGISTRY


@dataclasses.dataclass(frozen=True)
class Dependencies:
    """The op DAG of one block.

    ``edges[i]``: successors of op i from the rules above (sorted); ``ancestors[j]``: a bitset of
    the ops that happen before op j; ``successors``/``dependency_count``: the reduced DAG and each
    op's number of reduced predecessors (what a thread pool waits on).
    """

    edges: tuple
    ancestors: tuple
    successors: tuple
    dependency_count: tuple

    def happens_before(self, a, b) -> bool:
        return bool((self.ancestors[b] >> a) & 1)

    def edge_count(self, reduced=True) -> int:
        return sum(len(s) for s in (self.successors if reduced else self.edges))


def ordered_kind(defn):
    """Which implicit program-order chain an op belongs to: 'random', 'effect' or None."""
    if defn.random:
        return "random"
    if defn.side_effect or defn.inplace:
        return "effect"
    return None


def analyse(block) -> Dependencies:
    """Builds the DAG of ``block``'s ops, its happens-before relation and its reduction."""
    preds = _predecessors(block.ops)
    count = len(block.ops)
    edges = [[] for _ in range(count)]
    ancestors = [0] * count
    for j in range(count):
        mask = 0
        for i in sorted(preds[j]):
            edges[i].append(j)
            mask |= ancestors[i] | (1 << i)
        ancestors[j] = mask
    successors, dependency_count = [], [0] * count
    for i in range(count):
        direct = 0
        for c in edges[i]:
            direct |= 1 << c
        # c is redundant when another successor b of i happens before c (i -> b -> ... -> c).
        kept = tuple(c for c in edges[i] if not ancestors[c] & direct)
        successors.append(kept)
        for c in kept:
            dependency_count[c] += 1
    return Dependencies(
        tuple(tuple(e) for e in edges), tuple(ancestors), tuple(successors), tuple(dependency_count)
    )


def written_names(op):
    """The variables op writes: its outputs, and the inputs whose buffers it updates in place
    (an optimizer's Moment2 even when Moment2Out is another variable: the kernel reuses the
    input's buffer, so readers of the old value must run first)."""
    defn = REGISTRY[op.type]
    writes = op.output_names()
    for slot in defn.inplace.values():
        writes.extend(op.inputs.get(slot, ()))
    return writes


def _predecessors(ops):
    last_writer, readers = {}, {}
    chains = {}
    preds = []
    for j, op in enumerate(ops):
        before = set()
        reads, writes = op.input_names(), written_names(op)
        for name in reads:
            if name in last_writer:
                before.add(last_writer[name])
        for name in writes:
            before.update(readers.get(name, ()))
            if name in last_writer:
                before.add(last_writer[name])
        kind = ordered_kind(REGISTRY[op.type])
        if kind is not None:
            if kind in chains:
                before.add(chains[kind])
            chains[kind] = j
        before.discard(j)
        preds.append(before)
        for name in reads:
            readers.setdefault(name, []).append(j)
        for name in writes:
            last_writer[name] = j
            readers[name] = []
    return preds


__all__ = ["analyse", "Dependencies", "ordered_kind", "written_names"]
