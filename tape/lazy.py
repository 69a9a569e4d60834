"""Lazy mode: ops are recorded and shape-checked only; asking for a value runs the scheduler.

``with tape.lazy(): ...`` (or ``Tape(lazy=True)``) records without running kernels; shape errors
still surface at the user's line. ``value()``/``numpy()`` on a pending variable hand the pending
part of the tape -- forward, gradient ops, optimizer updates -- to the passes of ``tape.passes``,
pruned to what was asked plus every pending side effect (updates, saves) and random op, since
eager mode would already have run those. ``backward`` on a lazy tape records the gradient ops
(replayed, for a tape structure an earlier backward saw: ``tape.replay``) and marks the forward
ops released; they run with the next request, so a training step usually runs as one plan and
each forward activation is freed right after its last gradient op. (A structure seen for the
first time runs its forward at ``backward`` and differentiates the eager way instead:
``tape.backward._after_forward``; a structure whose whole step's plan is known runs that plan
at ``backward``, recording no gradient op: ``tape.step_program``; and after a streak of new
structures, the block's next global tape records eagerly: ``tape.eager_speculation``.)
Asking for one leaf's gradient computes every pending leaf gradient the user still holds in the
same run (an optimizer, or a loop over ``p.grad()``, reads them all next).
``reset_global_tape()`` first runs what the old tape still owes (its side effects).

A run frees every buffer nothing can read any more (``tape.trace`` says what it must keep: what
the user holds, what later ops or a later backward may read). A freed variable stays pending
(on its tape, held weakly: only the tape's ops can reach it), so an unexpected later request
recomputes it (pure ops only). The analysis is cached by the tape's
structure (op types, attributes, wiring, shapes, dtypes, flags, which ops already ran, what was
requested), so a loop recording the same tape every step pays only for a scan, binding and the
kernels.
"""

from __future__ import annotations

import collections
import sys
import threading
import weakref

import numpy as np

from ops.xp import to_numpy
from tape import (
    autobatch_choice,
    call_region,
    collector,
    eager_speculation,
    guard,
    instrument,
    interpret,
    region_plan,
    rollback,
    tier_choice,
)
from tape.errors import GraphError
from tape.passes import execute, pipeline
from tape.passes.autobatch import HEURISTICS
from tape.passes.plan import CACHE, stand_ins
from tape.remembered import Remembered
from tape.trace import Trace, compile_trace, effectful, held_among
from tape.transaction import uninterrupted
from tape.variable import Failed, owner


class _Options(threading.local):
    def __init__(self):
        self.threads, self.validate, self.debug, self.exact = "auto", False, None, False
        self.compile, self.autobatch = None, "auto"
        self.inline_calls = False  # (_settled: what tape.traced asks at every call)


def _settled():
    """Notes, as a block's options are set, what they imply for ``tape.traced``: whether its
    calls record the function's ops inline (``exact``, or options that compile every
    structure). A traced call asks at every call; the options change once per block."""
    options.inline_calls = options.exact or not interprets_new_structures()


options = _Options()


