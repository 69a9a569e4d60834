"""Helpers of the fused_elementwise tests: expressions from op cases, backends, comparisons."""

import contextlib

import numpy as np

import tape
from ops.fused import kernel_for
from ops.fused_expression import Expression, Reduction, Step
from ops.fusion_backends import blocked, numba_loops
from ops.infer import align_y
from ops.registry import REGISTRY
from tape.testing import _ordered, run_op

BACKENDS = ["reference", "blocked", "numba", "cupy"]


@contextlib.contextmanager
def small_blocks(size=64):
    """Blocks of ``size`` bytes, so that the tests' small arrays are cut into many blocks."""
    before, blocked.BLOCK_BYTES = blocked.BLOCK_BYTES, size
    try:
        yield
    finally:
        blocked.BLOCK_BYTES = before


def run_backend(name, expression, inputs, xp=np):
    """The expression's outputs on backend ``name`` (blocks small enough to cut every input)."""
    from ops import fused

    with fused.backend(name), small_blocks():
        fused.clear_cache()
        return kernel_for(expression, xp)(*inputs)


def unfused(case, values):
    """The case's op run by the engine (eagerly), as numpy arrays."""
    tape.reset_global_tape()
    copies = [
        None if v is None else [a.copy() for a in v] if isinstance(v, list) else v.copy()
        for v in values
    ]
    _, outputs = run_op(case, copies)
    return [np.array(o.numpy()) for o in outputs]


def case_inputs(case, dtype):
    """The case's inputs in slot order, with Y reshaped for plain broadcasting where the case
    uses Paddle's ``axis`` (as the fusion pass does); and the attributes with ``axis=-1``."""
    defn = REGISTRY[case.op]
    values = _ordered(case, case.arrays(dtype))
    attrs = dict(defn.check_attrs(case.attrs))
    if attrs.get("axis", -1) != -1:
        x, y = values[0], values[1]
        values[1] = y.reshape(align_y(x.shape, y.shape, attrs["axis"]))
        attrs["axis"] = -1
    return values, attrs


def step_expression(op, values, attrs, out_dtype, chained=False, reduce_axis=None):
    """``op`` on external inputs as step 0; with ``chained`` also ``op`` again with its first
    input through a ``cast`` step (to its own dtype) first, as steps 1-2 (outputs: step 0, then
    step 2); optionally a sum of step 0 over an axis."""
    inputs, args = [], []
    for value in values:
        if value is None:
            args.append(None)
            continue
        group = value if isinstance(value, list) else [value]
        refs = []
        for array in group:
            refs.append(("in", len(inputs)))
            inputs.append((tuple(array.shape), array.dtype.name))
        args.append(tuple(refs) if isinstance(value, list) else refs[0])
    attrs = tuple(sorted(attrs.items()))
    steps, outputs = [_step(op, tuple(args), attrs)], (0,)
    if chained:
        first = next(i for i, a in enumerate(args) if a is not None)
        ref = args[first] if isinstance(args[first][0], str) else args[first][0]
        steps.append(_step("cast", (ref,), (("out_dtype", inputs[ref[1]][1]),)))
        new = ("step", 1)
        args[first] = new if isinstance(args[first][0], str) else (new,) + args[first][1:]
        steps.append(_step(op, tuple(args), attrs))
        outputs = (0, 2)
    shape = tuple(np.broadcast_shapes(*(s for s, _ in inputs)))
    reductions, dtypes = (), (out_dtype,) * len(outputs)
    if reduce_axis is not None:
        kept = tuple(n for a, n in enumerate(shape) if a != reduce_axis)
        reductions = (Reduction(0, (reduce_axis,), False, False, kept),)
        dtypes += (out_dtype,)
    return Expression(tuple(inputs), shape, tuple(steps), outputs, reductions, dtypes)


def _step(op, args, attrs):
    return Step(op, attrs, args, (op, f"{op}_1", "test.py:1 in f"))


def flat(values):
    out = []
    for v in values:
        if v is not None:
            out.extend(v if isinstance(v, list) else [v])
    return out


def assert_same(got, expected, label):
    """Bit for bit (NaNs in the same places, the same dtype)."""
    assert got.dtype == expected.dtype, f"{label}: dtype {got.dtype} != {expected.dtype}"
    np.testing.assert_array_equal(got, expected, err_msg=label, strict=True)


# Tolerances of the libm rules of the generated backends against numpy's loops, measured on the
# sweep cases and the random expressions: plain functions within 5 ulp, compositions that cancel
# (gelu_grad, silu_grad) within 5e-6 (float32) and 1e-14 (float64) of max(1, |value|).
LIBM_TOL = {"float32": (5e-6, 5e-6), "float64": (1e-14, 1e-14), "bool": (0, 0)}


def libm_tol(expression):
    """(rtol, atol) of the generated backends' libm rules for ``expression``: its narrowest float
    dtype's (a float32 step's rounding carries into the float64 steps after it)."""
    kinds = {d.name for d in expression.step_dtypes} | {d for _, d in expression.inputs}
    return LIBM_TOL["float32" if "float32" in kinds else "float64"]


def exact_in(name, expression):
    """Whether backend ``name`` computes ``expression``'s elementwise outputs bit for bit:
    reference and blocked always; numba and cupy where the expression uses exact rules only
    (or they fall back); cupy's array code runs numpy's own functions on numpy."""
    if name in ("reference", "blocked", "cupy"):
        return True
    if not numba_loops.available() or not numba_loops.covers(expression):
        return True
    return numba_loops.covers(expression, exact=True)
