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
from tape.errors import GraphError
from tape.ir import from_ops
from tape.passes import pipeline
from tape.passes.autobatch import HEURISTICS
from tape.passes.dependencies import ordered_kind, written_names
from tape.structure import flatten, forms, numbered, signature


def effectful(defn):
    """Random ops and ops with side effects: eager mode would already have run them."""
    return ordered_kind(defn) is not None


class Trace:
    """The tape in canonical form (numbered by ``tape.structure``): ``key`` is hashable and equal
    for tapes of the same structure -- the interned ops and variable descriptions, which
    variables a backward released, which ops are pending, the requested slots and the array
    module. ``refs`` counts the references the tape's ops hold to each variable; ``produced``
    is the set of slots pending ops write. ``optional`` holds ids of Variables to compute too if
    the user holds them (the other gradients of a backward when one is asked for)."""

    def __init__(self, tape, targets, optional=(), keyless=False):
        numbering, variables, released = numbered(tape, keyless)
        self.pending = list(tape._pending_ops)
        handles, outs, refs = numbering.ops, numbering.outs, numbering.refs
        at = tuple([op.index for op in self.pending])
        if list(map(handles.__getitem__, at)) != self.pending:  # (OpHandles: by identity)
            raise GraphError(
                None,
                "a pending op is not on its tape",
                hint="ops were removed from the tape behind the scheduler's back",
            )
        produced = set()
        for i in at:
            slots = outs[i]
            if slots.__class__ is int:
                produced.add(slots)
            else:
                produced.update(slots)
        index = numbering.index
        if targets is None:  # whatever pending op computes a value the user holds
            self.targets = tuple(held_among(variables, refs, sorted(produced)))
        else:
            chosen = []
            for var in targets:
                slot = index.get(id(var))
                if slot is None:  # on no op of this tape: a slot for this run only
                    slot, refs = len(variables), refs + [0]
                    variables.append(var)
                    released += bytes([var._released])
                chosen.append(slot)
            extra = (index.get(i) for i in optional)
            chosen += sorted(
                s for s in extra if s in produced and s not in chosen and held(variables, refs, s)
            )
            self.targets = tuple(chosen)
        self.tape, self.numbering, self.at = tape, numbering, at
        self.variables, self.refs, self.produced = variables, refs, produced
        self.xp = module_of(variables)
        if numbering.keyless:  # (a run that looks nothing up: tape.structure.keyless)
            self.key = None
            return
        signatures = tuple(numbering.sig_ids)
        if len(variables) > len(signatures):
            signatures += tuple(signature(v) for v in variables[len(signatures) :])
        self.key = (
            "lazy",
            tuple(numbering.op_ids),
            signatures,
            released,
            at,
            self.targets,
            self.xp,
        )

    def ops(self):
        """(definition, pending, input slots, output slots) per op, for the analysis."""
        pending = set(self.at)
        ops = self.numbering.ops
        return [
            (
                ops[i].defn,
                i in pending,
                form[2],
                form[3] if form[3].__class__ is tuple else (form[3],),
            )
            for i, form in enumerate(forms(self.tape))
            if form is not None
        ]

    def missing_target(self):
        """A requested variable that is freed and that no pending op computes, if any."""
        for slot in self.targets:
            var = self.variables[slot]
            if var._value is None and slot not in self.produced:
                return var
        return None


def module_of(variables):
    """The array module of the first of ``variables`` with a value (numpy or cupy)."""
    first = next((v._value for v in variables if v._value is not None), None)
    return array_module(first) if first is not None else default_module()


def held(variables, refs, slot):
    """Whether the user holds the Variable in ``slot``: getrefcount sees the variables list,
    its own argument and the tape's ops (``refs``); any further reference is someone else's."""
    return sys.getrefcount(variables[slot]) > refs[slot] + 2


def held_among(variables, refs, slots):
    """The slots among ``slots`` whose Variable the user holds (``held`` for many slots: one
    comprehension, as a plan's candidates for freeing run into the thousands)."""
    count = sys.getrefcount
    return [s for s in slots if count(variables[s]) > refs[s] + 2]


