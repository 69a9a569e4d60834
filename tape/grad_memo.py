"""Gradient makers remembered per op form: a lazy backward of a graph that changes every step
asks each maker once per form, not once per op.

Makers build their gradients from registered ops and from the shapes, dtypes and flags of what
they are given (the registry's rule, which ``tape.replay`` relies on too), so two ops of one
*form* -- definition and gradient maker, attribute values, per input, output and output
gradient its shape, dtype and flags, which of them are one and the same Variable, and the
current place's array module (where the maker's constants are made) -- get the
same gradient ops, wired the same way. ``tape.replay`` replays a whole backward when the whole
tape repeats; a graph that follows the data (a tree, a sentence) repeats only op by op: the same
layer at every node. So a lazy backward keeps, per form seen twice, what its maker recorded (a
``Recipe``) and from the third sighting on appends those ops directly: new pending Variables
and OpHandles, with no maker call, shape inference or attribute check.

A recipe names each Variable its ops read by its place in ``env``: the forward op's inputs,
outputs and output gradients, flattened in slot order (None for an absent entry), then the
constants the maker made (leaves with a value that no op of the tape reads: kept and read again
by every replay, as ``tape.replay`` keeps them), then the recipe's own outputs in order. A maker
that reads any other Variable, or a backward that runs the tape meanwhile, is not remembered.
At most ``LIMIT`` recipes are kept, least recently used dropped.
"""

from __future__ import annotations

import operator

from ops.xp import default_module
from tape.op_handle import OpHandle
from tape.remembered import Remembered
from tape.replay import _entry, append_fetched
from tape.variable import Variable

LIMIT = 4096
_RECIPES = Remembered(LIMIT)
_SEEN = Remembered(LIMIT)  # forms seen once (not learnt)


class Recipe:
    """What a maker recorded for one form: ``ops`` as (definition, attributes, input places,
    outputs, a getter of the inputs from ``env`` for an op of one output and Variables in, else
    None) -- a place is an index into ``env`` (a tuple of them for a list entry, None for an
    absent one), an output None or (False, (shape, dtype, requires_grad)) or, for a list, (True,
    a tuple of those) -- ``consts`` the Variables the maker made, and ``returns`` the type of
    sequence the maker returned with the place of each gradient in it (None where it gave
    none)."""

    __slots__ = ("ops", "consts", "returns")


def _flat(entries, into):
    for entry in entries:
        if entry.__class__ is list:
            into.extend(entry)
        else:
            into.append(entry)
    return into


def _layout(entries):
    return tuple(len(e) if e.__class__ is list else e is None for e in entries)


def form(op, gouts):
    """The key of ``op``'s form with output gradients ``gouts`` (None: it has none: the
    attributes are not hashable), and the flat ``env`` head it names Variables by."""
    defn, args, results = op.defn, op.args, op.results
    if defn.fast:  # one output, one Variable per input: the common case
        env = [*args, results[0], *gouts]
        layout = len(gouts)
    else:
        env = _flat(gouts, _flat(results, _flat(args, [])))
        layout = (_layout(args), _layout(results), _layout(gouts))
    descs, ids = [], []
    for var in env:
        if var is None:
            descs.append(None)
            ids.append(None)
        else:
            descs.append((var.shape, var.dtype, var.requires_grad, var._leaf, var.persistable))
            ids.append(id(var))
    aliases = None if len(set(ids)) == len(ids) else tuple(map(ids.index, ids))
    # (and the current place's array module: a maker's constants for a lazy Variable are made
    # there, so a recipe learnt on the CPU, or another device, must not replay them here)
    place = default_module()
    key = (defn, defn.grad_maker, tuple(op.attrs.values()), layout, tuple(descs), aliases, place)
    try:
        hash(key)
    except TypeError:  # an attribute holding a list or an array
        return None, env
    return key, env


def make(op, gouts, tape, run_maker):
    """The gradients of ``op`` (per input slot), recorded lazily on ``tape``: replayed from
    the recipe of its form, or made by ``run_maker()`` and, on a form's second sighting,
    learnt."""
    key, env = form(op, gouts)
    if key is None:
        return run_maker()
    recipe = _RECIPES.get_recent(key)
    if recipe is not None:
        return _replay(recipe, env, tape)
    if not _SEEN.seen_before(key):
        return run_maker()
    ops, pending = tape._ops, tape._pending_ops
    first_op, first_pending = len(ops), len(pending)
    gins = run_maker()
    recorded = ops[first_op:]
    if pending[first_pending:] == recorded:  # (else a run happened meanwhile)
        recipe = _learn(recorded, env, gins, tape)
        if recipe is not None:
            _RECIPES.put(key, recipe)
    return gins


