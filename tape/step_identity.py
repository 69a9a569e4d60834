"""A known step recognised by identity: its forward checked against a recipe, not numbered.

A lazy step whose plan runs whole (``tape.step_program``) is found by its structural key: the
tape's numbering (``tape.structure``: ~1.2 us per op, a sixth of an eager step of small ops)
with every variable's flags, hashed. Yet a training loop records the very same ops every step:
what the numbering would say can be checked instead of computed. A ``Recipe`` keeps what the
numbering of a learnt step said -- per op its definition, attributes and the slots its inputs
are in; per variable its shape, dtype and flags; the loss's slot -- and ``match`` checks a new
tape against it with comparisons of whole lists (every input by identity), a third of the
numbering's cost, giving the Variables in the numbering's order.

It is as strict as the key it stands in for. Equal definitions, attributes (compared as the
numbering's tuples compare them) and inputs by slot, a list input (``stack``, ``concat``,
``sum``) entry by entry and of the same length; every variable distinct, so each is first seen
where the numbering first saw it and every output of every op (an LSTM cell's two, softmax
cross-entropy's two) is new; equal shapes, dtypes, requires_grad, leaf, released and
persistable flags; the same loss slot and array module. A step with something the check does
not cover has no recipe and is numbered: an output that is a list (a dispensable or duplicable
one) or absent, an input that is absent or a tuple, a dropped op, attributes that are not
plain values, or two ops sharing one argument tuple (the numbering counts such a tuple's
references once, and those counts tell a variable the user holds from one only the tape
holds: a recipe keeps the counts of a tape without sharing, and ``match`` checks there is
none). Measured: the ``lstm`` and ``lstm_lm`` steps (LSTM cells, a stack, softmax
cross-entropy) had no recipe before lists and several outputs were covered, and their
numbering took 0.29-0.36 ms a step.
"""

from __future__ import annotations

import itertools
import operator
from sys import getrefcount

from tape.trace import module_of
from tape.variable import Variable

_PLAIN = (int, float, bool, str, bytes, type(None))
_LEAF = -1  # (a leaf's place in ``Recipe.learn``, until every output has its own)


