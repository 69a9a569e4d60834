"""``tape.traced``: a function of Variables recorded as one op in lazy mode, so that many calls
of it batch as one (``ops.call`` says how and why).

    @tape.traced
    def compose(hl, cl, hr, cr):          # one tree node of a Tree-LSTM
        z = hl @ ul + hr @ ur + b
        ...
        return h, c

In eager mode (and with ``tape.lazy(exact=True)``, which promises eager mode's bits) a traced
function simply runs, its ops recorded as they come. In a ``tape.lazy()`` block its first call with
given argument shapes and dtypes records its ops once, on a tape of its own, into a program;
every call then becomes a row of the step's region (``tape.call_region``), which runs the calls
of one program and level as the program vectorised over them, all as one op; where no region
can be used (an observer, ``autobatch=False``) a call records one ``call`` op, which the
autobatching pass groups with the other calls ready at the same time. Its gradient is traced
once too, the first time a backward needs it.

What a trace fixes, as ``torch.jit.trace`` and ``jax.jit`` do: Python control flow inside the
function (it runs once per signature), and the Variables it reads other than its arguments --
parameters and constants, read afresh at every call but captured by identity at the trace. So a
value computed in the step, which changes from call to call, must be an argument; reading one
raises an error at the trace. Random, in-place and side-effecting ops are refused there too (a
group would share one draw, or update a parameter once per member).
"""

from __future__ import annotations

import functools
import importlib
import threading

import numpy as np

from ops.call import Program, Step, call, unpack
from ops.fill import fill_zeros_like
from ops.shape import concat, reshape
from ops.xp import _on_gpu
from tape import call_region, guard, instrument, tier_choice
from tape import tape as _engine
from tape.errors import FluidError, GraphError, InputError, user_location
from tape.tape import Tape, apply, record_lazy, state
from tape.variable import Variable


class TracedFunction:
    """The wrapper ``tape.traced`` returns: the function itself eagerly, one op lazily."""

    def __init__(self, fn):
        self.fn = fn
        self.programs = {}  # signature -> Program
        self.rows = {}  # a region row's flat key -> Program (tape.call_region.record)
        self.attribute = None  # (the name it is a method under: __set_name__)
        functools.update_wrapper(self, fn, updated=())

    def __repr__(self):
        return f"<traced function {getattr(self.fn, '__qualname__', self.fn)}>"

    def __set_name__(self, owner, name):
        self.attribute = name

    def __get__(self, instance, owner):
        """A method: traced per instance (its traces read that instance's parameters and die
        with it), kept in the instance's ``__dict__`` so that it is bound once."""
        if instance is None:
            return self
        bound = TracedFunction(self.fn.__get__(instance, owner))
        if self.attribute is not None and hasattr(instance, "__dict__"):
            instance.__dict__[self.attribute] = bound
        return bound

    def __call__(self, *args):
        current = state.tape
        if current is None:
            from tape.tape import get_global_tape

            current = get_global_tape()
        if not current.lazy or (_OPTIONS or _lazy_options()).inline_calls:
            # (its ops recorded as they come: eager, exact=True, or options that compile every
            # structure; arrays as Variables, as a trace gives them to the function)
            return self.fn(*[Variable(a) if _is_array(a) else a for a in args])
        current.traced_calls = True
        if _in_regions(current):  # (a row of the step's region: tape.call_region)
            result = call_region.record(self, current, args, state.grad_enabled, state.location)
            if result is not None:
                return result
        if current._region is not None:  # (this call may read the region's results)
            call_region.seal(current)
        program, inputs, watched = self.looked_up(args, current)
        # (the key fixes the inputs' shapes and dtypes: the call's result needs no inference)
        out, parts = record_lazy(
            current,
            call,
            [*inputs, *program.captured],
            program.attrs,
            program.descs,
            program.layout,
            watched,  # (no shared argument: the program is the signature, CallHandle)
        )
        return tuple(parts) if parts else out

    def program_for(self, *args):
        """The Program a lazy call with ``args`` runs (traced now if it was not yet): for
        ``ops.call`` by hand, and to read what a trace recorded (``program.steps``)."""
        return self.looked_up(args, None)[0]

    def looked_up(self, args, tape):
        """(the Program of a call with ``args`` on ``tape``, traced now if it was not yet;
        the Variables the call passes; where the user's own are among them: ``_signature``)."""
        key, inputs, watched = _signature(self.fn, args, tape)
        program = self.programs.get(key)
        if program is None:
            program = self.programs[key] = trace(self.fn, args, key, inputs)
        return program, inputs, watched


