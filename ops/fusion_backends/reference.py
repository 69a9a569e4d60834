"""The reference backend: each step's registered kernel on whole arrays, then the reductions.

Bit for bit what unfused execution computes (the same kernels on the same arrays, in program
order), so it is the oracle of the tests and the fallback of every other backend. Step values die
as soon as the last step reading them has run.
"""

from __future__ import annotations

import builtins

import numpy as np

from ops.fused_expression import flat_refs, is_ref, resolve
from ops.fusion_backends import (
    as_array,
    distinct,
    reduce,
    step_error,
    step_kernels,
    with_located_errors,
)
from ops.fusion_backends.block_program import recipe, ufunc_of


def compile(expression, xp):  # noqa: A001  (every backend's entry point has this name)
    """A callable running ``expression`` step by step with ``xp``; returns its output list.

    The steps are generated as straight-line Python (one kernel call per step, no per-step
    dispatch: on small arrays the dispatch costs as much as the kernels), with the interpreted
    form below raising a failing step's located error."""
    interpreted = _interpreted(expression, xp)
    try:
        generated = _generated(expression, xp)
    except SyntaxError:  # (cannot happen for well-formed expressions; be safe)
        return interpreted
    return with_located_errors(generated, interpreted)


def _generated(expression, xp):
    kernels = step_kernels(expression, xp)
    keep = set(expression.outputs) | {r.step for r in expression.reductions}
    frees = _last_uses(expression, keep)
    names = {"xp": xp, "asarray": np.asarray, "ndarray": np.ndarray, "reduce": reduce}
    ins = ", ".join(f"i{k}" for k in range(len(expression.inputs)))
    lines = [f"def run({ins}):"]
    for j, ((kernel, attrs), step) in enumerate(zip(kernels, expression.steps)):
        calls = _ufunc_calls(expression, j, names) if xp is np else None
        if calls is not None:
            lines += calls
        else:
            names[f"k{j}"], names[f"a{j}"] = kernel, attrs
            args = ", ".join(_source(arg) for arg in step.args)
            lines.append(f"    s{j} = k{j}(xp, a{j}, {args})")
        if xp is np and (calls is None or not expression.step_shapes[j]):
            # (kernels, and ufuncs on 0-d arrays, may return numpy scalars; a ufunc with an
            # operand of one axis or more returns an array)
            lines.append(f"    if s{j}.__class__ is not ndarray: s{j} = asarray(s{j})")
        if expression.size > 4096:  # (big values: free each after its last reader)
            lines += [f"    s{dead} = None" for dead in frees[j]]
    outs, seen = [], set()
    for j in expression.outputs:
        outs.append(f"s{j}.copy()" if j in seen else f"s{j}")
        seen.add(j)
    n_full = len(expression.outputs)
    for i, r in enumerate(expression.reductions):
        names[f"r{i}"] = (r, expression.shape, expression.dtypes[n_full + i])
        outs.append(f"reduce(xp, s{r.step}, *r{i})")
    lines.append(f"    return [{', '.join(outs)}]")
    exec(compile_source("\n".join(lines)), names)  # noqa: S102  (our own generated source)
    run = names.pop("run")  # (not left in its own globals: a discarded kernel is no cycle)
    run.backend = "reference"
    return run


def _ufunc_calls(expression, j, names):
    """Step ``j`` as the numpy ufunc calls its kernel makes (``block_program.recipe``: the same
    ufuncs on the same operands in the same order, so bit for bit the kernel's value), as lines
    of source binding ``s{j}``; None where the step has no recipe (its kernel is called). On
    small arrays the kernel's own Python (its wrapper, Paddle's axis rule) costs about as much
    as the ufunc."""
    n_in, step = len(expression.inputs), expression.steps[j]
    shapes = [shape for shape, _ in expression.inputs] + list(expression.step_shapes)
    dtypes = [np.dtype(d) for _, d in expression.inputs] + list(expression.step_dtypes)
    refs = list(flat_refs(step.args))
    slots = [k if kind == "in" else n_in + k for kind, k in refs]
    calls = recipe(
        step,
        dtypes[n_in + j],
        [shapes[s] for s in slots],
        [dtypes[s] for s in slots],
        shapes[n_in + j],
    )
    if calls is None:
        return None
    sources, made, lines = [_source(ref) for ref in refs], [], []
    for index, (ufunc, operands) in enumerate(calls):
        names[f"u_{ufunc}"] = ufunc_of(np, ufunc)
        args = []
        for operand in operands:
            if isinstance(operand, tuple):
                args.append(sources[operand[1]] if operand[0] == "a" else made[operand[1]])
            else:
                constant = f"c{len(names)}"
                names[constant] = operand
                args.append(constant)
        target = f"s{j}" if index == len(calls) - 1 else f"t{j}_{index}"
        made.append(target)
        lines.append(f"    {target} = u_{ufunc}({', '.join(args)})")
    return lines


def _source(arg):
    if arg is None:
        return "None"
    if is_ref(arg):
        return f"i{arg[1]}" if arg[0] == "in" else f"s{arg[1]}"
    return "[" + ", ".join(_source(ref) for ref in arg) + "]"


def compile_source(source):
    return builtins.compile(source, "<fused_elementwise>", "exec")


def _interpreted(expression, xp):
    kernels = step_kernels(expression, xp)
    steps = expression.steps
    keep = set(expression.outputs) | {r.step for r in expression.reductions}
    frees = _last_uses(expression, keep)
    n_full = len(expression.outputs)
    reduced = [
        (r, expression.shape, expression.dtypes[n_full + i])
        for i, r in enumerate(expression.reductions)
    ]

    def run(*inputs):
        values = []
        for j, ((kernel, attrs), step) in enumerate(zip(kernels, steps)):
            args = [resolve(arg, inputs, values) for arg in step.args]
            try:
                values.append(as_array(kernel(xp, attrs, *args), xp))
            except Exception as err:
                raise step_error(step, err) from err
            for dead in frees[j]:
                values[dead] = None
        outs = distinct([values[j] for j in expression.outputs], expression.outputs)
        outs += [reduce(xp, values[r.step], r, shape, dtype) for r, shape, dtype in reduced]
        return outs

    run.backend = "reference"
    return run


def _last_uses(expression, keep):
    """For each step j, the earlier steps whose value no step after j reads (and no output)."""
    last = {}
    for j, step in enumerate(expression.steps):
        for kind, index in flat_refs(step.args):
            if kind == "step":
                last[index] = j
    frees = [[] for _ in expression.steps]
    for index, j in last.items():
        if index not in keep:
            frees[j].append(index)
    return frees
