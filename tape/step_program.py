"""A repeated lazy step run whole at its backward: forward and backward as one cached plan.

A training step whose structure ``tape.replay`` knows has a template of its gradient ops. The
usual way to run it appends those ops to the tape (a Variable and an OpHandle each), numbers
them, traces the whole tape for its plan key and commits every slot the plan wrote: about as much
Python per gradient op as eager mode spends running it. Yet the outcome is the same every step:
the same plan over the same slots. So a structure's plan for the whole step is learnt once, the
usual way (``learn``: its template replayed and the step compiled with the leaf gradients as its
targets), and kept with the template as a ``Program``. Later steps (``run``) bind the forward's
inputs from the tape's numbering, run that plan at the backward and store what it kept: the
values the user holds and one new Variable per leaf gradient. No gradient op is recorded. Nor
is the tape numbered where the learnt step had a ``step_identity.Recipe`` (``run_known``): the
forward is checked against it, and its Variables come in the numbering's order.

This is the end state of the eager way (``tape.backward._after_forward``), which the same step
may take instead (``tape.tier_choice`` times the two): the forward has run, its ops are dropped
and the leaves' gradients hold values. A step the plan cannot run whole -- a pending op it would
leave out, an in-place update, an input without a value, validation or debug output -- goes
the usual way.

A failed run changes nothing it was to change (``tape.rollback``): the forward's ops leave the
pending list, their outputs are marked failed and the random generators are restored.
"""

from __future__ import annotations

import weakref

from tape import collector, instrument, rollback, tier_choice
from tape.passes import execute
from tape.passes.plan import CACHE, stand_ins
from tape.remembered import Remembered
from tape.trace import Trace, compile_trace, held_among
from tape.transaction import uninterrupted
from tape.variable import Variable

# Templates whose Program has a recipe (``tape.step_identity``), by the sketch of their tape
# (``tier_choice.sketch``): a known step is recognised without being numbered.
_KNOWN = Remembered(64)


class Program:
    """A whole step's plan and how to bind it, learnt from its analysis ``entry``: ``key``,
    that analysis's key in the plan cache, which holds it (clearing the cache drops it, as it
    drops every plan: a plan holds the kernels it was built with).

    ``at``: the tape indices of the forward ops pending at the backward; ``kept``: those of the
    ops the backward does not release (no gradient reaches them: they stay on the tape, as the
    eager way keeps them); ``forward``: the number of forward slots (the tape's numbering before
    the gradient ops; a slot at or past it is one of the template's: a constant or a gradient
    op's output); ``constants``: {slot: value} of the template's constants; ``leaves``: (leaf
    slot, gradient slot, shape, dtype) in the backward's order; ``candidates``: the forward
    slots whose being held changes the plan; ``recipe``, the forward's ``step_identity.Recipe``
    (or None: the step is recognised by its numbering)."""

    __slots__ = ("key", "at", "kept", "forward", "constants", "leaves", "candidates", "recipe")

    def __init__(self, key, entry, at, kept, forward, template, recipe):
        self.key, self.at, self.kept, self.forward = key, at, kept, forward
        self.recipe = recipe
        news = template.news
        self.constants = {
            forward + k: new._value for k, new in enumerate(news) if new.__class__ is Variable
        }
        self.leaves = tuple(
            (leaf, grad, *news[grad - forward][:2]) for leaf, grad in template.leaves
        )
        self.candidates = tuple(s for s in entry.candidates if s < forward)


def usable(tape, retain_graph):
    """Whether a lazy backward on ``tape`` may run (or learn) its step whole: the global tape
    in a ``tape.lazy()`` block with the default tiers (``compile=True`` defers every run to
    the first request, as it always has), a graph the backward releases, and no option or
    observer that needs the usual run (validation, debug output, anomaly checks, pending undo
    records)."""
    from tape.lazy import options
    from tape.tape import state

    return (
        tape.steps_only
        and state.lazy
        and not retain_graph
        and not tape.keep_history
        and not tape._undo
        and options.compile is None
        and not options.validate
        and not options.debug
        and not instrument.checking()
    )


def learn(tape, template, leaves, forward, first_gradient_op, recipe=None, sketched=None):
    """Runs a step whose gradient ops ``tape.replay`` just appended from ``first_gradient_op``
    on (their ``leaves``: {id: (leaf, gradient)}) as one plan computing the gradients, and keeps
    it with ``template`` as its ``Program`` where later steps can run it whole (else
    ``template.program`` is False). ``forward``: the number of forward slots. Nothing runs
    where a value is missing: the gradients stay pending, as the usual way leaves them. With
    the forward's ``recipe`` and the tape's sketch, ``run_known`` finds the program."""
    from tape.lazy import _execute, _run_ended, options

    grads = [grad for _, grad in leaves.values()]
    try:
        with tape._run_lock, collector.paused():
            scan = Trace(tape, grads)
            if scan.missing_target() is not None:
                return
            entry = CACHE.get(scan.key)
            if entry is None:
                tier_choice.cold()
                entry = compile_trace(scan, options.debug)
                CACHE.put(scan.key, entry)
            at = tuple(i for i in scan.at if i < first_gradient_op)
            kept = frozenset(
                i
                for i, op in enumerate(tape._ops[:first_gradient_op])
                if op is not None and not all(var._released for var in op.output_vars())
            )
            if _execute(tape, scan, entry) is not None:
                return  # (an input to recompute: the usual run settles it on request)
            tape.maybe_compact()
            whole = (
                len(entry.ran) == len(scan.pending)
                and not entry.updated_slots
                and all(grad >= forward for _, grad in template.leaves)
            )
            template.program = (
                Program(scan.key, entry, at, kept, forward, template, recipe) if whole else False
            )
            if whole and recipe is not None and sketched is not None:
                _KNOWN.put(sketched, template)
    finally:
        _run_ended(tape)