class lazy:
    """Context manager: ops recorded inside are pending until a value is asked for.

    Args:
        enabled: False switches lazy mode off inside an outer ``lazy()``.
        threads: "auto" (default): a plan runs on the cores where a cost model predicts the
            pool wins clearly and timed trials confirm it (``passes.parallel``; a chain or a
            tape of small ops never qualifies), else in program order; a count: run plans on
            this many threads (0 or 1: in program order). A structure's first, interpreted run
            is always in order.
        validate: also run every plan the eager way and compare the results bit for bit.
        debug: verify the IR between passes and print one line per pass (see pipeline).
        exact: no rewrites that reorder floating-point sums (``passes.batch_products``): results
            equal eager mode's bit for bit. By default many small products of an unrolled loop
            are batched into large ones, which is faster and equal to eager mode within
            reassociation rounding.
        compile: None (default): a tape structure seen for the first time is interpreted
            (``tape.interpret``, about eager mode's cost) and compiled into a cached plan, with
            the rewrites, from its second sighting on; True: always compile; False: never.
        check_finite: check every op's outputs for NaN and Inf as the runs compute them and
            raise ``tape.NonFiniteError`` naming the first op that produced one (as
            ``tape.detect_anomaly()`` does; the block's runs, including the one on leaving it).
        autobatch: "auto" (default): an interpreted run autobatches where that measured faster
            for this model (``tape.autobatch_choice``: the first two runs batch, the third does
            not, later runs take the cheaper and probe the other now and then); True or a
            heuristic name ("agenda", "depth"): always; False: off. Autobatching groups
            independent ops of one signature into batched kernel calls
            (``tape.passes.autobatch``: DyNet's autobatching; a structure that batched well
            keeps being interpreted that way instead of compiled). ``exact=True`` switches it
            off too. A step's ``tape.traced`` calls are batched whatever the choice, as rows
            of one region run level by level (``tape.call_region``), unless autobatching is
            off.

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

    def __init__(
        self,
        enabled=True,
        threads="auto",
        validate=False,
        debug=None,
        exact=False,
        compile=None,
        check_finite=False,
        autobatch="auto",
    ):
        self.enabled, self.check_finite = bool(enabled), bool(check_finite)
        if autobatch is True:
            autobatch = HEURISTICS[0]
        elif autobatch not in (False, None, "auto") and autobatch not in HEURISTICS:
            raise ValueError(
                "autobatch must be 'auto', True, False or one of "
                f"{list(HEURISTICS)}, not {autobatch!r}"
            )
        self.settings = (
            _threads(threads),
            bool(validate),
            debug,
            bool(exact),
            compile,
            autobatch or None,
        )

    def __enter__(self):
        from tape.tape import get_global_tape, state

        current = get_global_tape()
        # The entered tape weakly: a loop body that resets the global tape must free the old
        # tape right away (held, it would double the objects the garbage collector scans).
        self.saved = (
            state.lazy,
            (
                options.threads,
                options.validate,
                options.debug,
                options.exact,
                options.compile,
                options.autobatch,
            ),
            weakref.ref(current),
            current.record_all,
        )
        state.lazy = current.lazy = self.enabled
        current.record_all = current.record_all or self.enabled
        (
            options.threads,
            options.validate,
            options.debug,
            options.exact,
            options.compile,
            options.autobatch,
        ) = self.settings
        _settled()
        instrument.attach(check=self.check_finite)
        # (the ``with`` line and its options: its steps' speculation is its own)
        caller = sys._getframe(1)
        self.outer_block = eager_speculation.enter((caller.f_code, caller.f_lineno, self.settings))
        return self

    def __exit__(self, exc_type, *exc):
        from tape.tape import state

        outer, settings, entered, record_all = self.saved
        entered = entered()
        state.lazy = outer
        current = state.tape
        if current is not None and current._region is not None:
            call_region.seal(current)
        try:
            if (
                current is not None
                and current.lazy != outer
                and exc_type is None
                and current._pending_ops
            ):
                _run(current, None)  # with this block's options
        finally:
            (
                options.threads,
                options.validate,
                options.debug,
                options.exact,
                options.compile,
                options.autobatch,
            ) = settings
            _settled()
            instrument.detach(check=self.check_finite)
            eager_speculation.leave(self.outer_block)
            collector.step_ended()
        if current is not None and current.lazy != outer:
            current.lazy = outer
            current.record_all = record_all if current is entered else outer
        if entered is not None and entered is not current and not entered._pending_ops:
            entered.lazy, entered.record_all = outer, record_all  # replaced inside the block


def _threads(threads):
    """``threads`` checked: "auto" or a count."""
    return threads if threads == "auto" else int(threads)


def realize(tape, variables):
    """Runs the pending ops ``variables`` need (with pending side effects) and fills them in."""
    _run(tape, list(variables))


def run_before_backward(tape, loss):
    """Runs the pending ops before the eager backward of a structure seen for the first time
    (``tape.backward._after_forward``): every one of them in tape order, as eager mode would
    have (``tape.interpret.run_in_order``); or, where the options batch (``autobatch="auto"``
    when batching measured faster for this model, or always), the run ``loss`` needs,
    autobatched. Timed for ``autobatch="auto"``'s choice with the backward that follows (it
    batches as the forward did: ``tape.batched_backward``): the caller ends the measurement
    (``measured_with_backward``) once the gradients are there."""
    batching = None if options.exact else options.autobatch
    choice = None
    tape._with_backward = tape._unmeasured = tape._eager_count = None
    if batching == "auto" and tape.traced_calls:
        # (a traced function's call run alone interprets its program op by op, dearer than
        # the eager ops it stands for; a group's call runs it once for all: always batch)
        batching = HEURISTICS[0]
    elif batching == "auto":
        choice = _choose(tape._pending_ops, probe=tape.probe)
        tape._eager_count = autobatch_choice.recorded_eagerly(tape._pending_ops)
        batching = HEURISTICS[0] if choice[1] else None
    # (whether a model with this step's forward may be speculated eager: tape.eager_speculation)
    tape._unbatched_forward = batching is None and (
        choice is None or not autobatch_choice.prefers_batching(choice[0])
    )
    if batching is not None and tape._pending_ops and loss._pending in (None, tape):
        try:
            with tape._run_lock, collector.paused():
                # (not cold work: a new structure's step is cold already, and a known one's
                # eager way is a tier measured as it runs, tier_choice.warm_eager_way)
                tape._eager_way = None
                started, count = autobatch_choice.clock(), len(tape._pending_ops)
                tape._with_backward = True  # (the forward keeps what the backward reads)
                if interpret.run_all_batched(tape, batching):
                    _ran_whole(tape, choice, started, count)
                    return
        finally:
            tape._with_backward = None
            _run_ended(tape)
    if batching is not None or not tape._pending_ops:
        tape._with_backward = True  # (_interpret leaves the measurement to the backward's end)
        try:  # (keyless: the backward drops the ops, and what a structure's key finds with them)
            _run(tape, [loss], choice, interpreted=True, keyless=True)
        finally:
            tape._with_backward = None
        return
    try:
        with tape._run_lock, collector.paused():
            started = autobatch_choice.clock()
            count = len(tape._pending_ops)
            if not interpret.run_in_order(tape):
                _run_locked(tape, [loss], choice, interpreted=True, keyless=True)
                return
            _ran_whole(tape, choice, started, count)
    finally:
        _run_ended(tape)


def _ran_whole(tape, choice, started, count):
    """After a run of every pending op (``run_before_backward``): the tape compacted, and
    ``autobatch="auto"``'s measurement left to the end of the backward."""
    tape.maybe_compact()
    if choice is not None:
        tape._unmeasured = (choice, started, count)
    else:
        tape._last_choice = None


