"""Tape: recording ops (checking attributes, inferring shapes), running them eagerly or lazily.

The tape is the ordered list of OpHandles; because an op can only read variables that already
exist, tape order is topological, and backward is a reverse scan. Only ops that backward (or a
lazy run) may need are kept: in eager mode an op none of whose inputs requires a gradient runs and
is forgotten, so its buffers are freed as soon as the user drops them.
"""

from __future__ import annotations

import bisect
import threading
import time

import numpy as np

from ops import registry
from ops.xp import _NDARRAY, array_module, default_module
from tape import call_region, collector, eager_speculation, guard, stale, transaction
from tape.constants import as_inputs
from tape.errors import ExecutionError, FluidError, user_location
from tape.guard import SHARED
from tape.op_handle import CallHandle, OpHandle, slot_entries
from tape.variable import Variable


class Tape:
    """An ordered record of ops.

    Args:
        lazy: record and infer shapes only; values are computed on demand by the scheduler.
        record_all: keep every op, even those no gradient flows through and those that ran (for
            building Programs). Otherwise ops leave the tape once nothing can need them (their
            gradient ran, or they have none, and they ran), so a loop that never resets the
            tape stays flat in memory and time.
    """

    def __init__(self, lazy=False, record_all=False):
        self.keep_history = bool(record_all)
        self._ops = []
        self._pending_ops = []  # ops recorded lazily that have not run yet (tape.lazy runs them)
        self._structure = None  # tape.structure's numbering of the ops, extended by lazy runs
        # (weak gradient, weak leaf, the leaf's gradient before) per leaf gradient a lazy
        # backward recorded
        self._leaf_grads = []
        self._written = {}  # id(var) -> (ops recorded then, var, how, where): see tape.guard
        self._undo = []  # (op, callback) run when a lazy run that was to run op fails
        self._resume = None  # a failed eager backward's progress (tape.backward_faults)
        self._run_lock = threading.RLock()
        self._compact_at = None  # the length at which maybe_compact() next compacts
        self._grad_hooks = []  # on_grad_ready: checked by backward only when non-empty
        self.lazy = lazy
        self.record_all = record_all or lazy
        # A thread's global tape (get_global_tape, reset_global_tape), which only runs the
        # user's steps; a Tape made by hand may also become a Program (Program.from_tape).
        self.steps_only = False
        # A global tape that records eagerly in a lazy block (tape.eager_speculation), one that
        # records lazily as its probe, and whether a lazy step's forward ran unbatched (set by
        # its run before the backward).
        self.speculated = self.probe = self._unbatched_forward = False
        self.started = None  # (a step's global tape: when it started, for autobatch's choice)
        self.traced_calls = False  # (whether a tape.traced function's call was recorded)
        self._region = None  # (the open region of traced calls: tape.call_region)
        self._regions_off = False  # (the step's calls fragment regions: call_region.FRAGMENTED)
        # (whether an op was recorded into given output Variables, add_op's ``outputs``: only
        # then may an output be bound to one of its op's inputs)
        self.bound_outputs = False
        guard.register(self)

    @property
    def ops(self):
        """The recorded ops still held (released ones are dropped by backward)."""
        return [op for op in self._ops if op is not None]

    def __len__(self):
        return len(self._ops)

    def add_op(self, type, inputs=None, outputs=None, attrs=None):
        """Records op ``type`` (the seed's AddOp): checks, infers, runs (eager) and returns outputs.

        ``inputs`` and ``outputs`` map slot names to lists of Variables; output slots left out get
        new Variables. Returns the output Variable, or a tuple of them for several output slots.
        """
        try:
            defn = registry.lookup(type)
            args = slot_entries(
                defn,
                defn.input_slots,
                inputs,
                "input",
                defn.duplicable_inputs,
                defn.optional_inputs,
            )
            given = None
            if outputs:
                given = slot_entries(
                    defn,
                    defn.output_slots,
                    outputs,
                    "output",
                    defn.duplicable_outputs,
                    defn.output_slots,
                )
            attrs = defn.check_attrs(attrs)
        except FluidError as err:
            raise err.with_context(location=user_location()) from None
        return record(self, defn, args, attrs, given)

    def forward(self):
        """Runs whatever has not run yet (lazy tapes); eager tapes have nothing pending."""
        if self._region is not None:
            call_region.seal(self)
        if self.lazy:
            pending = [v for op in self.ops for v in op.output_vars() if v._value is None]
            if pending:
                self.realize(pending)

    def realize(self, variables):
        """Computes ``variables`` by running the pending ops they need (lazy mode)."""
        from tape.lazy import realize  # the module (``tape.lazy`` itself is the context manager)

        realize(self, variables)

    def backward(self, loss, grad=None, retain_graph=False, create_graph=False):
        """Computes d(loss)/d(leaf) and accumulates it into the leaves (see tape.backward)."""
        from tape.backward import backward

        backward(self, loss, grad, retain_graph, create_graph)

    def on_grad_ready(self, hook):
        """Calls ``hook(leaf, grad)`` during each backward over this tape as soon as a leaf's
        gradient from that backward is final (the reverse scan has passed every op reading the
        leaf), while the rest of backward still runs: data parallel starts its all-reduce there.
        ``hook`` returns None, a replacement gradient Variable, or a callable returning one,
        called once the scan has ended (before the gradients are accumulated into the leaves).
        """
        self._grad_hooks.append(hook)

    def reset(self):
        self._ops, self._structure, self._written, self._resume = [], None, {}, None
        self._region, self._regions_off, self._last_region = None, False, None

    def maybe_compact(self):
        """``compact()`` once the tape has doubled since it was last compacted (amortised: a
        tape whose ops all stay is not scanned after every run)."""
        if self._compact_at is None:  # the first run: a tape reset every step never compacts
            self._compact_at = 2 * len(self._ops) + 64
        elif len(self._ops) >= self._compact_at:
            self.compact()
            self._compact_at = 2 * len(self._ops) + 64

    def compact(self, keep=None):
        """Removes dropped ops (and, for a lazy tape, the ops that ran and that no backward can
        reach any more) and numbers the rest afresh. ``keep(op)`` overrides the rule."""
        if self.keep_history:
            return
        ops = self._ops
        if keep is None:
            pending = {id(op) for op in self._pending_ops}
            kept = [op for op in ops if op is not None and (id(op) in pending or needed(op))]
        else:
            kept = [op for op in ops if op is not None and keep(op)]
        if len(kept) == len(ops):
            return
        old = [op.index for op in kept]
        for index, op in enumerate(kept):
            op.index = index
        self._ops, self._structure = kept, None
        with guard.LOCK:  # (another thread may be noting a write on this tape)
            if self._written:  # an entry counts the ops recorded before a write
                # (one that no kept op precedes concerns no op any more: it goes)
                self._written = {
                    key: (before,) + entry[1:]
                    for key, entry in self._written.items()
                    for before in (bisect.bisect_left(old, entry[0]),)
                    if before
                }

    def __repr__(self):
        mode = "lazy" if self.lazy else "eager"
        return f"Tape({mode}, {len(self.ops)} ops)"


