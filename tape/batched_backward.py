"""The backward of an autobatched forward, group by group (DyNet's batched backward).

An autobatched lazy run computed each group of same-signature ops as one kernel call
(``tape.passes.autobatch``). A structure seen for the first time is then differentiated at once,
the eager way (``tape.backward._after_forward``); op by op, that backward costs a maker, a
Variable and a kernel call per op, as much Python as eager mode's, whatever the forward saved
by batching. So the backward batches as the forward did: the gradients reaching a group's
members are stacked, the op's own gradient maker runs once on the stacked operands (the batch
rule says how the group's call reads as one instance of the op: ``Rule.as_op``), and the rows
of each input gradient go back to the members' inputs; a shared input (a parameter) gets the
group's total at once. Ops that ran alone, and groups whose rule does not read as one op, are
differentiated one by one, as ``tape.backward`` does.

Between groups the gradients flow stacked: a group's members' output gradients are rows of
one array (``_Flows``: one *bank* for all groups whose outputs have one shape and dtype), and a
consumer group adds the rows of its operand's gradient into the bank in one call, a slice where
they are consecutive rows (as the forward's gather read them), else by index, whichever groups
computed them (a tree node's children: leaves and nodes of several heights); a stack run alone
(the per-example losses' stack before their mean) sends its gradient's slices the same way. A
member gets a Variable of its own only where an op outside the groups reads it. So the
per-member work is a lookup or two, not a Variable, a pending entry and an add per member (the
Tree-LSTM's backward: 51k members in 248 groups).

Order: the groups in the reverse of the order the forward ran them, which puts every reader of
a value before its producer; then the tape's other ops (run before this run, so reading none of
its values) in reverse tape order.

Only members whose output received a gradient are stacked (a member that received none sends
none on, as op by op). Values equal the op-by-op backward's within the rounding of products over
more rows and of sums in another order (autobatching is off with ``tape.lazy(exact=True)``). If
anything fails, ``gradients`` returns None before any gradient reached a Variable, and the
caller runs the op-by-op backward, which reports the error at the op and the user's line.
"""

from __future__ import annotations

import importlib
import operator
from itertools import repeat

import numpy as np

from ops import buffers
from ops.xp import array_module
from tape import collector
from tape.passes.autobatch import gather, shared
from tape.variable import Variable


class _Group:
    """A group's call as one op instance, as a gradient maker reads it (``GradContext``)."""

    __slots__ = ("defn", "type", "args", "results", "attrs")

    def __init__(self, defn, args, results, attrs):
        self.defn, self.type = defn, defn.type
        self.args, self.results, self.attrs = args, results, attrs


def gradients(tape, loss, run, seed):
    """The leaf gradients ``{id: (leaf, gradient)}`` of ``loss`` on ``tape`` after the
    autobatched run ``run`` (``(ops, groups, rules, rows, ran, parts_read)``:
    ``tape.interpret``; ``ran`` per group what its forward kept for this backward, or None;
    ``parts_read``: ``autobatch.Schedule``'s), its gradient ops run at once; ``seed``: the
    loss's gradient. None if it could not (nothing changed)."""
    backward = importlib.import_module("tape.backward")  # (``tape.backward`` is the function)

    ops, groups, rules, rows, ran, parts_read = run
    # (a part gets a gradient of its own only where an op read it, or it is the loss)
    parts_read = parts_read or loss._piece is not None
    ran = ran or [None] * len(groups)
    units = [
        (tuple([ops[p] for p in group]), rule, facts)  # (a list first: no generator)
        for group, rule, facts in zip(groups, rules, ran)
    ]
    units.reverse()
    flows = _Flows(units)
    taped = tape._ops
    if len(taped) - taped.count(None) != len(ops):  # (ops recorded before the run: after it)
        in_run = {id(op) for op in ops}
        units += [((op,), None, None) for op in reversed(taped) if op and id(op) not in in_run]
    pending = {id(loss): [loss, seed]}
    reached, counts = [], {}  # (op type -> [groups differentiated as one, their members])
    try:
        for unit, (members, rule, facts) in enumerate(units):
            if not _together(rule, members):
                for op in members:
                    if _one(op, pending, backward, flows):
                        reached.append(op)
            else:
                gout, active = flows.take(
                    unit, members, pending, backward._total, rule if parts_read else None
                )
                if gout is not None:
                    facts = facts if len(active) == len(members) else None
                    reached += _group(
                        active, gout, rule, facts, pending, rows, backward, counts, flows
                    )
        leaves = backward._leaves(pending, None)
    except Exception as err:  # (the op-by-op scan reports it, at the op and the user's line)
        # (kept for tape.explain: a fall back costs the batching, which is otherwise unseen)
        tape._batched_backward_failed = f"{type(err).__name__}: {err}".splitlines()[0]
        return None
    ops = tape._ops
    for op in reached:  # (released and dropped, as the op-by-op scan drops them)
        for entry in op.results:
            if entry.__class__ is list or entry.__class__ is tuple:
                for var in entry:
                    var._released = True
            elif entry is not None:
                entry._released = True
        if op.index < len(ops) and ops[op.index] is op:
            ops[op.index] = None
    together = sum(members for _, members in counts.values())
    tape._batched_backward = (counts, len(reached) - together)  # (for tape.explain)
    tape._structure = None
    tape.compact(lambda op: True)
    if tape.steps_only:
        collector.step_ended()  # (the step's ops are gone: tape.collector)
    return leaves


