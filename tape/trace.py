"""The tape as the lazy scheduler sees it: its structural key, what a run must keep, the analysis.

A ``Trace`` numbers every variable on a tape by first appearance and lists every op (ran or
pending) by definition, attributes and slots: two tapes of the same structure give equal keys,
whatever their Variables, so the plan cache (``tape.passes.plan.CACHE``) maps a key to one
``Compiled`` analysis. Building a Program happens only on a cache miss.

What a run must keep (never free): parameters and other persistable variables, the requested
variables, leaves (nothing could recompute them), what pending ops outside the run or a later
backward may read (inputs -- except no-need-buffer ones -- and outputs of differentiable ops not
yet released by a backward), and what the user holds. "Held" is decided with reference counts: a
Variable referenced from anywhere but the tape's own ops (a user's name, a layer attribute,
another tape, ``param.grad()``) has more references than the trace counts. Counting errs only
towards keeping; what is held varies per run, so ``Compiled`` keeps one plan per held set.
"""

from __future__ import annotations

import sys

from ops.xp import array_module, default_module
from tape.ir import _freeze_value, from_ops
from tape.passes import pipeline
from tape.passes.dependencies import ordered_kind
from tape.variable import Variable


def effectful(defn):
    """Random ops and ops with side effects: eager mode would already have run them."""
    return ordered_kind(defn) is not None


class Numbering:
    """Variables numbered by first appearance, with their signatures and the references the
    tape's ops hold to them. (A class, not closures: a recursive closure is a reference cycle,
    which would keep the numbered Variables -- and their buffers -- alive until the next
    garbage collection and make them look held.)"""

    __slots__ = ("index", "variables", "signatures", "refs")

    def __init__(self):
        self.index, self.variables, self.signatures, self.refs = {}, [], [], []

    def number(self, var, counted):
        slot = self.index.get(id(var))
        if slot is None:
            slot = self.index[id(var)] = len(self.variables)
            self.variables.append(var)
            self.signatures.append((var.shape, var.dtype, var.requires_grad, var.persistable,
                                    var._released))
            self.refs.append(0)
        if counted:
            self.refs[slot] += 1
        return slot

    def entry(self, entry, counted):
        """A slot, a tuple of slots for a list of Variables, or None."""
        if entry is None:
            return None
        if entry.__class__ is list or entry.__class__ is tuple:
            return tuple(self.entry(e, counted) for e in entry)
        return self.number(entry, counted)

    def slots(self, entry):
        """Like ``entry`` for Variables already numbered, counting nothing."""
        if entry is None:
            return None
        if entry.__class__ is list or entry.__class__ is tuple:
            return tuple(self.slots(e) for e in entry)
        return self.index[id(entry)]


class Trace:
    """The tape in canonical form: every op (ran or pending) with variables numbered by first
    appearance. ``key`` is hashable and equal for tapes of the same structure: per op its
    definition, attributes, whether it is pending, and its input and output slots (lists as
    tuples), delimited by -1 and -2. ``refs`` counts the references the tape's ops hold to each
    variable (an argument tuple two ops share holds one); ``produced`` is the set of slots
    pending ops write."""

    def __init__(self, tape, targets):
        self.pending = list(tape._pending_ops)
        pending_ids = {id(op) for op in self.pending}
        numbering = self.numbering = Numbering()
        index, refs, shared, produced = numbering.index, numbering.refs, set(), set()
        variables, signatures = numbering.variables, numbering.signatures
        handles = [op for op in tape._ops if op is not None]
        key = []
        add = key.append
        for op in handles:
            pending = id(op) in pending_ids
            add(op.defn)
            add(tuple(op.attrs.items()))
            add(pending)
            args = op.args
            counted = id(args) not in shared
            shared.add(id(args))
            for entry in args:
                slot = index.get(id(entry))
                if slot is not None and entry.__class__ is Variable:  # the common case
                    if counted:
                        refs[slot] += 1
                    add(slot)
                else:
                    add(numbering.entry(entry, counted))
            add(-1)
            for entry in op.results:  # result tuples are made by record: never shared
                if entry.__class__ is Variable and id(entry) not in index:  # the common case
                    slot = index[id(entry)] = len(variables)
                    variables.append(entry)
                    signatures.append((entry.shape, entry.dtype, entry.requires_grad,
                                       entry.persistable, entry._released))
                    refs.append(1)
                    if pending:
                        produced.add(slot)
                else:
                    slot = numbering.entry(entry, True)
                    if pending:
                        produced.update(flat((slot,)))
                add(slot)
            add(-2)
        if targets is None:  # whatever pending op computes a value the user holds
            self.targets = tuple(sorted(s for s in produced if held(variables, refs, s)))
        else:
            self.targets = tuple(numbering.entry(v, False) for v in targets)
        self.handles, self.pending_ids = handles, pending_ids
        self.variables, self.refs, self.produced = variables, refs, produced
        first = next((v._value for v in variables if v._value is not None), None)
        self.xp = array_module(first) if first is not None else default_module()
        self.key = hashable(("lazy", tuple(key), tuple(numbering.signatures), self.targets,
                              self.xp))

    def ops(self):
        """(definition, pending, input slots, output slots) per op, for the analysis."""
        slots = self.numbering.slots
        return [(op.defn, id(op) in self.pending_ids, slots(op.args), slots(op.results))
                for op in self.handles]

    def missing_target(self):
        """A requested variable that is freed and that no pending op computes, if any."""
        for slot in self.targets:
            var = self.variables[slot]
            if var._value is None and slot not in self.produced:
                return var
        return None


