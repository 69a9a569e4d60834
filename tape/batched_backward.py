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
    autobatched run ``run`` (``(ops, groups, rules, rows)``: ``tape.interpret``), its gradient
    ops run at once; ``seed``: the loss's gradient. None if it could not (nothing changed)."""
    backward = importlib.import_module("tape.backward")  # (``tape.backward`` is the function)

    ops, groups, rules, rows = run
    in_run = {id(op) for op in ops}
    units = [(tuple(ops[p] for p in group), rule) for group, rule in zip(groups, rules)]
    units.reverse()
    units += [((op,), None) for op in reversed(tape._ops) if op and id(op) not in in_run]
    pending = {id(loss): [loss, seed]}
    reached, counts = [], {}  # (op type -> [groups differentiated as one, their members])
    try:
        for members, rule in units:
            if rule is None or len(members) < 2:
                for op in members:
                    if _one(op, pending, backward):
                        reached.append(op)
            else:
                reached += _group(members, rule, pending, rows, backward, counts)
        leaves = backward._leaves(pending, None)
    except Exception:  # (the op-by-op scan reports it, at the op and the user's line)
        return None
    ops = tape._ops
    for op in reached:  # (released and dropped, as the op-by-op scan drops them)
        results = op.results
        if len(results) == 1 and results[0].__class__ is Variable:
            results[0]._released = True
        else:
            for var in op.output_vars():
                var._released = True
        if op.index < len(ops) and ops[op.index] is op:
            ops[op.index] = None
    together = sum(members for _, members in counts.values())
    tape._batched_backward = (counts, len(reached) - together)  # (for tape.explain)
    tape._structure = None
    tape.compact(lambda op: True)
    if tape.steps_only:
        collector.step_ended()  # (the step's ops are gone: tape.collector)
    return leaves


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


def _group(members, rule, pending, rows, backward, counts):
    """A group's members that a gradient reached, differentiated together where the rule
    reads as one op (else one by one, as ``_one``); returns them. ``counts``: per op type,
    the groups and members differentiated as one so far."""
    active, gouts = [], []
    pop, total, pieces = pending.pop, backward._total, backward._Slices
    for op in members:
        item = pop(id(op.results[0]), None)
        if item is not None:
            active.append(op)
            g = item[1]  # (one gradient, as most are: no call to sum them)
            gouts.append(g if len(item) == 2 and g.__class__ is not pieces else total(item))
    if len(active) > 1 and active[0].defn.grad_maker is not None:
        shares = _as_one(active, gouts, rule, rows)
        if shares is not None:
            for g, var in shares:
                backward._accumulate(g, var, pending)
            tally = counts.setdefault(active[0].defn.type, [0, 0])
            tally[0] += 1
            tally[1] += len(active)
            return active
    for op, g in zip(active, gouts):
        if op.defn.grad_maker is not None:
            backward._run_grad_maker(op, [g], pending)
    return active


def _as_one(active, gouts, rule, rows):
    """[(gradient, input Variable)] of the members ``active`` (their output gradients
    ``gouts``) from one run of the op's gradient maker over their stacked operands; None where
    the rule does not read as one op or a gradient does not come back in the stacked shape."""
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
    xp = array_module(gouts[0]._value)
    members_of = [op.args[0] for op in active] if listed else [op.args for op in active]
    stacked = []  # per slot of the member op: a Variable (stacked or shared)
    for slot, var in enumerate(entries):
        if not each[slot]:
            stacked.append(var)
            continue
        values = [args[slot]._value for args in members_of]
        shape = (n,) + shapes[slot]
        value = None if any(v is None for v in values) else gather(values, rows, xp)
        wants = any(args[slot].requires_grad for args in members_of)
        stacked.append(Variable._make(value, shape, var.dtype, wants))
    if listed:
        shaped = [[_reshaped(v, s) for v, s in zip(stacked, stacked_shapes[0])]]
    else:
        shaped = [
            stacked[member_slot]
            if stacked_shapes[k] is None
            else _reshaped(stacked[member_slot], stacked_shapes[k])
            for k, member_slot in enumerate(slots)
        ]
    outs = [op.results[0]._value for op in active]
    out_value = None if any(v is None for v in outs) else gather(outs, rows, xp)
    dtype = first.results[0].dtype
    out = _reshaped(Variable._make(out_value, (n,) + out_shape, dtype, True), stacked_out)
    gout_value = xp.stack([g._value for g in gouts]).reshape(stacked_out)
    gout = Variable._make(gout_value, stacked_out, gout_value.dtype, False)
    group = _Group(defn, shaped, (out,), attrs)
    grads = defn.grad_maker(GradContext(group, [gout]))
    shares = []
    if listed:
        for slot, g in enumerate(grads[0] if grads[0] is not None else ()):
            if g is None:
                continue
            inputs = [args[slot] for args in members_of]
            if not _add_rows(g, shaped[0][slot], stacked[slot], inputs, shares):
                return None
        return shares
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
            inputs = [args[member_slot] for args in members_of]
            if not _add_rows(g, shaped[k], stacked[member_slot], inputs, shares):
                return None
    return shares


def _reshaped(var, shape):
    """``var`` (a Variable whose value may be absent) described with ``shape``."""
    if tuple(var.shape) == tuple(shape):
        return var
    value = None if var._value is None else var._value.reshape(shape)
    return Variable._make(value, tuple(shape), var.dtype, var.requires_grad)


def _add_rows(g, operand, stacked, inputs, shares):
    """Row i of the gradient ``g`` of the group's ``operand`` (the ``stacked`` members'
    inputs, reshaped) is the gradient of ``inputs[i]``; False where ``g`` does not have the
    operand's shape and dtype."""
    value = g._value
    if value is None or g.shape != operand.shape or g.dtype != operand.dtype:
        return False
    rows = value.reshape(stacked.shape)
    parts = [rows[i, ...] for i in range(len(inputs))] if rows.ndim == 1 else rows
    for row, var in zip(parts, inputs):
        if var.requires_grad:
            shares.append((Variable._make(row, row.shape, row.dtype, False), var))
    return True


__all__ = ["gradients"]
