"""Memory reports: which live buffers exist, which op and line made them, what the last lazy plan
was predicted to need at its peak, and what the user holds across iterations.

Eager ops keep no line of their own (the record path stays short), so lines are collected only
while ``with tape.track_memory():`` is open: recording then goes through a wrapper that notes
each output's op and the user's line (and gives eager ops on the tape their line, which error
messages then show too). Buffers made outside that block are still listed and counted, by kind
(parameter, gradient, leaf, op output).

>>> import numpy as np, tape, layers
>>> model = layers.Linear(256, 256)
>>> with tape.track_memory():
...     y = model(np.ones((64, 256), np.float32))
>>> report = tape.memory_report()
>>> row = report.row_for("elementwise_add")
>>> row.count, row.bytes, row.line.startswith("<doctest")
(1, 65536, True)
"""

from __future__ import annotations

import dataclasses
import gc
import threading
import weakref

import numpy as np

from tape import stale
from tape import tape as engine
from tape.errors import user_location
from tape.variable import Variable

# id(var) -> (weak reference, op type, user's line) for outputs recorded while tracking.
_ORIGINS = {}
_LOCK = threading.Lock()
_ACTIVE = [0, None]  # open track_memory blocks, and the record function they wrapped


class track_memory:
    """Context manager: ops recorded inside (on any thread) note their outputs' op and line."""

    def __enter__(self):
        with _LOCK:
            if _ACTIVE[0] == 0:
                _ACTIVE[1] = engine.record
                engine.record = _tracking(engine.record)
            _ACTIVE[0] += 1
        return self

    def __exit__(self, *exc):
        with _LOCK:
            _ACTIVE[0] -= 1
            if _ACTIVE[0] == 0:
                engine.record, _ACTIVE[1] = _ACTIVE[1], None


def _tracking(record):
    def tracking_record(tape, defn, args, attrs, given=None, observed=False, depth=3):
        outputs = record(tape, defn, args, attrs, given, observed, depth + 1)
        where = user_location()
        ops = tape._ops
        if ops and ops[-1] is not None and ops[-1].location is None:
            ops[-1].location = where  # (the op just recorded, if it was kept)
        for var in _flat(outputs):
            _note(var, defn.type, where)
        return outputs

    return tracking_record


def _flat(outputs):
    if isinstance(outputs, Variable):
        return (outputs,)
    flat = []
    for item in outputs if isinstance(outputs, (tuple, list)) else ():
        flat.extend(_flat(item))
    return flat


def _note(var, op_type, where):
    key = id(var)
    _ORIGINS[key] = (weakref.ref(var, lambda _, key=key: _ORIGINS.pop(key, None)), op_type, where)


def origin(var):
    """(op type, line) that made ``var`` while tracking was on, or None."""
    entry = _ORIGINS.get(id(var))
    if entry is None or entry[0]() is not var:
        return None
    return entry[1], entry[2]


@dataclasses.dataclass
class Row:
    """Live buffers of one kind: the op that made them (or a kind), the line, count, bytes."""

    op: str
    line: str
    count: int
    bytes: int


@dataclasses.dataclass
class MemoryReport:
    """What ``memory_report`` found (``str()`` formats it as a table)."""

    rows: list
    total_bytes: int
    held: list
    plan_peak: object  # (peak bytes, after which op, bytes before the run, ops) or None

    def row_for(self, op):
        """The first row for buffers made by op type ``op`` (None if there is none)."""
        return next((row for row in self.rows if row.op == op), None)

    def __str__(self):
        lines = [f"live buffers: {_mb(self.total_bytes)} in {sum(r.count for r in self.rows)}"]
        lines += _table(self.rows)
        if self.held:
            lines.append(
                "held across iterations (their tape was reset, something still holds them):"
            )
            lines += _table(self.held)
        if self.plan_peak is not None:
            peak, after, before, ops = self.plan_peak
            lines.append(
                f"last lazy plan ({ops} ops): predicted peak {_mb(peak)} after {after} "
                f"({_mb(before)} live when it started)"
            )
        return "\n".join(lines)


def _mb(count):
    return f"{count / 2**20:.3f} MB"


def _table(rows):
    out = [f"  {'bytes':>12}  {'count':>6}  {'made by':<28} line"]
    out += [f"  {r.bytes:>12}  {r.count:>6}  {r.op:<28} {r.line}" for r in rows]
    return out