def needed(op):
    """Whether a backward may still differentiate ``op`` (a differentiable op with an output
    that requires a gradient, none of them released by an earlier backward)."""
    defn = op.defn
    if defn.grad_maker is None or not defn.differentiable:
        return False
    outputs = op.output_vars()
    return any(v.requires_grad for v in outputs) and not any(v._released for v in outputs)


class _ThreadState(threading.local):
    def __init__(self):
        self.tape = None
        self.grad_enabled = True
        self.lazy = False
        # True inside an eager backward that records nothing (see run_trusted).
        self.trusted = False
        # Inside a lazy backward: the user's line every gradient op is recorded from.
        self.location = None


state = _ThreadState()


def get_global_tape() -> Tape:
    """This thread's global tape (created on first use)."""
    tape = state.tape
    if tape is None:
        tape = state.tape = _steps_tape()
    return tape


def reset_global_tape() -> Tape:
    """Starts a fresh global tape for this thread (call once per iteration, as in DyNet).

    A lazy tape being replaced first runs its pending side effects (optimizer updates, saves).
    """
    old = state.tape
    if old is not None and old._pending_ops:
        from tape.lazy import flush

        flush(old)
    if old is not None:
        stale.tape_ended(old)  # (its variables' history ends here: tape.stale)
    state.tape = new = _steps_tape()
    del old  # (the step's objects die before the paused collector resumes)
    collector.step_ended()
    return new


