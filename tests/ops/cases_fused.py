"""Cases for ``fused_elementwise`` (ops/fused.py): a fused chain with a broadcast vector, a
constant, two outputs and two reductions, against the same computation in plain numpy."""

import numpy as np

from ops.fused_expression import Expression, Reduction, Step
from tape.testing import OpCase

_AXIS = (("axis", -1),)


def _step(op, args, attrs=_AXIS):
    return Step(op, attrs, args, (op, f"{op}_0", None))


def chain_expression(shape, dtype):
    """tanh(X * a + b) * sigmoid(X) - c * X * X, with a, b vectors over the last axis and c a
    0-d constant; outputs the chain and tanh, sums it over axis 0 and averages it over all."""
    vector = ((shape[-1],), dtype)
    steps = (
        _step("elementwise_mul", (("in", 0), ("in", 1))),
        _step("elementwise_add", (("step", 0), ("in", 2))),
        _step("tanh", (("step", 1),), ()),
        _step("sigmoid", (("in", 0),), ()),
        _step("elementwise_mul", (("step", 2), ("step", 3))),
        _step("elementwise_mul", (("in", 3), ("in", 0))),
        _step("elementwise_mul", (("step", 5), ("in", 0))),
        _step("elementwise_sub", (("step", 4), ("step", 6))),
    )
    return Expression(
        inputs=((shape, dtype), vector, vector, ((), dtype)),
        shape=shape,
        steps=steps,
        outputs=(7, 2),
        reductions=(
            Reduction(7, (0,), False, False, shape[1:]),
            Reduction(7, tuple(range(len(shape))), False, True, ()),
        ),
        dtypes=(dtype,) * 4,
    )


def chain_reference(xs, expression):
    x, a, b, c = xs
    t = np.tanh(x * a + b)
    out = t * (1.0 / (1.0 + np.exp(-x))) - c * x * x
    return [out, t, out.sum(axis=0), np.asarray(out.mean())]


def scaled_expression(shape):
    """tanh(X * k) * sigmoid(X) - 0.5 * X * X with X float64 and k an int64 vector over the last
    axis (one float input: the expression fixes its inputs' dtypes, so the dtype-rule test's
    mixed float variants do not apply); outputs the chain and tanh, sums it over axis 0 and
    averages it over all."""
    steps = (
        _step("elementwise_mul", (("in", 0), ("in", 1))),
        _step("tanh", (("step", 0),), ()),
        _step("sigmoid", (("in", 0),), ()),
        _step("elementwise_mul", (("step", 1), ("step", 2))),
        _step("scale", (("in", 0),), (("bias", 0.0), ("bias_after_scale", True), ("scale", 0.5))),
        _step("elementwise_mul", (("step", 4), ("in", 0))),
        _step("elementwise_sub", (("step", 3), ("step", 5))),
    )
    axes = tuple(range(len(shape)))
    return Expression(
        inputs=((shape, "float64"), (shape[-1:], "int64")),
        shape=shape,
        steps=steps,
        outputs=(6, 1),
        reductions=(
            Reduction(6, (0,), False, False, shape[1:]),
            Reduction(6, axes, False, True, ()),
        ),
        dtypes=("float64",) * 4,
    )


def scaled_reference(xs, expression):
    x, k = xs
    t = np.tanh(x * k)
    out = t * (1.0 / (1.0 + np.exp(-x))) - 0.5 * x * x
    return [out, t, out.sum(axis=0), np.asarray(out.mean())]


def _case(shape, name):
    return OpCase(
        "fused_elementwise",
        {
            "X": [
                lambda rng, _: rng.standard_normal(shape),
                lambda rng, _: rng.integers(-3, 4, shape[-1:]),
            ]
        },
        {"expression": scaled_expression(shape)},
        reference=scaled_reference,
        grad=False,
        dtypes=("float64",),
        name=name,
    )


# float64 only (the expression fixes it); float32, mixed dtypes and float inputs that broadcast
# are checked in tests/ops/test_fused*.py.
CASES = [_case((3, 4), "chain"), _case((5, 1, 3), "chain-3d")]
