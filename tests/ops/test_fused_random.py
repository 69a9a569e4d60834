"""Random fused expressions (hypothesis): broadcasting, float32/float64 mixes, 0-d constants,
several outputs and reductions; every backend against the reference (bit for bit where the
backend promises it, within the stated tolerances elsewhere)."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

from ops.fused_expression import Expression, Reduction, Step
from ops.fusion_backends import numba_loops
from tests.ops.fused_helpers import assert_same, exact_in, libm_tol, run_backend

_AXIS = (("axis", -1),)
UNARY = {
    "tanh": (),
    "sigmoid": (),
    "neg": (),
    "abs": (),
    "square": (),
    "relu": (),
    "sin": (),
    "softsign": (),
    "exp": (),
    "scale": (("bias", 0.25), ("bias_after_scale", True), ("scale", -1.5)),
    "leaky_relu": (("alpha", 0.1),),
    "clip": (("max", 0.5), ("min", -0.25)),
}
BINARY = {
    "elementwise_add": _AXIS,
    "elementwise_sub": _AXIS,
    "elementwise_mul": _AXIS,
    "elementwise_div": _AXIS,
    "elementwise_max": _AXIS,
    "elementwise_min": _AXIS,
    "atan2": (),
}
SAME_SHAPE = {"tanh_grad": (), "sigmoid_grad": (), "relu_grad": ()}


@st.composite
def expressions(draw):
    n = draw(st.integers(1, 4))
    shapes, full = draw(mutually_broadcastable_shapes(num_shapes=n, max_dims=3, max_side=5))
    shapes = list(shapes) + ([()] if draw(st.booleans()) else [])
    dtypes = [draw(st.sampled_from(["float32", "float64"])) for _ in shapes]
    values = [(("in", k), tuple(s)) for k, s in enumerate(shapes)]
    steps = []
    for j in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["unary", "binary", "same"]))
        a = draw(st.sampled_from(values))
        if kind == "unary":
            op = draw(st.sampled_from(sorted(UNARY)))
            args, attrs, shape = (a[0],), UNARY[op], a[1]
        else:
            pool = values if kind == "binary" else [v for v in values if v[1] == a[1]]
            b = draw(st.sampled_from(pool))
            table = BINARY if kind == "binary" else SAME_SHAPE
            op = draw(st.sampled_from(sorted(table)))
            args, attrs = (a[0], b[0]), table[op]
            shape = tuple(np.broadcast_shapes(a[1], b[1]))
        steps.append(Step(op, attrs, args, (op, f"{op}_{j}", None)))
        values.append((("step", j), shape))
    inputs = tuple((tuple(s), d) for s, d in zip(shapes, dtypes))
    outputs = tuple(draw(st.lists(st.integers(0, len(steps) - 1), min_size=1, max_size=3)))
    probe = Expression(inputs, tuple(full), tuple(steps), outputs, (), ())
    reductions = draw(st.lists(_reduction(len(steps), tuple(full)), max_size=2))
    dtypes = [probe.step_dtypes[j].name for j in outputs]
    dtypes += [probe.step_dtypes[r.step].name for r in reductions]
    return Expression(inputs, tuple(full), tuple(steps), outputs, tuple(reductions), tuple(dtypes))


@st.composite
def _reduction(draw, n_steps, full):
    step = draw(st.integers(0, n_steps - 1))
    axes = tuple(sorted(draw(st.sets(st.integers(0, len(full) - 1))))) if full else ()
    keep, mean = draw(st.booleans()), draw(st.booleans())
    shape = tuple(1 if a in axes else n for a, n in enumerate(full))
    if not keep:
        shape = tuple(n for a, n in enumerate(full) if a not in axes)
    return Reduction(step, axes, keep, mean, shape)


def _inputs(expression, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(d) for s, d in expression.inputs]


def _check(name, expression, inputs):
    got = run_backend(name, expression, inputs)
    want = run_backend("reference", expression, inputs)
    n_full = len(expression.outputs)
    for i, (g, w) in enumerate(zip(got, want)):
        label = f"{name} output {i}"
        assert g.shape == w.shape and g.dtype == w.dtype, label
        if i < n_full:
            if exact_in(name, expression):
                assert_same(g, w, label)
            else:
                rtol, atol = libm_tol(expression)
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=label)
            continue
        _check_reduction(expression, expression.reductions[i - n_full], inputs, g, w, name)


def _check_reduction(expression, reduction, inputs, got, want, name):
    """Within reassociation rounding: count * eps * sum(|value|) (libm differences added)."""
    probe = Expression(
        expression.inputs,
        expression.shape,
        expression.steps,
        (reduction.step,),
        (),
        (expression.step_dtypes[reduction.step].name,),
    )
    (value,) = run_backend("reference", probe, inputs)
    value = np.abs(np.broadcast_to(value, expression.shape).astype(np.float64))
    count = max(math.prod(expression.shape[a] for a in reduction.axes), 1)
    magnitude = value.sum(axis=reduction.axes, keepdims=reduction.keepdims)
    if reduction.mean:
        magnitude = magnitude / count
    eps = np.finfo(want.dtype).eps
    # Each summed term may differ by the elementwise outputs' libm tolerance, rtol |v| + atol
    # (a composition that cancels, e.g. x - sigmoid_grad(x, exp(x)), turns numpy's own 2-ulp
    # float32 exp error into a large relative one; the atol covers it, as for full outputs).
    rtol, atol = (0.0, 0.0) if exact_in(name, expression) else libm_tol(expression)
    bound = (count * eps + rtol) * magnitude.reshape(want.shape) + np.finfo(want.dtype).tiny
    bound = bound + atol * (1.0 if reduction.mean else count)
    with np.errstate(invalid="ignore"):
        diff = np.abs(got.astype(np.float64) - want)
    finite = np.isfinite(want)
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{name}: NaNs differ"
    assert np.all(diff[finite] <= bound[finite]), f"{name}: reduction {diff} > {bound}"


_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=80, **_SETTINGS)
@given(expressions(), st.integers(0, 2**16))
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_blocked_and_generated_array_code_equal_the_reference(expression, seed):
    inputs = _inputs(expression, seed)
    for name in ("blocked", "cupy"):
        _check(name, expression, inputs)


@pytest.mark.skipif(not numba_loops.available(), reason="numba not installed (extra 'fuse')")
@settings(max_examples=25, **_SETTINGS)
@given(expressions(), st.integers(0, 2**16))
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_numba_equals_the_reference(expression, seed):
    _check("numba", expression, _inputs(expression, seed))
