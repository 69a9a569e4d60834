"""Dependencies (seed: the standalone executor's dependency builder): the op DAG and its order.

For each variable, an op that reads it runs after its last writer (read after write), an op that
writes it runs after the readers since that write (write after read) and after that writer
(write after write). Random ops keep their program order among themselves, so a seeded run draws
the same numbers; ops with side effects (``side_effect`` or in-place outputs: saves, prints,
optimizer updates) keep theirs too. Every edge points forward in program order, so program order
is a valid schedule.

The transitive reduction drops a -> c when a -> b -> c: the schedule only needs the edges that
remain. Deciding "a happens before c" exactly for every pair is quadratic (the seed's bitsets:
n bits per op); here each question is a search bounded by ``HORIZON`` ops, so the reduction is
exact for paths found within the horizon and keeps an edge otherwise; the edges into an op with
more than ``FAN_IN`` predecessors are all kept. A kept redundant edge costs the thread pool one
count, never correctness. Cost: O(E * FAN_IN * HORIZON) for E edges: linear in the tape,
whatever its degrees (chains, unrolled loops, trees, wide layers, products joined from
thousands of rows).
"""

from __future__ import annotations

import dataclasses

from ops.registry import REGISTRY

HORIZON = 32  # ops a happens-before search may visit
# Predecessors above which an op's incoming edges are all kept, unreduced: reducing them asks
# one bounded search per pair of predecessors, quadratic in the fan-in. A product that
# batch_products joined from a tree's nodes, or a sum of many gradients, reads thousands of
# values: on a 64-tree tape (18k ops) reducing those cost 24 s, all the rest of the pass 0.3 s.
FAN_IN = 64


@dataclasses.dataclass(frozen=True)
class Dependencies:
    """The op DAG of one block.

    ``edges[i]``: successors of op i from the rules above (sorted); ``predecessors[j]``: the ops
    op j waits for; ``successors``/``dependency_count``: the reduced DAG and each op's number of
    reduced predecessors (what a thread pool waits on).
    """

    edges: tuple
    predecessors: tuple
    successors: tuple
    dependency_count: tuple

    def happens_before(self, a, b, horizon=None) -> bool:
        """Whether op ``a`` must finish before op ``b`` starts (a path a -> ... -> b). Without a
        ``horizon`` the search is exhaustive; with one it gives up (False) after visiting that
        many ops, the conservative answer for every use here."""
        if a >= b:
            return False
        seen, todo = {b}, [b]
        while todo:
            for p in self.predecessors[todo.pop()]:
                if p == a:
                    return True
                if p > a and p not in seen:
                    if horizon is not None and len(seen) >= horizon:
                        return False
                    seen.add(p)
                    todo.append(p)
        return False

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
    """Builds the DAG of ``block``'s ops and its (bounded) transitive reduction."""
    preds = [tuple(sorted(p)) for p in _predecessors(block.ops)]
    count = len(preds)
    edges = [[] for _ in range(count)]
    for j, before in enumerate(preds):
        for i in before:
            edges[i].append(j)
    deps = Dependencies(tuple(map(tuple, edges)), tuple(preds), (), ())
    reduced = [[] for _ in range(count)]
    dependency_count = [0] * count
    for j, before in enumerate(preds):
        if len(before) > FAN_IN:  # (a wide op: its edges kept, see FAN_IN)
            for i in before:
                reduced[i].append(j)
            dependency_count[j] += len(before)
            continue
        for i in before:
            # i -> j is redundant when another predecessor k of j is reached from i.
            if not any(k > i and deps.happens_before(i, k, HORIZON) for k in before if k != i):
                reduced[i].append(j)
                dependency_count[j] += 1
    return Dependencies(
        deps.edges, deps.predecessors, tuple(map(tuple, reduced)), tuple(dependency_count)
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
