"""Memory plan (seed: the standalone executor's last-use GC table): when each buffer can go.

For each variable, its users are the ops that write it or read its buffer. Shrinking drops every
user that happens before another user: only the last users remain, and the variable is freed when
all of them have finished (its reference count). Reads that need only a shape and dtype do not
count -- those of non-differentiable ops through a ``no_need_buffer`` slot, such as
``fill_zeros_like(X)`` -- and the plan hands such ops a stand-in without a buffer. Never freed:
persistable variables (parameters, optimizer state) and whatever the caller keeps (fetch targets,
variables the user still holds, values later ops will read).
"""

from __future__ import annotations

import dataclasses

from ops.registry import REGISTRY
from tape.passes.dependencies import HORIZON


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """The GC table of one block.

    ``users``/``last_users``: name -> op indices before and after shrinking (every variable);
    ``refcount``: name -> number of last users (freeable variables); ``gc_after[i]``: names whose
    count drops when op i finishes; ``free_after[i]``: names to free after op i when the ops run
    in program order; ``kept``: names never freed; ``buffer_free_reads``: (op index, name) reads
    that get a stand-in.
    """

    users: dict
    last_users: dict
    refcount: dict
    gc_after: tuple
    free_after: tuple
    kept: frozenset
    buffer_free_reads: frozenset


def buffer_free_slots(defn):
    """Input slots whose buffer op ``defn`` itself never reads (only shape and dtype)."""
    return defn.no_need_buffer if not defn.differentiable else frozenset()


def plan_memory(block, deps, keep=()) -> MemoryPlan:
    """The GC table of ``block`` given its Dependencies and the names that must survive."""
    users, free_reads = _users(block)
    kept = frozenset(keep) | {name for name, var in block.vars.items() if var.persistable}
    last_users, refcount = {}, {}
    gc_after = [[] for _ in block.ops]
    free_after = [[] for _ in block.ops]
    for name, ops in users.items():
        # A user that happens before another user is not a last user: the other one frees.
        # (Bounded: each user is compared with the next few, within the search horizon; a last
        # user it cannot rule out is kept, which only adds a count to the reference.)
        last = tuple(
            op
            for k, op in enumerate(ops)
            if not any(deps.happens_before(op, other, HORIZON) for other in ops[k + 1 : k + 5])
        )
        last_users[name] = last
        if name in kept:
            continue
        refcount[name] = len(last)
        for op in last:
            gc_after[op].append(name)
        free_after[max(last)].append(name)
    return MemoryPlan(
        users,
        last_users,
        refcount,
        tuple(tuple(g) for g in gc_after),
        tuple(tuple(f) for f in free_after),
        kept,
        frozenset(free_reads),
    )


def _users(block):
    users, free_reads = {}, set()
    for index, op in enumerate(block.ops):
        free_slots = buffer_free_slots(REGISTRY[op.type])
        names = []
        for slot, slot_names in op.inputs.items():
            if slot in free_slots:
                free_reads.update((index, name) for name in slot_names)
            else:
                names.extend(slot_names)
        names.extend(op.output_names())
        for name in dict.fromkeys(names):
            users.setdefault(name, []).append(index)
    return {name: tuple(ops) for name, ops in users.items()}, free_reads


def table(memory, block) -> list:
    """Rows (variable, users before shrinking, after shrinking, freed?) naming ops by name."""
    rows = []
    for name, ops in memory.users.items():
        before = [block.ops[i].name or block.ops[i].type for i in ops]
        after = [block.ops[i].name or block.ops[i].type for i in memory.last_users[name]]
        rows.append((name, before, after, name not in memory.kept))
    return rows


__all__ = ["plan_memory", "MemoryPlan", "table", "buffer_free_slots"]
