"""Editing fused-kernel IR: building one ``Expression`` out of the steps of others.

The passes that work across fused groups (``tape/passes/rematerialise.py`` recomputes a
group's cheap value inside the groups reading it; ``tape/passes/sibling_fusion.py`` merges
independent groups into one kernel) both need the same three edits on ``Expression``\\s, which
this module provides as plain data operations:

- the *cone* of a step: the steps it depends on (``cone``), and how costly it is to recompute
  (``libm_steps``: the steps that call a transcendental function, or have no generated form);
- *building* an expression from steps of several others, addressed by variable name
  (``Builder``): each input is read once, a step identical to one already built (same op,
  attributes and arguments) is not built again (common subexpression elimination), and steps no
  output needs are dropped.

>>> import numpy as np
>>> from ops.fused_expression import Expression, Step
>>> def ex(steps, outputs):
...     return Expression(
...         inputs=(((4,), "float32"),), shape=(4,), steps=steps, outputs=outputs,
...         reductions=(), dtypes=("float32",) * len(outputs))
>>> tanh = Step("tanh", (), (("in", 0),), ("tanh", "t", None))
>>> a = ex((tanh, Step("neg", (), (("step", 0),), ("neg", "n", None))), (1,))
>>> b = ex((tanh, Step("exp", (), (("step", 0),), ("exp", "e", None))), (1,))
>>> built = Builder((4,))
>>> ra, rb = built.add(a, ["x"]), built.add(b, ["x"])
>>> merged, names = built.finish([ra[1], rb[1]], [], ("float32", "float32"))
>>> [s.op for s in merged.steps], names  # tanh once
(['tanh', 'neg', 'exp'], ['x'])
"""

from __future__ import annotations

import dataclasses

from ops.fused_expression import Expression, Step, flat_refs, is_ref


def cone(expression, step, limit=None):
    """The indices of the steps ``step``'s value depends on, itself included, in order (with
    ``limit``: stops once it has more than ``limit`` of them)."""
    needed, stack = {step}, [step]
    while stack and (limit is None or len(needed) <= limit):
        for kind, index in flat_refs(expression.steps[stack.pop()].args):
            if kind == "step" and index not in needed:
                needed.add(index)
                stack.append(index)
    return sorted(needed)


def cone_inputs(expression, steps):
    """The indices of the external inputs the given steps read."""
    return sorted(
        {
            index
            for j in steps
            for kind, index in flat_refs(expression.steps[j].args)
            if kind == "in"
        }
    )


def libm_steps(expression, steps):
    """How many of the given steps call a libm function (exp, tanh, log, ...: the generated
    backends' rule is not exact arithmetic) or have no generated form at all (they run as a
    numpy call): the expensive ones to compute twice."""
    from ops.fusion_backends.table import rule_for

    count = 0
    for j in steps:
        rule = rule_for(expression.steps[j])
        count += rule is None or not rule.exact
    return count


class Builder:
    """One expression over ``shape`` assembled from steps of others (see the module docstring).

    ``add`` copies steps of an expression whose inputs are the variables ``names``, returning a
    reference per step in the built expression; ``substitute`` replaces external inputs (by
    index) by references already built -- a value recomputed instead of read. ``finish`` makes
    the Expression from the references to materialise and to reduce."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.names, self.descs = [], []  # external inputs: variable name, (shape, dtype)
        self.steps, self._memo = [], {}

    def input(self, name, desc):
        """The reference to the external input ``name`` (added on first use)."""
        if name not in self.names:
            self.names.append(name)
            self.descs.append(tuple(desc))
        return ("in", self.names.index(name))

    def add(self, expression, names, substitute=None, only=None):
        """Copies ``expression``'s steps (those in ``only``, by default all) and returns a list
        with the built reference of each copied step (None for the others)."""
        substitute = substitute or {}
        refs = [None] * len(expression.steps)

        def remap(ref):
            kind, index = ref
            if kind == "step":
                return refs[index]
            if index in substitute:
                return substitute[index]
            return self.input(names[index], expression.inputs[index])

        for j in range(len(expression.steps)) if only is None else only:
            step = expression.steps[j]
            args = tuple(
                None if arg is None else remap(arg) if is_ref(arg) else tuple(map(remap, arg))
                for arg in step.args
            )
            key = (step.op, step.attrs, args)
            found = self._memo.get(key)
            if found is None:
                self.steps.append(Step(step.op, step.attrs, args, step.origin))
                found = self._memo[key] = ("step", len(self.steps) - 1)
            refs[j] = found
        return refs

    def finish(self, outputs, reductions, dtypes):
        """(Expression, input names): ``outputs`` are step references to materialise,
        ``reductions`` (reference, Reduction) pairs, ``dtypes`` every output's dtype name (full
        outputs, then reductions). Steps and inputs nothing needs are dropped."""
        needed = set()
        for ref in [*outputs, *(ref for ref, _ in reductions)]:
            needed.add(ref[1])
        for j in range(len(self.steps) - 1, -1, -1):
            if j in needed:
                needed.update(i for kind, i in flat_refs(self.steps[j].args) if kind == "step")
        order = sorted(needed)
        used = sorted(
            {i for j in order for kind, i in flat_refs(self.steps[j].args) if kind == "in"}
        )
        new_step = {j: k for k, j in enumerate(order)}
        new_input = {i: k for k, i in enumerate(used)}

        def remap(ref):
            kind, index = ref
            return ("step", new_step[index]) if kind == "step" else ("in", new_input[index])

        steps = []
        for j in order:
            step = self.steps[j]
            args = tuple(
                None if arg is None else remap(arg) if is_ref(arg) else tuple(map(remap, arg))
                for arg in step.args
            )
            steps.append(Step(step.op, step.attrs, args, step.origin))
        expression = Expression(
            inputs=tuple(self.descs[i] for i in used),
            shape=self.shape,
            steps=tuple(steps),
            outputs=tuple(new_step[ref[1]] for ref in outputs),
            reductions=tuple(
                dataclasses.replace(r, step=new_step[ref[1]]) for ref, r in reductions
            ),
            dtypes=tuple(dtypes),
        )
        return expression, [self.names[i] for i in used]


__all__ = ["Builder", "cone", "cone_inputs", "libm_steps"]
