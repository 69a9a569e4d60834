"""Plan and cache: the analysed block compiled to instructions over numbered value slots.

Each instruction holds its pre-resolved kernel, its attributes, the slots it reads and writes and
the slots to free after it, so running it is one kernel call and a few list stores -- no lookup,
no inference, no checks. Plans are cached by the caller's structural key (the structural hash plus
feed/fetch names), so a training loop whose tape has the same shape every step analyses once.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from ops.registry import REGISTRY

# Instruction kinds: FAST (one output, one variable per input), SINGLE (one output, list or absent
# inputs), MULTI (several output slots).
FAST, SINGLE, MULTI = 1, 2, 0


@dataclasses.dataclass(eq=False)
class Plan:
    """A compiled schedule (see the module docstring).

    ``instructions[i]`` is ``(kind, kernel, attrs, ins, out, free)``: for a FAST instruction
    (one output, one variable per input) ``ins`` is a tuple of slots and ``out`` a slot; otherwise
    ``ins`` has one entry per input slot (a slot, a tuple of slots or None) and ``out`` one per
    output slot (a tuple's entry is None for a result nothing reads: not stored). ``meta[i]``
    is ``(type, name, location)``. ``inputs`` are the slots that must hold values before the
    run, ``produced`` those the run writes, ``freed`` those it frees, ``writeback`` those it
    writes and keeps, ``stubs`` the (slot, shape, dtype) stand-ins for buffer-free reads.
    """

    instructions: tuple
    meta: tuple
    successors: tuple
    dependency_count: tuple
    gc_after: tuple
    refcount: tuple
    inputs: tuple
    produced: tuple
    freed: frozenset
    writeback: tuple
    stubs: tuple
    slots: int
    xp: object
    analysis: object = None
    random: bool = False  # whether a kernel draws random numbers
    parallel: object = None  # threads="auto"'s choice for this plan (passes.parallel.Choice)


def kernel_for(defn, xp, attrs=None):
    """The kernel an op runs with array module ``xp`` (as the eager engine chooses it); with
    ``attrs``, the one a plan holds for that op (``defn.bind``: a fused op's compiled group)."""
    bind = getattr(defn, "bind", None) if attrs is not None else None
    if bind is not None:
        return bind(attrs, xp)
    return defn.kernel if xp is np else defn.kernels.get("gpu", defn.kernels["any"])


def build(block, deps, memory, slot_of, slots, xp=np, analysis=None) -> Plan:
    """Compiles ``block`` (already pruned and analysed) to a Plan; ``slot_of`` maps names to
    slots numbered below ``slots``; stand-in slots are added after them."""
    stub_slot = {}
    for _, name in sorted(memory.buffer_free_reads):
        stub_slot.setdefault(name, slots + len(stub_slot))
    instructions, meta = [], []
    for index, op in enumerate(block.ops):
        defn = REGISTRY[op.type]

        def slot(name, index=index):
            if (index, name) in memory.buffer_free_reads:
                return stub_slot[name]
            return slot_of[name]

        ins = tuple(
            None
            if s not in op.inputs
            else (
                tuple(slot(n) for n in op.inputs[s])
                if s in defn.duplicable_inputs
                else slot(op.inputs[s][0])
            )
            for s in defn.input_slots
        )
        # A list output's results nothing reads, freed as soon as made (a batched group's rows
        # that only the whole result is read as): None in ``out``, never stored nor freed.
        unread = _unread_entries(defn, op, memory.free_after[index])
        outs = tuple(
            None
            if s not in op.outputs
            else (
                tuple(None if n in unread else slot_of[n] for n in op.outputs[s])
                if s in defn.duplicable_outputs
                else slot_of[op.outputs[s][0]]
            )
            for s in defn.output_slots
        )
        fast = defn.single_output and all(i.__class__ is int for i in ins)
        kind = FAST if fast else SINGLE if defn.single_output else MULTI
        free = tuple(slot_of[name] for name in memory.free_after[index] if name not in unread)
        instructions.append(
            (kind, kernel_for(defn, xp, op.attrs), op.attrs, ins, outs[0] if fast else outs, free)
        )
        meta.append((op.type, op.name or f"{op.type}_{index}", op.location))
    refcount = [0] * (slots + len(stub_slot))
    for name, count in memory.refcount.items():
        refcount[slot_of[name]] = count
    stubs = tuple(
        (s, tuple(block.vars[n].shape), np.dtype(block.vars[n].dtype)) for n, s in stub_slot.items()
    )
    produced = _produced(block, slot_of)
    freed = frozenset(slot_of[n] for n in memory.refcount)
    random = any(REGISTRY[op.type].random for op in block.ops)
    return Plan(
        tuple(instructions),
        tuple(meta),
        deps.successors,
        deps.dependency_count,
        tuple(tuple(slot_of[n] for n in g) for g in memory.gc_after),
        tuple(refcount),
        _inputs(block, memory, slot_of),
        produced,
        freed,
        tuple(s for s in produced if s not in freed),
        stubs,
        slots + len(stub_slot),
        xp,
        analysis,
        random,
    )


def _unread_entries(defn, op, freed_here):
    """The names in ``op``'s list outputs that the memory plan frees right after it
    (``freed_here``) and that it does not read itself: results no op reads."""
    if not defn.duplicable_outputs or not freed_here:
        return ()
    freed = set(freed_here).difference(op.input_names())
    return {n for s in defn.duplicable_outputs for n in op.outputs.get(s, ()) if n in freed}


def _inputs(block, memory, slot_of):
    written, inputs = set(), {}
    for index, op in enumerate(block.ops):
        for name in op.input_names():
            if name not in written and (index, name) not in memory.buffer_free_reads:
                inputs[slot_of[name]] = None
        written.update(op.output_names())
    return tuple(inputs)


def _produced(block, slot_of):
    return tuple(dict.fromkeys(slot_of[n] for op in block.ops for n in op.output_names()))


def stand_ins(plan):
    """(slot, array) for each buffer-free read: the right shape and dtype, one element of memory."""
    return [
        (slot, plan.xp.broadcast_to(plan.xp.zeros((), dtype), shape))
        for slot, shape, dtype in plan.stubs
    ]


class PlanCache:
    """A small LRU map from structural keys to compiled plans, counting hits and misses."""

    def __init__(self, size=128):
        self.size, self.hits, self.misses = size, 0, 0
        self._entries = collections.OrderedDict()

    def get(self, key):
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(key)
        return entry

    def put(self, key, entry):
        self._entries[key] = entry
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def clear(self):
        self._entries.clear()
        self.hits = self.misses = 0

    def __len__(self):
        return len(self._entries)


CACHE = PlanCache()

__all__ = ["Plan", "build", "PlanCache", "CACHE", "stand_ins", "kernel_for"]