class Recipe:
    """What the numbering of one step's forward said (see the module docstring): ``refs``, the
    references its ops hold to each slot's Variable (``tape.trace.held``'s counts)."""

    __slots__ = ("defns", "attrs", "arities", "shares", "leaf_at", "order", "inputs", "flags")
    __slots__ += ("shapes", "dtypes", "loss", "module", "refs", "outputs", "lists")

    @classmethod
    def learn(cls, ops, numbering, variables, loss):
        """The recipe of the forward ``ops`` (the whole tape), numbered by ``numbering``
        (``variables`` in its slot order) with the loss in slot ``loss``; None where the check
        would not cover it."""
        if len(variables) != len(numbering.where) or numbering.scanned != len(ops):
            return None
        if any(op is None or not _checkable(op) for op in ops):
            return None
        # Each argument tuple held by its op and the list: a tuple two ops share has more.
        shares = list(map(getrefcount, [op.args for op in ops]))
        if shares != [shares[0]] * len(ops):
            return None
        index, where = numbering.index, numbering.where
        recipe = cls()
        recipe.defns = [op.defn for op in ops]
        recipe.attrs = [op.attrs for op in ops]
        recipe.arities = [len(op.args) for op in ops]
        recipe.shares = shares
        # Ops with list inputs: (i, the positions of its lists, their lengths).
        recipe.lists = []
        for i, op in enumerate(ops):
            at = tuple(p for p, a in enumerate(op.args) if a.__class__ is list)
            if at:
                recipe.lists.append((i, at, [len(op.args[p]) for p in at]))
        inputs = _inputs(ops, recipe.lists)
        # Each op's outputs in tape order (``outputs``: None where every op has one), then the
        # leaves: where each slot's Variable is found is its place in that list; the k-th leaf
        # is input p of op i (leaf_at[k] = (i, p), lists counted entry by entry).
        counts = [len(op.results) for op in ops]
        recipe.outputs = counts if any(count != 1 for count in counts) else None
        order, leaf_at, leaf_slots, place = [None] * len(variables), [], [], 0
        for i, op in enumerate(ops):
            for p, arg in enumerate(inputs[i]):
                slot = index[id(arg)]
                if order[slot] is None and where[slot].__class__ is not int:
                    if where[slot].__class__ is tuple:  # (an output of an op not yet seen)
                        return None
                    leaf_at.append((i, p))
                    leaf_slots.append(slot)
                    order[slot] = _LEAF  # (placed after every output, below)
            for position, result in enumerate(op.results):
                slot = index[id(result)]
                if where[slot] != (i if len(op.results) == 1 else (i, position)):
                    return None  # (not a new output: an input updated in place)
                order[slot] = place
                place += 1
        if None in order:
            return None
        for k, slot in enumerate(leaf_slots):
            order[slot] = place + k
        recipe.leaf_at, recipe.order = leaf_at, operator.itemgetter(*order)
        recipe.inputs = operator.itemgetter(*[index[id(arg)] for args in inputs for arg in args])
        recipe.flags = _flags(variables)
        recipe.shapes = [v.shape for v in variables]
        recipe.dtypes = [v.dtype for v in variables]
        recipe.loss, recipe.module = loss, module_of(variables)
        recipe.refs = list(numbering.refs)
        return recipe

    def match(self, ops, loss):
        """The Variables of the tape of ``ops`` in the numbering's order, if it is the step
        this recipe was learnt from (else None)."""
        if len(ops) != len(self.defns):
            return None
        try:
            if [op.defn for op in ops] != self.defns or [op.attrs for op in ops] != self.attrs:
                return None
        except (AttributeError, TypeError, ValueError):  # (a dropped op; an odd attribute)
            return None
        args = [op.args for op in ops]
        if list(map(len, args)) != self.arities or list(map(getrefcount, args)) != self.shares:
            return None
        if self.lists:
            for i, lists, lengths in self.lists:
                given = args[i]
                if not all(given[p].__class__ is list for p in lists):
                    return None
                if [len(given[p]) for p in lists] != lengths:
                    return None
            args = _inputs(ops, self.lists)
        if self.outputs is None:
            found = [op.results[0] for op in ops]
        else:
            results = [op.results for op in ops]
            if list(map(len, results)) != self.outputs:
                return None
            found = list(itertools.chain.from_iterable(results))
            if not all(map(_is_variable, found)):  # (an output absent, or a list)
                return None
        found += [args[i][p] for i, p in self.leaf_at]
        variables = list(self.order(found)) if len(found) > 1 else found
        if len(set(variables)) != len(variables):  # (Variables hash by identity)
            return None
        expected = self.inputs(variables)
        if expected.__class__ is not tuple:
            expected = (expected,)
        if not all(map(operator.is_, itertools.chain.from_iterable(args), expected)):
            return None
        if (
            _flags(variables) != self.flags
            or [v.shape for v in variables] != self.shapes
            or [v.dtype for v in variables] != self.dtypes
            or variables[self.loss] is not loss
            or module_of(variables) is not self.module
        ):
            return None
        return variables


def _checkable(op):
    """Whether ``match`` covers op: Variable outputs, Variable or list-of-Variable inputs,
    plain attributes."""
    return (
        len(op.results) >= 1
        and all(result.__class__ is Variable for result in op.results)
        and all(
            arg.__class__ is Variable
            or (arg.__class__ is list and all(a.__class__ is Variable for a in arg))
            for arg in op.args
        )
        and all(_plain(value) for value in op.attrs.values())
    )


def _is_variable(value):
    return value.__class__ is Variable


def _inputs(ops, lists):
    """Per op, its inputs as one sequence: its argument tuple, the lists of the ops in
    ``lists`` (``Recipe.lists``) spelt out entry by entry."""
    inputs = [op.args for op in ops]
    for i, at, _ in lists:
        inputs[i] = tuple(v for p, a in enumerate(inputs[i]) for v in (a if p in at else (a,)))
    return inputs


def _plain(value):
    if value.__class__ in _PLAIN:
        return True
    if value.__class__ is tuple:
        return all(_plain(v) for v in value)
    return False


def _flags(variables):
    return bytes(
        [v.requires_grad + 2 * v._leaf + 4 * v._released + 8 * v.persistable for v in variables]
    )


__all__ = ["Recipe"]
