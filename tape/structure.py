"""The lazy tape's numbering, kept on the tape and extended by each run with the ops since the last.

Variables are numbered by first appearance over the tape's ops. Per op, its definition,
attributes and input/output slots are interned to one int (``op_ids``), per variable its shape,
dtype, requires_grad and persistable flags (``sig_ids``): two tapes of the same structure give
equal id lists, so a structural key is a few tuples of ints, cheap to hash and compare, and a
run scans only the ops recorded since the previous run instead of the whole tape.

The numbering holds its Variables by weak reference: the tape's ops hold them anyway, and a
strong list would add a reference that the "held by the user" count would have to discount
between runs. Ops dropped from the tape (an eager backward; ``Tape.reset``) invalidate it:
``tape._structure`` is set to None and the next run numbers the tape afresh.
"""

from __future__ import annotations

import itertools
import weakref

from tape.ir import _freeze_value
from tape.variable import Variable

# Interned op and variable descriptions -> ids. Ids are never reused (a counter, not the table's
# size), so clearing the tables when they grow large can only cause cache misses, never a
# wrong hit.
_IDS = itertools.count()
_OPS, _SIGNATURES = {}, {}
_LIMIT = 1 << 19


def intern(table, key):
    found = table.get(key)
    if found is None:
        if len(table) > _LIMIT:
            table.clear()
        found = table[key] = next(_IDS)
    return found


def signature(var):
    return intern(_SIGNATURES, (var.shape, var.dtype, var.requires_grad, var.persistable))


class Structure:
    """The numbering of ``tape``'s first ``scanned`` ops (see the module docstring).

    Per op i of the tape (``ops``, the tape's list): ``keys[i]`` is its form (definition,
    attributes, input slots, output slots, with tuples for lists and None for absent slots; None
    for a dropped op), ``op_ids[i]`` the form's interned id, ``outs[i]`` its output slots
    flattened;
    ``refs[s]``: the references the ops hold to variable s (an argument tuple two ops share holds
    one).
    """

    __slots__ = ("ops", "scanned", "keys", "outs", "op_ids",
                 "index", "refs", "weak", "sig_ids", "shared")

    def __init__(self, tape):
        self.ops, self.scanned = tape._ops, 0
        self.keys, self.outs, self.op_ids = [], [], []
        self.index, self.refs, self.weak, self.sig_ids = {}, [], [], []
        self.shared = set()

    def _new(self, var, count):
        slot = self.index[id(var)] = len(self.weak)
        self.weak.append(weakref.ref(var))
        self.sig_ids.append(signature(var))
        self.refs.append(count)
        return slot

    def _entry(self, entry, counted, output):
        if entry is None:
            return None
        if entry.__class__ is list or entry.__class__ is tuple:
            return tuple(self._entry(e, counted, output) for e in entry)
        slot = self.index.get(id(entry))
        if slot is None:
            return self._new(entry, int(counted))
        if counted:
            self.refs[slot] += 1
        if output:  # rewritten by this op (in place, or a given handle): describe it anew
            self.sig_ids[slot] = signature(entry)
        return slot

    def extend(self):
        """Numbers the ops recorded since the last call (the loop is inlined: it runs per op)."""
        ops, index, refs, shared, entry_of = self.ops, self.index, self.refs, self.shared, \
            self._entry
        keys, outs, op_ids = self.keys, self.outs, self.op_ids
        weak, sig_ids, ref, signatures, known = self.weak, self.sig_ids, weakref.ref, \
            _SIGNATURES, _OPS
        for i in range(self.scanned, len(ops)):
            op = ops[i]
            if op is None:
                keys.append(None)
                outs.append(())
                op_ids.append(-1)
                continue
            args = op.args
            before = len(shared)
            shared.add(id(args))
            counted = len(shared) != before
            ins = []
            for entry in args:
                slot = index.get(id(entry))
                if slot is not None and entry.__class__ is Variable:  # the common case
                    if counted:
                        refs[slot] += 1
                    ins.append(slot)
                else:
                    ins.append(entry_of(entry, counted, False))
            ins = tuple(ins)
            results = op.results
            out = results[0] if len(results) == 1 else None
            if out.__class__ is Variable and id(out) not in index:
                slot = index[id(out)] = len(weak)  # the common case: one new output
                weak.append(ref(out))
                desc = (out.shape, out.dtype, out.requires_grad, out.persistable)
                sig = signatures.get(desc)
                sig_ids.append(sig if sig is not None else intern(signatures, desc))
                refs.append(1)
                res = flat_outs = (slot,)
            else:
                res = tuple([entry_of(entry, True, True) for entry in results])
                flat_outs = tuple(flatten(res))
            outs.append(flat_outs)
            key = (op.defn, tuple(op.attrs.items()), ins, res)
            try:
                found = known.get(key)
            except TypeError:  # an attribute holding a list
                key = _freeze_value(key)
                found = known.get(key)
            keys.append(key)
            op_ids.append(found if found is not None else intern(known, key))
        self.scanned = len(ops)

    def variables(self):
        """The numbered Variables, or None if one died (its op was dropped from the tape)."""
        variables = [ref() for ref in self.weak]
        try:
            return variables, bytes([v._released for v in variables])
        except AttributeError:  # None has no _released
            return None, None


def structure(tape):
    """``tape``'s numbering, extended with the ops recorded since the last run."""
    current = getattr(tape, "_structure", None)
    if current is None or current.ops is not tape._ops:
        current = tape._structure = Structure(tape)
    current.extend()
    return current


def flatten(entries):
    """The slots in nested entries (tuples for lists of Variables; None skipped)."""
    for entry in entries:
        if entry is None:
            continue
        if entry.__class__ is tuple:
            yield from flatten(entry)
        else:
            yield entry


__all__ = ["Structure", "structure", "signature", "flatten", "intern"]