def _together(rule, members):
    """Whether a group's members are differentiated as one op: two or more, or one whose rule
    runs a group of one (``Rule.min_group``: a traced call's vectorised gradient)."""
    return rule is not None and (len(members) > 1 or (rule.min_group or 2) < 2)


def _one(op, pending, backward, flows):
    """One op differentiated as ``tape.backward``'s scan does; whether a gradient reached it.
    A stack (of per-example losses, say) sends its gradient's slices to the groups that
    computed its inputs as their rows (``_stack_rows``)."""
    defn = op.defn
    if defn.inplace and defn.grad_maker is None:
        return False
    results = op.results
    if len(results) == 1 and results[0].__class__ is Variable:
        item = pending.pop(id(results[0]), None)
        if item is None:
            return False
        gouts = [backward._total(item)]
        if defn.type == "stack" and gouts[0]._value is not None:
            _stack_rows(op, gouts[0]._value, pending, backward, flows)
            return True
    else:
        gouts, taken = backward._take_output_grads(op, pending, None)
        if not taken:
            return False
    if defn.grad_maker is not None:
        backward._run_grad_maker(op, gouts, pending)
    return True


def _zeros(xp, rows, shape, dtype):
    """A bank of ``rows`` zero rows of ``shape``: a view of a reused buffer (``ops.buffers``)
    whose row count is ``rows`` rounded up to a power of two, so that the next step's bank,
    of another size, reuses it. A fresh array this large (``np.zeros``: pages mapped afresh
    and faulted in as rows are first written) took a third of a tagger step's adds."""
    capacity = 1 << max(rows - 1, 0).bit_length()
    value = buffers.empty(xp, (capacity, *shape), dtype)[:rows]
    value[...] = 0
    return value


def _stack_rows(op, gout, pending, backward, flows):
    """The gradient of a stack: its slices along the stacked axis are its inputs' gradients,
    added to the groups that computed them as rows (one add where they are a group's
    consecutive rows, as the losses of a batch of examples are), the others sent on as
    Variables of their own. The stack's own gradient maker splits and reshapes: an op and a
    Variable per input, then an add per row into its group."""
    (inputs,) = op.args
    rows = array_module(gout).moveaxis(gout, op.attrs["axis"] % gout.ndim, 0)
    shares = []
    _add_rows(rows, inputs, shares, flows)
    for g, var in shares:
        backward._accumulate(g, var, pending)


_REQUIRES_GRAD = operator.attrgetter("requires_grad")
ROW_BITS = 32  # (a group's rows: fewer than 2**32)
ROW_MASK = (1 << ROW_BITS) - 1