def held(variables, refs, slot):
    """Whether the user holds the Variable in ``slot``: getrefcount sees the variables list,
    its own argument and the tape's ops (``refs``); any further reference is someone else's."""
    return sys.getrefcount(variables[slot]) > refs[slot] + 2


def flat(entries):
    """The slots in nested entries (tuples for lists of Variables; None skipped)."""
    for entry in entries:
        if entry is None:
            continue
        if entry.__class__ is tuple:
            yield from flat(entry)
        else:
            yield entry


def hashable(key):
    try:
        hash(key)
        return key
    except TypeError:  # an attribute holding a list: freeze the whole key once
        return _freeze_value(key)


class Compiled:
    """A cached analysis: the pruned program and DAG, what is kept, and a plan per held set."""

    def __init__(self, analysis, keep, names, ran, xp, debug):
        self.analysis, self.keep, self.names, self.ran = analysis, keep, names, ran
        self.xp, self.debug = xp, debug
        self.slot_of = {name: slot for slot, name in enumerate(names)}
        self.plans = {}
        self.candidates = tuple(sorted(self.plan(frozenset()).freed))

    def plan(self, held):
        """The plan when the user holds the variables in slots ``held`` (kept as well)."""
        compiled = self.plans.get(held)
        if compiled is None:
            keep = self.keep | {self.names[s] for s in held}
            compiled = pipeline.schedule(self.analysis, keep, self.slot_of, len(self.names),
                                         self.xp, self.debug)
            self.plans[held] = compiled
        return compiled


def compile_trace(scan, debug=None):
    """The analysis of a trace's pending ops: a Program of them, pruned to the requested
    variables and the side effects, its DAG, and what no run of this structure may free."""
    names = [f"{var._name}_{slot}" if var._name else f"v{slot}"
             for slot, var in enumerate(scan.variables)]
    program = from_ops(scan.pending, {id(v): names[s] for s, v in enumerate(scan.variables)})
    program.bindings = {}  # the cache must not keep Variables alive
    for op, handle in zip(program.global_block().ops, scan.pending, strict=True):
        op.is_target = effectful(handle.defn)
    analysis = pipeline.analyse(program, [names[s] for s in scan.targets], debug)
    ran = tuple(analysis.pruned.kept)
    keep = kept_slots(scan, set(ran)) | set(scan.targets)
    return Compiled(analysis, frozenset(names[s] for s in keep), names, ran, scan.xp, debug)


def kept_slots(scan, ran):
    """Slots no run of this structure may free: leaves, and what pending ops outside the run
    (``ran`` holds the indices of the pending ops that run) or a later backward may read."""
    keep, produced = set(), set()
    pending_index = 0
    for defn, pending, ins, outs in scan.ops():
        out_slots = list(flat(outs))
        produced.update(out_slots)
        outside = False
        if pending:
            outside = pending_index not in ran
            pending_index += 1
        if outside or awaits_backward(defn, out_slots, scan.variables):
            keep.update(out_slots)
            for slot_name, entry in zip(defn.input_slots, ins, strict=True):
                if outside or slot_name not in defn.no_need_buffer:
                    keep.update(flat([entry]))
    leaves = set(range(len(scan.variables))) - produced
    return keep | leaves


def awaits_backward(defn, out_slots, variables):
    """A differentiable op a later backward may still differentiate (outputs need a gradient
    and none was released)."""
    if not defn.differentiable or defn.grad_maker is None:
        return False
    return any(variables[s].requires_grad for s in out_slots) and \
        not any(variables[s]._released for s in out_slots)


__all__ = ["Trace", "Compiled", "compile_trace", "held", "flat", "effectful"]