def memory_report(tape=None):
    """The live buffers grouped by the op and line that made them (largest first), what is
    held across iterations, and the predicted peak of the last lazy plan (of ``tape``, by
    default the global tape or the one ``reset_global_tape`` last replaced)."""
    # type(), not isinstance(): a weakref.proxy whose referent died (numba keeps some) raises
    # ReferenceError on isinstance.
    variables = [o for o in gc.get_objects() if issubclass(type(o), Variable)]
    gradients = {id(v._grad) for v in variables if v._grad is not None}
    groups, held, seen = {}, {}, set()
    for var in variables:
        size = _new_bytes(var._value, seen)
        if size is None:
            continue
        key = _kind(var, gradients)
        _add(groups, key, size)
        ended = getattr(var, "_origin", None)
        if ended is not None:
            _add(held, (ended[0], ended[2] or "(eager op: no line kept)"), size)
    for var in variables:  # pending lazy values that keep a whole old tape alive
        owner = var._pending
        if owner.__class__ is engine.Tape and owner is not engine.state.tape:
            size = sum(_new_bytes(v._value, seen) or 0 for op in owner.ops for v in _vars(op))
            _add(held, ("a pending lazy value's tape", _pending_line(owner, var)), size)
    rows = sorted((Row(op, line, n, b) for (op, line), (n, b) in groups.items()), key=_largest)
    held_rows = sorted((Row(op, line, n, b) for (op, line), (n, b) in held.items()), key=_largest)
    return MemoryReport(rows, sum(r.bytes for r in rows), held_rows, _last_peak(tape))


def _largest(row):
    return (-row.bytes, row.op, row.line)


def _add(groups, key, size):
    count, total = groups.get(key, (0, 0))
    groups[key] = (count + 1, total + size)


def _vars(op):
    return op.input_vars() + op.output_vars()


def _new_bytes(value, seen):
    """The bytes of the buffer behind ``value`` the first time it is seen (views share their
    base), else None."""
    if value is None or not hasattr(value, "nbytes"):
        return None
    base = value
    while getattr(base, "base", None) is not None and hasattr(base.base, "nbytes"):
        base = base.base
    if id(base) in seen:
        return None
    seen.add(id(base))
    return int(base.nbytes)


def _kind(var, gradients):
    if var.persistable:
        return ("parameter or state", var._name or "(unnamed)")
    found = origin(var)
    if found is not None:
        return found
    if id(var) in gradients:
        return ("gradient", "(held by .grad)")
    if var._leaf:
        return ("Variable(...)", "(a leaf)")
    return ("op output", "(untracked: open tape.track_memory() first)")


def _pending_line(tape, var):
    for op in tape.ops:
        if any(v is var for v in op.output_vars()):
            return op.location or "(unknown line)"
    return "(unknown line)"


def _last_peak(tape):
    if tape is None:
        tape = engine.state.tape
    plan = getattr(tape, "_last_plan", None) if tape is not None else None
    plan = plan or stale.ended.last_plan
    return None if plan is None else predicted_peak(plan)


def predicted_peak(plan):
    """(peak bytes, name of the op after which it is reached, bytes of the plan's inputs, number
    of ops) of a compiled plan run in program order, from its variables' shapes and dtypes and
    its memory plan's frees (``tape.passes.memory_plan``)."""
    sizes = _slot_sizes(plan)
    live = set(plan.inputs)
    current = before = sum(sizes.get(s, 0) for s in live)
    peak, at = current, "the start"
    for (_, _, _, _, out, free), (_, name, _) in zip(plan.instructions, plan.meta):
        for slot in _slots(out):
            if slot not in live:
                live.add(slot)
                current += sizes.get(slot, 0)
        if current > peak:
            peak, at = current, name
        for slot in free:
            if slot in live:
                live.discard(slot)
                current -= sizes.get(slot, 0)
    return peak, at, before, len(plan.instructions)


def _slots(entry):
    if entry is None:
        return ()
    if isinstance(entry, int):
        return (entry,)
    return [s for item in entry for s in _slots(item)]


def _slot_sizes(plan):
    """Bytes per slot, from the plan's block: each instruction's slots match its op's names."""
    from ops.registry import REGISTRY

    block = plan.analysis.block
    stubs = {slot for slot, _, _ in plan.stubs}
    sizes = {}
    for op, (_, _, _, ins, out, _) in zip(block.ops, plan.instructions):
        defn = REGISTRY[op.type]
        pairs = [(ins, defn.input_slots, op.inputs), (out, defn.output_slots, op.outputs)]
        for entry, slot_names, names in pairs:
            if isinstance(entry, int):  # a FAST instruction's one output
                entry = (entry,)
            for slots, slot_name in zip(entry, slot_names):
                found = names.get(slot_name, ())
                listed = slots if slots.__class__ is tuple else _slots(slots)
                for slot, name in zip(listed, found):  # (None: a result the plan never stores)
                    if slot is not None and slot not in stubs:
                        var = block.vars[name]
                        count = int(np.prod(var.shape, dtype=np.int64))
                        sizes[slot] = count * np.dtype(var.dtype).itemsize
    return sizes


__all__ = ["track_memory", "memory_report", "MemoryReport", "Row", "predicted_peak", "origin"]