def _steps_tape():
    """A new global tape for this thread: lazy when a ``tape.lazy()`` block is open, unless
    the model's recent steps were all new structures (``tape.eager_speculation``)."""
    speculated = state.lazy and eager_speculation.next_step_eager()
    tape = Tape(lazy=state.lazy and not speculated)
    tape.steps_only, tape.speculated = True, speculated
    tape.probe = state.lazy and not speculated and eager_speculation.probing()
    tape.started = time.perf_counter()
    return tape


def _values(args):
    """The input arrays (a list for duplicable slots), realizing lazy variables when needed."""
    values = []
    for arg in args:
        if arg is None:
            values.append(None)
        elif arg.__class__ is list:
            values.append([_current(v) for v in arg])
        elif arg._pending is not None or arg._value is None:
            values.append(arg._array())
        else:
            values.append(arg._value)
    return values


def _current(var):
    return var._array() if var._pending is not None or var._value is None else var._value


def _wants_grad(args):
    for arg in args:
        if arg.__class__ is Variable:
            if arg.requires_grad:
                return True
        elif arg is None:
            continue
        elif arg.__class__ is list:
            for v in arg:  # (a loop, not any(): a generator's frame costs more than the test)
                if v.requires_grad:
                    return True
        elif arg.requires_grad:
            return True
    return False


def run_kernel(defn, attrs, values):
    """Runs ``defn``'s kernel on arrays; one array per output slot (a list for duplicable ones)."""
    first = next(
        (v if v.__class__ is not list else (v[0] if v else None) for v in values if v is not None),
        None,
    )
    xp = array_module(first) if first is not None else default_module()
    kernel = defn.kernel if xp is np else defn.kernels.get("gpu", defn.kernels["any"])
    result = kernel(xp, attrs, *values)
    if defn.single_output:
        return (result if result.__class__ is _NDARRAY or xp is not np else np.asarray(result),)
    return tuple(
        [np.asarray(r) if xp is np else r for r in res]
        if isinstance(res, list)
        else (res if res.__class__ is _NDARRAY or xp is not np else np.asarray(res))
        for res in result
    )


def _infer_checked(defn, attrs, args, tape):
    """The outputs' descriptions; a failed check raised naming the op and the user's line."""
    try:
        return defn.infer(attrs, *args)
    except FluidError as err:
        raise err.with_context(
            name=f"{defn.type}_{len(tape._ops)}", op=defn.type, location=user_location()
        ) from None


def _run_checked(defn, attrs, args, tape):
    """``run_kernel`` on the Variables' arrays; a kernel's own failure raised as the op's
    ``ExecutionError``, at the user's line."""
    try:
        return run_kernel(defn, attrs, _values(args))
    except FluidError:
        raise
    except Exception as err:
        raise _kernel_error(defn, tape, err) from err


def _kernel_error(defn, tape, err):
    return ExecutionError(
        defn.type,
        f"kernel failed: {type(err).__name__}: {err}",
        name=f"{defn.type}_{len(tape._ops)}",
        location=user_location(),
    )


_HOOK = None  # tape.instrument's observer while profiling or checking: one test per op