def run_known(tape, loss, sketched, retain_graph):
    """The leaf gradients of a lazy backward of ``loss`` run whole, if the tape (its sketch
    ``sketched``) is a step whose program has a recipe and matches it; else None (the usual
    way numbers the tape and looks its structure up)."""
    template = _KNOWN.get_recent(sketched)
    if template is None or not template.program or not usable(tape, retain_graph):
        return None
    if not all(defn.grad_maker is maker for defn, maker in template.makers):
        return None
    variables = template.program.recipe.match(tape._ops, loss)
    if variables is None:
        return None
    return run(tape, template.program.recipe.refs, variables, template, "its recipe")


def forget():
    """Forgets the steps known by their sketch (``tape.replay.forget``)."""
    _KNOWN.clear()


def run(tape, refs, variables, template, found_by="its numbering"):
    """The leaf gradients ``{id: (leaf, gradient)}`` of a lazy backward run whole by the
    template's ``Program`` (see the module docstring), or None where it cannot run (the usual
    way then replays the template). ``variables``: the tape's in its numbering's order;
    ``refs``: the references its ops hold to each; ``found_by``: how the step was recognised
    (for ``tape.explain``)."""
    from tape.lazy import _run_ended

    program = template.program
    if tuple([op.index for op in tape._pending_ops]) != program.at:
        return None
    entry = CACHE.get(program.key)
    if entry is None:  # (the cache was cleared, or dropped it: learnt again)
        template.program = None
        return None
    try:
        with tape._run_lock, collector.paused():
            leaves = _run(tape, variables, program, entry, refs, template.released)
    finally:
        _run_ended(tape)
    if leaves is not None:
        tape._whole_step = (tape._last_plan, found_by)
    return leaves


def _run(tape, variables, program, entry, refs, released):
    from tape.lazy import options

    forward = program.forward
    holding = frozenset(held_among(variables, refs, program.candidates))
    compiled = entry.plan(holding, options.exact)
    vals = [None] * compiled.slots
    constants = program.constants
    for slot in compiled.inputs:
        if slot < forward:
            var = variables[slot]
            value = var._value
            if value is None or var._pending is not None:
                return None  # (freed, failed or computed elsewhere: the usual run settles it)
        else:
            value = constants[slot]
        vals[slot] = value
    pending = tape._pending_ops
    snapshot = rollback.Snapshot(compiled.random)
    committed = False
    try:
        for slot, array in stand_ins(compiled):
            vals[slot] = array
        execute.run(compiled, vals, options.threads)
        with uninterrupted():
            leaves = _commit(tape, variables, program, compiled, vals, released)
            committed = True
    except BaseException as err:
        if not committed:
            computed = rollback.computed_values(variables, compiled.produced, vals, forward)
            rollback.abort(tape, list(pending), err, snapshot, computed)
        raise
    return leaves


def _commit(tape, variables, program, compiled, vals, released):
    """Stores the values the plan kept, makes the leaves' gradients and drops the step's ops
    (the backward released them: the end state of the eager way)."""
    forward, freed = program.forward, compiled.freed
    for slot in compiled.writeback:
        if slot < forward and slot not in freed:
            var = variables[slot]
            var._value, var._pending = vals[slot], None
    leaves = {}
    for leaf, grad, shape, dtype in program.leaves:
        var = variables[leaf]
        leaves[id(var)] = (var, Variable._make(vals[grad], shape, dtype, False))
    for slot in released:
        variables[slot]._released = True
    tape._pending_ops = []
    _drop_released(tape, program.kept)
    tape._eager_way = tape._last_autobatch = tape._last_choice = None
    tape._last_plan = compiled
    return leaves


def _drop_released(tape, kept):
    """Drops the ops the backward released, as the eager way does; an op kept (``kept``: tape
    indices) whose output the plan freed leaves it freed (recomputed if asked for)."""
    if not kept:
        tape._ops, tape._structure = [], None
        return
    tape.compact(lambda op: op.index in kept)
    freed_by = weakref.ref(tape)  # (see tape.variable.owner)
    for op in tape._ops:
        for var in op.output_vars():
            if var._pending is tape:
                var._pending = freed_by


__all__ = ["Program", "usable", "learn", "run", "run_known", "forget"]
