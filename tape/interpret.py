"""The lazy scheduler's first tier: run a tape's pending ops directly, in one linear pass.

A structure seen for the first time (a tree, a parse, a new sequence length: a DyNet-style
model's usual case) is run without building the IR or compiling a plan, so a cache miss costs
about what eager mode costs (``tape.lazy`` compiles a plan, with the rewrites, only for a
structure it has seen before). One reverse scan over the pending ops decides everything the
passes decide:

- prune: an op runs if it is random or has side effects (eager mode would have run it), if it
  computes a requested value or an input of an op that runs, or if it reads a value that a later
  op of the run updates in place (it must see the old value, as in eager mode);
- keep: a computed value stays when it is requested, read by a pending op left out of the run,
  saved by an op a later backward may differentiate, persistable, or held by the user (reference
  counts, as ``tape.trace`` decides); every other value produced on the tape is freed right
  after its last reader in the run;
- order: tape order is topological, so the run follows it.

Pure outputs are stored into their Variables as they are computed; in-place updates (an
optimizer's) are staged and committed only when the whole run succeeded (``tape.transaction``),
so a failure is rolled back like any lazy run's (``tape.rollback``). Cost: O(n) in the pending
ops, a few dictionary operations per input and output.
"""

from __future__ import annotations

import sys
import weakref

import numpy as np

from ops.xp import _NDARRAY
from tape import guard, instrument, rollback
from tape.errors import ExecutionError, FluidError, GraphError
from tape.op_handle import CallHandle
from tape.passes import autobatch
from tape.passes.plan import kernel_for
from tape.trace import module_of
from tape.transaction import uninterrupted
from tape.variable import Failed, owner

_count = sys.getrefcount
_ABSENT = object()


def run(tape, scan, autobatch=None):
    """Runs what ``scan`` (a ``tape.trace.Trace`` of ``tape``) asks for; returns a freed input
    that must be recomputed first, or None. ``autobatch``: a heuristic of
    ``tape.passes.autobatch`` (independent ops of one signature run as one batched call), or
    None (tape order, one op at a time)."""
    return _run(tape, scan, autobatch)


def _run(tape, scan, autobatch):
    decision = _decide(tape, scan)
    if decision.__class__ is not _Decision:
        return decision  # a Variable to recompute
    snapshot = rollback.Snapshot(
        any(op.defn.random for op in decision.ops), _produced(decision.ops)
    )
    staged = {}
    tape._batched_run = None
    if autobatch is None:
        tape._last_autobatch = None
        execute = _execute
        extra = ()
    else:
        execute, extra = _execute_batched, (autobatch,)
    _transaction(
        tape,
        decision,
        snapshot,
        staged,
        lambda: execute(tape, decision, snapshot, staged, scan.xp, scan.variables, *extra),
    )
    return None


def _transaction(tape, decision, snapshot, staged, execute):
    """Runs ``execute()`` and commits ``decision``'s results; on any failure before the commit,
    rolls back what the run did (``rollback.abort``) and re-raises."""
    committed = False
    try:
        execute()
        with uninterrupted():
            _commit(tape, decision, staged)
            committed = True
    except BaseException as err:
        if not committed:
            rollback.abort(tape, list(decision.ops), err, snapshot, {})
        raise


def _inputs_ready(tape, ops):
    """Whether every input of ``ops`` is computed or pending on ``tape`` (not on another tape,
    freed, failed or never written)."""
    for op in ops:
        for var in autobatch.inputs(op):
            pending = var._pending
            if pending is not tape and (pending is not None or var._value is None):
                return False
    return True


def run_in_order(tape):
    """Runs every pending op of ``tape`` in tape order and keeps every value, as eager mode
    would have run and kept them; returns whether it ran (False, running nothing, when an op
    reads a value not ready here: computed on another tape, freed, failed or never written,
    which ``run`` settles or reports).

    A structure's first sighting before its eager backward (``tape.backward._after_forward``):
    the backward reads nearly every forward value and then drops the ops, so ``run``'s reverse
    scan (pruning, frees, the structure's numbering for its key) would cost more than it saves.
    Failures roll back as ``run``'s do."""
    ops = tape._pending_ops
    if not _inputs_ready(tape, ops):
        return False
    xp = module_of(var for op in ops for var in op.input_vars())
    ops = list(ops)
    snapshot = rollback.Snapshot(any(op.defn.random for op in ops))
    staged = {}
    tape._last_autobatch = tape._batched_run = None
    decision = _Decision(ops, None, ())
    _transaction(tape, decision, snapshot, staged, lambda: _execute_in_order(ops, staged, xp))
    return True