def traced(fn):
    """Decorator: ``fn`` (positional Variables, arrays or hashable Python values in; a Variable
    or a tuple of Variables of one dtype out) runs as one op per call in lazy mode, batched
    with the other calls ready at once. See the module docstring for what a trace fixes."""
    return TracedFunction(fn)


_OPTIONS = None  # (``tape.lazy``'s options, once imported: that module imports this one)


def _lazy_options():
    """The lazy blocks' options, whose ``inline_calls`` says whether lazy calls record the
    function's ops instead of a call: with ``exact=True`` (eager mode's bits, nested calls
    included), and where the options compile every structure (threads, validate, debug,
    ``compile=True``): a compiled plan autobatches ops, not calls, and a recorded backward
    would differentiate each call alone (a parameter's gradient per member)."""
    global _OPTIONS
    # (the module: ``tape.lazy`` the package exports is the context manager)
    _OPTIONS = importlib.import_module("tape.lazy").options
    return _OPTIONS


def _in_regions(tape):
    """Whether a lazy call on ``tape`` is recorded as a row of its region
    (``tape.call_region``): where calls are autobatched, and nothing observes or guards
    each op as it is recorded (what ``record_lazy`` would hand to ``apply``); never on a
    trace's own tape (a traced function calling another records a call step)."""
    if tape._regions_off:  # (this step's calls fragment regions: until nothing is pending)
        if tape._pending_ops:
            return False
        tape._regions_off = False
    return (
        call_region.ENABLED
        and tape.__class__ is not _TraceTape
        and _OPTIONS.autobatch is not None
        and _engine._HOOK is None
        and _engine.record is _engine._RECORD
        and not _engine.SHARED
        and not state.trusted
        and instrument.ACTIVE is None
    )


def _is_array(value):
    return isinstance(value, np.ndarray) or _on_gpu(value)


def _signature(fn, args, tape):
    """The cache key of a call on ``tape``, per argument how the trace reads it, the
    Variables the call passes, and where the user's own Variables are among them (positions
    in that list), or None where one is shared now (``autobatch.shared``: a parameter passed
    as an argument, which a batch signature names by identity; ``CallHandle``). An argument
    is a Variable (keyed by its shape and dtype; an array becomes a constant one), a result
    of another traced call still pending on ``tape`` (the call's packed output is passed
    instead, and the program slices it: a tree of calls records no slices between them), or
    a hashable Python value (keyed by its value)."""
    key, inputs, watched = [], [], []
    for k, arg in enumerate(args):
        made = False  # (a constant made here of an array: no one else can flag it shared)
        if arg.__class__ is not Variable and _is_array(arg):
            if arg.__class__ is np.ndarray and arg.dtype.kind in "biufc":  # (Variable(arg)'s
                arg = Variable._make(arg.copy(), arg.shape, arg.dtype, False)  # copy, checked)
            else:
                arg = Variable(arg)
            made = True
        if arg.__class__ is Variable or isinstance(arg, Variable):
            piece = arg._piece
            if (
                piece is None
                or tape is None
                or piece[0].__class__ is not Variable  # (a row of a region: tape.call_region)
                or piece[0]._pending is not tape
            ):
                piece, source = None, arg  # (a plain Variable, or a result already computed)
            else:
                source = piece[0]
            index = len(inputs)
            for i, known in enumerate(inputs):  # (a few: a scan beats a dictionary)
                if known is source:
                    index = i
                    break
            if index == len(inputs):
                inputs.append(source)
            if piece is None:
                if watched is not None and not made:
                    if arg.persistable or (arg._leaf and arg.requires_grad):  # (autobatch.shared)
                        watched = None
                    else:
                        watched.append(index)
                shape = arg.shape if arg.shape.__class__ is tuple else tuple(arg.shape)
                key.append(("var", index, shape, arg.dtype))
            else:
                key.append(("piece", index, piece[1], piece[2]))  # (the layout's number)
            continue
        try:
            hash(arg)
        except TypeError:
            raise InputError(
                "call",
                f"argument {k} of traced function '{getattr(fn, '__qualname__', fn)}' is neither "
                "a Variable, "
                "an array nor hashable",
                actual=type(arg).__name__,
                hint="pass it as a Variable, or close over it",
                location=user_location(),
            ) from None
        key.append(("value", arg.__class__, arg))
    return tuple(key), inputs, watched


