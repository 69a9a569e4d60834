"""Call regions: a lazy step's ``tape.traced`` calls recorded as rows of integer columns, and
run as one op (``call_region``, ``ops/regions.py``), group by group.

A DyNet-style step calls a few traced functions thousands of times (a Tree-LSTM's leaves and
nodes). Recorded as one op each (``ops.call``), every call cost a handle, a packed output, a
place in the autobatching pass's schedule and in the batched backward's banks: ~14 us a call,
against the ~3 us a call the hand-batched floor leaves (``benchmarks/README.md``). Here a call
is a row of the step's open *region*, appended as it is recorded (~2.5 us):

- its group: the program, its *level* (one more than the deepest row it reads: DyNet's
  depth-based batching, as the hand-batched floor does), whether it needs a gradient, and,
  where it passes a parameter as an argument, which (a shared input is not gathered);
- one int per input: another row, or a number among the region's inputs from outside
  (``live``: values computed in the step, and parameters) or its constants (arrays, and
  Variables holding a value, read as the call was recorded, as eager mode reads them).

The user gets the call's results as Variables, marked as the row's. Ops recorded meanwhile
that batch as a program step (a batch rule, one output, hashable attributes: an embedding
lookup feeding the calls, ``h * mask`` between two) are rows too, as calls of a traced
function of that op alone (``record_op``). The region is *sealed* into one op on the tape,
reading its live inputs and computing the results someone still holds (a reference count
above the region's own: the losses, not the thousands of intermediate states), as soon as
anything else may depend on it: another op reading one of its results, an op with side
effects or updating in place, a value asked for, a new value given to an input, a backward,
the end of the lazy block. So the tape stays in topological order, and the rest of the engine
(scheduling, memory, rollback, errors) sees one op; its gradient is one op too, the groups in
reverse. A step whose calls keep being sealed after a few (each example's calls interleaved
with ops that cannot be rows) records the rest of its calls one op each (``FRAGMENTED``).

A region is used where the calls would be autobatched anyway: a lazy block with autobatching
on (not ``exact``), no observer (profiler, anomaly detection, finiteness checks) and no
shared buffers. Two departures from one op per call: the gradient of a region cannot be
differentiated again (``create_graph``: a ``GraphError`` says to turn autobatching off), and
a result a region exported is differentiated by ``tape.grad`` through the region's own
calls too (``tape.region_plan.want``).
"""

from __future__ import annotations

import importlib
import itertools
import weakref

import numpy as np

from ops.batching import rule_of
from ops.xp import _on_gpu
from tape import collector
from tape.errors import user_location
from tape.region_plan import (
    READ_INSIDE,
    RESULT_UNHELD,
    ROW_UNHELD,
    Group,
    counts,
    forget_dead,
    read_counts,
    summary,
)
from tape.variable import Variable

ENABLED = True  # (False: calls are recorded one op each, as before; for comparisons)


class Region:
    """The open (then sealed) record of a run of traced calls on one lazy tape."""

    __slots__ = (
        "results",
        "levels",
        "grads",
        "location",
        "groups",
        "row_groups",
        "live",
        "live_of",
        "consts",
        "captured",
        "exported",
        "kinds",
        "stores",
        "positions",
        "repeated",
        "read",
        "wanted",
        "__weakref__",
    )

    def __init__(self):
        self.results = []  # (per row: its results, a tuple; dropped when sealed)
        self.levels, self.grads = [], []  # (per row)
        self.location = None  # (the first call's line: the op's)
        self.groups = {}  # group key -> Group, in order of first call
        self.row_groups = []  # (per row: its Group)
        self.live, self.live_of = [], {}  # (the op's inputs: Variables read from outside)
        self.consts = []  # (values read from outside as recorded)
        self.captured = {}  # program -> (its parameters' live numbers, whether one needs grad)
        self.exported = []  # per output of the sealed op: (row, part number or -1)
        self.kinds = self.stores = self.positions = None  # (the forward's: ops/regions.py)
        self.repeated = False  # (whether some call's result is read twice)
        self.read = None  # (per row: how many inputs of the region's calls read its result)
        self.wanted = {}  # (output number -> (Variable, tape.grad's dict): region_plan.want)

    def __repr__(self):
        return f"<call region: {len(self.levels)} calls in {len(self.groups)} groups>"

    def live_number(self, var):
        number = self.live_of.get(var)
        if number is None:
            number = self.live_of[var] = len(self.live)
            self.live.append(var)
        return number

    def reads(self, args):
        """Whether an op reading ``args`` (its positional entries) reads a result of a call
        of this (open) region."""
        for entry in args:
            if entry is None:
                continue
            for var in entry if entry.__class__ is list or entry.__class__ is tuple else (entry,):
                piece = var._piece
                if piece is not None and piece[0] is self:
                    return True
        return False


