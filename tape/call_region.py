"""Call regions: a lazy step's ``tape.traced`` calls recorded as rows of integer columns, and
run as one op (``ops.call_region``), group by group.

A DyNet-style step calls a few traced functions thousands of times (a Tree-LSTM's leaves and
nodes). Recorded as one op each (``ops.call``), every call costs a handle, a packed output,
a place in the autobatching pass's schedule and in the batched backward's banks: ~14 us a call,
against the ~3 us a call the hand-batched floor leaves (``benchmarks/README.md``, per-example
floors). Here a call costs a row instead, appended while it is recorded:

- its group: the program, its *level* (one more than the deepest call it reads: DyNet's
  depth-based batching, which the hand-batched floor does too) and, where the call passes a
  parameter as an argument, which (a shared input is not gathered);
- one int per input: the row of another call of the region, or a number among the region's
  inputs, the Variables it reads from outside (``live``: values computed in the step, and
  parameters) or its constants (arrays and other Variables holding a value, read as the call
  was recorded, as eager mode reads them).

The user gets the call's results as Variables, as from any op. The region stays open while
calls come; it is *sealed* into one op on the tape, reading its live inputs and computing the
results someone still holds (a reference count above the region's own: the losses, not the
thousands of intermediate states), as soon as anything else may depend on it: an op reading
one of its results, an op with side effects or updating in place, a value asked for, a
backward, the end of the lazy block. So the tape stays in topological order, and the rest of
the engine (scheduling, memory, rollback, errors) sees one op. Its gradient is one op too,
run group by group in reverse (``ops.call_region``).

A region is used where the calls would be autobatched anyway: a lazy block with autobatching
on, no observer (profiler, anomaly detection, finiteness checks), no shared buffers. Elsewhere
calls are recorded one by one as before (``tape.traced``).
"""

from __future__ import annotations

import itertools
import sys
import weakref

import numpy as np

from ops.xp import _on_gpu
from tape import collector
from tape.errors import GraphError, user_location
from tape.variable import Variable

ENABLED = True  # (False: calls are recorded one op each, as before; for comparisons)

# Variables exported by a region whose call results other calls of the same region read: the
# gradient with respect to one of them is not the one ``tape.grad`` would see from outside
# (``check_wanted``).
_READ_INSIDE = weakref.WeakValueDictionary()  # (id -> Variable: they compare elementwise)


class Group:
    """The calls of one program at one level (and with the same shared arguments): run as the
    program vectorised over them (``ops.call_region``)."""

    __slots__ = (
        "program",
        "level",
        "each",
        "shared",
        "rows",
        "refs",
        "bits",
        "grad",
        "kind",
        "base",
        "saved",
    )

    def __init__(self, program, level, each, shared):
        self.program, self.level, self.each, self.shared = program, level, each, shared
        self.rows, self.refs = [], []  # (refs: every member's input refs, flat)
        self.bits = 0  # (bit k: some member's input k needs a gradient)
        self.grad = False  # (some member was recorded with gradients enabled)
        self.kind = self.base = self.saved = None  # (set by the region's forward)

    def mask(self):
        """The inputs of the program (its arguments, then its parameters) whose gradient
        some member needs."""
        if not self.grad:
            return ()
        program, bits = self.program, self.bits
        width = len(program.in_descs) - len(program.captured)
        mask = [j for j in range(width) if bits >> j & 1 and program.in_descs[j][1].kind in "fc"]
        mask += [width + i for i, p in enumerate(program.captured) if p.requires_grad]
        return tuple(mask)