def _learn(recorded, env, gins, tape):
    known = {}
    for position, var in enumerate(env):
        if var is not None:
            known.setdefault(id(var), position)
    numbering = getattr(tape, "_structure", None)
    tape_vars = numbering.index if numbering is not None else None
    produced = {id(v) for op in recorded for v in op.output_vars()}
    consts = []
    for op in recorded:  # the maker's constants: first, in order of first reading
        for var in op.input_vars():
            if id(var) in known or id(var) in produced:
                continue
            if tape_vars is None or id(var) in tape_vars or not _constant(var):
                return None  # a Variable of the tape its op does not name, or no constant
            known[id(var)] = len(env) + len(consts)
            consts.append(var)
    recipe = Recipe()
    recipe.ops, recipe.consts = [], tuple(consts)
    size = len(env) + len(consts)
    for op in recorded:
        ins = tuple(_places(entry, known) for entry in op.args)
        outs = []
        for entry in op.results:
            if entry is None:
                outs.append(None)
                continue
            for var in entry if entry.__class__ is list else (entry,):
                if id(var) in known:
                    return None  # an output written twice, or in place
                known[id(var)] = size
                size += 1
            outs.append(_description(entry))
        fetch = None
        if len(outs) == 1 and outs[0] is not None and not outs[0][0] and ins:
            if all(p.__class__ is int for p in ins):  # one output, Variables in: fetch them
                fetch = operator.itemgetter(*ins)
        recipe.ops.append((op.defn, op.attrs, ins, tuple(outs), fetch))
    returns = []
    for g in gins if gins.__class__ in (list, tuple) else ():
        place = _places(g, known) if g is not None else None
        if g is not None and (place is None or (place.__class__ is tuple and None in place)):
            return None
        returns.append(place)
    if gins.__class__ not in (list, tuple):
        return None
    recipe.returns = (gins.__class__, tuple(returns))
    return recipe


def _constant(var):
    return var._leaf and not var.requires_grad and var._value is not None and var._pending is None


def _places(entry, known):
    if entry is None:
        return None
    if entry.__class__ is list:
        return tuple(known.get(id(v)) for v in entry)
    return known.get(id(entry))


def _description(entry):
    """(True, descriptions) for a list of outputs, (False, description) for one."""
    if entry.__class__ is list:
        return True, tuple((v.shape, v.dtype, v.requires_grad) for v in entry)
    return False, (entry.shape, entry.dtype, entry.requires_grad)


def _replay(recipe, env, tape):
    """Appends the recipe's ops to ``tape`` (pending) and returns the gradients they make."""
    from tape.tape import state

    env += recipe.consts
    ops, location, make_var, start = tape._ops, state.location, Variable._make, len(tape._ops)
    for defn, attrs, ins, outs, fetch in recipe.ops:
        if fetch is not None:  # the common case, kept short
            append_fetched(ops, defn, attrs, fetch, env, outs[0][1], location, tape)
            continue
        args = tuple([_entry(env, p) for p in ins])
        results = []
        for out in outs:
            if out is None:
                results.append(None)
                continue
            many, desc = out
            if many:
                entry = []
                for shape, dtype, requires_grad in desc:
                    var = make_var(None, shape, dtype, requires_grad)
                    var._pending = tape
                    env.append(var)
                    entry.append(var)
                results.append(entry)
            else:
                var = make_var(None, *desc)
                var._pending = tape
                env.append(var)
                results.append(var)
        ops.append(OpHandle(defn, args, tuple(results), attrs, location, len(ops)))
    tape._pending_ops += ops[start:]
    kind, returns = recipe.returns
    return kind(_entry(env, p) for p in returns)


def clear():
    """Forgets every recipe (and every form seen once)."""
    _RECIPES.clear()
    _SEEN.clear()


__all__ = ["make", "form", "clear", "Recipe", "LIMIT"]