class _Flows:
    """The gradients reaching the groups' members, stacked per group (see the module docstring).

    The rows of every group whose members' outputs have one shape and dtype live in one
    *bank* (zeroed at the first row added to it: ``_zeros``), group after group, so that the
    rows a consumer group sends to several producer groups (a tree node's children) take one
    indexed add, not one per producer. ``code_of[id(output)]`` is ``bank << ROW_BITS | row``
    for a member of a group differentiated as one (by its one output); ``place[group]`` its
    (bank, first row); ``outputs[group]`` the ids of its members' outputs in row order;
    ``banks[bank]`` the array (None until a row is added), ``reached[bank]`` which of its rows
    a gradient reached, ``layouts[bank]`` (row shape, dtype, rows)."""

    __slots__ = ("code_of", "place", "outputs", "banks", "reached", "layouts")

    def __init__(self, units):
        self.code_of, self.place, self.outputs = {}, {}, {}
        numbers, layouts = {}, []  # (row shape, dtype) -> bank; per bank [shape, dtype, rows]
        for unit, (members, rule, facts) in enumerate(units):
            if _together(rule, members):
                ids = facts[0] if facts else [id(op.results[0]) for op in members]
                out = members[0].results[0]
                layout = (tuple(out.shape), out.dtype)
                bank = numbers.get(layout)
                if bank is None:
                    bank = numbers[layout] = len(layouts)
                    layouts.append([layout[0], layout[1], 0])
                first = layouts[bank][2]
                layouts[bank][2] += len(ids)
                self.outputs[unit] = ids
                self.place[unit] = (bank, first)
                base = (bank << ROW_BITS) + first
                self.code_of.update(zip(ids, range(base, base + len(ids))))
        self.layouts = layouts
        self.banks, self.reached = [None] * len(layouts), [None] * len(layouts)

    def add(self, g, inputs):
        """Adds the rows of ``g`` (one per Variable of ``inputs``) to the groups whose members
        computed them; returns the positions of the inputs that no group computed."""
        codes = list(map(self.code_of.get, map(id, inputs), repeat(-1)))
        count, first = len(codes), codes[0]
        if not all(map(_REQUIRES_GRAD, inputs)):  # (rows nothing reads: not added)
            codes = [c if var.requires_grad else -1 for c, var in zip(codes, inputs)]
        elif (
            first >= 0
            and codes[-1] - first == count - 1
            and (count == 1 or codes == list(range(first, first + count)))
        ):  # (consecutive rows, as a group reading an earlier group's results in order)
            row = first & ROW_MASK
            self._add(first >> ROW_BITS, slice(row, row + count), g, True)
            return ()
        # (the rows of one operand have one shape and dtype: one bank, whichever groups)
        if -1 not in codes:  # (every row a group's: the first's bank, checked by _add)
            coded = np.array(codes, np.int64)
            coded &= ROW_MASK
            self._add(first >> ROW_BITS, coded, g, len(set(codes)) == count)
            return ()
        coded = np.array(codes, np.int64)
        banks = coded >> ROW_BITS  # (-1 for an input no group computed)
        distinct = len(set(codes)) + max(codes.count(-1) - 1, 0) == count  # (-1: no row)
        (known,) = (banks >= 0).nonzero()
        if not known.size:
            return list(range(count))
        bank = int(banks[known[0]])
        if (banks[known] != bank).any():
            raise ValueError("an operand's rows come from groups of other shapes")
        self._add(bank, coded[known] & ROW_MASK, g[known], distinct)
        return (banks < 0).nonzero()[0].tolist()

    def _add(self, bank, at, g, distinct):
        """Adds ``g`` to rows ``at`` of ``bank`` (a slice, or row numbers in the order of
        ``g``'s rows; ``distinct``: no row twice)."""
        value = self.banks[bank]
        if value is None:
            shape, dtype, size = self.layouts[bank]
            xp = array_module(g)
            value = self.banks[bank] = _zeros(xp, size, shape, dtype)
            self.reached[bank] = xp.zeros(size, bool)
        if value.dtype != g.dtype or value.shape[1:] != g.shape[1:]:
            raise ValueError("a gradient's rows do not match its producers' outputs")
        xp = array_module(value)
        if at.__class__ is not slice and xp is not np:
            at = xp.asarray(at)
        if distinct:
            value[at] += g
        else:  # (an output read twice by one group: its rows add up)
            xp.add.at(value, at, g)
        self.reached[bank][at] = True

    def take(self, unit, members, pending, total, rule=None):
        """The stacked gradient of a group's outputs (None where none reached it) and the
        members it reached: the group's rows, with any gradient an op outside the groups sent
        a member (``pending``) added in; for a rule with ``parts`` (a traced call's results,
        views of its output), the gradients its members' parts received, added where each
        part lies in the row."""
        (bank, first), ids = self.place[unit], self.outputs[unit]
        size = len(ids)
        value = reached = None
        if self.banks[bank] is not None:
            reached = self.reached[bank][first : first + size]
            if reached.all():  # (a copy: the bank is not handed on, nor kept alive by a view)
                value, reached = self.banks[bank][first : first + size].copy(), None
            elif reached.any():
                value, reached = self.banks[bank][first : first + size].copy(), reached.copy()
            else:
                reached = None
        extra = []
        sent = pending.keys() & ids  # (usually none: an op outside the groups sent them)
        if sent:
            for row, key in enumerate(ids):
                if key in sent:
                    extra.append((row, None, total(pending.pop(key))._value))
        if getattr(rule, "parts", False):
            spans = rule.part_spans(members[0])
            for row, op in enumerate(members):
                for var, span in zip(op.results[1], spans):
                    item = pending.pop(id(var), None)
                    if item is not None:
                        extra.append((row, span, total(item)._value.reshape(-1)))
        if value is None and not extra:
            return None, ()
        if value is None:
            shape, dtype = members[0].results[0].shape, members[0].results[0].dtype
            xp = array_module(extra[0][2])
            value = xp.zeros((len(members), *shape), dtype)
            reached = xp.zeros(len(members), bool)
        for row, span, g in extra:
            if span is None:
                value[row] += g
            else:
                value[row, span] += g
            if reached is not None:
                reached[row] = True
        if reached is None or reached.all():
            return value, members
        (rows,) = reached.nonzero()
        return value[rows], [members[row] for row in rows.tolist()]


