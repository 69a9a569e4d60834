"""Lazy backward replay: the gradient ops a lazy backward records, learnt once per tape structure.

A training loop records the same forward every step, so its lazy backward asks the same gradient
makers for the same gradient ops every step. A structure's second numbered backward runs the
makers (``tape.backward``'s reverse scan) and keeps what they recorded as a ``Template``: per
gradient op its definition, attributes and the slots it reads and writes in the tape's numbering
(``tape.structure``), that numbering's extension for these ops, the forward variables the scan
released, and which slot holds each leaf's gradient. (The first does not learn: a graph that
follows the data may never repeat, and learning costs about what the scan does; on a global tape
it runs the forward and differentiates the eager way, ``tape.backward._after_forward``. There a
tape is numbered only once its ``sketch`` was seen: a global tape's structure is learnt on its
third sighting.) A later backward over a tape of the same structure -- the numbering's op forms
and variable descriptions, every variable's requires_grad, leaf and released flags, the loss,
``retain_graph`` and the array module -- appends the same ops with new output Variables and
extends the numbering in bulk: no maker, no shape inference and no per-op numbering.

This relies on the registry's rule that gradient makers build gradients from registered ops
only, so what they record depends on the structure alone; constants they make (of shapes and
attributes, e.g. ``1 / n`` for a mean) are kept in the template and read again. A template
also keeps the gradient makers it was learnt from, and is learnt anew if one was replaced. A
backward that runs the tape meanwhile (a maker asking for a value) is not learnt; a seed
gradient, ``create_graph`` and ``tape.grad``'s wanted inputs always scan.
"""

from __future__ import annotations

import operator
import weakref

from tape import eager_speculation, step_program, tier_choice
from tape.errors import user_location
from tape.op_handle import OpHandle
from tape.remembered import Remembered
from tape.step_identity import Recipe
from tape.structure import numbered
from tape.trace import module_of
from tape.variable import Variable

_TEMPLATES = Remembered(64)  # templates kept (least recently used dropped): a few models' steps
# Structures whose backward ran once, without learning: a template is learnt on a structure's
# second sighting, as plans are compiled (``tape.lazy``). Learning costs about as much as the
# scan itself (~20% of a first-sighting step of a per-example tree model), wasted on a graph
# that follows the data and never repeats.
_SEEN = Remembered(256)


def forget():
    """Forgets every structure seen and template learnt (tests and benchmarks start afresh; a
    streak of new structures, ``tape.eager_speculation``, stays: forgetting makes more)."""
    _TEMPLATES.clear()
    _SEEN.clear()
    step_program.forget()
    tier_choice.reset()


class Template:
    """What one lazy backward recorded, in the numbering's slots (see the module docstring).

    ``ops`` holds ``(defn, attrs, ins, outs, constants, fetch)`` per gradient op: an entry per
    slot (a slot, a tuple of slots, or None), the constants it numbers first, and for an op
    with one output and plain inputs an itemgetter of its inputs. ``news`` describes each new
    variable in slot order: the constant itself, or an output's (shape, dtype, requires_grad).
    ``op_ids``, ``outs``, ``sig_ids``, ``where`` (None: a weak reference to the new variable),
    ``ref_deltas`` ((slot, count) references added to older variables) and ``new_refs`` extend
    the numbering; ``released`` lists the slots the scan marked released, ``leaves`` the
    (leaf slot, gradient slot) pairs in the scan's order and ``makers`` the (definition,
    gradient maker) pairs of the forward ops.
    """

    __slots__ = (
        "ops",
        "news",
        "op_ids",
        "outs",
        "sig_ids",
        "where",
        "ref_deltas",
        "new_refs",
        "released",
        "leaves",
        "makers",
        "program",
    )


