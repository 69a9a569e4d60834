"""No recursion limit and no quadratic pass: long tapes run lazily, with backward, in both tiers
(interpreted on a structure's first sighting, compiled from its second), and equal eager mode."""

import sys

import numpy as np
import pytest

import ops
import tape


def _chain(ops_count, lazy, compile=None):
    p = tape.Variable(np.full((2, 2), 0.5, np.float32), requires_grad=True)
    with tape.lazy(enabled=lazy, compile=compile):
        tape.reset_global_tape()
        h = tape.Variable(np.full((2, 2), 0.1, np.float32))
        for _ in range(ops_count // 3):
            h = ops.tanh((h + p) * p)
        loss = h.sum()
        tape.backward(loss)
        result = loss.numpy().copy(), p.grad().numpy().copy()
        tape.reset_global_tape()
    return result


@pytest.fixture
def shallow_stack():
    """A recursion limit well below the tape's length: any recursive walk over it fails."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    yield
    sys.setrecursionlimit(limit)


def test_a_tape_of_a_hundred_thousand_ops_runs_lazily_with_backward(shallow_stack):
    want = _chain(100_000, lazy=False)
    got = _chain(100_000, lazy=True)
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_long_tape_compiles_into_a_plan_without_recursion(shallow_stack):
    want = _chain(6_000, lazy=False)
    got = _chain(6_000, lazy=True, compile=True)  # (the rewrites reorder sums: rounding only)
    for a, b in zip(want, got, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)