def run_all_batched(tape, heuristic):
    """``run_in_order`` autobatched: runs every pending op of ``tape``, independent ops of one
    signature as one call (``heuristic``: ``tape.passes.autobatch``'s), and keeps every value;
    returns whether it ran (False, running nothing, where ``run`` must decide: an op reads a
    value not ready here, updates in place or has side effects, or an observer is active).

    A structure's first sighting before its eager backward (``tape.lazy.run_before_backward``)
    when batching: the backward reads nearly every value and then drops the ops, so ``run``'s
    reverse scan (pruning, frees and the numbering they need) buys nothing there; it cost as
    much per op as the batched run itself (~2.8 us of a Tree-LSTM's ~12). Failures roll back as
    ``run``'s do."""
    if instrument.ACTIVE is not None:
        return False
    ops = list(tape._pending_ops)
    xp = module_of(var for op in ops for var in op.input_vars())
    kernels, steps, random, shared = {}, [], False, {}
    append, bound_outputs = steps.append, tape.bound_outputs
    for op in ops:  # (the instructions ``_decide`` makes, with nothing to free; one pass)
        defn = op.defn
        if defn.simple_inputs:  # (_inputs_ready)
            inputs = op.args
        else:
            inputs = op.args[0] if op.__class__ is CallHandle else autobatch.inputs(op)
        for var in inputs:
            pending = var._pending
            if pending is not tape and (pending is not None or var._value is None):
                return False
        kernel = kernels.get(defn)
        if kernel is None:
            if defn.inplace or defn.side_effect:
                return False
            kernel = kernels[defn] = kernel_for(defn, xp)
            random = random or defn.random
        if defn.fast:
            append((kernel, op.attrs, op.args, op.results, False, ()))
            continue
        if bound_outputs:
            inputs = set(map(id, op.input_vars()))  # (a set: a traced call reads ~6, writes ~3)
            if any(id(out) in inputs for out in op.output_vars()):
                return False  # (an output bound to an input: written in place)
        # (such an op runs through ``_general``, which reads its inputs from the op: ops with
        # one kernel and one attribute dict, a traced program's calls, share one instruction)
        step = shared.get(id(op.attrs))
        if step is None or step[0] is not kernel or step[1] is not op.attrs:
            step = shared[id(op.attrs)] = (kernel, op.attrs, None, None, False, ())
        append(step)
    decision = _Decision(ops, steps, set())
    snapshot = rollback.Snapshot(random)
    staged = {}
    tape._batched_run = None
    _transaction(
        tape,
        decision,
        snapshot,
        staged,
        # (no barriers: an in-place or side-effecting op sent the run to ``run`` above)
        lambda: _execute_batched(tape, decision, snapshot, staged, xp, (), heuristic, False),
    )
    return True


def _execute_in_order(ops, staged, xp):
    """``_execute`` for ``run_in_order``: every op, no frees, no instructions built first."""
    is_numpy, kernels = xp is np, {}
    op = None
    try:
        for op in ops:
            defn = op.defn
            kernel = kernels.get(defn)
            if kernel is None:
                kernel = kernels[defn] = kernel_for(defn, xp)
            if defn.fast and not defn.inplace:
                args = op.args
                if staged:
                    values = [_value(v, staged) for v in args]
                else:
                    values = [v._value for v in args]
                result = kernel(xp, op.attrs, *values)
                values = None
                if is_numpy and result.__class__ is not _NDARRAY:
                    result = np.asarray(result)
                out = op.results[0]
                out._value, out._pending = result, None
            else:
                _general(op, kernel, op.attrs, xp, staged, is_numpy)
    except Exception as err:
        _raise_located(op, err)