def gradients(tape, loss, retain_graph, scan, fresh=None):
    """The leaf gradients ``{id: (leaf, gradient)}`` of a lazy backward of ``loss`` on ``tape``:
    replayed from a template, or recorded by ``scan()`` (the reverse scan) and learnt; for a
    structure never seen before, ``fresh()`` when given (``tape.backward``: the forward runs
    and the gradients are computed at once, as nothing will be cached).

    With ``fresh``, a tape whose ``tier_choice.sketch`` was never seen is such a structure: it
    is not numbered (~1.4 us per op, a sixth of an eager step of small ops). A known sketch may
    still be a new structure (the same ops wired differently): then the numbering decides, and a
    structure is learnt from its third sighting instead of its second. A known structure also
    runs ``fresh()`` where that measured faster than its compiled plan (``tape.tier_choice``).
    A known structure's step in a ``tape.lazy()`` block runs whole, forward and backward as one
    plan, once that plan is learnt (``tape.step_program``): no gradient op is recorded."""
    if fresh is not None:
        sketched = tier_choice.sketch(tape, loss, retain_graph)
        new = not tier_choice.known(sketched)
        if not new:
            eager_speculation.lazy_step(False)
        if tape.traced_calls:
            # (tape.traced calls: the backward batches as the forward did, at once; a recorded
            # backward would differentiate each call alone, a parameter's gradient per member)
            return _the_eager_way(tape, fresh, sketched, new)
        if tier_choice.eager_way(sketched, len(tape._ops)):
            if new:
                return _the_eager_way(tape, fresh, sketched, new)
            with tier_choice.warm_eager_way():  # (a measured tier: its run is warm work)
                return _the_eager_way(tape, fresh, sketched, new)
        if not new:
            leaves = step_program.run_known(tape, loss, sketched, retain_graph)
            if leaves is not None:
                return leaves
    else:
        sketched = None
    numbering, variables, _ = numbered(tape)
    slot = numbering.index.get(id(loss))
    if slot is None:  # not on this tape: the scan reports it
        return scan()
    key = structural_key(numbering, variables, slot, retain_graph)
    template = _TEMPLATES.get_recent(key)
    if template is not None and all(defn.grad_maker is maker for defn, maker in template.makers):
        whole = step_program.usable(tape, retain_graph)
        if whole and template.program:
            leaves = step_program.run(tape, numbering.refs, variables, template)
            if leaves is not None:
                return leaves
        first_op = len(tape._ops)
        learning = whole and template.program is None
        recipe = Recipe.learn(tape._ops, numbering, variables, slot) if learning else None
        leaves = _replay(tape, numbering, variables, template)
        if learning:
            step_program.learn(tape, template, leaves, len(variables), first_op, recipe, sketched)
        return leaves
    tier_choice.cold()  # (unless replayed: a first sighting of this key, or learning it)
    if not _SEEN.seen_before(key):
        return scan() if fresh is None else _the_eager_way(tape, fresh, sketched)
    before = (len(tape._ops), len(tape._pending_ops), list(numbering.refs))
    leaves = scan()
    template = _learn(tape, numbering, variables, before, leaves)
    if template is not None:
        _TEMPLATES.put(key, template)
    return leaves


def structural_key(numbering, variables, loss, retain_graph):
    """The key of a lazy backward's template: the tape's numbering and variables (in its
    order), every variable's flags, the loss's slot, ``retain_graph`` and the array module."""
    flags = bytes([v.requires_grad + 2 * v._leaf + 4 * v._released for v in variables])
    return (
        tuple(numbering.op_ids),
        tuple(numbering.sig_ids),
        flags,
        loss,
        bool(retain_graph),
        module_of(variables),
    )


def _the_eager_way(tape, fresh, sketched, new=False):
    """``fresh()``'s gradients, the step's sketch noted for ``tape.explain`` and, for a ``new``
    structure, for ``tape.eager_speculation``."""
    leaves = fresh()
    tape._eager_way = sketched
    if new:
        eager_speculation.lazy_step(tape._unbatched_forward)
    return leaves


def _replay(tape, numbering, variables, template):
    """Appends the template's gradient ops to ``tape`` (pending) and to its numbering."""
    ops, location = tape._ops, user_location()
    slots, first_new, start = list(variables), len(variables), len(ops)
    append, news = slots.append, iter(template.news)
    for defn, attrs, ins, outs, consts, fetch in template.ops:
        if fetch is not None:  # one new output, one variable per input: the common case
            append_fetched(ops, defn, attrs, fetch, slots, next(news), location, tape)
        else:
            for const in consts:
                append(const)
                next(news)
            args = tuple([_entry(slots, entry) for entry in ins])
            results = tuple([_new(slots, entry, news, tape) for entry in outs])
            ops.append(OpHandle(defn, args, results, attrs, location, len(ops)))
    tape._pending_ops += ops[start:]
    numbering.append(template, slots[first_new:], ops[start:])
    for slot in template.released:
        variables[slot]._released = True
    return {id(slots[leaf]): (slots[leaf], slots[grad]) for leaf, grad in template.leaves}