def measured_with_backward(tape):
    """Ends the measurement ``run_before_backward`` started, its backward done. A step's
    global tape is timed from its start (``reset_global_tape``), recording included: the
    unbatched way a model's steps take is often eager speculation, timed so too
    (``tape.eager_speculation``), and recording lazily is part of what batching costs."""
    unmeasured, tape._unmeasured = getattr(tape, "_unmeasured", None), None
    if unmeasured is not None:
        choice, started, count = unmeasured
        started = tape.started or started
        _measured(tape, choice, started, getattr(tape, "_eager_count", None) or count)
        # (measured, the model may now prefer the unbatched way: speculation may start, or,
        # after a probe that batched and lost, go on)
        tape._unbatched_forward = not autobatch_choice.prefers_batching(choice[0])


def flush(tape):
    """Runs the pending side effects of ``tape`` (optimizer updates, saves) and what they need."""
    if any(effectful(op.defn) for op in tape._pending_ops):
        _run(tape, [])


def explain(tape=None) -> str:
    """What the scheduler decided for the last lazy run on ``tape`` (default: the global tape):
    ops kept, dependency edges after reduction, where each variable is freed, cache hits."""
    if tape is None:
        from tape.tape import get_global_tape

        tape = get_global_tape()
    if tape.speculated and not tape.lazy:
        return (
            "the last step recorded eagerly: the structures of the steps before it were all new "
            f"({eager_speculation.streak()} in a row; tape.eager_speculation), so it ran as eager "
            "mode runs it"
        )
    way = getattr(tape, "_eager_way", None)
    batched = getattr(tape, "_last_autobatch", None)
    choice = getattr(tape, "_last_choice", None)
    region = getattr(tape, "_last_region", None)
    lines = [] if way is None else [_explain_eager_way(way)]
    if region is not None:
        lines += region_plan.explain(region)
    if batched is not None:
        lines.append(_explain_autobatch(*batched))
        differentiated = getattr(tape, "_batched_backward", None)
        failed = getattr(tape, "_batched_backward_failed", None)
        if way is not None and differentiated is not None:
            lines.append(_explain_batched_backward(*differentiated))
        elif way is not None and failed is not None:
            lines.append(f"backward op by op: batching it as the forward failed ({failed})")
    elif choice is not None or way is not None:
        lines.append(
            ("forward run in tape order" if way else "interpreted run") + ", not autobatched"
        )
    if choice is not None:
        lines.append(_explain_choice(*choice))
    if lines:
        return "\n".join(lines)
    compiled = getattr(tape, "_last_plan", None)
    if compiled is None:
        return "no lazy run on this tape yet"
    explained = pipeline.explain(compiled, CACHE)
    whole, found_by = getattr(tape, "_whole_step", (None, None))
    if whole is compiled:
        explained = (
            "the last step ran whole at its backward, forward and backward as one plan "
            f"(tape.step_program), recognised by {found_by}\n{explained}"
        )
    return explained