def _group(active, gout, rule, facts, pending, rows, backward, counts, flows):
    """A group's members that a gradient reached (``active``; ``gout``: their output
    gradients, stacked), differentiated together where the rule reads as one op (else one by
    one, as ``_one``); returns them. ``facts``: the forward's (output ids, operands, result,
    what the rule kept, the members' inputs) of the group when every member is active;
    ``counts``: per op type, the groups and members differentiated as one so far."""
    if _together(rule, active) and active[0].defn.grad_maker is not None:
        shares = _as_one(active, gout, rule, rows, flows, facts)
        if shares is not None:
            for g, var in shares:
                backward._accumulate(g, var, pending)
            tally = counts.setdefault(active[0].defn.type, [0, 0])
            tally[0] += 1
            tally[1] += len(active)
            return active
    for op, g in zip(active, gout):
        if op.defn.grad_maker is not None:
            backward._run_grad_maker(op, [Variable._make(g, g.shape, g.dtype, False)], pending)
    return active


def _as_one(active, gout_value, rule, rows, flows, facts):
    """[(gradient, input Variable)] of the members ``active`` (their output gradients stacked:
    ``gout_value``) from one run of the op's gradient maker over their stacked operands, the
    rows for other groups' members added to ``flows``; None where the rule does not read as
    one op or a gradient does not come back in the stacked shape (nothing added then)."""
    from tape.backward import GradContext

    first = active[0]
    defn, attrs, n = first.defn, first.attrs, len(active)
    listed = first.args[0].__class__ is list
    entries = first.args[0] if listed else first.args
    each = [not shared(var) for var in entries]
    shapes = [tuple(var.shape) for var in entries]
    out_shape = tuple(first.results[0].shape)
    form = rule.as_op(attrs, shapes, each, n, out_shape)
    if form is None:
        return None
    attrs, slots, stacked_shapes, stacked_out = form
    xp = array_module(gout_value)
    inputs_of = None if facts is None else facts[4]  # (the members' inputs: the forward's)
    if inputs_of is None:
        members_of = [op.args[0] for op in active] if listed else [op.args for op in active]
        inputs_of = [
            [args[slot] for args in members_of] if per else None for slot, per in enumerate(each)
        ]
    wants = [
        any(map(_REQUIRES_GRAD, inputs)) if per else var.requires_grad
        for var, per, inputs in zip(entries, each, inputs_of)
    ]
    unread = ()
    if facts is not None and facts[3] is not None:  # (what the forward kept for it)
        attrs = rule.with_saved(attrs, facts[3])
        # (operands whose gradient reads only what the forward kept are not gathered again)
        unread = rule.unread(attrs, tuple(j for j, w in enumerate(wants) if w))
    stacked = []  # per slot of the member op: a Variable (stacked or shared)
    for slot, var in enumerate(entries):
        if not each[slot]:
            stacked.append(var)
            continue
        inputs, shape = inputs_of[slot], (n,) + shapes[slot]
        value = None if facts is None else facts[1][slot]  # (the operand the forward read)
        if value is None and slot in unread:  # (its shape only: no memory)
            value = _stand_in(xp, shape, var.dtype)
        elif value is None:
            values = [v._value for v in inputs]
            value = None if any(v is None for v in values) else gather(values, rows, xp)
        stacked.append(Variable._make(value, shape, var.dtype, wants[slot]))
    if listed:
        shaped = [[_reshaped(v, s) for v, s in zip(stacked, stacked_shapes[0])]]
    else:
        shaped = [
            stacked[member_slot]
            if stacked_shapes[k] is None
            else _reshaped(stacked[member_slot], stacked_shapes[k])
            for k, member_slot in enumerate(slots)
        ]
    gout_value = gout_value.reshape(stacked_out)
    differentiate = getattr(rule, "differentiate", None)
    if differentiate is not None:  # (the rule runs the group's gradient itself: a call's)
        grads = differentiate(xp, attrs, shaped, gout_value)
    else:
        if facts is not None:
            out_value = facts[2]
        else:
            outs = [op.results[0]._value for op in active]
            out_value = None if any(v is None for v in outs) else gather(outs, rows, xp)
        dtype = first.results[0].dtype
        out = _reshaped(Variable._make(out_value, (n,) + out_shape, dtype, True), stacked_out)
        gout = Variable._make(gout_value, stacked_out, gout_value.dtype, False)
        group = _Group(defn, shaped, (out,), attrs)
        grads = defn.grad_maker(GradContext(group, [gout]))
    shares, stacked_grads = [], []  # (checked first: nothing is added where one does not fit)
    if listed:
        for slot, g in enumerate(grads[0] if grads[0] is not None else ()):
            if g is None:
                continue
            if not _fits(g, shaped[0][slot]):
                return None
            if each[slot]:
                stacked_grads.append((g, stacked[slot], inputs_of[slot]))
            elif entries[slot].requires_grad:  # (a parameter every member reads: its total)
                shares.append((g, entries[slot]))
    else:
        for k, g in enumerate(grads):
            if g is None:
                continue
            member_slot = slots[k]
            if not each[member_slot]:
                var = entries[member_slot]
                if not var.requires_grad:
                    continue
                if g.shape != var.shape or g.dtype != var.dtype:
                    return None
                shares.append((g, var))
            else:
                if not _fits(g, shaped[k]):
                    return None
                stacked_grads.append((g, stacked[member_slot], inputs_of[member_slot]))
    for g, operand, inputs in stacked_grads:
        _add_rows(g._value.reshape(operand.shape), inputs, shares, flows)
    return shares


