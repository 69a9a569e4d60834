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

One buffer can change without a rebinding: one shared with another library through DLPack
(``tape.dlpack``), which that library may write in place. Such Variables are listed in ``SHARED``
and their buffers checksummed (CRC-32, about 2 ms per 8 MB here) when they are shared and when an
op reading them is recorded (``seal``); backward first compares each checksum with the buffer
(``verify_shared``) and turns a difference into a write the ordinary check reports. Ordinary
Variables pay one test of an empty dict per recorded op (below the noise of a ~3.9 us eager
op here).
"""

from __future__ import annotations

import threading
import weakref
import zlib

import numpy as np

from ops.xp import to_numpy
from tape.errors import MutationError, user_location

# Every tape (weakly: a dropped tape needs no guarding). Threads record on their own tapes but
# one thread's write is noted on all of them: the set and the tapes' write records are changed
# under LOCK.
LIVE_TAPES = weakref.WeakSet()
LOCK = threading.Lock()


def register(tape):
    with LOCK:
        LIVE_TAPES.add(tape)


# id(var) -> (weak Variable, its buffer when shared, where): buffers another library may write.
SHARED = {}
# Key tag of a seal entry in Tape._written: (count, weak var, checksum, buffer). Weak: a seal
# must not keep a Variable (and with it its ``SHARED`` entry) alive on a tape that no longer
# reads it, e.g. an idle thread's tape.
_SEAL = "dlpack-seal"
_SHARED_WRITE = "a write through memory shared with another library (DLPack, shared at {})"


def note_writes(variables, how, location=None, writers=None):
    """Records on each live tape that ``variables`` were just given new values by ``how``
    ('set_value', 'an optimizer update', ...): ops recorded so far must not use them.
    ``writers``: the ops that wrote them in place, on their tape (a lazy run's updates): there
    only the ops recorded before its writer must not (the writer itself read the old value, as
    an eager op that updates its input does)."""
    where = location or user_location()
    before = {}
    for op in writers or ():
        for var in op.output_vars():
            before[id(var)] = (op.index, op)
    with LOCK:
        for tape in list(LIVE_TAPES):
            recorded = len(tape._ops)
            if not recorded:
                continue
            written = tape._written
            for var in variables:
                # The latest write decides; the entry holds the Variable, so its id stays unique.
                count = recorded
                writer = before.get(id(var))
                if (
                    writer is not None
                    and writer[0] < recorded
                    and tape._ops[writer[0]] is writer[1]
                ):
                    count = writer[0]
                written[id(var)] = (count, var, how, where)


def pending_readers(var):
    """The outputs of pending lazy ops that read ``var`` (they must run before it changes)."""
    outputs = []
    with LOCK:
        tapes = list(LIVE_TAPES)
    for tape in tapes:
        region = tape._region
        if region is not None and var in region.live_of:  # (its calls read var when they run)
            from tape import call_region

            call_region.seal(tape)
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


def share(var, where):
    """Lists ``var``'s current buffer as writable by another library, and seals it on every live
    tape with an op reading it: those ops saw the buffer as it is now (ops recorded later are
    sealed as they are recorded: ``seal``)."""
    buffer = var._value
    if buffer is None:
        return
    key = id(var)
    SHARED[key] = (weakref.ref(var, lambda _: SHARED.pop(key, None)), buffer, where)
    checksum = None
    with LOCK:
        for tape in list(LIVE_TAPES):
            if _reads(tape._ops, var):
                if checksum is None:
                    checksum = _checksum(buffer)
                tape._written[(_SEAL, key)] = (len(tape._ops), weakref.ref(var), checksum, buffer)


def _reads(ops, var):
    """Whether an op of ``ops`` (a tape's, dropped ones None) reads ``var``."""
    for op in ops:
        if op is not None and any(v is var for v in op.input_vars()):
            return True
    return False


def seal(tape, args):
    """Record hook (only while ``SHARED`` is not empty): for each shared input of the op being
    recorded, a changed checksum since the tape's last seal is a write between the two; then the
    seal moves past this op."""
    for arg in args:
        for var in arg if arg.__class__ is list else (arg,):
            entry = SHARED.get(id(var)) if var is not None else None
            if entry is None:
                continue
            if var._value is not entry[1]:  # rebound: the other library holds the old buffer
                del SHARED[id(var)]
                continue
            key, count, written = (_SEAL, id(var)), len(tape._ops), tape._written
            checksum, previous = _checksum(entry[1]), written.get(key)
            if previous is not None and previous[1]() is var and previous[2] != checksum:
                _note_shared_write(written, var, count, entry[2])
            written[key] = (count + 1, weakref.ref(var), checksum, entry[1])


def verify_shared(tape):
    """Backward hook: a shared buffer whose checksum changed since its seal was written after the
    ops recorded before the seal saw it; those ops' backward then raises (``check``). Seals of
    Variables that no longer exist are dropped (no op on the tape reads them)."""
    written = tape._written
    for key, entry in list(written.items()):
        if key.__class__ is tuple and key[0] == _SEAL:
            count, ref, checksum, buffer = entry
            var = ref()
            if var is None:
                written.pop(key, None)
            elif var._value is buffer and _checksum(buffer) != checksum:
                shared = SHARED.get(id(var))
                _note_shared_write(written, var, count, shared[2] if shared else "?")


def _note_shared_write(written, var, count, where):
    current = written.get(id(var))
    if current is None or current[0] < count:
        written[id(var)] = (count, var, _SHARED_WRITE.format(where), None)


def _checksum(buffer):
    """CRC-32 of the buffer's bytes (a host copy for a device or strided array)."""
    if buffer.__class__ is not np.ndarray or not buffer.flags.c_contiguous:
        buffer = np.ascontiguousarray(to_numpy(buffer))
    return zlib.crc32(buffer.reshape(-1).view(np.uint8))


__all__ = [
    "LIVE_TAPES",
    "LOCK",
    "register",
    "SHARED",
    "note_writes",
    "pending_readers",
    "check",
    "share",
    "seal",
    "verify_shared",
]