_VALUES = (int, float, bool, str, type(None))  # (arguments keyed by value, hashable)


def record(traced, tape, args, grad_enabled, location):
    """Appends a call of ``traced`` (a ``tape.traced`` function) on ``args`` to ``tape``'s
    open region (opened now if none is), its program traced now if this is the first call
    of its signature; returns what the call returns: its result, or the tuple of its
    results. None, recording nothing, where the call is not for a region: an argument of
    another kind than a Variable, a numeric array or a plain Python value, or a result of a
    call recorded otherwise, or no argument that differs from call to call (``tape.traced``
    records it the general way).

    The call's results are marked ``_piece = (region, row, (layout, index))`` (the index
    None for a function of one result): a call reading one reads that row. The program is
    found by a flat key of the arguments, per argument the input it is (its number among
    the distinct ones) and a Variable's shape and dtype, a result's layout and index, or a
    value's class and value: tokens that parse one way only."""
    region = tape._region
    if region is None:
        region = tape._region = Region()  # (sealed while empty, it records no op)
        if not tape._pending_ops:
            collector.step_started()  # (a step's first op: as tape.record marks one)
    levels, grads = region.levels, region.grads
    if len(region.results) != len(levels):
        _trim(region)
    key, refs, seen = [], [], []  # (seen: per input, its row + 1 or minus its object's id)
    level, bits, bit, shared = 0, 0, 1, None
    for arg in args:
        cls = arg.__class__
        if cls is Variable:
            piece = arg._piece
            if piece is not None:
                owner, row, token = piece
                if owner is not region:
                    return None  # (a result of a call recorded one op each)
                mark = row + 1
                if mark in seen:
                    key.append(seen.index(mark))
                else:
                    key.append(len(refs))
                    seen.append(mark)
                    refs.append(row)
                    if levels[row] >= level:
                        level = levels[row] + 1
                    if grads[row]:
                        bits |= bit
                    bit <<= 1
                if token is None:
                    key.append(arg.shape)
                    key.append(arg.dtype)
                else:
                    key.append(token)
                continue
            if -id(arg) in seen:
                key.append(seen.index(-id(arg)))
            else:
                key.append(len(refs))
                seen.append(-id(arg))
                if arg.requires_grad:
                    bits |= bit
                    refs.append(-1 - 2 * region.live_number(arg))
                    if arg._leaf or arg.persistable:  # (a parameter: shared, not gathered)
                        shared = (shared or 0) | bit
                elif arg._pending is None and arg._value is not None and not arg.persistable:
                    refs.append(-2 - 2 * len(region.consts))  # (a constant: its value now)
                    region.consts.append(arg._value)
                else:
                    refs.append(-1 - 2 * region.live_number(arg))
                    if arg.persistable:
                        shared = (shared or 0) | bit
                bit <<= 1
            key.append(arg.shape if arg.shape.__class__ is tuple else tuple(arg.shape))
            key.append(arg.dtype)
        elif cls is np.ndarray or _on_gpu(arg):
            if arg.dtype.kind not in "biufc":
                return None
            key.append(len(refs))
            key.append(arg.shape)
            key.append(arg.dtype)
            seen.append(0)  # (never another argument)
            refs.append(-2 - 2 * len(region.consts))  # (a constant, copied as Variable(arg))
            region.consts.append(arg.copy())
            bit <<= 1
        elif cls in _VALUES:
            key.append(cls)
            key.append(arg)
        else:
            return None
    if not refs:
        return None
    each = None
    if shared is not None:
        each = tuple(not shared >> k & 1 for k in range(len(refs)))
        if not any(each):
            return None  # (no input differs per member: nothing to batch the calls over)
    key = tuple(key)
    program = traced.rows.get(key)
    if program is None:
        program = traced.rows[key] = _program(traced, tape, region, args)
    captured = region.captured.get(program)
    if captured is None:
        numbers = tuple(region.live_number(p) for p in program.captured)
        captured = region.captured[program] = (
            numbers,
            any(p.requires_grad for p in program.captured),
        )
    grad = grad_enabled and (bits or captured[1]) and program.dtype.kind in "fc"
    if each is None:
        group_key = (program, level, grad)
        shared_refs = None
    else:
        shared_refs = tuple(ref for ref, per in zip(refs, each) if not per)
        group_key = (program, level, grad, each, shared_refs)
    group = region.groups.get(group_key)
    if group is None:
        group = Group(program, level, each, shared_refs, grad, location or user_location(3))
        region.groups[group_key] = group
        if region.location is None:
            region.location = group.location
    row = len(levels)
    make, dtype = Variable._make, program.dtype
    pieces = program.part_pieces
    if len(pieces) == 2:  # (the usual tuple, (h, c): no comprehension's frame)
        (first, first_token), (second, second_token) = pieces
        returned = results = (
            make(None, first, dtype, grad, tape, (region, row, first_token)),
            make(None, second, dtype, grad, tape, (region, row, second_token)),
        )
    elif pieces:
        returned = results = tuple(
            [make(None, shape, dtype, grad, tape, (region, row, token)) for shape, token in pieces]
        )
    else:
        returned = make(None, program._out_shape, dtype, grad, tape, (region, row, None))
        results = (returned,)
    # The row: appended to every per-row list, its level last (a call interrupted before
    # that, by KeyboardInterrupt, left a partial row that ``_trim`` drops).
    group.rows.append(row)
    group.refs.extend(refs)
    group.bits |= bits
    region.row_groups.append(group)
    grads.append(grad)
    region.results.append(results)
    levels.append(level)
    return returned