def record(tape, defn, args, attrs, given=None, observed=False, depth=3, inferred=None):
    """The hot path: infer, run (eager) and record op ``defn`` on ``tape``; returns its outputs.

    Only the library calls it (``apply``, ``Tape.add_op``, optimizers, operators), so the
    user's line is looked for from its caller's caller on (``user_location(depth)``); a caller
    that knows its own caller is the library passes a larger ``depth``: frames fewer to walk
    (and to create) for each lazy op. While a profiler or anomaly block is open the observer
    records the op (calling back with ``observed=True``). ``inferred``: the outputs'
    descriptions, from the same op checked on the same shapes before (``apply_inferred``).
    """
    if tape._region is not None:  # (traced calls recorded as rows: tape.call_region)
        result = call_region.record_op(tape, defn, args, attrs, given, state)
        if result is not None:
            return result
    if _HOOK is not None and not observed:
        return _HOOK.record(tape, defn, args, attrs, given)
    if state.trusted and defn.fast and given is None:
        return run_trusted(defn, args, attrs)
    if SHARED:  # a buffer another library may write (tape.dlpack): checksum what this op reads
        guard.seal(tape, args)
    descs = _infer_checked(defn, attrs, args, tape) if inferred is None else inferred
    grad = state.grad_enabled and defn.differentiable and _wants_grad(args)
    if defn.fast and given is None and not tape.lazy:
        # One output, plain inputs, eager: the common case, kept short.
        try:
            value = _run_single(defn, attrs, args)
        except FluidError:
            raise
        except Exception as err:
            raise _kernel_error(defn, tape, err) from err
        shape, dtype = descs
        out = Variable._make(value, shape, dtype, grad and dtype.kind in "fc")
        if grad or tape.record_all:
            ops = tape._ops
            index = len(ops)
            if index & EAGER_STEP_MASK == 0 and tape.steps_only:  # (a step's first op)
                _step_mark(ops)
            ops.append(OpHandle(defn, args, (out,), attrs, None, index))
        return out
    if given is None and defn.single_output and tape.lazy:
        # Lazy, one output: record only; the scheduler runs the kernel when a value is needed.
        shape, dtype = descs
        out = Variable._make(None, shape, dtype, grad and dtype.kind in "fc")
        out._pending = tape
        location = state.location or user_location(depth)
        op = OpHandle(defn, args, (out,), attrs, location, len(tape._ops))
        tape._ops.append(op)
        pending = tape._pending_ops
        if len(pending) & STEP_MASK == 0:  # (a step's first op, or its STEP_LIMIT-th)
            _step_mark(pending)
        pending.append(op)
        return out
    if defn.single_output:
        descs = (descs,)
    values = (None,) * len(descs) if tape.lazy else _run_checked(defn, attrs, args, tape)
    if given is not None:
        tape.bound_outputs = True
    results = _outputs(defn, descs, values, grad, given, args, tape)
    if grad or tape.record_all:
        if not tape.lazy and len(tape._ops) & EAGER_STEP_MASK == 0 and tape.steps_only:
            _step_mark(tape._ops)
        op = OpHandle(defn, args, results, attrs, None, len(tape._ops))
        tape._ops.append(op)
        if tape.lazy:
            op.location = state.location or user_location(depth)
            if len(tape._pending_ops) & STEP_MASK == 0:
                _step_mark(tape._pending_ops)
            tape._pending_ops.append(op)
    if defn.single_output:
        return results[0]
    if defn.returns is not None:
        return defn.returns(results)
    return results


def run_update(tape, defn, args, attrs, given):
    """An optimizer's in-place update op (``given``: the inputs its outputs rebind, ``record``'s
    form): on an eager tape nothing observes, guards or keeps, ``record``'s work for it and no
    more -- inference (the checks), the kernel, and each new value written to the Variable it
    updates at the open step's commit -- as nothing is recorded and no output is new (~1.5 us
    of ~7 an update spent in ``record``'s general path). Elsewhere ``record`` itself."""
    if (
        tape.lazy
        or tape.record_all
        or _HOOK is not None
        or record is not _RECORD
        or SHARED
        or state.trusted
        or (state.grad_enabled and defn.differentiable)
    ):
        record(tape, defn, args, attrs, given, depth=4)
        return
    _infer_checked(defn, attrs, args, tape)
    values = _run_checked(defn, attrs, args, tape)
    tape.bound_outputs = True
    write = transaction.write
    for var, value in zip(given, values):
        if var.__class__ is list:  # (a dispensable slot: zero or one Variable)
            for one, array in zip(var, value):
                write(one, array)
        elif var is not None:
            write(var, value)


