"""Lazy equals eager for every registered op: the registry sweep's cases run both ways, and the
outputs, the updated inputs (in-place ops) and the gradients agree bit for bit -- but for the
ops whose kernel a plan may switch to a form equal to eager mode's within rounding
(``tape.passes.fast_kernels``): theirs agree within float rounding, and bit for bit in
``exact=True`` plans."""

import numpy as np
import pytest

import tape
from ops.registry import REGISTRY
from tape.passes import fast_kernels
from tape.testing import (
    _cotangents,
    _differentiable_leaves,
    _float_slots,
    _ordered,
    _weighted_sum,
    assert_within_rounding,
    run_op,
)
from tests.ops.test_registry_sweep import CASES

pytestmark = pytest.mark.usefixtures("lazy_tier")  # both lazy tiers


def _copy(values):
    return [
        ([v.copy() for v in x] if isinstance(x, list) else (None if x is None else x.copy()))
        for x in values
    ]


def _forward(case, values, lazy, exact=False):
    tape.seed(1234)
    with tape.lazy(lazy, exact=exact):
        tape.reset_global_tape()
        variables, outputs = run_op(case, values)
        results = [out.numpy() for out in outputs]
    inputs = [
        v.numpy()
        for entry in variables
        if entry is not None
        for v in (entry if isinstance(entry, list) else [entry])
    ]
    return results, inputs


def _gradients(case, values, lazy):
    tape.seed(1234)
    with tape.lazy(lazy):
        tape.reset_global_tape()
        slots = _float_slots(case, values)
        variables, outputs = run_op(case, values, slots)
        loss = _weighted_sum(outputs, _cotangents(outputs, np.random.default_rng(7)))
        leaves = _differentiable_leaves(variables, REGISTRY[case.op].input_slots, slots)
        grads = tape.grad(loss, leaves) if loss is not None else []
        return [None if g is None else g.numpy() for g in grads]


def _assert_same(eager, lazy, what, rounding=False):
    """Equal bit for bit; within float rounding (a few ulps of each array's scale) where
    ``rounding``."""
    assert len(eager) == len(lazy), what
    for i, (want, got) in enumerate(zip(eager, lazy, strict=True)):
        if want is None or got is None:
            assert want is None and got is None, f"{what} {i}"
            continue
        assert got.dtype == want.dtype and got.shape == want.shape, f"{what} {i}"
        if rounding and want.dtype.kind == "f":
            rtol = 80 * np.finfo(want.dtype).eps
            assert_within_rounding(got, want, rtol, ulps=8, err_msg=f"{what} {i}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{what} {i}")


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_lazy_forward_equals_eager(case):
    rounding = case.op in fast_kernels.FAST
    for dtype in case.dtypes:
        values = _ordered(case, case.arrays(dtype))
        eager, eager_inputs = _forward(case, _copy(values), lazy=False)
        lazy, lazy_inputs = _forward(case, _copy(values), lazy=True)
        _assert_same(eager, lazy, f"{case.id} ({dtype}) output", rounding)
        _assert_same(eager_inputs, lazy_inputs, f"{case.id} ({dtype}) input after the op")
        if rounding:
            exact, _ = _forward(case, _copy(values), lazy=True, exact=True)
            _assert_same(eager, exact, f"{case.id} ({dtype}) output, exact=True")


GRAD_CASES = [case for case in CASES if case.grad]


@pytest.mark.parametrize("case", GRAD_CASES, ids=[case.id for case in GRAD_CASES])
def test_lazy_gradients_equal_eager(case):
    values = _ordered(case, case.arrays("float64"))
    eager = _gradients(case, _copy(values), lazy=False)
    lazy = _gradients(case, _copy(values), lazy=True)
    _assert_same(eager, lazy, f"{case.id} gradient")