def _program(traced, tape, region, args):
    """The Program of a call of ``traced`` with ``args`` (traced now if it was not yet),
    found by ``tape.traced``'s own key (``_signature``): each result of a call of the region
    is passed as a stand-in, as a result of a call recorded one op each (a part of a pending
    packed output) or, for a function of one result, as a Variable of its shape."""
    packed, standing = {}, []  # (row -> its packed stand-in; the arguments as passed)
    for arg in args:
        piece = arg._piece if arg.__class__ is Variable else None
        if piece is not None:
            row, token = piece[1], piece[2]
            out = packed.get(row)
            if out is None:
                program = region.row_groups[row].program
                out = packed[row] = Variable._make(None, program._out_shape, program.dtype, False)
                out._pending = tape
            if token is None:
                arg = out
            else:
                arg = Variable._make(None, arg.shape, arg.dtype, False)
                arg._piece = (out, *token)
        standing.append(arg)
    return traced.looked_up(standing, tape)[0]


def _trim(region):
    """Drops what an interrupted ``record`` appended of a row whose level it did not
    append (the row ``len(region.levels)``): the region stays consistent for later calls."""
    rows = len(region.levels)
    for group in region.groups.values():
        if group.rows and group.rows[-1] >= rows:
            group.rows.pop()
        width = len(group.program.in_descs) - len(group.program.captured)
        del group.refs[len(group.rows) * width :]
    for column in (region.grads, region.results, region.row_groups):
        del column[rows:]
    for key in [key for key, group in region.groups.items() if not group.rows]:
        del region.groups[key]