_RECORD = record  # (``tape.track_memory`` replaces the module's record while it notes outputs)
STEP_MASK = collector.STEP_LIMIT - 1
EAGER_STEP_MASK = collector.EAGER_STEP_LIMIT - 1


def _step_mark(pending):
    """A step starts (nothing pending on a lazy tape, no op on an eager global tape): pause the
    collector for it (``tape.collector``); or it has recorded ``STEP_LIMIT`` ops without
    running (lazy) or without a backward (eager): resume it."""
    if pending:
        collector.step_ended()
    else:
        collector.step_started()


def _run_single(defn, attrs, args):
    """The array a one-output op computes from Variables (numpy without module dispatch)."""
    if len(args) == 2:  # (most ops: no comprehension, whose frame costs as much as the rest)
        a, b = args
        values = (
            a._array() if a._pending is not None or a._value is None else a._value,
            b._array() if b._pending is not None or b._value is None else b._value,
        )
    else:
        values = [
            arg._array() if arg._pending is not None or arg._value is None else arg._value
            for arg in args
        ]
    if values[0].__class__ is _NDARRAY:
        value = defn.kernel(np, attrs, *values)
        return value if value.__class__ is _NDARRAY else np.asarray(value)
    return run_kernel(defn, attrs, values)[0]


def run_trusted(defn, args, attrs):
    """Gradient ops of an eager backward that records nothing: the makers built them from
    checked forward shapes, so the kernel's result describes itself (no inference needed).
    One output; an input slot may hold a list (``slices_grad``'s pieces)."""
    try:
        if defn.fast:
            value = _run_single(defn, attrs, args)
        else:
            (value,) = run_kernel(defn, attrs, _values(args))
    except FluidError:
        raise
    except Exception as err:
        raise ExecutionError(defn.type, f"kernel failed: {type(err).__name__}: {err}") from err
    return Variable._make(value, value.shape, value.dtype, False)


def _outputs(defn, descs, values, grad, given, args, tape):
    results = []
    for i, (desc, value) in enumerate(zip(descs, values)):
        handle = given[i] if given is not None else None
        if isinstance(desc, list):
            handles = handle or [None] * len(desc)
            value = value if value is not None else [None] * len(desc)
            results.append(
                [_fill(defn, h, d, v, grad, args, tape) for h, d, v in zip(handles, desc, value)]
            )
        else:
            results.append(_fill(defn, handle, desc, value, grad, args, tape))
    return tuple(results)


def _fill(defn, handle, desc, value, grad, args, tape):
    shape, dtype = desc
    wants = grad and dtype.kind in "fc"
    if handle is None:
        var = Variable._make(value, shape, dtype, wants)
    elif any(handle is a for a in args):
        # In place (e.g. an optimizer update): the variable keeps its flags and its old value
        # until the new one is committed (at once, at the end of an optimizer step, or when the
        # pending lazy update has run).
        var = handle
        if value is not None:
            transaction.write(var, value)
    else:
        var = handle
        in_use = var._value is not None or var._pending is not None
        var._value, var.shape, var.dtype = value, shape, dtype
        var.requires_grad, var._leaf, var._released = wants, not wants, False
        if in_use:  # an existing Variable rebound as an op's output
            guard.note_writes((var,), f"the output of op '{defn.type}'")
    if value is None:
        var._pending = tape
    return var


def apply(defn, args, attrs):
    """Records ``defn`` on the current global tape with positional inputs and checked attributes.

    The library's own entry (ops, layers, operators): its caller is never the user's line, so
    lazy mode looks for that line from the caller's caller on. Gradient makers call it for every
    gradient op: inside an eager backward that records nothing it runs the kernel at once, as
    ``record`` would (a frame fewer per gradient op)."""
    if state.trusted and defn.fast and _HOOK is None and record is _RECORD:
        return run_trusted(defn, args, attrs)  # (unless tape.track_memory wraps record)
    tape = state.tape
    if tape is None:
        tape = get_global_tape()
    return record(tape, defn, args, attrs, None, False, 4)


