"""The GPU backend: the expression as generated array code, compiled by ``cupy.fuse`` into one
kernel for its outputs and one reduction kernel per reduction.

The code comes from the same ``table.RULES`` as the numba backend, evaluated on arrays with the
array module's functions (``where`` is ``xp.where``, ...). ``xp.fuse`` is applied where the
module has it (cupy); elsewhere (numpy, the emulated device of ``tape.testing_device``) the same
functions run unfused, which is how the CPU suite checks the generated code. cupy is never
imported here: the array module comes from the caller (the ``xp`` seam).

Results: elementwise outputs within the libm differences of the device (CUDA's tanh, exp, ...
are within 2 ulp of numpy's); reductions as cupy's sum.
"""

from __future__ import annotations

import numpy as np

from ops.fused_expression import flat_refs, is_ref
from ops.fusion_backends import (
    as_array,
    distinct,
    reduce,
    reduced_count,
    reference,
    with_located_errors,
)
from ops.fusion_backends.table import Constant, rule_for


def covers(expression):
    """Whether every step has a rule and every value is a float or bool."""
    kinds = {np.dtype(d).kind for _, d in expression.inputs}
    kinds |= {d.kind for d in expression.step_dtypes}
    return kinds <= {"f", "b"} and all(rule_for(s) is not None for s in expression.steps)


def _spell(value, dtype):
    if dtype.kind == "b":
        return repr(bool(value))
    return repr(value) if np.isfinite(value) else f"float({str(value)!r})"


def _needed(expression, targets):
    """The steps the ``targets`` depend on, in program order."""
    needed, stack = set(), list(targets)
    while stack:
        j = stack.pop()
        if j in needed:
            continue
        needed.add(j)
        stack.extend(i for kind, i in flat_refs(expression.steps[j].args) if kind == "step")
    return sorted(needed)


def generate(expression, targets, reduction=None):
    """Source of ``fused(in0, ...)`` returning the values of steps ``targets`` (a tuple), or,
    with ``reduction``, ``xp.sum`` of its step over its axes."""
    params = ", ".join(f"in{k}" for k in range(len(expression.inputs)))
    lines = [f"def fused({params}):"]
    names = {("in", k): f"in{k}" for k in range(len(expression.inputs))}
    dtypes = {("in", k): np.dtype(d) for k, (_, d) in enumerate(expression.inputs)}
    for j in _needed(expression, targets):
        step, dtype = expression.steps[j], expression.step_dtypes[j]
        text = _render(step, dtype, names, dtypes)
        if step.op == "cast":
            text = f"({text}).astype(np.{dtype.name})"
        lines.append(f"    s{j} = {text}")
        names[("step", j)], dtypes[("step", j)] = f"s{j}", dtype
    if reduction is None:
        lines.append(f"    return ({''.join(f's{j}, ' for j in targets)})")
    else:
        axes, keep = tuple(reduction.axes), reduction.keepdims
        lines.append(f"    return np.sum(s{reduction.step}, axis={axes!r}, keepdims={keep})")
    return "\n".join(lines) + "\n"


def _render(step, dtype, names, dtypes):
    rule = rule_for(step)
    flat = [r for arg in step.args if arg is not None for r in ([arg] if is_ref(arg) else arg)]
    if rule.cast == "out":
        compute = dtype
    elif rule.cast == "common":
        compute = np.result_type(*(dtypes[r] for r in flat))
    else:
        compute = None
    args = []
    for ref in flat:
        name, have = names[ref], dtypes[ref]
        cast = compute is not None and have != compute and have.kind == "f"
        args.append(f"{name}.astype(np.{compute.name})" if cast else name)
    k = Constant(compute if compute is not None else dtype, _spell)
    return rule.render(args, dict(step.attrs), k)


def _function(source, xp):
    namespace = {
        "np": xp,
        "where": xp.where,
        "maximum": xp.maximum,
        "minimum": xp.minimum,
        "clip_low": lambda x, low: xp.clip(x, low, None),
        "clip_high": lambda x, high: xp.clip(x, None, high),
    }
    exec(source, namespace)  # noqa: S102  (source generated from the rule table)
    fn = namespace.pop("fused")  # (not left in its own globals: no cycle)
    return xp.fuse(fn) if hasattr(xp, "fuse") else fn


def compile(expression, xp):  # noqa: A001  (every backend's entry point has this name)
    """A callable running ``expression`` as one fused elementwise kernel plus one fused
    reduction kernel per reduction (plain array code where ``xp`` has no ``fuse``)."""
    full = tuple(expression.shape)
    n_full = len(expression.outputs)
    outputs = _function(generate(expression, tuple(expression.outputs)), xp)
    reducers = []
    for i, r in enumerate(expression.reductions):
        dtype = np.dtype(expression.dtypes[n_full + i])
        if expression.step_shapes[r.step] == full:
            reducers.append((r, dtype, _function(generate(expression, (r.step,), r), xp)))
        else:  # a broadcast value: materialise it and reduce as the reference does
            reducers.append((r, dtype, _function(generate(expression, (r.step,)), xp)))

    def run(*inputs):
        outs = list(outputs(*inputs)) if expression.outputs else []
        outs = distinct([xp.asarray(o) for o in outs], expression.outputs)
        for r, dtype, fn in reducers:
            if expression.step_shapes[r.step] != full:
                outs.append(reduce(xp, xp.asarray(fn(*inputs)[0]), r, full, dtype))
                continue
            out = xp.asarray(fn(*inputs))
            if r.mean:
                out = out / reduced_count(r, full)
            out = as_array(out, xp).reshape(r.shape)
            outs.append(out if out.dtype == dtype else out.astype(dtype))
        return outs

    run = with_located_errors(run, reference.compile(expression, xp))
    run.backend = "cupy"
    return run
