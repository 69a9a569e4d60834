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

Between groups the gradients flow stacked: a group's members' output gradients are the rows of
one array (``_Flow``), and a consumer group adds the rows of its operand's gradient into its
producer group's array in one call where they are consecutive rows of it (as the forward's
gather read them), else by index; a member gets a Variable of its own only where an op
outside the groups reads it. So the per-member work is a lookup or two, not a Variable, a
pending entry and an add per member (the Tree-LSTM's backward: 51k members in 248 groups).

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
        (tuple(ops[p] for p in group), rule, facts)
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
                    if _one(op, pending, backward):
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


def _one(op, pending, backward):
    """One op differentiated as ``tape.backward``'s scan does; whether a gradient reached it."""
    defn = op.defn
    if defn.inplace and defn.grad_maker is None:
        return False
    results = op.results
    if len(results) == 1 and results[0].__class__ is Variable:
        item = pending.pop(id(results[0]), None)
        if item is None:
            return False
        gouts = [backward._total(item)]
    else:
        gouts, taken = backward._take_output_grads(op, pending, None)
        if not taken:
            return False
    if defn.grad_maker is not None:
        backward._run_grad_maker(op, gouts, pending)
    return True


_REQUIRES_GRAD = operator.attrgetter("requires_grad")


class _Flows:
    """The gradients reaching the groups' members, stacked per group (see the module docstring):
    ``unit_of[id(output)]`` is the group of a member of a group differentiated as one (by its
    one output) and ``row_of[id(output)]`` its row there, ``outputs[group]`` the ids of its
    members' outputs in row order, ``value[group]`` the rows added so far (None until one is)
    and ``reached[group]`` which rows a gradient reached (None: every row)."""

    __slots__ = ("unit_of", "row_of", "outputs", "value", "reached")

    def __init__(self, units):
        self.unit_of, self.row_of, self.outputs, self.value, self.reached = {}, {}, {}, {}, {}
        for unit, (members, rule, facts) in enumerate(units):
            if _together(rule, members):
                ids = facts[0] if facts else [id(op.results[0]) for op in members]
                self.outputs[unit] = ids
                self.unit_of.update(zip(ids, repeat(unit)))
                self.row_of.update(zip(ids, range(len(ids))))

    def add(self, g, inputs):
        """Adds the rows of ``g`` (one per Variable of ``inputs``) to the groups whose members
        computed them; returns the positions of the inputs that no group computed."""
        keys = list(map(id, inputs))
        units = list(map(self.unit_of.get, keys))
        unit, count = units[0], len(keys)
        if (
            unit is not None and units.count(unit) == count and all(map(_REQUIRES_GRAD, inputs))
        ):  # (every row for one group: one add)
            row_of = self.row_of
            row = row_of[keys[0]]
            if self.outputs[unit][row : row + count] == keys:  # (consecutive, as often read)
                self._add(unit, slice(row, row + count), g, count)
            else:
                self._add(unit, list(map(row_of.__getitem__, keys)), g, count)
            return ()
        by_unit, others, row_of = {}, [], self.row_of
        for position, (key, unit) in enumerate(zip(keys, units)):
            if unit is None or not inputs[position].requires_grad:
                others.append(position)
                continue
            entry = by_unit.get(unit)
            if entry is None:
                entry = by_unit[unit] = ([], [])
            entry[0].append(position)
            entry[1].append(row_of[key])
        for unit, (positions, at) in by_unit.items():
            self._add(unit, at, g[positions], len(positions))
        return others

    def _add(self, unit, at, g, count):
        value = self.value.get(unit)
        if value is None:
            size = len(self.outputs[unit])
            if at.__class__ is slice and at.stop - at.start == size:
                self.value[unit] = g.copy()  # (a copy: ``g`` may be another gradient's too)
                self.reached[unit] = None  # (every row)
                return
            xp = array_module(g)
            value = self.value[unit] = xp.zeros((size,) + g.shape[1:], g.dtype)
            self.reached[unit] = xp.zeros(size, bool)
        elif value.dtype != g.dtype or value.shape[1:] != g.shape[1:]:
            raise ValueError("a gradient's rows do not match its producers' outputs")
        if at.__class__ is slice or len(set(at)) == count:
            value[at] += g
        else:  # (an output read twice by one group: its rows add up)
            array_module(value).add.at(value, at, g)
        reached = self.reached[unit]
        if reached is not None:
            reached[at] = True

    def take(self, unit, members, pending, total, rule=None):
        """The stacked gradient of a group's outputs (None where none reached it) and the
        members it reached: the group's rows, with any gradient an op outside the groups sent
        a member (``pending``) added in; for a rule with ``parts`` (a traced call's results,
        views of its output), the gradients its members' parts received, added where each
        part lies in the row."""
        value, reached = self.value.pop(unit, None), self.reached.pop(unit, None)
        extra = []
        ids = self.outputs[unit]
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
    one, as ``_one``); returns them. ``facts``: the forward's (output ids, operands, result)
    of the group when every member is active; ``counts``: per op type, the groups and members
    differentiated as one so far."""
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