def _explain_eager_way(sketched):
    """Why the last step ran the eager way, with the tiers' costs measured so far."""
    plan, eager = tier_choice.costs_of(sketched)
    if plan is None:
        why = "a structure not compiled yet (seen for the first or second time)"
    else:
        measured = "not measured yet" if eager is None else f"{eager * 1e6:.2f} us"
        cheaper = eager is not None and eager <= tier_choice.MARGIN * plan
        why = (
            f"{'cheaper' if cheaper else 'timed'} against "
            f"its compiled plan (tape.tier_choice), per op: eager way {measured}, plan "
            f"{plan * 1e6:.2f} us"
        )
    return (
        "the last step ran the eager way: its forward in tape order, then its backward's "
        f"kernels at once; {why}"
    )


def _explain_choice(batched, plain, batched_cost):
    """Why an ``autobatch="auto"`` run did or did not batch: the costs measured so far."""

    def cost(seconds):
        return "not measured yet" if seconds is None else f"{seconds * 1e6:.2f} us"

    return (
        f"autobatch='auto' {'batched' if batched else 'did not batch'} this run; per op "
        f"measured on this model: unbatched {cost(plain)}, batched {cost(batched_cost)}"
    )


def _explain_autobatch(ran, groups, bailed):
    """The account of an interpreted, autobatched run: each batched group's op type and size,
    the inputs it gathered per member and those all members share (parameters), and how many
    ops ran in tape order without grouping work (no signature could fill a group)."""
    members = sum(group[1] for group in groups)
    lines = [
        f"interpreted run, autobatched: {ran} ops, {members} of them in {len(groups)} "
        f"batched groups ({ran - members + len(groups)} kernel calls)"
    ]
    counts = collections.Counter(groups)
    lines += [
        f"  batched {op_type} x{size}"
        + (f" ({count} groups)" if count > 1 else "")
        + f": gathered {', '.join(gathered) or 'nothing'}"
        + (f"; shared {', '.join(shared)}" if shared else "")
        for (op_type, size, gathered, shared), count in counts.items()
    ]
    if bailed:
        lines.append(f"  {bailed} ops run in tape order (no signature could fill a group)")
    return "\n".join(lines)


def _explain_batched_backward(counts, alone):
    """The account of the backward that followed an autobatched run (tape.batched_backward):
    per op type, the groups differentiated by one gradient maker each and their members."""
    groups = sum(g for g, _ in counts.values())
    members = sum(m for _, m in counts.values())
    lines = [
        f"backward batched as the forward: {members} ops differentiated in {groups} groups, "
        f"one gradient maker each; {alone} ops one by one"
    ]
    lines += [
        f"  {op_type}: {m} ops in {g} group{'s' if g > 1 else ''}"
        for op_type, (g, m) in sorted(counts.items(), key=lambda item: -item[1][1])
    ]
    return "\n".join(lines)