def _raise_located(op, err):
    """Raises ``err``, which ``op``'s kernel raised, as an error naming the op and the user's
    line: a library error with that context added, any other as an ExecutionError."""
    if isinstance(err, FluidError):
        raise err.with_context(name=op.name, location=op.location, op=op.type) from None
    raise ExecutionError(
        op.type,
        f"kernel failed: {type(err).__name__}: {err}",
        name=op.name,
        location=op.location,
    ) from err


def _produced(ops):
    """Ids of the Variables ``ops`` compute (not those they update in place)."""
    ids = set()
    for op in ops:
        if op.defn.fast:
            ids.add(id(op.results[0]))
            continue
        inputs = set(map(id, op.input_vars()))
        ids.update(key for key in map(id, op.output_vars()) if key not in inputs)
    return ids


class _Decision:
    """What one run does: the ops in order and, per op, an instruction (see ``_instruction``)."""

    __slots__ = ("ops", "steps", "updated")

    def __init__(self, ops, steps, updated):
        self.ops, self.steps, self.updated = ops, steps, updated


def _decide(tape, scan):
    pending = scan.pending
    variables, refs, index = scan.variables, scan.refs, scan.numbering.index
    targets = {id(variables[s]) for s in scan.targets}
    needed = {key: None for key in targets}  # id -> Variable read by a chosen op (or a target)
    overwritten, outside, saved, last_use = set(), set(), set(), {}
    chosen, produced_last, in_place = [], [], []
    for op in reversed(pending):
        defn = op.defn
        args = op.args
        if defn.fast and not (defn.random or defn.side_effect or defn.inplace):
            # One output, one Variable per input, pure: the common case, kept short.
            out = op.results[0]
            key = id(out)
            wanted = needed.pop(key, _ABSENT) is not _ABSENT
            if not wanted and not (overwritten and any(id(a) in overwritten for a in args)):
                outside.update(map(id, args))
                continue  # (else it must read an old value before a later update)
            position = len(chosen)
            chosen.append(op)
            produced_last.append(() if wanted or key in last_use else (out,))
            in_place.append(False)
            for var in args:
                key = id(var)
                needed[key] = var
                if key not in last_use:
                    last_use[key] = position
            if defn.differentiable and defn.grad_maker is not None and _awaits(op.results):
                saved.add(id(out))
                for slot, var in zip(defn.input_slots, args):
                    if slot not in defn.no_need_buffer:
                        saved.add(id(var))
            continue
        outputs = op.results if defn.single_output else op.output_vars()
        inputs = args if defn.simple_inputs else op.input_vars()
        runs = defn.random or defn.side_effect or defn.inplace
        if not runs:
            for var in outputs:
                if id(var) in needed:
                    runs = True
                    break
            else:
                if overwritten:
                    for var in inputs:
                        if id(var) in overwritten:
                            runs = True
                            break
        if not runs:
            outside.update(map(id, inputs))
            continue
        position = len(chosen)
        chosen.append(op)
        unread, bound = [], False
        for var in outputs:
            key = id(var)
            if needed.pop(key, _ABSENT) is _ABSENT and key not in last_use:
                unread.append(var)  # computed, read by nothing the run does
            for arg in inputs:
                if arg is var:  # an output bound to an input: written in place
                    bound = True
                    overwritten.add(key)
        produced_last.append(unread)
        in_place.append(bound)
        for var in inputs:
            key = id(var)
            needed[key] = var
            if key not in last_use:
                last_use[key] = position
        if defn.differentiable and defn.grad_maker is not None and _awaits(outputs, inputs):
            saved.update(map(id, outputs))
            for slot, entry in zip(defn.input_slots, args):
                if entry is not None and slot not in defn.no_need_buffer:
                    saved.update(map(id, entry) if entry.__class__ is list else (id(entry),))
    # What no chosen op computes must be ready now (computed earlier, or on another tape).
    for var in needed.values():
        if var is None:
            continue  # a target nothing computes: its value is already there (Trace checked)
        if var._value is None or var._pending is not None:
            missing = _settle_input(tape, var)
            if missing is not None:
                return missing
    keep = targets | outside | saved
    where = scan.numbering.where
    frees = [[] for _ in chosen]
    for key, position in last_use.items():
        if key not in keep:
            slot = index.get(key)
            if slot is not None and where[slot].__class__ is not weakref.ref:
                frees[position].append((slot, refs[slot]))
    for position, unread in enumerate(produced_last):
        for var in unread:
            key = id(var)
            if key not in keep and not var.persistable:
                slot = index[key]
                frees[position].append((slot, refs[slot]))
    kernels, xp = {}, scan.xp
    steps = []
    for position in range(len(chosen) - 1, -1, -1):
        op = chosen[position]
        defn = op.defn
        kernel = kernels.get(defn)
        if kernel is None:
            kernel = kernels[defn] = kernel_for(defn, xp)
        # (kernel, attrs, inputs, a plain op's results tuple or None, bound?, frees); the tuple,
        # not the output itself: the refcount test counts what the tape's ops hold
        results = op.results if defn.fast else None
        attrs = op.attrs
        if "reuse_grad" in defn.attrs and not attrs["reuse_grad"]:
            attrs = _donor(op, position, last_use, keep, index, refs) or attrs
        steps.append((kernel, attrs, op.args, results, in_place[position], tuple(frees[position])))
    chosen.reverse()
    if instrument.ACTIVE is not None:  # a profiler or anomaly block is open
        steps = instrument.observed_steps(chosen, steps)
    return _Decision(chosen, steps, overwritten)