_ZEROS = np.zeros(2)  # (16 bytes: one element of any dtype, for _stand_in; read-only, so
_ZEROS.flags.writeable = False  # every array on them is too)


def _stand_in(xp, shape, dtype):
    """An array of ``shape`` and ``dtype`` that uses no memory (every element the same zero
    bytes): an operand nothing will read. ``np.broadcast_to`` took ~6 us a call."""
    if xp is np and dtype.itemsize <= _ZEROS.nbytes:
        return np.ndarray(shape, dtype, buffer=_ZEROS, strides=(0,) * len(shape))
    return xp.broadcast_to(xp.zeros((), dtype), shape)


def _reshaped(var, shape):
    """``var`` (a Variable whose value may be absent) described with ``shape``."""
    if tuple(var.shape) == tuple(shape):
        return var
    value = None if var._value is None else var._value.reshape(shape)
    return Variable._make(value, tuple(shape), var.dtype, var.requires_grad)


def _fits(g, operand):
    """Whether the gradient ``g`` of a group's ``operand`` has its shape and dtype."""
    return g._value is not None and g.shape == operand.shape and g.dtype == operand.dtype


def _add_rows(rows, inputs, shares, flows):
    """Row i of ``rows`` (a group operand's gradient, stacked) is the gradient of
    ``inputs[i]``: added to the group that computed it (``flows``), else a Variable of its own
    in ``shares`` where the input needs a gradient."""
    others = flows.add(rows, inputs)
    for position in others:
        var = inputs[position]
        if var.requires_grad:
            row = rows[position, ...] if rows.ndim == 1 else rows[position]
            shares.append((Variable._make(row, row.shape, row.dtype, False), var))


__all__ = ["gradients"]
