"""fused_elementwise: every elementwise op fuses on every backend, errors name the original op,
and the op's inference checks its inputs.

The registry-wide test is the guard of the fusion pass: it fails as soon as an op flagged
``elementwise=True`` cannot be evaluated by the backends (a kernel that is not really
elementwise, a rule that differs from its kernel, a dtype the generated code gets wrong).
"""

import numpy as np
import pytest

import ops
import tape
from ops.fused_expression import Expression, Step
from ops.registry import REGISTRY
from tape.errors import AttrError, DTypeError, ExecutionError, InputError, ShapeError
from tests.ops.fused_helpers import (
    BACKENDS,
    assert_same,
    case_inputs,
    exact_in,
    flat,
    libm_tol,
    run_backend,
    step_expression,
    unfused,
)
from tests.ops.test_registry_sweep import CASES

ELEMENTWISE = sorted(name for name, defn in REGISTRY.items() if defn.elementwise)


def test_the_elementwise_ops_are_the_registry_flag():
    assert "tanh" in ELEMENTWISE and "elementwise_add" in ELEMENTWISE
    assert "fused_elementwise" not in ELEMENTWISE  # a fused group is never fused again


def _compare(name, expression, got, expected, label):
    assert len(got) == len(expected), label
    for i, (g, e) in enumerate(zip(got, expected)):
        what = f"{label} output {i} on {name}"
        if i < len(expression.outputs) and exact_in(name, expression):
            assert_same(g, e, what)
        else:
            assert g.dtype == e.dtype and g.shape == e.shape, what
            full = i < len(expression.outputs)
            rtol, atol = libm_tol(expression) if full else (1e-5, 1e-6)
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=what)


@pytest.mark.parametrize("op", ELEMENTWISE)
def test_every_elementwise_op_fuses_on_every_backend(op):
    """The op alone and after another step, with a sum of its float result, on each backend
    (numba, whose compiles are slow, on the op's first case)."""
    cases = [c for c in CASES if c.op == op]
    assert cases, f"elementwise op '{op}' has no sweep case to build fusion tests from"
    for number, case in enumerate(cases):
        for dtype in case.dtypes:
            values, attrs = case_inputs(case, dtype)
            (expected,) = unfused(case, values)
            floats = expected.dtype.kind == "f" and expected.ndim > 0
            expression = step_expression(
                op, values, attrs, expected.dtype.name, True, 0 if floats else None
            )
            want = [expected, expected] + ([expected.sum(axis=0)] if floats else [])
            for name in BACKENDS if number == 0 else ["reference", "blocked", "cupy"]:
                got = run_backend(name, expression, flat(values))
                _compare(name, expression, got, want, f"{case.id} {dtype}")


@pytest.mark.parametrize("op", ELEMENTWISE)
def test_blocked_backend_on_strided_inputs_equals_unfused(op):
    case = next(c for c in CASES if c.op == op)
    values, attrs = case_inputs(case, case.dtypes[-1])
    (expected,) = unfused(case, values)
    strided = [
        None
        if v is None
        else [np.repeat(a, 2, axis=-1)[..., ::2] if a.ndim else a for a in v]
        if isinstance(v, list)
        else (np.repeat(v, 2, axis=-1)[..., ::2] if v.ndim else v)
        for v in values
    ]
    expression = step_expression(op, values, attrs, expected.dtype.name)
    (got,) = run_backend("blocked", expression, flat(strided))
    assert_same(got, expected, f"{case.id} strided")


def _floor_divide_expression():
    """x * 2 // y on int64: the floor division fails when y has a zero."""
    origin = ("floor_divide", "floor_divide_7", "train.py:42 in step")
    steps = (
        Step(
            "scale",
            (("bias", 0.0), ("bias_after_scale", True), ("scale", 2.0)),
            (("in", 0),),
            ("scale", "scale_6", "train.py:41 in step"),
        ),
        Step("floor_divide", (), (("step", 0), ("in", 1)), origin),
        Step("elementwise_add", (("axis", -1),), (("step", 1), ("in", 0)), ("add", "a", None)),
    )
    inputs = (((64, 8), "int64"), ((8,), "int64"))
    return Expression(inputs, (64, 8), steps, (2,), (), ("int64",))