class Region:
    """The open (then sealed) record of a run of traced calls on one lazy tape."""

    __slots__ = (
        "outs",
        "parts",
        "slot_of",
        "levels",
        "grads",
        "locations",
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
        "__weakref__",
    )

    def __init__(self):
        self.outs, self.parts, self.slot_of = [], [], {}  # (per row; dropped when sealed)
        self.levels, self.grads, self.locations = [], [], []  # (per row)
        self.groups = {}  # group key -> Group, in order of first call
        self.row_groups = []  # (per row: its Group)
        self.live, self.live_of = [], {}  # (the op's inputs: Variables read from outside)
        self.consts = []  # (values read from outside as recorded)
        self.captured = {}  # program -> (its parameters' live numbers, whether one needs grad)
        self.exported = []  # per output of the sealed op: (row, part number or -1)
        self.kinds = self.stores = self.positions = None  # (the forward's: ops.call_region)
        self.repeated = False  # (whether some call's result is read twice)
        self.read = None  # (per row: how many inputs of the region's calls read its result)

    def __repr__(self):
        return f"<call region: {len(self.levels)} calls in {len(self.groups)} groups>"

    def row_group(self, row):
        return self.row_groups[row]

    def live_number(self, var):
        number = self.live_of.get(var)
        if number is None:
            number = self.live_of[var] = len(self.live)
            self.live.append(var)
        return number

    def reads(self, args):
        """Whether an op reading ``args`` (its positional entries) reads a result of a call
        of this (open) region."""
        slot_of = self.slot_of
        for entry in args:
            if entry is None:
                continue
            for var in entry if entry.__class__ is list or entry.__class__ is tuple else (entry,):
                if var in slot_of:
                    return True
                piece = var._piece
                if piece is not None and piece[0] in slot_of:
                    return True
        return False


_VALUES = (int, float, bool, str, type(None))  # (arguments keyed by value, hashable)


def record(traced, tape, args, grad_enabled, location):
    """Appends a call of ``traced`` (a ``tape.traced`` function) on ``args`` to ``tape``'s
    open region (opened now if none is), its program traced now if this is the first call
    of its signature; returns what the call returns: its result, or the tuple of its
    results. None, recording nothing, where the call is not for a region: an argument of
    another kind than a Variable, a numeric array or a plain Python value, or no argument
    that differs from call to call (``tape.traced`` records it the general way).

    The signature is ``tape.traced``'s (``_signature``), computed here in the same pass
    as the row: per argument a Variable's shape and dtype, a pending call's result by its
    layout, a value by itself; the inputs are the distinct Variables (a result of a call of
    the region: its packed output) and arrays."""
    region = tape._region
    slot_of = region.slot_of if region is not None else _NO_SLOTS
    # The key, flat: per argument a Variable's (number among the inputs, shape, dtype), a
    # pending call's result's (-1 - number, its layout, its index), a value's
    # (class, value): one tuple of tokens, which parse one way only (``_signature``'s key
    # of nested tuples costs a tuple per argument).
    key, sources, rows = [], [], []  # (rows: per source its row in the region, or None)
    shared = False
    for arg in args:
        cls = arg.__class__
        if cls is Variable:
            piece = arg._piece
            if piece is not None:
                source = piece[0]
                row = slot_of.get(source)
                if row is None and source._pending is not tape:
                    piece, source = None, arg  # (a result computed since: plain)
            else:
                source = arg
                row = slot_of.get(arg)
            index = 0
            for known in sources:
                if known is source:
                    break
                index += 1
            else:
                sources.append(source)
                rows.append(row)
            if piece is None:
                if row is None and (arg.persistable or (arg._leaf and arg.requires_grad)):
                    shared = True
                key.append(index)
                key.append(arg.shape)
                key.append(arg.dtype)
            else:
                key.append(-1 - index)
                key.append(piece[1])
                key.append(piece[2])
        elif cls is np.ndarray or _on_gpu(arg):
            if arg.dtype.kind not in "biufc":
                return None
            key.append(len(sources))
            key.append(arg.shape)
            key.append(arg.dtype)
            sources.append(arg.copy())  # (a constant, as Variable(arg) would copy it)
            rows.append(None)
        elif cls in _VALUES:
            key.append(cls)
            key.append(arg)
        else:
            return None
    if not sources:
        return None
    key = tuple(key)
    program = traced.rows.get(key)
    if program is None:
        program = traced.rows[key] = traced.program_on(tape, args)
    if shared:
        each = tuple(
            row is not None
            or source.__class__ is not Variable
            or not (source.persistable or (source._leaf and source.requires_grad))
            for source, row in zip(sources, rows)
        )
        if not any(each):
            return None  # (no input differs per member: nothing to batch the calls over)
    else:
        each = None
    if region is None:
        region = tape._region = Region()
        slot_of = region.slot_of
        if not tape._pending_ops:
            collector.step_started()  # (a step's first op: as tape.record marks one)
    levels, grads = region.levels, region.grads
    if len(levels) != len(region.outs):
        _trim(region)
    refs, level, bits, bit = [], 0, 0, 1
    for source, row in zip(sources, rows):
        if row is not None:
            refs.append(row)
            if levels[row] >= level:
                level = levels[row] + 1
            if grads[row]:
                bits |= bit
        elif source.__class__ is not Variable:
            refs.append(-2 - 2 * len(region.consts))  # (an array: a constant)
            region.consts.append(source)
        elif source.requires_grad:
            bits |= bit
            refs.append(-1 - 2 * region.live_number(source))
        elif source._pending is None and source._value is not None and not source.persistable:
            refs.append(-2 - 2 * len(region.consts))  # (a constant: its value now)
            region.consts.append(source._value)
        else:
            refs.append(-1 - 2 * region.live_number(source))
        bit <<= 1
    captured = region.captured.get(program)
    if captured is None:
        numbers = tuple(region.live_number(p) for p in program.captured)
        captured = region.captured[program] = (
            numbers,
            any(p.requires_grad for p in program.captured),
        )
    grad = grad_enabled and (bits or captured[1]) and program.dtype.kind in "fc"
    if each is None:
        group_key = (program, level)
        shared_refs = None
    else:
        shared_refs = tuple(ref for ref, per in zip(refs, each) if not per)
        group_key = (program, level, each, shared_refs)
    group = region.groups.get(group_key)
    if group is None:
        group = region.groups[group_key] = Group(program, level, each, shared_refs)
    make, dtype = Variable._make, program.dtype
    out = make(None, program._out_shape, dtype, grad)
    out._pending = tape
    parts, layout, index = [], program.layout, 0
    for shape, _ in program.part_descs:
        var = make(None, shape, dtype, grad)
        var._pending = tape
        var._piece = (out, layout, index)
        parts.append(var)
        index += 1
    # The row: appended to every per-row list, its result last (a call interrupted before
    # that, by KeyboardInterrupt, left a partial row that ``_trim`` drops).
    row = len(region.outs)
    group.rows.append(row)
    group.refs.extend(refs)
    if grad_enabled:
        group.bits |= bits
        group.grad = True
    region.row_groups.append(group)
    levels.append(level)
    grads.append(grad)
    region.locations.append(location or user_location(3))
    region.parts.append(parts)
    slot_of[out] = row
    region.outs.append(out)
    return tuple(parts) if parts else out