class _Donating(dict):
    """An update's attributes when its gradient is read by nothing after it: the kernel may
    compute the new parameter in the gradient's buffer (``reuse_grad``, as eager optimizer
    steps do), if at run time that buffer is the gradient's alone. Saves a parameter-sized
    buffer per update (the old value stays until the run commits, for rollback)."""

    __slots__ = ("grad_at", "grad", "known")


def _donor(op, position, last_use, keep, index, refs):
    slots = op.defn.input_slots
    if "Grad" not in slots:
        return None
    at = slots.index("Grad")
    grad = op.args[at]
    key = id(grad)
    if (
        grad.__class__ is list
        or last_use.get(key) != position
        or key in keep
        or grad.persistable
        or index.get(key) is None
    ):
        return None
    donating = _Donating(op.attrs)
    donating["reuse_grad"] = True
    donating.grad_at, donating.grad, donating.known = at, grad, refs[index[key]]
    return donating


def _attrs_for(attrs, values):
    """``attrs``, or the donating ones where the gradient's buffer is provably its own: an
    owned, writable array held only by its Variable and ``values`` (no view, no user)."""
    if attrs.__class__ is not _Donating:
        return attrs
    value = values[attrs.grad_at]
    if (
        value.__class__ is _NDARRAY
        and value.base is None
        and value.flags.writeable
        and _count(value) <= 4  # its Variable, values, ``value``, the argument
        and _count(attrs.grad) <= attrs.known + 3  # (as the frees count: no user reference)
    ):
        return attrs
    return dict(attrs, reuse_grad=False)


def _awaits(outputs, inputs=()):
    """Whether a backward may still differentiate the op computing ``outputs``. An output
    bound to one of its ``inputs`` (updated in place: batch norm's running statistics) is
    not this op's to judge by: its released flag is left from the last backward that read
    the buffer, a step before."""
    wants = False
    for var in outputs:
        if var._released and not any(var is arg for arg in inputs):
            return False
        wants = wants or var.requires_grad
    return wants


def _settle_input(tape, var):
    """Makes an input computed elsewhere ready; returns it if this tape must recompute it."""
    pending = var._pending
    if pending.__class__ is Failed:
        raise pending.error()
    computes = owner(var) if pending is not None else None
    if computes is not None and computes is not tape:
        var._array()  # another tape's value: run that tape first
        return None
    if var._value is None:
        if computes is tape:
            return var
        raise GraphError(
            None,
            f"variable '{var.name}' has no value",
            hint="it is an empty handle that no op has written",
        )
    var._pending = None
    return None