@pytest.mark.parametrize("name", BACKENDS)
def test_an_error_in_a_step_names_the_original_op_and_line(name):
    x = np.arange(512, dtype=np.int64).reshape(64, 8)
    y = np.arange(1, 9, dtype=np.int64)
    expression = _floor_divide_expression()
    (good,) = run_backend(name, expression, [x, y])
    np.testing.assert_array_equal(good, x * 2 // y + x)
    y[5] = 0
    with pytest.raises(ExecutionError) as info:
        run_backend(name, expression, [x, y])
    assert str(info.value) == (
        "op 'floor_divide' (floor_divide_7): kernel failed: ZeroDivisionError: integer division "
        "by zero (input Y has a zero)\n  recorded at: train.py:42 in step"
    )
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_the_op_raises_the_step_error_through_the_engine():
    x = tape.Variable(np.arange(512, dtype=np.int64).reshape(64, 8))
    y = tape.Variable(np.array([1, 2, 3, 0, 5, 6, 7, 8], np.int64))
    with pytest.raises(ExecutionError, match="op 'floor_divide' \\(floor_divide_7\\)") as info:
        ops.fused_elementwise([x, y], expression=_floor_divide_expression())
    assert "recorded at: train.py:42 in step" in str(info.value)


def _chain(shape=(4, 3), dtype="float32"):
    from tests.ops.cases_fused import chain_expression

    return chain_expression(shape, dtype)


def _chain_inputs(shape=(4, 3), dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(dtype) for s in (shape, shape[-1:], shape[-1:])]
    return arrays + [np.array(0.5, dtype)]


def test_the_op_runs_through_the_engine_and_equals_the_ops_it_replaces():
    arrays = _chain_inputs()
    outs = ops.fused_elementwise([tape.Variable(a) for a in arrays], expression=_chain())
    x, a, b, c = (tape.Variable(v) for v in arrays)
    t = ops.tanh(x * a + b)
    y = t * ops.sigmoid(x) - c * x * x
    assert [o.shape for o in outs] == [(4, 3), (4, 3), (3,), ()]
    assert [o.dtype for o in outs] == [np.float32] * 4
    assert_same(outs[0].numpy(), y.numpy(), "chain")
    assert_same(outs[1].numpy(), t.numpy(), "tanh")
    np.testing.assert_allclose(outs[2].numpy(), y.numpy().sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(outs[3].numpy(), y.numpy().mean(), rtol=1e-6)


def test_inference_checks_the_inputs_against_the_expression():
    arrays = _chain_inputs()
    variables = [tape.Variable(a) for a in arrays]
    with pytest.raises(InputError, match="expected: 4\n  actual:   3"):
        ops.fused_elementwise(variables[:3], expression=_chain())
    wrong = [tape.Variable(arrays[0].T.copy())] + variables[1:]
    with pytest.raises(ShapeError, match="input X\\[0\\] has another shape") as info:
        ops.fused_elementwise(wrong, expression=_chain())
    assert "expected: (4, 3)\n  actual:   (3, 4)" in str(info.value)
    wrong = [tape.Variable(arrays[0].astype(np.float64))] + variables[1:]
    with pytest.raises(DTypeError, match="expected: float32\n  actual:   float64"):
        ops.fused_elementwise(wrong, expression=_chain())
    with pytest.raises(AttrError, match="expected: an ops.fused_expression.Expression"):
        ops.fused_elementwise(variables, expression="tanh(x)")


@pytest.mark.parametrize("name", BACKENDS)
def test_no_backend_writes_into_its_inputs(name):
    arrays = _chain_inputs((64, 16))
    for a in arrays:
        a.setflags(write=False)
    expression = _chain((64, 16))
    outs = run_backend(name, expression, arrays)
    expected = run_backend("reference", expression, arrays)
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert got.flags.writeable and not any(np.shares_memory(got, a) for a in arrays)