def append_fetched(ops, defn, attrs, fetch, slots, desc, location, tape):
    """Appends to ``ops`` an op of one new pending output described by ``desc`` (shape, dtype,
    requires_grad) whose inputs ``fetch(slots)`` gives; the output joins ``slots``. The common
    case of replaying recorded gradient ops (here and ``tape.grad_memo``)."""
    var = Variable._make(None, *desc)
    var._pending = tape
    args = fetch(slots)
    slots.append(var)
    ops.append(
        OpHandle(
            defn, args if args.__class__ is tuple else (args,), (var,), attrs, location, len(ops)
        )
    )


def _entry(slots, entry):
    if entry is None or entry.__class__ is int:
        return entry if entry is None else slots[entry]
    return [slots[s] for s in entry]


def _new(slots, entry, descs, tape):
    """New pending output Variables for an output entry (appended to ``slots`` in order)."""
    if entry is None:
        return None
    if entry.__class__ is tuple:
        return [_new(slots, s, descs, tape) for s in entry]
    shape, dtype, requires_grad = next(descs)
    var = Variable._make(None, shape, dtype, requires_grad)
    var._pending = tape
    slots.append(var)
    return var


def _learn(tape, numbering, variables, before, leaves):
    """The template of the gradient ops ``scan`` just appended, or None if it cannot replay
    them (a run happened, or a maker read a variable that is neither the tape's, nor an
    earlier gradient op's output, nor a constant)."""
    first_op, first_pending, refs = before
    ops = tape._ops
    if (
        tape._structure is not numbering
        or numbering.scanned != first_op
        or tape._pending_ops[first_pending:] != ops[first_op:]
    ):
        return None
    numbering.extend()
    index, first_new = numbering.index, len(variables)
    template, news = Template(), []
    template.ops, template.program = [], None
    for op in ops[first_op:]:
        ins = tuple(_slots(index, entry) for entry in op.args)
        consts = list(_new_inputs(op, ins, first_new + len(news)))
        if None in consts:
            return None
        news += consts
        outs = tuple(_slots(index, entry) for entry in op.results)
        if not _outputs_new(outs, first_new + len(news)):
            return None
        news += [(v.shape, v.dtype, v.requires_grad) for v in op.output_vars()]
        fast = (
            not consts
            and outs[0].__class__ is int
            and len(outs) == 1
            and ins
            and all(s.__class__ is int for s in ins)
        )
        template.ops.append(
            (
                op.defn,
                op.attrs,
                ins,
                outs,
                tuple(consts),
                operator.itemgetter(*ins) if fast else None,
            )
        )
    if len(numbering.where) != first_new + len(news):
        return None
    template.news = news
    _numbering_extension(template, numbering, first_op, first_new, refs)
    template.released = [s for s, var in enumerate(variables) if var._released]
    template.makers = tuple(
        {op.defn: op.defn.grad_maker for op in ops[:first_op] if op is not None}.items()
    )
    template.leaves = [(index[id(var)], index[id(grad)]) for var, grad in leaves.values()]
    return template


def _new_inputs(op, ins, next_slot):
    """The Variables an op's inputs number first (in slot order): constants a maker made (held
    by the template and read again by every replay), or None for anything else."""
    for var, slot in zip(op.input_vars(), _flat(ins), strict=True):
        if slot >= next_slot:
            if slot != next_slot:
                yield None
                return
            constant = (
                var._leaf
                and not var.requires_grad
                and var._value is not None
                and var._pending is None
            )
            yield var if constant else None
            next_slot += 1


def _numbering_extension(template, numbering, first_op, first_new, refs):
    """What numbering the gradient ops added: their op forms, output slots, new variables'
    descriptions and origins (None: a weak reference), and reference counts."""
    template.op_ids, template.outs = numbering.op_ids[first_op:], numbering.outs[first_op:]
    template.sig_ids = numbering.sig_ids[first_new:]
    template.where = [
        None if w.__class__ is weakref.ref else w for w in numbering.where[first_new:]
    ]
    template.ref_deltas = [
        (s, numbering.refs[s] - count) for s, count in enumerate(refs) if numbering.refs[s] != count
    ]
    template.new_refs = numbering.refs[first_new:]


def _slots(index, entry):
    if entry is None:
        return None
    if entry.__class__ is list:
        return tuple(index[id(v)] for v in entry)
    return index[id(entry)]


def _flat(entries):
    for entry in entries:
        if entry.__class__ is tuple:
            yield from entry
        elif entry is not None:
            yield entry


def _outputs_new(outs, next_slot):
    """Whether an op's outputs are the next new slots in order (each written once)."""
    for slot in _flat(outs):
        if slot != next_slot:
            return False
        next_slot += 1
    return True


__all__ = ["gradients", "structural_key", "Template"]