def _run(tape, targets, choice=None, interpreted=False, keyless=False):
    if tape._region is not None:  # (the traced calls recorded as rows: now one op)
        call_region.seal(tape)
    if targets and not tape._pending_ops and all(v._value is not None for v in targets):
        for var in targets:  # nothing can be owed to them: they are up to date
            var._pending = None
        return
    # Another thread may ask for a value of this tape (a shared parameter's gradient): one
    # run at a time.
    try:
        with tape._run_lock, collector.paused():
            _run_locked(tape, targets, choice, interpreted, keyless)
    finally:
        _run_ended(tape)


def _run_ended(tape):
    """A step's collector pause (``tape.collector``) lasts only while a lazy block records on
    the global tape: a run of another tape, or outside the block, ends it."""
    from tape.tape import state

    if tape is state.tape and state.lazy:
        collector.run_ended()
    else:
        collector.step_ended()


def _run_locked(tape, targets, choice=None, interpreted=False, keyless=False):
    """``choice``: ``autobatch="auto"``'s (model key, batched?) when the caller made it;
    ``interpreted``: a run that is not compiled (a cached plan is still used); ``keyless``:
    an interpreted run whose structure is neither looked up nor remembered, so the tape's
    numbering need not describe its ops (``tape.structure.keyless``)."""
    tape._eager_way = None
    optional = _gradients(tape, targets)
    for _ in range(len(tape._ops) + 1):
        scan = Trace(tape, targets, optional, keyless and interpreted)
        missing = scan.missing_target()
        if missing is None:
            # (anomaly checks compile afresh: a cached plan names the lines it was built from)
            checking = scan.key is None or instrument.checking()
            entry = None if checking else CACHE.get(scan.key)
            if entry is None and (interpreted or not _compiles(scan.key, scan.pending)):
                missing = _interpret(tape, scan, choice)
            else:
                tape._last_autobatch = tape._last_choice = None
                if entry is None:
                    tier_choice.cold()
                    entry = compile_trace(scan, options.debug)
                    CACHE.put(scan.key, entry)
                missing = _execute(tape, scan, entry)
            if missing is None:
                tape.maybe_compact()
                return
        _repend_producer(tape, missing)
    raise GraphError(None, "lazy run did not converge")  # each retry re-pends one more op


def _interpret(tape, scan, choice=None):
    """One interpreted run (``tape.interpret``), autobatched as the options ask: always, never,
    or ("auto") as measured fastest for this model (``tape.autobatch_choice``; ``choice``: the
    choice already made for this run)."""
    tier_choice.cold()
    batching = None if options.exact else options.autobatch
    if batching == "auto":
        choice = choice or _choose(scan.pending)
        batching = HEURISTICS[0] if choice[1] else None
        started = autobatch_choice.clock()
    missing = interpret.run(tape, scan, batching)
    if missing is not None:
        return missing
    if options.autobatch == "auto" and not options.exact:
        if getattr(tape, "_with_backward", None):  # (ended once the backward is done)
            tape._unmeasured = (choice, started, len(scan.pending))
        else:
            _measured(tape, choice, started, len(scan.pending))
        if not autobatch_choice.prefers_batching(choice[0]):
            return None
    else:
        tape._last_choice = None
    if batching is not None and scan.key is not None and _batched_well(tape):
        _BATCHED.put(scan.key)
    return None


def _choose(pending, probe=False):
    """``autobatch="auto"``'s choice for a run of ``pending``: (its model's key, batched?)."""
    key = autobatch_choice.model_key(pending)
    return key, autobatch_choice.choose(key, probe)


def _measured(tape, choice, started, ops):
    """Records the time since ``started`` of a run of ``ops`` ops made as ``choice`` said, and
    the costs ``explain`` reports."""
    key, batched = choice
    autobatch_choice.measured(key, batched, autobatch_choice.clock() - started, ops)
    tape._last_choice = (batched, *autobatch_choice.costs_of(key))