class _TraceTape(Tape):
    """The private lazy tape a trace records on: nothing runs on it, so nothing guards it
    (``tape.guard``: a Variable given a new value while a trace's tape lingers, as the
    collector is paused in a step, must not run the trace's ops)."""

    def __init__(self, lazy=True):
        super().__init__(lazy=lazy)
        with guard.LOCK:
            guard.LIVE_TAPES.discard(self)

    def realize(self, variables):
        raise GraphError(
            "call",
            "a traced function read a value while it was traced (its arguments have none yet)",
            hint="compute from Variables only inside it; read values after the call",
            location=user_location(),
        )


class _Tracing:
    """A private lazy tape recording for the duration of a trace (nothing runs on it)."""

    def __enter__(self):
        self.saved = (state.tape, state.grad_enabled, state.trusted, state.location)
        self.tape = _TraceTape(lazy=True)
        state.tape, state.grad_enabled, state.trusted, state.location = self.tape, True, False, None
        return self.tape

    def __exit__(self, *exc):
        state.tape, state.grad_enabled, state.trusted, state.location = self.saved


def _placeholder(shape, dtype, requires_grad, tape):
    var = Variable._make(None, tuple(shape), np.dtype(dtype), requires_grad)
    var._pending, var._leaf = tape, True  # (a leaf of the trace: its gradient is wanted)
    return var


def trace(fn, args, specs, inputs):
    """The Program of ``fn`` called with ``args`` (``specs``: how it reads each, the call's
    key; ``inputs``: the Variables a call passes; see ``_signature``)."""
    name = getattr(fn, "__qualname__", repr(fn))
    location = user_location()
    tier_choice.cold()  # (work a warm step does not do: the step is not timed for a choice)
    with _Tracing() as tape:
        holders = [_placeholder(v.shape, v.dtype, v.dtype.kind in "fc", tape) for v in inputs]
        traced_args = []
        for arg, spec in zip(args, specs):
            if spec[0] == "var":
                traced_args.append(holders[spec[1]])
            elif spec[0] == "piece":
                layout = _LAYOUTS[spec[2]]
                traced_args.append(unpack(layout, holders[spec[1]])[spec[3]])  # (sliced inside)
            else:
                traced_args.append(arg)
        try:
            results = fn(*traced_args)
        except FluidError as err:
            raise err.with_context(location=err.location or location) from None
    single = isinstance(results, Variable)
    outputs = [results] if single else list(results) if isinstance(results, (tuple, list)) else None
    if not outputs or not all(isinstance(v, Variable) for v in outputs):
        raise InputError(
            "call",
            f"traced function '{name}' must return a Variable or a tuple of Variables",
            actual=type(results).__name__,
            location=location,
        )
    program = extract(name, tape, holders, outputs, location, lift_parameters=True)
    program.layout = _layout_number(program.out_descs)
    program.part_pieces = tuple(
        (shape, (program.layout, k)) for k, (shape, _) in enumerate(program.part_descs)
    )
    return program


