"""The lazy tape's numbering, kept on the tape and extended by each run with the ops since the last.

Variables are numbered by first appearance over the tape's ops. Per op, its definition, attributes
and input/output slots are interned to one int (``op_ids``), per variable its shape, dtype,
requires_grad and persistable flags (``sig_ids``; -1 for the one output of an op taking Variables,
which that op's form describes, saving a lookup per op): two tapes of the same structure give equal
id lists, so a structural key is a few tuples of ints, cheap to hash and compare, and a run scans
only the ops recorded since the previous run instead of the whole tape.

The numbering holds no Variables (it finds each through the op it comes from, or a weak
reference): the tape's ops hold them anyway, and a list of them would add a reference that the
"held by the user" count would have to discount between runs. Little that it allocates per op
outlives the scan, which keeps the garbage collector's young generations small. Ops dropped from
the tape (an eager backward; ``Tape.reset``) invalidate it: ``tape._structure`` is set to None
and the next run numbers the tape afresh.
"""

from __future__ import annotations

import itertools
import weakref

from tape.ir import _freeze_value
from tape.variable import Variable

# Interned op and variable descriptions -> ids. Ids are never reused (a counter, not the table's
# size), so forgetting a description can only cause cache misses, never a wrong hit. The tables
# keep two generations: when the current one grows past the limit it becomes the old one and a
# new one starts, and a description found only in the old one moves to the new one with its
# id. So the forms a repeated structure uses keep their ids (its cached plan stays reachable)
# while a tape whose structure changes every step adds new forms each step; see _trim.
_IDS = itertools.count()
_OPS, _SIGNATURES = {}, {}
_OLD_OPS, _OLD_SIGNATURES = {}, {}
_LIMIT = 1 << 16


def intern(table, key):
    found = table.get(key)
    if found is None:
        old = _OLD_OPS if table is _OPS else _OLD_SIGNATURES
        found = old.get(key)
        if found is None:
            found = next(_IDS)
        table[key] = found
    return found


def _trim(ops):
    """Starts a new generation of a table before a scan when it holds far more than a tape of
    ``ops`` ops needs (never during one: a tape larger than the limit would then never hit the
    cache); the old generation is dropped."""
    global _OPS, _OLD_OPS, _SIGNATURES, _OLD_SIGNATURES
    if len(_OPS) > max(_LIMIT, 4 * ops):
        _OLD_OPS, _OPS = _OPS, {}
    if len(_SIGNATURES) > _LIMIT:
        _OLD_SIGNATURES, _SIGNATURES = _SIGNATURES, {}


def signature(var):
    return intern(_SIGNATURES, (var.shape, var.dtype, var.requires_grad, var.persistable))