_SEEN = Remembered(256)  # structures run once (interpreted), least recent first
# Structures whose interpreted run autobatched well: they stay interpreted (with autobatching)
# instead of compiled, as a plan runs one op at a time.
_BATCHED = Remembered(256)
# An autobatched run "batched well" when it made at most this share of one kernel call per op
# (a Tree-LSTM or tagger step: 0.1-0.2). An unrolled LSTM batches only its input products
# (0.66): its compiled plan (fusion, no per-op dispatch) stays the faster choice.
BATCHED_CALLS = 0.25


def _batched_well(tape):
    ran, groups, _ = tape._last_autobatch
    calls = ran - sum(group[1] for group in groups) + len(groups)
    return calls <= BATCHED_CALLS * ran


def _compiles(key, pending):
    """Whether a run of this structure (its ``pending`` ops) compiles a plan (analysis,
    rewrites, a cached plan) instead of being interpreted: from its second sighting on, or
    always when the options ask for what only plans do (threads, validation, debug output,
    ``compile=True``). A structure that batched well stays interpreted while its runs batch."""
    if not interprets_new_structures():
        return True
    if options.compile is not None:  # (compile=False)
        return False
    if key in _BATCHED and options.autobatch is not None and not options.exact:
        if options.autobatch != "auto" or autobatch_choice.prefers_batching(
            autobatch_choice.model_key(pending)
        ):
            _BATCHED.move_to_end(key)
            return False
    return _SEEN.seen_before(key)


def interprets_new_structures():
    """Whether a structure seen for the first time runs interpreted (the options ask for
    nothing that only compiled plans do: threads, validation, debug output, ``compile=True``)."""
    if options.compile is not None:
        return not options.compile
    return not (
        (options.threads != "auto" and options.threads > 1) or options.validate or options.debug
    )


def always_batches():
    """Whether an interpreted run in the current block always autobatches (``autobatch=True``
    or a heuristic's name, not ``exact``)."""
    return options.autobatch not in (False, None, "auto") and not options.exact


def may_autobatch():
    """Whether an interpreted run in the current block may autobatch (``autobatch`` not off,
    not ``exact``)."""
    return bool(options.autobatch) and not options.exact


def _gradients(tape, targets):
    """Ids of the pending leaf gradients of lazy backwards: any run computes those still held
    (by their leaves or the user) too. Eager mode would already have computed them, and they
    are usually read next, so forward and backward run as one plan (fused across both)."""
    if not tape._leaf_grads or not targets:
        return ()
    owed = [e for e in tape._leaf_grads if e[0]() is not None and e[0]()._pending is tape]
    tape._leaf_grads = owed  # the ones still owed
    return tuple(id(g) for g in (e[0]() for e in owed) if g is not None)


def _execute(tape, scan, entry):
    """Binds, runs and commits one plan; returns a freed input to recompute, or None.

    Nothing is committed unless the whole plan ran: on any exception (Ctrl-C included) the
    run's ops are dropped and the tape's state restored (``tape.rollback``)."""
    variables = scan.variables
    holding = frozenset(held_among(variables, scan.refs, entry.candidates))
    compiled = entry.plan(holding, options.exact)
    vals = [None] * compiled.slots
    for slot in compiled.inputs:
        var = variables[slot]
        value = var._value
        pending = var._pending
        computes = owner(var) if pending is not None else None
        if pending.__class__ is Failed:
            raise pending.error()
        if computes is not None and computes is not tape:
            value = var._array()  # computed on another tape: run that one first
        if value is None:
            if computes is tape:
                return var
            raise GraphError(
                None,
                f"variable '{var.name}' has no value",
                hint="it is an empty handle that no op has written",
            )
        vals[slot] = value
    snapshot = rollback.Snapshot(compiled.random)
    committed = False
    try:
        for slot in compiled.inputs:
            if slot in compiled.freed:  # computed by an earlier run: let the plan free it
                snapshot.release(variables[slot])
        for slot, array in stand_ins(compiled):
            vals[slot] = array
        check = _Validation(entry, compiled, vals) if options.validate else None
        execute.run(compiled, vals, options.threads)
        with uninterrupted():
            _commit(tape, scan, entry, compiled, vals)
            committed = True
    except BaseException as err:
        if not committed:
            computed = rollback.computed_values(variables, compiled.produced, vals, len(variables))
            rollback.abort(tape, [scan.pending[i] for i in entry.ran], err, snapshot, computed)
        raise
    if check is not None:
        check.compare(vals)
    return None