# A call's parts name their packed output's layout (its results' shapes and dtypes) by a small
# number, so that the keys of the calls they are passed to hash an int, not nested tuples of
# shapes and dtypes (~0.2 us of a four-argument call's ~3). Layouts are few: kept for good.
_LAYOUTS, _LAYOUT_NUMBERS = [], {}
_LAYOUT_LOCK = threading.Lock()  # (two threads tracing at once must not share a number)


def _layout_number(out_descs):
    with _LAYOUT_LOCK:
        number = _LAYOUT_NUMBERS.get(out_descs)
        if number is None:
            number = _LAYOUT_NUMBERS[out_descs] = len(_LAYOUTS)
            _LAYOUTS.append(out_descs)
        return number


def _is_parameter(var):
    return var.persistable or var.requires_grad


def extract(name, tape, holders, outputs, location, lift_parameters=False, track=None):
    """The Program computing ``outputs`` from ``holders`` out of the ops recorded on ``tape``:
    only the ops the outputs need, in tape order. ``lift_parameters``: the parameters read from
    outside (Variables needing a gradient, or persistable) become inputs after the holders,
    passed by every call (``Program.captured``), so gradients reach them and autobatching sees
    them shared; other Variables read from outside are constants, read when the program runs.
    ``track``: (Variables, a list given the number of each in the program, None where absent)."""
    produced = {}  # id(var) -> the op that computed it
    for op in tape._ops:
        if op is not None:
            for var in op.output_vars():
                produced[id(var)] = op
    holder_ids = {id(h) for h in holders}
    needed, stack, seen = set(), [v for v in outputs], set()
    while stack:
        var = stack.pop()
        if id(var) in seen:
            continue
        seen.add(id(var))
        op = produced.get(id(var))
        if op is None or id(op) in needed:
            continue
        needed.add(id(op))
        stack.extend(op.input_vars())
    ops = [op for op in tape._ops if op is not None and id(op) in needed]
    consts, const_ids = [], set()
    for op in ops:
        for var in op.input_vars():
            if id(var) in holder_ids or id(var) in produced or id(var) in const_ids:
                continue
            _check_outside(name, var, op, location)
            const_ids.add(id(var))
            consts.append(var)
    for var in outputs:
        if id(var) not in holder_ids and id(var) not in produced and id(var) not in const_ids:
            _check_outside(name, var, None, location)
            const_ids.add(id(var))
            consts.append(var)
    lifted = [v for v in consts if _is_parameter(v)] if lift_parameters else []
    if lifted:
        holders = list(holders) + lifted
        consts = [v for v in consts if not _is_parameter(v)]
    numbers = {id(h): k for k, h in enumerate(holders)}
    for i, var in enumerate(consts):
        numbers[id(var)] = len(holders) + i
    size = len(holders) + len(consts)
    steps = []
    for op in ops:
        defn = op.defn
        if defn.random or defn.side_effect or defn.inplace:
            kind = "random" if defn.random else "in-place" if defn.inplace else "side-effecting"
            raise GraphError(
                defn.type,
                f"traced function '{name}' records the {kind} op '{defn.type}'",
                hint="a batched call would run it once for all members; keep it outside",
                location=op.location or location,
            )

        def ref(var):
            return None if var is None else numbers[id(var)]

        args = [
            None if a is None else [ref(v) for v in a] if a.__class__ is list else ref(a)
            for a in op.args
        ]
        in_shapes = [
            None
            if a is None
            else [tuple(v.shape) for v in a]
            if a.__class__ is list
            else tuple(a.shape)
            for a in op.args
        ]
        outs, out_shapes = [], []
        for result in op.results:
            if result.__class__ is list:
                outs.append(list(range(size, size + len(result))))
                out_shapes.append([tuple(v.shape) for v in result])
                for v in result:
                    numbers[id(v)] = size
                    size += 1
            else:
                outs.append(size)
                out_shapes.append(tuple(result.shape))
                numbers[id(result)] = size
                size += 1
        steps.append(
            Step(defn, op.attrs, args, outs, in_shapes, out_shapes, op.location or location)
        )
    in_descs = [(tuple(h.shape), h.dtype) for h in holders]
    out_descs = [(tuple(v.shape), v.dtype) for v in outputs]
    program = Program(
        name, in_descs, consts, steps, size, [numbers[id(v)] for v in outputs], out_descs
    )
    program.captured = lifted
    if track is not None:
        track[1].extend(None if v is None else numbers.get(id(v)) for v in track[0])
    return program


