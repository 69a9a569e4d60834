"""The numba backend: the whole expression as one generated, compiled loop nest (optional extra).

Source is generated from ``table.RULES`` (one scalar expression per step, inputs read through
their broadcast index, outputs stored and reductions accumulated in the innermost loop) and
compiled once per expression with ``numba.njit`` (``pip install fluidtape[fuse]``). Nothing is
allocated per element and no intermediate touches memory.

When it wins (``python -m benchmarks.fusion_backends``, see benchmarks/README.md): on exact
arithmetic (add, mul, where, max, the *_grad ops of tanh, sigmoid and relu, ...) it is 2-6x faster
than blocked numpy at every size from 8x8 to 4M. With libm functions (tanh, exp, ...) it is 2-9x
*slower* from 64x64 up on float32 (numba calls scalar libm where numpy runs AVX-512 loops), and
7x faster at 8x8 (numpy's ~2 us per call dominates there). ``ops.fused``'s auto policy follows
these numbers, after the expression has paid for the compile (0.1-0.5 s).

Results: exact rules give numpy's results bit for bit (checked by the tests); libm functions are
within 5 ulp of numpy's (measured over 1e5 points per function and dtype), and compositions that
cancel (gelu_grad, silu_grad) within 5e-6 * max(1, |value|) in float32 and 1e-14 * max(1,
|value|) in float64, the narrowest float dtype of the expression deciding. Reductions accumulate
in float64 (int64 for bool) and round once to the output dtype: closer to the exact sum than the
reference's own float32 sum, so within its rounding of it.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ops.fused_expression import is_ref
from ops.fusion_backends import reference, with_located_errors
from ops.fusion_backends.table import Constant, rule_for

_TYPES = frozenset({"float32", "float64", "bool"})


@functools.lru_cache(maxsize=1)
def available():
    """Whether numba can be imported (the ``fuse`` extra)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def covers(expression, exact=False):
    """Whether every step has a rule (an exact one if ``exact``) and every value is float32,
    float64 or bool (numba's integer arithmetic does not follow numpy's types)."""
    dtypes = [np.dtype(d).name for _, d in expression.inputs]
    dtypes += [d.name for d in expression.step_dtypes] + list(expression.dtypes)
    if not set(dtypes) <= _TYPES:
        return False
    for step in expression.steps:
        rule = rule_for(step)
        if rule is None or (exact and not rule.exact):
            return False
    return True


def _spell(value, dtype):
    if dtype.kind == "b":
        return repr(bool(value))
    if math.isnan(value) or math.isinf(value):
        return f"np.{dtype.name}({str(value)!r})"
    return f"np.{dtype.name}({value!r})"


def generate(expression):
    """The source of ``fused(in0, ..., out0, ..., acc0, ...)`` computing ``expression``."""
    shape, ndim = expression.shape, len(expression.shape)
    n_in, n_out = len(expression.inputs), len(expression.outputs)
    params = [f"in{k}" for k in range(n_in)] + [f"out{i}" for i in range(n_out)]
    params += [f"acc{i}" for i in range(len(expression.reductions))]
    lines = [f"def fused({', '.join(params)}):"]
    indent = "    "
    for a in range(ndim):
        lines.append(f"{indent}for i{a} in range({shape[a]}):")
        indent += "    "
    names, dtypes = {}, {}
    for k, (in_shape, dtype) in enumerate(expression.inputs):
        names[("in", k)], dtypes[("in", k)] = f"x{k}", np.dtype(dtype)
        lines.append(f"{indent}x{k} = in{k}[{_index(in_shape, ndim)}]")
    for j, step in enumerate(expression.steps):
        dtype = expression.step_dtypes[j]
        lines.append(f"{indent}s{j} = np.{dtype.name}({_render(step, dtype, names, dtypes)})")
        names[("step", j)], dtypes[("step", j)] = f"s{j}", dtype
    for i, j in enumerate(expression.outputs):
        lines.append(f"{indent}out{i}[{_index(expression.step_shapes[j], ndim)}] = s{j}")
    for i, r in enumerate(expression.reductions):
        index = ", ".join("0" if a in r.axes else f"i{a}" for a in range(ndim)) or "()"
        lines.append(f"{indent}acc{i}[{index}] += s{r.step}")
    lines.append("    return 0")
    return "\n".join(lines) + "\n"


def _index(shape, ndim):
    """The element of an array of ``shape`` (right-aligned, broadcast) at loop indices i*."""
    if not shape:
        return "()"
    lead = ndim - len(shape)
    return ", ".join("0" if n == 1 else f"i{a + lead}" for a, n in enumerate(shape))


def _render(step, dtype, names, dtypes):
    rule = rule_for(step)
    refs = [arg for arg in step.args if arg is not None]
    flat = [ref for arg in refs for ref in ([arg] if is_ref(arg) else arg)]
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
        args.append(f"np.{compute.name}({name})" if cast else name)
    k = Constant(compute if compute is not None else dtype, _spell)
    return rule.render(args, dict(step.attrs), k)


@functools.lru_cache(maxsize=1)
def _helpers():
    import numba

    inline = numba.njit(inline="always")

    @inline
    def where(cond, a, b):
        return a if cond else b

    @inline
    def maximum(a, b):  # numpy's: NaN wins, ties give b
        return a if (a > b or a != a) else b

    @inline
    def minimum(a, b):
        return a if (a < b or a != a) else b

    @inline
    def clip_low(x, low):  # numpy's clip: NaN stays, -0.0 stays at a bound of 0
        return low if x < low else x

    @inline
    def clip_high(x, high):
        return high if x > high else x

    return {
        "np": np,
        "where": where,
        "maximum": maximum,
        "minimum": minimum,
        "clip_low": clip_low,
        "clip_high": clip_high,
    }


def compile(expression, xp):  # noqa: A001  (every backend's entry point has this name)
    """A callable running ``expression`` as one compiled loop nest (numba compiles it at the
    first call, for the inputs' layouts)."""
    import numba

    namespace = dict(_helpers())
    exec(generate(expression), namespace)  # noqa: S102  (source generated from the rule table)
    loops = numba.njit(nogil=True, error_model="numpy")(namespace.pop("fused"))
    outputs = [
        (expression.step_shapes[j], np.dtype(d))
        for j, d in zip(expression.outputs, expression.dtypes)
    ]
    accumulators = _accumulators(expression)

    def run(*inputs):
        outs = [np.empty(shape, dtype) for shape, dtype in outputs]
        accs = [np.zeros(shape, dtype) for shape, dtype, _, _ in accumulators]
        loops(*inputs, *outs, *accs)
        for acc, (_, _, reduction, dtype) in zip(accs, accumulators):
            if reduction.mean:
                acc = acc / math.prod(expression.shape[a] for a in reduction.axes)
            outs.append(acc.reshape(reduction.shape).astype(dtype, copy=False))
        return outs

    run = with_located_errors(run, reference.compile(expression, xp))
    run.backend = "numba"
    return run


def _accumulators(expression):
    """(shape keeping every axis, accumulation dtype, reduction, output dtype) per reduction."""
    n_full, found = len(expression.outputs), []
    for i, r in enumerate(expression.reductions):
        shape = tuple(1 if a in r.axes else n for a, n in enumerate(expression.shape))
        dtype = np.dtype(expression.dtypes[n_full + i])
        wide = np.dtype(np.int64) if dtype.kind in "biu" else np.dtype(np.float64)
        found.append((shape, wide, r, dtype))
    return found