def seal(tape):
    """Closes ``tape``'s open region into one ``call_region`` op on the tape: its outputs
    the call results someone holds (nobody else can read the others, which die here); a
    region without calls records nothing. Returns the op (or None)."""
    region = tape._region
    tape._region = None
    if len(region.results) != len(region.levels):
        _trim(region)
    if not region.levels:
        return None
    from ops.regions import call_region
    from tape.op_handle import OpHandle
    from tape.tape import STEP_MASK, _step_mark

    read = read_counts(region)
    results = region.results
    rows = len(results)
    widths = np.fromiter(map(len, results), np.intp, rows)
    # (a result is held where it is, or where the tuple the call returned is)
    held = counts(itertools.chain.from_iterable(results), int(widths.sum())) > RESULT_UNHELD
    held |= np.repeat(counts(results, rows) > ROW_UNHELD, widths)
    flat = np.flatnonzero(held)
    owners = np.repeat(np.arange(rows), widths)[flat]
    starts = np.cumsum(widths) - widths
    chosen, outputs, row_groups = [], [], region.row_groups
    for row, index, inside in zip(
        owners.tolist(), (flat - starts[owners]).tolist(), read[owners].tolist()
    ):
        var = results[row][index]
        chosen.append((row, index if row_groups[row].program.part_pieces else -1))
        outputs.append(var)
        var._piece = None  # (read from now on as any op's output)
        if inside:
            READ_INSIDE[id(var)] = (weakref.ref(var), weakref.ref(region), len(outputs) - 1)
    var = None
    if READ_INSIDE:
        forget_dead()
    region.exported = chosen
    region.results = None
    tape._last_region = summary(region)
    op = OpHandle(
        call_region,
        (region.live,),
        (outputs,),
        {"region": region},
        region.location,
        len(tape._ops),
    )
    tape._ops.append(op)
    pending = tape._pending_ops
    if len(pending) & STEP_MASK == 0:
        _step_mark(pending)
    pending.append(op)
    return op


# A region sealed by an op reading its results with fewer calls than this: the step
# interleaves its calls with ops reading them (``h = f(...); g(h * mask)`` per example), so
# regions would hold a call or two each and batch nothing. The tape's later calls in the step
# are recorded one op each instead, which the autobatching pass groups across those ops.
FRAGMENTED = 16


def record_op(tape, defn, args, attrs, given, state):
    """An op recorded while ``tape`` has an open region: a row of the region where it can be
    one (returns its result), else the region is sealed first if the op may depend on it
    (returns None: ``tape.record`` records the op); ``state``: the thread's recording state.

    A row: a pure op of one output over Variables, with a batch rule (``ops.batching``: it
    batches as a program step) and hashable attributes, recorded as a call of a traced
    function of that op alone (traced once per attributes and input signature). So ops
    between the calls (a tagger's embedding lookups, ``g(h * mask)``) join the region's
    groups instead of sealing it: nothing of the step waits for them."""
    if (
        given is None
        and defn.fast
        and rule_of(defn) is not None
        and not (defn.random or defn.side_effect or defn.inplace)
        and _recording(tape)
    ):
        function = _op_function(defn, attrs)
        if function is not None:
            result = record(function, tape, args, state.grad_enabled, state.location)
            if result is not None:
                return result
    before_op(tape, defn, args, given)
    return None


_OP_FUNCTIONS = {}  # (op, attributes) -> its traced function, or None (not one: unhashable)
_OP_FUNCTIONS_LIMIT = 4096  # (cleared beyond: distinct attributes per op are usually few)


def _op_function(defn, attrs):
    """The traced function of ``defn`` alone with ``attrs`` (None: attributes not hashable)."""
    try:
        key = (defn, None if attrs is defn.defaults else tuple(attrs.items()))
        hash(key)
    except TypeError:
        return None
    function = _OP_FUNCTIONS.get(key, False)
    if function is False:
        from tape.tape import apply
        from tape.traced import TracedFunction

        def one_op(*inputs):
            return apply(defn, inputs, attrs)

        one_op.__qualname__ = one_op.__name__ = defn.type
        if len(_OP_FUNCTIONS) >= _OP_FUNCTIONS_LIMIT:
            _OP_FUNCTIONS.clear()
        function = _OP_FUNCTIONS[key] = TracedFunction(one_op)
    return function


def _recording(tape):
    """Whether calls (and ops) on ``tape`` may be rows now (``tape.traced``'s test; that
    module imports this one, so it is found once, not imported per op)."""
    global _TRACED
    if _TRACED is None:
        _TRACED = importlib.import_module("tape.traced")
    return _TRACED._in_regions(tape)


_TRACED = None


def before_op(tape, defn, args, given):
    """Seals ``tape``'s open region before an op that may depend on it is recorded."""
    if given is not None or defn.side_effect or defn.inplace:
        seal(tape)
    elif tape._region.reads(args):
        calls = len(tape._region.levels)
        seal(tape)
        if calls < FRAGMENTED:
            tape._regions_off = True  # (until nothing is pending: tape.traced._in_regions)


__all__ = ["Region", "record", "record_op", "seal", "before_op"]