def _check_outside(name, var, op, location):
    """A Variable a traced function read from outside must have a value (a parameter or a
    constant): one computed in the step would be captured from the first call only."""
    if var._pending is not None or var._value is None:
        reader = f" (read by '{op.defn.type}')" if op is not None else ""
        raise GraphError(
            "call",
            f"traced function '{name}' reads a Variable computed outside it{reader}, "
            f"shape {tuple(var.shape)}",
            hint="pass it as an argument: a trace captures what it reads by identity",
            location=(op.location if op is not None else None) or location,
        )


def trace_gradient(program, mask, differentiable):
    """The gradient Program of ``program`` for the inputs in ``mask`` (see Program.grad)."""
    backward = importlib.import_module("tape.backward")  # (``tape.backward`` is the function)
    name = f"{program.name}'"
    tier_choice.cold()
    with _Tracing() as tape:
        holders = [
            _placeholder(shape, dtype, j in mask, tape)
            for j, (shape, dtype) in enumerate(program.in_descs)
        ]
        results, replayed = replay(program, holders)
        out = results[0] if len(results) == 1 else _packed(results)
        gout = _placeholder(out.shape, out.dtype, False, tape)
        wanted = [holders[j] for j in mask]
        grads = [None] * len(wanted)
        if out.requires_grad:  # (else no input in mask reaches the results)
            grads = backward.grad(
                tape, out, wanted, gout, retain_graph=True, create_graph=differentiable
            )
        grads = [
            g if g is not None else apply(fill_zeros_like, (x,), {}) for g, x in zip(grads, wanted)
        ]
    dtypes = sorted({str(g.dtype) for g in grads})
    if len(dtypes) > 1:  # (what Program would refuse as its results', naming the gradient)
        raise InputError(
            "call",
            f"the inputs of traced function '{program.name}' that need a gradient have "
            "different dtypes",
            expected="one dtype (a call's gradients leave it packed in one array)",
            actual=", ".join(dtypes),
            hint="cast them to one dtype before the call, or call the function undecorated",
        )
    numbers = []  # (per replayed value, its number in the gradient program, or None)
    gradient = extract(name, tape, holders + [gout], grads, None, track=(replayed, numbers))
    # The forward's step values the gradient computes again, {its number: the forward's}: a
    # batched backward reads them from its forward instead (ops.call.Vectorised.saved_plan).
    first = len(program.in_descs) + len(program.consts)  # (the forward's first step value)
    gradient.recomputed = {
        number: ref for ref, number in enumerate(numbers) if ref >= first and number is not None
    }
    return gradient


def replay(program, holders):
    """The program's ops recorded again on the current tape, reading ``holders`` as its
    inputs; its results (Variables) and every value (Variables by the program's numbers)."""
    env = list(holders) + list(program.consts) + [None] * (program.size - len(holders))
    env = env[: program.size]
    for step in program.steps:
        args = step.values(env)
        before = len(state.tape._ops)
        apply(step.defn, args, step.attrs)
        recorded = state.tape._ops[before:]
        if len(recorded) != 1:
            raise GraphError(step.defn.type, "replaying a traced op recorded no single op")
        step.store(env, recorded[0].results)
    return [env[r] for r in program.outputs], env


def _packed(results):
    flat = [apply(reshape, (r,), {"shape": (-1,)}) for r in results]
    return apply(concat, (flat,), concat.check_attrs({"axis": 0}))


__all__ = ["traced", "TracedFunction"]