def _commit(tape, scan, entry, compiled, vals):
    """Writes the run's kept values into their Variables and drops the ops that ran."""
    variables = scan.variables
    all_ran = len(entry.ran) == len(scan.pending)  # (the usual case)
    _write_back(
        tape,
        compiled,
        vals,
        variables,
        compiled.writeback,
        None if all_ran else [scan.pending[i] for i in entry.ran],
    )
    freed_by = weakref.ref(tape)  # (see tape.variable.owner: no cycle through the tape)
    for slot in entry.freed_variables(compiled):
        variables[slot]._pending = freed_by
    if tape._undo:
        ran = {id(scan.pending[i]) for i in entry.ran}
        tape._undo = [(op, undo) for op, undo in tape._undo if id(op) not in ran]
    tape._last_plan = compiled
    updated = [variables[s] for s in entry.updated_slots]
    if updated:
        guard.note_writes(
            updated,
            "an in-place update (a lazy run)",
            writers=[scan.pending[i] for i in entry.in_place_ran(scan.pending)],
        )


def _write_back(tape, compiled, vals, variables, slots, ran):
    """Stores the values the run kept into their Variables; drops the ops that ran (``ran``;
    None: every pending op)."""
    for slot in slots:
        value = vals[slot]
        if value is not None and slot not in compiled.freed:
            var = variables[slot]
            var._value, var._pending = value, None
    if ran is None or len(ran) == len(tape._pending_ops):  # (ran is a subset)
        tape._pending_ops = []
        return
    finished = {id(op) for op in ran}
    tape._pending_ops = [op for op in tape._pending_ops if id(op) not in finished]


def _repend_producer(tape, var):
    """Puts the (pure) op that computed a freed ``var`` back among the pending ops."""
    producer = next(
        (op for op in reversed(tape.ops) if any(v is var for v in op.output_vars())), None
    )
    if producer is None or effectful(producer.defn) or producer in tape._pending_ops:
        raise GraphError(
            None,
            f"variable '{var.name}' has no value and cannot be recomputed",
            hint="keep a reference to variables you will read later",
        )
    tape._pending_ops.append(producer)
    tape._pending_ops.sort(key=lambda op: op.index)


class _Validation:
    """The validation flag: runs the same ops the eager way on copies and compares."""

    def __init__(self, entry, compiled, vals):
        from tape import random_state

        self.block = compiled.analysis.analysis.pruned.program.global_block()
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
        tolerance = _reassociation_tolerance if pipeline.rewritten(self.compiled) else None
        for slot in self.compiled.produced:
            if vals[slot] is None or slot >= len(self.names):  # (a rewrite's own variable)
                continue
            name = self.names[slot]
            want, got = to_numpy(expected[name]), to_numpy(vals[slot])
            if want.shape != got.shape or not (
                np.array_equal(want, got, equal_nan=True)
                if tolerance is None
                else tolerance(want, got)
            ):
                raise GraphError(
                    None,
                    f"lazy and eager results differ for '{name}'",
                    hint="a scheduler bug: please report it with the tape",
                )


def _reassociation_tolerance(want, got):
    """Equal up to the rounding of a reordered sum: each element within a few thousand units
    of the last place of the largest magnitude (a sum of n terms may differ by about n ulps)."""
    if want.dtype.kind not in "fc":
        return np.array_equal(want, got, equal_nan=True)
    scale = float(np.max(np.abs(want), initial=0.0))
    atol = 4096 * np.finfo(want.dtype).eps * scale
    return np.allclose(got, want, rtol=0.0, atol=atol, equal_nan=True)


__all__ = ["lazy", "realize", "flush", "explain", "options"]
