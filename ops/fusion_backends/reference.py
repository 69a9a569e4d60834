"""The reference backend: each step's registered kernel on whole arrays, then the reductions.

Bit for bit what unfused execution computes (the same kernels on the same arrays, in program
order), so it is the oracle of the tests and the fallback of every other backend. Step values die
as soon as the last step reading them has run.
"""

from __future__ import annotations

from ops.fused_expression import flat_refs, resolve
from ops.fusion_backends import as_array, distinct, reduce, step_error, step_kernels


def compile(expression, xp):  # noqa: A001  (every backend's entry point has this name)
    """A callable running ``expression`` step by step with ``xp``; returns its output list."""
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