class Structure:
    """The numbering of ``tape``'s first ``scanned`` ops (see the module docstring).

    Per op i of the tape (``ops``, the tape's list): ``op_ids[i]`` is the interned id of its form
    (definition, attributes, input slots, output slots, with tuples for lists and None for absent
    slots -- and the descriptions of its new outputs; -1 for a dropped op), ``outs[i]`` its
    output slot (an int) or output slots (a tuple, flattened). Per variable s: ``where[s]`` is the
    index of the op whose one output it is, ``(index, position)`` for a new output among several,
    or a weak reference (a variable first seen as an input); ``refs[s]`` counts the references
    the ops hold to it (an argument tuple two ops share holds one). With ``forms``, ``forms[i]``
    keeps op i's form (the analysis needs them on a cache miss; a hit allocates nothing that
    outlives the scan).
    """

    __slots__ = (
        "ops",
        "scanned",
        "forms",
        "outs",
        "op_ids",
        "index",
        "refs",
        "where",
        "sig_ids",
        "shared",
        "keyless",
    )

    def __init__(self, tape, forms=False, keyless=False):
        self.ops, self.scanned, self.forms = tape._ops, 0, [] if forms else None
        self.keyless = keyless  # (variables numbered, op forms not: see ``keyless``)
        self.outs, self.op_ids = [], []
        self.index, self.refs, self.where, self.sig_ids = {}, [], [], []
        self.shared = set()

    def _new(self, var, count):
        slot = self.index[id(var)] = len(self.where)
        self.where.append(weakref.ref(var))
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

    def _results(self, i, results):
        """Slots of op ``i``'s results (not one new output) and, for each new Variable among
        them, its description (described in the op's form, found through the op: ``where``
        holds ``(i, position)``); None for the others (described by ``sig_ids``)."""
        index, where, res, descs = self.index, self.where, [], []
        for position, entry in enumerate(results):
            if entry.__class__ is Variable and id(entry) not in index:
                res.append(len(where))
                index[id(entry)] = len(where)
                where.append((i, position))
                self.sig_ids.append(-1)
                self.refs.append(1)
                descs.append((entry.shape, entry.dtype, entry.requires_grad, entry.persistable))
            else:
                res.append(self._entry(entry, True, True))
                descs.append(None)
        return tuple(res), tuple(descs)

    def extend(self):
        """Numbers the ops recorded since the last call (the loop is inlined: it runs per op).
        A ``keyless`` numbering skips the op forms and their ids (``op_ids`` holds -2 per op):
        interning forms unique to a structure seen once was ~60% of the cost."""
        keyless = self.keyless
        ops, index, refs, shared, entry_of = (
            self.ops,
            self.index,
            self.refs,
            self.shared,
            self._entry,
        )
        forms, outs, op_ids = self.forms, self.outs, self.op_ids
        where, sig_ids, known = self.where, self.sig_ids, _OPS
        for i in range(self.scanned, len(ops)):
            op = ops[i]
            if op is None:
                outs.append(())
                op_ids.append(-1)
                if forms is not None:
                    forms.append(None)
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
                slot = index[id(out)] = len(where)  # the common case: one new output,
                where.append(i)
                sig_ids.append(-1)  # described in the op's form
                refs.append(1)
                outs.append(slot)
                if keyless:
                    op_ids.append(-2)
                    continue
                defn, attrs = op.defn, op.attrs  # (None: the shared defaults, not copied)
                key = (
                    defn,
                    None if attrs is defn.defaults else tuple(attrs.items()),
                    ins,
                    slot,
                    out.shape,
                    out.dtype,
                    out.requires_grad,
                    out.persistable,
                )
            else:
                res, descs = self._results(i, results)
                outs.append(tuple(flatten(res)))
                if keyless:
                    op_ids.append(-2)
                    continue
                key = (op.defn, tuple(op.attrs.items()), ins, res, descs)
            try:
                found = known.get(key)
            except TypeError:  # an attribute holding a list
                key = _freeze_value(key)
                found = known.get(key)
            op_ids.append(found if found is not None else intern(known, key))
            if forms is not None:
                forms.append(key)
        self.scanned = len(ops)

    def append(self, template, new, ops):
        """Numbers ``ops`` (just appended to the tape) and the Variables ``new`` they number
        first (their outputs, a maker's constants) from a ``tape.replay`` template of the same
        ops: the lists grow by the template's entries, no op is scanned."""
        first = len(self.where)
        self.op_ids += template.op_ids
        self.outs += template.outs
        self.sig_ids += template.sig_ids
        self.where += [
            weakref.ref(var) if where is None else where
            for var, where in zip(new, template.where, strict=True)
        ]
        refs = self.refs
        for slot, count in template.ref_deltas:
            refs[slot] += count
        refs += template.new_refs
        self.index.update(zip(map(id, new), range(first, first + len(new))))
        self.shared.update([id(op.args) for op in ops])
        self.scanned = len(self.ops)

    def variables(self):
        """The numbered Variables and their released flags, or (None, None) if one died (its op
        was dropped from the tape)."""
        ops = self.ops
        try:
            variables = [
                ops[w].results[0]
                if w.__class__ is int
                else ops[w[0]].results[w[1]]
                if w.__class__ is tuple
                else w()
                for w in self.where
            ]
            return variables, bytes([v._released for v in variables])
        except AttributeError:  # None has no results, no _released
            return None, None


def structure(tape):
    """``tape``'s numbering, extended with the ops recorded since the last run."""
    current = getattr(tape, "_structure", None)
    if current is None or current.ops is not tape._ops:
        current = tape._structure = Structure(tape)
    _trim(len(tape._ops))
    current.extend()
    return current


def keyless(tape):
    """A numbering of ``tape`` for one run whose structure is neither looked up nor
    remembered (``tape.lazy.run_before_backward``: a step's forward before its eager
    backward, which drops the ops): ``tape``'s own numbering where it has one, else one of its
    variables only, kept nowhere (its op ids are -2, its structural key meaningless)."""
    current = getattr(tape, "_structure", None)
    if current is not None and current.ops is tape._ops:
        return structure(tape)
    numbering = Structure(tape, keyless=True)
    numbering.extend()
    return numbering


def numbered(tape, without_key=False):
    """``(numbering, variables, released)``: ``structure(tape)`` (``keyless(tape)`` when
    ``without_key``) with its Variables and their released flags (numbered afresh if ops were
    dropped behind the numbering's back)."""
    number = keyless if without_key else structure
    numbering = number(tape)
    variables, released = numbering.variables()
    if variables is None:
        tape._structure = None
        numbering = number(tape)
        variables, released = numbering.variables()
    return numbering, variables, released


def forms(tape):
    """The form of each op on ``tape`` (numbered afresh; for the analysis on a cache miss)."""
    fresh = Structure(tape, forms=True)
    fresh.extend()
    return fresh.forms


def flatten(entries):
    """The slots in nested entries (tuples for lists of Variables; None skipped)."""
    for entry in entries:
        if entry is None:
            continue
        if entry.__class__ is tuple:
            yield from flatten(entry)
        else:
            yield entry


__all__ = ["Structure", "structure", "numbered", "forms", "signature", "flatten", "intern"]
