"""Lazy mode: ops are recorded and shape-checked only; asking for a value runs the scheduler.

``with tape.lazy(): ...`` (or ``Tape(lazy=True)``) records without running kernels; shape errors
still surface at the user's line. ``value()``/``numpy()`` on a pending variable hand the pending
part of the tape -- forward, gradient ops, optimizer updates -- to the passes of ``tape.passes``,
pruned to what was asked plus every pending side effect (updates, saves) and random op, since
eager mode would already have run those. ``backward`` on a lazy tape records the gradient ops
and marks the forward ops released; they run with the next request, so a training step usually
runs as one plan and each forward activation is freed right after its last gradient op.
``reset_global_tape()`` first runs what the old tape still owes (its side effects).

Which buffers a run may free. Never: parameters and other persistable variables, the requested
variables, leaves (nothing could recompute them), variables that pending ops outside this run or
a later backward may read (inputs -- except no-need-buffer ones -- and outputs of differentiable
ops not yet released by a backward), and variables the user still holds. "Held" is decided
with reference counts: a Variable referenced from anywhere but the tape's own ops (a user's
name, a layer attribute, another tape, ``param.grad()``) has more references than the tape
accounts for. Counting errs only towards keeping. A freed variable stays pending, so an
unexpected later request recomputes it (pure ops only).

The analysis is cached by the tape's structure (op types, attributes, wiring, shapes, dtypes,
flags, which ops already ran, what was requested), so a loop recording the same tape every step
pays only for a scan, binding and the kernels.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from ops.xp import array_module, default_module, to_numpy
from tape.errors import GraphError
from tape.ir import from_ops
from tape.passes import execute, pipeline
from tape.passes.dependencies import ordered_kind
from tape.passes.plan import CACHE, stand_ins
from tape.variable import Variable


class _Options(threading.local):
    def __init__(self):
        self.threads, self.validate, self.debug = 0, False, None


options = _Options()


class lazy:
    """Context manager: ops recorded inside are pending until a value is asked for.

    Args:
        enabled: False switches lazy mode off inside an outer ``lazy()``.
        threads: run plans on this many threads (0 or 1: in program order).
        validate: also run every plan the eager way and compare the results bit for bit.
        debug: verify the IR between passes and print one line per pass (see pipeline).

    Leaving the block runs what is still pending on the global tape and observable: the values
    the user holds and the side effects.

    >>> import numpy as np, tape, ops
    >>> with tape.lazy():
    ...     tape.reset_global_tape()  # doctest: +ELLIPSIS
    ...     y = ops.relu(tape.Variable(np.array([-1.0, 2.0], np.float32)))
    ...     print(repr(y).endswith("value=<pending>)"), y.numpy())
    Tape(...)
    True [0. 2.]
    """

    def __init__(self, enabled=True, threads=0, validate=False, debug=None):
        self.enabled, self.settings = bool(enabled), (int(threads), bool(validate), debug)

    def __enter__(self):
        from tape.tape import get_global_tape, state

        current = get_global_tape()
        self.saved = (state.lazy, (options.threads, options.validate, options.debug),
                      current, current.record_all)
        state.lazy = current.lazy = self.enabled
        current.record_all = current.record_all or self.enabled
        options.threads, options.validate, options.debug = self.settings
        return self

    def __exit__(self, exc_type, *exc):
        from tape.tape import state

        outer, settings, entered, record_all = self.saved
        state.lazy = outer
        options.threads, options.validate, options.debug = settings
        current = state.tape
        if current is None or current.lazy == outer:
            return
        if exc_type is None and current._pending_ops:
            _run(current, None)
        current.lazy = outer
        current.record_all = record_all if current is entered else outer


def realize(tape, variables):
    """Runs the pending ops ``variables`` need (with pending side effects) and fills them in."""
    _run(tape, list(variables))


def flush(tape):
    """Runs the pending side effects of ``tape`` (optimizer updates, saves) and what they need."""
    if any(_effectful(op.defn) for op in tape._pending_ops):
        _run(tape, [])


def explain(tape) -> str:
    """What the scheduler decided for the last lazy run on ``tape``."""
    compiled = getattr(tape, "_last_plan", None)
    if compiled is None:
        return "no lazy run on this tape yet"
    return pipeline.explain(compiled, CACHE)


def _effectful(defn):
    return ordered_kind(defn) is not None


def _run(tape, targets):
    for _ in range(len(tape._ops) + 1):
        scan = _Scan(tape, targets)
        missing = scan.missing_target()
        if missing is None:
            entry = CACHE.get(scan.key)
            if entry is None:
                entry = _compile(scan)
                CACHE.put(scan.key, entry)
            missing = _execute(tape, scan, entry)
            if missing is None:
                return
        _repend_producer(tape, missing)
    raise GraphError(None, "lazy run did not converge")  # each retry re-pends one more op


class _Numbering:
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


class _Scan:
    """The tape in canonical form: every op (ran or pending) with variables numbered by first
    appearance. ``key`` is hashable and equal for tapes of the same structure: per op its
    definition, attributes, whether it is pending, and its input and output slots (lists as
    tuples), delimited by -1 and -2. ``refs`` counts the references the tape's ops hold to each
    variable (an argument tuple two ops share holds one); ``produced`` is the set of slots
    pending ops write."""

    def __init__(self, tape, targets):
        self.pending = list(tape._pending_ops)
        pending_ids = {id(op) for op in self.pending}
        numbering = self.numbering = _Numbering()
        index, refs, shared, produced = numbering.index, numbering.refs, set(), set()
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
                slot = numbering.entry(entry, True)
                add(slot)
                if pending:
                    produced.update(_flat((slot,)))
            add(-2)
        variables = numbering.variables
        if targets is None:  # whatever pending op computes a value the user holds
            self.targets = tuple(sorted(s for s in produced if _held(variables, refs, s)))
        else:
            self.targets = tuple(numbering.entry(v, False) for v in targets)
        self.handles, self.pending_ids = handles, pending_ids
        self.variables, self.refs, self.produced = variables, refs, produced
        first = next((v._value for v in variables if v._value is not None), None)
        self.xp = array_module(first) if first is not None else default_module()
        self.key = _hashable(("lazy", tuple(key), tuple(numbering.signatures), self.targets,
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


def _held(variables, refs, slot):
    """Whether the user holds the Variable in ``slot``: getrefcount sees the variables list,
    its own argument and the tape's ops (``refs``); any further reference is someone else's."""
    return sys.getrefcount(variables[slot]) > refs[slot] + 2


def _flat(entries):
    for entry in entries:
        if entry is None:
            continue
        if entry.__class__ is tuple:
            yield from _flat(entry)
        else:
            yield entry


def _hashable(key):
    try:
        hash(key)
        return key
    except TypeError:  # an attribute holding a list: freeze the whole key once
        from tape.ir import _freeze_value

        return _freeze_value(key)


class _Entry:
    """A cached analysis: the pruned program and DAG, what is kept, and a plan per held set."""

    def __init__(self, analysis, keep, names, ran, xp):
        self.analysis, self.keep, self.names, self.ran, self.xp = analysis, keep, names, ran, xp
        self.slot_of = {name: slot for slot, name in enumerate(names)}
        self.plans = {}
        self.candidates = tuple(sorted(self.plan(frozenset()).freed))

    def plan(self, held):
        """The plan when the user holds the variables in slots ``held`` (kept as well)."""
        compiled = self.plans.get(held)
        if compiled is None:
            keep = self.keep | {self.names[s] for s in held}
            compiled = pipeline.schedule(self.analysis, keep, self.slot_of, len(self.names),
                                         self.xp, options.debug)
            self.plans[held] = compiled
        return compiled


def _compile(scan):
    names = [f"{var._name}_{slot}" if var._name else f"v{slot}"
             for slot, var in enumerate(scan.variables)]
    program = from_ops(scan.pending, {id(v): names[s] for s, v in enumerate(scan.variables)})
    program.bindings = {}  # the cache must not keep Variables alive
    for op, handle in zip(program.global_block().ops, scan.pending, strict=True):
        op.is_target = _effectful(handle.defn)
    analysis = pipeline.analyse(program, [names[s] for s in scan.targets], options.debug)
    ran = tuple(analysis.pruned.kept)
    keep = _keep(scan, set(ran)) | set(scan.targets)
    return _Entry(analysis, frozenset(names[s] for s in keep), names, ran, scan.xp)


def _keep(scan, ran):
    """Slots no run of this structure may free (see the module docstring)."""
    keep, produced = set(), set()
    pending_index = 0
    for defn, pending, ins, outs in scan.ops():
        out_slots = list(_flat(outs))
        produced.update(out_slots)
        outside = False
        if pending:
            outside = pending_index not in ran
            pending_index += 1
        if outside or _awaits_backward(defn, out_slots, scan.variables):
            keep.update(out_slots)
            for slot_name, entry in zip(defn.input_slots, ins, strict=True):
                if outside or slot_name not in defn.no_need_buffer:
                    keep.update(_flat([entry]))
    leaves = set(range(len(scan.variables))) - produced
    return keep | leaves


def _awaits_backward(defn, out_slots, variables):
    """A differentiable op a later backward may still differentiate (outputs need a gradient
    and none was released)."""
    if not defn.differentiable or defn.grad_maker is None:
        return False
    return any(variables[s].requires_grad for s in out_slots) and \
        not any(variables[s]._released for s in out_slots)


def _execute(tape, scan, entry):
    """Binds, runs and writes back one plan; returns a freed input to recompute, or None."""
    variables = scan.variables
    held = frozenset(s for s in entry.candidates if _held(variables, scan.refs, s))
    compiled = entry.plan(held)
    vals = [None] * compiled.slots
    for slot in compiled.inputs:
        var = variables[slot]
        value = var._value
        if var._pending is not None and var._pending is not tape:
            value = var.value()  # computed on another tape: run that one first
        if value is None:
            if var._pending is tape:
                return var
            raise GraphError(None, f"variable '{var.name}' has no value",
                             hint="it is an empty handle that no op has written")
        vals[slot] = value
    for slot in compiled.inputs:
        if slot in compiled.freed:  # computed by an earlier run: let the plan free it
            variables[slot]._value, variables[slot]._pending = None, tape
    for slot, array in stand_ins(compiled):
        vals[slot] = array
    check = _Validation(entry, compiled, vals) if options.validate else None
    ran = [scan.pending[i] for i in entry.ran]
    try:
        execute.run(compiled, vals, options.threads)
    except Exception as err:
        done = getattr(err, "completed", ())
        slots = (s for i in done for s in _flat([compiled.instructions[i][4]]))
        _write_back(tape, compiled, vals, variables, slots, [ran[i] for i in done])
        raise
    _write_back(tape, compiled, vals, variables, compiled.writeback, ran)
    tape._last_plan = compiled
    if check is not None:
        check.compare(vals)
    return None


def _write_back(tape, compiled, vals, variables, slots, ran):
    """Stores the values the run kept into their Variables; drops the ops that ran."""
    for slot in slots:
        value = vals[slot]
        if value is not None and slot not in compiled.freed:
            var = variables[slot]
            var._value, var._pending = value, None
    finished = {id(op) for op in ran}
    tape._pending_ops = [op for op in tape._pending_ops if id(op) not in finished]


def _repend_producer(tape, var):
    """Puts the (pure) op that computed a freed ``var`` back among the pending ops."""
    producer = next((op for op in reversed(tape.ops) if any(v is var for v in op.output_vars())),
                    None)
    if producer is None or _effectful(producer.defn) or producer in tape._pending_ops:
        raise GraphError(None, f"variable '{var.name}' has no value and cannot be recomputed",
                         hint="keep a reference to variables you will read later")
    tape._pending_ops.append(producer)
    tape._pending_ops.sort(key=lambda op: op.index)


class _Validation:
    """The validation flag: runs the same ops the eager way on copies and compares."""

    def __init__(self, entry, compiled, vals):
        from tape import random_state

        self.block = compiled.analysis[0].pruned.program.global_block()
        self.names, self.compiled = entry.names, compiled
        self.inputs = {entry.names[s]: vals[s].copy() for s in compiled.inputs}
        self.generator = random_state.generator(compiled.xp)
        self.state = self.generator.bit_generator.state

    def compare(self, vals):
        after = self.generator.bit_generator.state
        self.generator.bit_generator.state = self.state
        try:
            expected = execute.run_reference(self.block, dict(self.inputs))
        finally:
            self.generator.bit_generator.state = after
        for slot in self.compiled.produced:
            if vals[slot] is None:
                continue
            name = self.names[slot]
            want, got = to_numpy(expected[name]), to_numpy(vals[slot])
            if want.shape != got.shape or not np.array_equal(want, got, equal_nan=True):
                raise GraphError(None, f"lazy and eager results differ for '{name}'",
                                 hint="a scheduler bug: please report it with the tape")


__all__ = ["lazy", "realize", "flush", "explain", "options"]