def apply_inferred(defn, args, attrs, descs):
    """``apply`` where the caller knows the outputs' descriptions ``descs``, having recorded
    the same op with the same attributes on inputs of the same shapes and dtypes before
    (``tape.indexing``'s remembered indices): no inference. ``tape.track_memory``'s wrapper of
    ``record`` takes no descriptions: it gets ``apply``'s call (an observer, ``record``'s)."""
    if record is not _RECORD:
        return apply(defn, args, attrs)
    if state.trusted and defn.fast and _HOOK is None:
        return run_trusted(defn, args, attrs)
    tape = state.tape
    if tape is None:
        tape = get_global_tape()
    return record(tape, defn, args, attrs, None, False, 4, descs)


def record_lazy(tape, defn, inputs, attrs, descs, layout, watched=None):
    """``apply_inferred`` of ``defn`` on one list of ``inputs`` for a lazy ``tape`` (the
    caller's): ``tape.traced``'s calls, one op standing for a function's ~20, so that its few
    microseconds of recording are the step's largest cost left. ``descs``: the packed
    output's (shape, dtype), then a list of its parts' (every output of one dtype); each part
    is marked as piece ``index`` of the packed output (``_piece``: ``(out, layout, index)``,
    ``layout`` the number ``tape.traced`` names the output's layout by); ``watched``: where
    the program alone is its batch signature, the positions of the user's Variables among
    ``inputs`` (``CallHandle``), else None. Returns the packed output and the list of
    parts. Anything ``record`` would watch (an observer, shared buffers, a trusted backward)
    takes the whole way."""
    args = (inputs,)
    if _HOOK is not None or record is not _RECORD or SHARED or state.trusted or not tape.lazy:
        out, parts = apply_inferred(defn, args, attrs, descs)
    else:
        (shape, dtype), part_descs = descs
        grad = False
        if state.grad_enabled and defn.differentiable and dtype.kind in "fc":
            for var in inputs:  # (_wants_grad of the one list, a frame fewer)
                if var.requires_grad:
                    grad = True
                    break
        make = Variable._make
        out = make(None, shape, dtype, grad)
        out._pending = tape
        parts = []
        for shape, _ in part_descs:
            var = make(None, shape, dtype, grad)
            var._pending = tape
            parts.append(var)
        location = state.location or user_location(3)
        op = CallHandle(defn, args, (out, parts), attrs, location, len(tape._ops), watched)
        tape._ops.append(op)
        pending = tape._pending_ops
        if len(pending) & STEP_MASK == 0:
            _step_mark(pending)
        pending.append(op)
    for index, part in enumerate(parts):  # (read packed by the calls it is passed to)
        part._piece = (out, layout, index)
    return out, parts


def dispatch(defn, inputs, attrs):
    """OpDef.__call__: converts the user's positional inputs and attributes, then records."""
    args = inputs if defn.fast and len(inputs) == len(defn.input_slots) else None
    if args is not None:
        for value in inputs:  # (a loop, not all(): a generator's frame is a third of an op)
            if value.__class__ is not Variable:
                args = None
                break
    if attrs or args is None or defn.required:
        if len(inputs) > len(defn.input_slots):
            raise defn.too_many_inputs(inputs)
        try:
            attrs = defn.check_attrs(attrs)
            if args is None:
                args = as_inputs(defn, inputs)
        except FluidError as err:
            raise err.with_context(op=defn.type, location=user_location()) from None
    else:
        attrs = defn.defaults
    # (``apply`` inlined; OpDef.__call__, the only caller, is the library: a frame fewer to walk)
    tape = state.tape
    if tape is None:
        tape = get_global_tape()
    return record(tape, defn, args, attrs, None, False, 4)