def _execute(tape, decision, snapshot, staged, xp, variables):
    """Runs the decided ops in order, freeing after each what it read last."""
    is_numpy = xp is np
    position = 0
    try:
        for kernel, attrs, args, results, bound, frees in decision.steps:
            if results is not None:  # one output, one Variable per input: the common case
                if staged:
                    values = [_value(v, staged) for v in args]
                else:
                    values = [v._value for v in args]
                if attrs.__class__ is _Donating:
                    attrs = _attrs_for(attrs, values)
                result = kernel(xp, attrs, *values)
                values = None
                if is_numpy and result.__class__ is not _NDARRAY:
                    result = np.asarray(result)
                out = results[0]
                if bound:
                    staged[id(out)] = (out, result)  # an in-place update: committed with the run
                else:
                    out._value, out._pending = result, None
                out = None
            else:
                _general(decision.ops[position], kernel, attrs, xp, staged, is_numpy)
            if frees:
                for slot, known in frees:
                    var = variables[slot]
                    # getrefcount sees its argument, ``var``, the variables list and the tape's
                    # ops: any further reference is the user's.
                    if _count(var) <= known + 3:
                        if var._value is not None:
                            snapshot.release(var)
                        var._pending = weakref.ref(tape)
                var = None
            position += 1
    except Exception as err:
        _raise_located(decision.ops[position], err)


def _execute_batched(tape, decision, snapshot, staged, xp, variables, heuristic, barriers=True):
    """Runs the decided ops as ``tape.passes.autobatch`` schedules them: each group after the
    groups it reads from, a batched group as one kernel call; frees each value after the last
    group that reads it. A schedule without batched groups runs as ``_execute`` does (tape
    order), so a run with nothing to batch pays only the schedule's linear scans. ``barriers``:
    whether an op may be one (side effects, in place), as the caller knows."""
    ops, steps = decision.ops, decision.steps
    if barriers:
        barriers = [
            op.defn.side_effect or op.defn.inplace or step[4] for op, step in zip(ops, steps)
        ]
    plan = autobatch.schedule(ops, barriers or None, heuristic, parts=True)
    batched = plan.batched()
    tape._last_autobatch = (len(ops), [_described(ops[g[0]], n) for g, n in batched], plan.bailed)
    if not batched:
        _execute(tape, decision, snapshot, staged, xp, variables)
        return
    groups, rules = plan.groups, plan.rules
    if variables:
        free_at = _frees_after_last_reads(ops, steps, groups, variables)
    else:  # (no slots, so no frees: a run of every op keeps every value, run_all_batched's)
        free_at = [()] * len(groups)
    is_numpy, rows = xp is np, {}
    release, freed = snapshot.release, weakref.ref(tape)
    unread = None if plan.parts_read else freed  # (parts no op reads: views only where held)
    ran = [None] * len(groups)  # per batched group: what its backward reads (see below)
    kept = [] if getattr(tape, "_with_backward", None) else None  # groups with facts
    saving = kept is not None  # (a batched backward follows: facts kept per group)
    keep = saving and not variables  # (their inputs too, where nothing is freed)
    torn = set()  # ids of batched results (and their bases) some rows of which were freed
    for number, (members, rule, frees) in enumerate(zip(groups, rules, free_at)):
        if rule is None:
            _located_step(steps[members[0]], ops[members[0]], xp, staged, is_numpy)
        else:
            facts = _batched_step(
                members, rule, steps, ops, xp, staged, rows, is_numpy, saving, unread, keep
            )
            if kept is not None and facts is not None:
                ran[number] = facts
                kept.append(number)
        for slot, known in frees:
            var = variables[slot]
            if _count(var) <= known + 3:  # (as in _execute)
                if var._value is not None:
                    if rows:
                        row = rows.pop(id(var._value), None)
                        if row is not None and kept is not None:
                            torn.update((id(row[0]), id(row[0].base)))  # (freed in part)
                    release(var)
                var._pending = freed
        var = None
    # (what the backward of a structure seen for the first time batches the same way:
    # tape.batched_backward; ``rows`` lets it gather the members' values as the forward did.
    # For a run the backward follows, ``ran`` holds each batched group's output ids, the
    # operands it gathered as views, its result, what its rule kept and its members' inputs
    # (``_batched_step``), where none of its results was freed --
    # holding them costs no memory the backward does not hold anyway -- and where no op wrote
    # in place: a value read then may have changed since)
    for number in kept or ():
        ids, operands, out, saved, read = ran[number]
        if id(out) in torn:
            ran[number] = None
        elif torn:  # (what the forward kept for the gradient may view a freed buffer too)
            operands = [None if _torn(v, torn) else v for v in operands]
            ran[number] = ids, operands, out, None, read
    tape._batched_run = (ops, groups, rules, rows, None if staged else ran, plan.parts_read)