def _trim(region):
    """Drops what an interrupted ``record`` appended of a row whose result it did not append
    (the row ``len(region.outs)``): the region stays consistent for the calls after it."""
    rows = len(region.outs)
    for group in region.groups.values():
        if group.rows and group.rows[-1] >= rows:
            group.rows.pop()
        width = len(group.program.in_descs) - len(group.program.captured)
        del group.refs[len(group.rows) * width :]
    for column in (region.levels, region.grads, region.locations, region.parts, region.row_groups):
        del column[rows:]
    for key in [key for key, group in region.groups.items() if not group.rows]:
        del region.groups[key]


_NO_SLOTS = {}  # (no region open yet: no call's result is a row)


def _counts(variables, size):
    """``sys.getrefcount`` of each of ``variables`` (an iterable of ``size``), in one pass
    in C."""
    return np.fromiter(map(sys.getrefcount, variables), np.intp, size)


def _unheld_counts():
    """What ``_counts`` gives a row's result and a part that nothing but the region holds
    (the result: the region's list and its key in ``slot_of``; a part: its row's list),
    measured, not assumed (as ``ops.call._UNHELD``)."""
    outs, slot_of, parts = [object()], {}, [[object()]]
    slot_of[outs[0]] = 0
    out = _counts(outs, 1)[0]
    return int(out), int(_counts(itertools.chain.from_iterable(parts), 1)[0])


_OUT_UNHELD, _PART_UNHELD = _unheld_counts()


