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


def _fixed(shape, dtype):
    """Standard-normal inputs in ``dtype`` whatever dtype a check asks for: an expression
    fixes its inputs' dtypes."""
    return lambda rng, _: rng.standard_normal(shape).astype(dtype)


def _case(shape, dtype, name):
    inputs = [_fixed(shape, dtype), _fixed(shape[-1:], dtype), _fixed(shape[-1:], dtype)]
    inputs.append(lambda rng, _: np.array(0.5, dtype))
    return OpCase(
        "fused_elementwise",
        {"X": inputs},
        {"expression": chain_expression(shape, dtype)},
        reference=chain_reference,
        grad=False,
        dtypes=(dtype,),
        name=name,
    )


# float64 only: tests/test_gpu.py compares every case's CPU and GPU results at rtol 1e-10;
# float32 and mixed expressions are checked in tests/ops/test_fused*.py.
CASES = [_case((3, 4), "float64", "chain"), _case((5, 1, 3), "float64", "chain-3d")]