class Compiled:
    """A cached analysis: the pruned program and DAG, what is kept, and a plan per held set."""

    def __init__(self, analysis, keep, names, ran, xp, debug):
        self.analysis, self.keep, self.names, self.ran = analysis, keep, names, ran
        self.xp, self.debug = xp, debug
        self.slot_of = {name: slot for slot, name in enumerate(names)}
        self.plans, self.freed = {}, {}
        self._in_place = None  # (see in_place_ran)
        # What a run may free, so whether the user holds it matters: every variable of the run
        # not kept (what the memory plan frees before a rewrite drops some and adds its own).
        block = analysis.pruned.program.global_block()
        used = {name for op in block.ops for name in op.input_names() + op.output_names()}
        self.candidates = tuple(
            sorted(
                self.slot_of[name]
                for name in used
                if name not in keep and not block.vars[name].persistable
            )
        )
        # Variables an op of the run updates in place (an optimizer's): their old values must
        # not be read by a later backward over ops recorded before (tape.guard).
        self.updated_slots = tuple(
            sorted(
                {
                    self.slot_of[name]
                    for op in block.ops
                    for name in set(op.input_names()) & set(op.output_names())
                }
            )
        )

    def in_place_ran(self, pending):
        """The positions among ``pending`` (a run's pending ops) of the ops that ran and update
        a Variable in place (an optimizer's, batch norm's statistics); the same for every run of
        this structure, so found once."""
        found = self._in_place
        if found is None:
            found = self._in_place = tuple(i for i in self.ran if pending[i].defn.inplace)
        return found

    def plan(self, held, exact=False):
        """The plan when the user holds the variables in slots ``held`` (kept as well);
        ``exact``: without the rewrites that reorder floating-point sums."""
        batch = None if exact else batching()
        key = (held, exact, pipeline.FUSION, batch)
        compiled = self.plans.get(key)
        if compiled is None:
            keep = self.keep | {self.names[s] for s in held}
            compiled = pipeline.schedule(
                self.analysis,
                keep,
                self.slot_of,
                len(self.names),
                self.xp,
                self.debug,
                exact,
                batch,
            )
            self.plans[key] = compiled
        return compiled

    def freed_variables(self, plan):
        """The slots of the Variables a run of ``plan`` leaves without a value: those it frees
        and those a rewrite computes another way (not a rewrite's own variables)."""
        freed = self.freed.get(plan)
        if freed is None:
            block = self.analysis.pruned.program.global_block()
            written = {self.slot_of[name] for op in block.ops for name in op.output_names()}
            kept = set(plan.writeback)
            freed = self.freed[plan] = tuple(
                sorted(s for s in written | plan.freed if s < len(self.names) and s not in kept)
            )
        return freed


def batching():
    """The heuristic a plan autobatches with under the lazy block's options (None: it does
    not): ``autobatch=False`` switches it off; ``"auto"`` batches, as a plan's groups are
    scheduled once, not every run (``tape/passes/batch_groups.py``)."""
    from tape.lazy import options

    setting = options.autobatch
    if not setting:
        return None
    return setting if setting in HEURISTICS else HEURISTICS[0]


def compile_trace(scan, debug=None):
    """The analysis of a trace's pending ops: a Program of them, pruned to the requested
    variables and the side effects, its DAG, and what no run of this structure may free."""
    names = [
        f"{var._name}_{slot}" if var._name else f"v{slot}"
        for slot, var in enumerate(scan.variables)
    ]
    program = from_ops(scan.pending, {id(v): names[s] for s, v in enumerate(scan.variables)})
    program.bindings = {}  # the cache must not keep Variables alive
    ops = program.global_block().ops
    for op, handle in zip(ops, scan.pending, strict=True):
        op.is_target = effectful(handle.defn)
    targets = [names[s] for s in scan.targets]
    analysis = pipeline.analyse(program, targets, debug)
    while True:  # until no op left out reads a value an op of the run overwrites
        readers = overwritten_readers(ops, analysis.pruned.kept)
        if not readers:
            break
        for index in readers:
            ops[index].is_target = True
        analysis = pipeline.analyse(program, targets, debug)
    ran = tuple(analysis.pruned.kept)
    keep = kept_slots(scan, set(ran)) | set(scan.targets)
    return Compiled(analysis, frozenset(names[s] for s in keep), names, ran, scan.xp, debug)


def overwritten_readers(ops, kept):
    """Ops left out of a run that read a variable an op of the run later overwrites (an
    in-place update such as an optimizer's, even into another output variable): eager mode ran
    them on the old value, so they must run now, before it changes."""
    kept, first_reader = set(kept), {}
    for index, op in enumerate(ops):
        if index not in kept:
            for name in op.input_names():
                first_reader.setdefault(name, index)
    readers = set()
    for index in kept:
        for name in written_names(ops[index]):
            readers.update(i for i in _readers_before(ops, kept, name, index, first_reader))
    return sorted(readers)


def _readers_before(ops, kept, name, before, first_reader):
    start = first_reader.get(name)
    if start is None or start >= before:
        return ()
    return [i for i in range(start, before) if i not in kept and name in ops[i].input_names()]


def kept_slots(scan, ran):
    """Slots no run of this structure may free: leaves, and what pending ops outside the run
    (``ran`` holds the indices of the pending ops that run) or a later backward may read."""
    keep, produced = set(), set()
    pending_index = 0
    for defn, pending, ins, outs in scan.ops():
        out_slots = list(flatten(outs))
        produced.update(out_slots)
        outside = False
        if pending:
            outside = pending_index not in ran
            pending_index += 1
        if outside or awaits_backward(defn, out_slots, scan.variables):
            keep.update(out_slots)
            for slot_name, entry in zip(defn.input_slots, ins, strict=True):
                if outside or slot_name not in defn.no_need_buffer:
                    keep.update(flatten([entry]))
    leaves = set(range(len(scan.variables))) - produced
    return keep | leaves


def awaits_backward(defn, out_slots, variables):
    """A differentiable op a later backward may still differentiate (outputs need a gradient
    and none was released)."""
    if not defn.differentiable or defn.grad_maker is None:
        return False
    return any(variables[s].requires_grad for s in out_slots) and not any(
        variables[s]._released for s in out_slots
    )


__all__ = ["Trace", "Compiled", "compile_trace", "held", "held_among", "effectful", "module_of"]
