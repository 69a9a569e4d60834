"""Saved buffers are guarded: a value backward needs cannot change behind its back.

A recorded op keeps its input and output Variables for its gradient. Three things keep what it
reads equal to what it saw, at no cost per recorded op:

- ``Variable(array)`` and ``set_value(array)`` copy the caller's array (as ``torch.tensor``
  does), so reusing that array for the next batch changes nothing recorded;
- ``value()`` and ``numpy()`` hand out read-only views, and no kernel writes into its inputs
  (updates are new buffers, see ``tape.transaction``), so no buffer changes in place;
- what remains is rebinding a Variable to a new buffer (``set_value``, a committed optimizer
  update, ``Tape.add_op`` writing an output into an existing Variable). ``note_writes`` tells
  every live tape how many ops it had recorded when the Variable changed; backward raises a
  ``MutationError`` naming the op, the variable and where it changed when it differentiates an
  op recorded before the change that saved that Variable (PyTorch's version counters, paid for
  per write instead of per op).

In lazy mode a write is also a hazard for pending ops that read the old value: ``set_value``
first runs them, as eager mode would already have.
"""

from __future__ import annotations

import threading
import weakref

from tape.errors import MutationError, user_location

# Every tape (weakly: a dropped tape needs no guarding). Threads record on their own tapes but
# one thread's write is noted on all of them: the set and the tapes' write records are changed
# under LOCK.
LIVE_TAPES = weakref.WeakSet()
LOCK = threading.Lock()


def register(tape):
    with LOCK:
        LIVE_TAPES.add(tape)


def note_writes(variables, how, location=None):
    """Records on each live tape that ``variables`` were just given new values by ``how``
    ('set_value', 'an optimizer update', ...): ops recorded so far must not use them."""
    where = location or user_location()
    with LOCK:
        for tape in list(LIVE_TAPES):
            recorded = len(tape._ops)
            if not recorded:
                continue
            written = tape._written
            for var in variables:
                # The latest write decides; the entry holds the Variable, so its id stays unique.
                written[id(var)] = (recorded, var, how, where)


def pending_readers(var):
    """The outputs of pending lazy ops that read ``var`` (they must run before it changes)."""
    outputs = []
    with LOCK:
        tapes = list(LIVE_TAPES)
    for tape in tapes:
        for op in tape._pending_ops:
            if any(v is var for v in op.input_vars()):
                outputs.extend(v for v in op.output_vars() if v is not var)
    return outputs


def check(written, op):
    """Raises if ``op`` saved a Variable that was given a new value after ``op`` was recorded
    (``written``: the tape's record of writes)."""
    for slot, var in _saved(op):
        entry = written.get(id(var))
        if entry is not None and op.index < entry[0]:
            _, _, how, where = entry
            raise MutationError(
                op.type,
                f"{slot} ('{var.name}') was given a new value after this op saved it for backward",
                expected="the value the op was recorded with",
                actual=f"replaced by {how}" + (f" at {where}" if where else ""),
                hint="call backward before changing it, or put the new value in a new Variable",
                name=op.name,
                location=op.location,
            )


def _saved(op):
    """(slot name, Variable) for what the op's gradient may read: inputs whose buffer it needs,
    and outputs."""
    defn = op.defn
    for slot, entry in zip(defn.input_slots, op.args):
        if entry is None or slot in defn.no_need_buffer:
            continue
        for var in entry if entry.__class__ is list else (entry,):
            yield slot, var
    for slot, entry in zip(defn.output_slots, op.results):
        for var in entry if entry.__class__ is list else (entry,):
            yield slot, var


__all__ = ["LIVE_TAPES", "LOCK", "register", "note_writes", "pending_readers", "check"]