def _frees_after_last_reads(ops, steps, groups, variables):
    """Per group (in run order), the frees of ``steps`` that may happen once it ran: each
    after the last group reading the variable, which may come later than its op's."""
    group_of = [0] * len(ops)
    last_read = {}
    for number, members in enumerate(groups):
        for position in members:
            group_of[position] = number
            op = ops[position]
            for var in op.args if op.defn.simple_inputs else op.input_vars():
                # (ids, not the Variables: a key would be a reference the frees' refcount
                # tests count as the user's, and nothing would be freed early)
                last_read[id(var)] = number  # (groups are numbered in run order)
    free_at = [[] for _ in groups]
    read = last_read.get
    for position, step in enumerate(steps):
        frees = step[5]
        if frees:
            number = group_of[position]
            for entry in frees:
                later = read(id(variables[entry[0]]), -1)
                free_at[later if later > number else number].append(entry)
    return free_at


def _torn(value, torn):
    """Whether ``value`` views a batched result some rows of which were freed."""
    return value is not None and value.base is not None and id(value.base) in torn


def _described(op, size):
    """(op type, group size, the input slots gathered per member, the shared ones): what
    ``tape.explain`` says of a batched group whose first member is ``op``."""
    args, slots = op.args, op.defn.input_slots
    kind = op.type
    if kind == "call":  # (a traced function's calls: named by the function)
        kind = f"call of {getattr(op.attrs['fn'], 'name', '?')}"
    if args[0].__class__ is list:  # the list rule: every position gathered but parameters
        if any(map(autobatch.shared, args[0])):
            return kind, size, (slots[0],), (f"{slots[0]} (parameters)",)
        return kind, size, (slots[0],), ()
    gathered = tuple(slot for slot, var in zip(slots, args) if not autobatch.shared(var))
    shared = tuple(slot for slot, var in zip(slots, args) if autobatch.shared(var))
    return kind, size, gathered, shared


def _located_step(step, op, xp, staged, is_numpy):
    """One op, its errors naming the op and the user's line."""
    kernel, attrs, args, results, bound, _ = step
    try:
        if results is None:
            _general(op, kernel, attrs, xp, staged, is_numpy)
            return
        values = [_value(v, staged) for v in args]
        if attrs.__class__ is _Donating:
            attrs = _attrs_for(attrs, values)
        result = kernel(xp, attrs, *values)
        values = None
        if is_numpy and result.__class__ is not _NDARRAY:
            result = np.asarray(result)
        out = results[0]
        if bound:
            staged[id(out)] = (out, result)
        else:
            out._value, out._pending = result, None
    except Exception as err:
        _raise_located(op, err)