def seal(tape):
    """Closes ``tape``'s open region into one ``call_region`` op on the tape: its outputs
    the call results someone holds (nobody else can read the others, which die here)."""
    region = tape._region
    tape._region = None
    from ops.regions import call_region
    from tape.op_handle import OpHandle
    from tape.tape import STEP_MASK, _step_mark

    if len(region.levels) != len(region.outs):
        _trim(region)
    read = _read_counts(region)
    outs, parts = region.outs, region.parts
    rows = len(outs)
    widths = np.fromiter(map(len, parts), np.intp, rows)  # (parts per row)
    held = _counts(outs, rows) > _OUT_UNHELD
    held &= widths == 0  # (a call of several results returned its parts, not its output)
    chosen = [(int(row), -1) for row in np.flatnonzero(held)]
    total = int(widths.sum())
    if total:
        ends = np.cumsum(widths)
        flat = np.flatnonzero(_counts(itertools.chain.from_iterable(parts), total) > _PART_UNHELD)
        owners = np.searchsorted(ends, flat, side="right")
        chosen += [
            (int(row), int(position - ends[row] + widths[row]))
            for row, position in zip(owners, flat)
        ]
        chosen.sort()
    results = []
    for row, index in chosen:
        var = outs[row] if index < 0 else parts[row][index]
        results.append(var)
        var._piece = None  # (read from now on as any op's output)
        if read[row]:
            _READ_INSIDE[id(var)] = var
    var = None
    region.exported = chosen
    region.outs = region.parts = region.slot_of = None
    tape._last_region = _summary(region)
    op = OpHandle(
        call_region,
        (region.live,),
        (results,),
        {"region": region},
        region.locations[0],
        len(tape._ops),
    )
    tape._ops.append(op)
    pending = tape._pending_ops
    if len(pending) & STEP_MASK == 0:
        _step_mark(pending)
    pending.append(op)
    return op


def _summary(region):
    """What ``tape.explain`` says of a sealed region: per function its calls, groups and
    largest group; the results held outside; the inputs read from outside."""
    per = {}
    for group in region.groups.values():
        calls, groups, largest = per.get(group.program.name, (0, 0, 0))
        n = len(group.rows)
        per[group.program.name] = (calls + n, groups + 1, max(largest, n))
    return len(region.levels), per, len(region.exported), len(region.live), len(region.consts)


def explain(summary):
    """The lines ``tape.explain`` shows for the last region sealed on a tape."""
    calls, per, held, live, consts = summary
    groups = sum(g for _, g, _ in per.values())
    lines = [
        f"traced calls recorded as one region (tape.call_region): {calls} calls in {groups} "
        f"groups by level, each group its function vectorised; {held} results held outside, "
        f"{live} inputs read from outside and {consts} constants"
    ]
    lines += [
        f"  {name}: {n} calls in {g} group{'s' if g > 1 else ''} (largest {largest})"
        for name, (n, g, largest) in sorted(per.items(), key=lambda item: -item[1][0])
    ]
    return lines


def _read_counts(region):
    """Per row, how many inputs of the region's calls read its result; the groups' input
    refs become arrays (members by inputs), as the forward reads them."""
    rows = len(region.levels)
    slots = []
    for group in region.groups.values():
        width = len(group.program.in_descs) - len(group.program.captured)
        refs = np.array(group.refs, np.intp).reshape(len(group.rows), width)
        group.refs, group.rows = refs, np.array(group.rows, np.intp)
        slots.append(refs[refs >= 0])
    read = np.bincount(np.concatenate(slots), minlength=rows) if slots else np.zeros(rows, int)
    region.repeated = bool(rows) and int(read.max(initial=0)) > 1
    region.read = read
    return read


def before_op(tape, defn, args, given):
    """Seals ``tape``'s open region before an op that may depend on it is recorded."""
    if given is not None or defn.side_effect or defn.inplace or tape._region.reads(args):
        seal(tape)


def check_wanted(wanted):
    """Raises where a gradient is asked for with respect to a traced call's result that
    other calls of its region read (see the module's ``_READ_INSIDE``)."""
    for var in wanted:
        if _READ_INSIDE.get(id(var)) is var:
            raise GraphError(
                "call",
                "the gradient with respect to a traced call's result that other traced calls "
                "read is not available: the calls ran batched as one region",
                hint="use tape.lazy(autobatch=False) for this gradient",
                location=user_location(),
            )


__all__ = ["Region", "Group", "record", "seal", "before_op", "check_wanted"]