def _batched_step(
    members, rule, steps, ops, xp, staged, rows, is_numpy, saving=False, unread=None, keep=False
):
    """One group as one call: gather, run the op's batch rule, scatter. If the batched call
    fails, the members run one by one, so the error names the member that fails. Returns the
    ids of the members' outputs, the inputs as the rule got them, the result and what the
    rule kept for the group's gradient (``saving``: a batched backward follows; a rule that
    ``saves``, a traced call's, keeps the values its gradient would compute again), None where
    the members ran one by one; and, where ``keep`` (a run that frees nothing), per input the
    members' Variables (None for a shared one: the backward reads them from here, its
    members' ops long out of the caches; held where the run frees, they would keep values
    alive that it frees by their reference counts). ``unread``: no op of the run reads a
    traced call's part (the freed mark for the parts nobody holds: ``CALL.fill_parts``)."""
    first = ops[members[0]]
    try:
        inputs, read = [], []  # (per input: the rule's form; the members' Variables or None)
        listed = first.args[0].__class__ is list  # (the list rule: one input per position)
        if listed:
            entries = [ops[p].args[0] for p in members]
        else:
            entries = [ops[p].args for p in members]
        for slot, var in enumerate(first.args[0] if listed else first.args):
            if autobatch.shared(var):  # (a parameter: one in every member, a traced call's)
                inputs.append((False, _value(var, staged)))
                read.append(None)
                continue
            each = [args[slot] for args in entries]
            if staged:
                values = [_value(member, staged) for member in each]
            else:
                values = [member._value for member in each]
            inputs.append((True, autobatch.gather(values, rows, xp)))
            read.append(each)
        saved = None
        if saving and getattr(rule, "saves", False):
            out, saved = rule.run_saving(xp, first.attrs, inputs, first)
        else:
            out = rule.run(
                xp, steps[members[0]][0], first.attrs, inputs, len(members), first.results[0].shape
            )
        if is_numpy and out.__class__ is not _NDARRAY:
            out = np.asarray(out)
    except Exception:
        for position in members:
            _located_step(steps[position], ops[position], xp, staged, is_numpy)
        return None
    ids = []
    append = ids.append
    for row, (position, part) in enumerate(zip(members, autobatch.rows_of(out, len(members)))):
        # (each row recorded for later gathers, holding it so that its id stays unique; the
        # executor drops the entry when it frees the row)
        rows[id(part)] = (out, row, part)
        result = ops[position].results[0]
        result._value, result._pending = part, None
        append(id(result))
    if getattr(rule, "parts", False):  # (views of each member's row: a traced call's results)
        rule.fill_parts([ops[position] for position in members], out, unread)
    # (a copy gathered is not kept: it would hold memory no Variable holds; but where the
    # rule kept what its gradient reads, the copies that gradient reads are kept too)
    reads = saved[2] if saved is not None else ()
    operands = [
        value if value.base is not None or slot in reads else None
        for slot, (_, value) in enumerate(inputs)
    ]
    return ids, operands, out, saved, read if keep else None


def _general(op, kernel, attrs, xp, staged, is_numpy):
    """An op with several outputs, list inputs or absent ones."""
    values = [
        None
        if entry is None
        else [_value(v, staged) for v in entry]
        if entry.__class__ is list
        else _value(entry, staged)
        for entry in op.args
    ]
    results = kernel(xp, _attrs_for(attrs, values), *values)
    _store(op, (results,) if op.defn.single_output else results, staged, is_numpy)


def _value(var, staged):
    if staged:
        value = staged.get(id(var))
        if value is not None:
            return value[1]
    return var._value


def _store(op, results, staged, is_numpy):
    inputs = op.args if op.defn.simple_inputs else op.input_vars()
    if len(inputs) > 8:  # (a region of traced calls: hundreds of inputs and outputs)
        inputs = set(map(id, inputs))  # (their ids: _put's look-up)
    for entry, result in zip(op.results, results):
        if entry is None:
            continue
        if entry.__class__ is list:
            for var, value in zip(entry, result):
                _put(var, value, inputs, staged, is_numpy)
        else:
            _put(entry, result, inputs, staged, is_numpy)


def _put(var, value, inputs, staged, is_numpy):
    if is_numpy and value.__class__ is not _NDARRAY:
        value = np.asarray(value)
    # (``inputs``: the op's inputs, or, where many, a set of their ids)
    bound = id(var) in inputs if inputs.__class__ is set else any(var is a for a in inputs)
    if bound or id(var) in staged:
        staged[id(var)] = (var, value)  # an in-place update: committed with the run
    else:
        var._value, var._pending = value, None


def _commit(tape, decision, staged):
    for var, value in staged.values():
        var._value, var._pending = value, None
    everything = len(decision.ops) == len(tape._pending_ops)  # (the ops that ran: a subset)
    ran = None if everything and not tape._undo else {id(op) for op in decision.ops}
    tape._pending_ops = [] if everything else [o for o in tape._pending_ops if id(o) not in ran]
    if tape._undo:
        tape._undo = [(op, undo) for op, undo in tape._undo if id(op) not in ran]
    if staged:
        guard.note_writes(
            [var for var, _ in staged.values()],
            "an in-place update (a lazy run)",
            writers=[op for op in decision.ops if op.defn.inplace],
        )


__all__ = ["run", "run_in_order", "run_all_batched"]
