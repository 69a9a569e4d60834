"""The registry sweep: every registered op has test cases, and every case passes the forward,
non-contiguous, gradient and double-gradient checks it asks for."""

import importlib
import pkgutil

import numpy as np
import pytest

import tests.ops as cases_package
from ops.registry import REGISTRY
from tape.testing import check_double_grad, check_forward, check_grad
from tape.testing_device import EmulatedDevice, check_on_device


def _load_cases():
    cases = []
    for module in pkgutil.iter_modules(cases_package.__path__):
        if module.name.startswith("cases_"):
            cases.extend(importlib.import_module(f"tests.ops.{module.name}").CASES)
    return cases


CASES = _load_cases()
_ids = [case.id for case in CASES]


def test_every_registered_op_has_a_case():
    covered = {case.op for case in CASES}
    missing = sorted(set(REGISTRY) - covered)
    assert not missing, f"registered ops without a test case: {missing}"


def test_cases_name_registered_ops():
    unknown = sorted({case.op for case in CASES} - set(REGISTRY))
    assert not unknown, f"cases for ops that are not registered: {unknown}"


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_forward_matches_reference(case):
    for dtype in case.dtypes:
        check_forward(case, dtype)


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_forward_on_noncontiguous_inputs(case):
    check_forward(case, case.dtypes[-1], contiguous=False)


GRAD_CASES = [case for case in CASES if case.grad]
DOUBLE_CASES = [case for case in CASES if case.double_grad]


@pytest.mark.parametrize("case", GRAD_CASES, ids=[c.id for c in GRAD_CASES])
def test_gradient_matches_finite_differences(case):
    check_grad(case)


@pytest.mark.parametrize("case", DOUBLE_CASES, ids=[c.id for c in DOUBLE_CASES])
def test_double_gradient_matches_finite_differences(case):
    check_double_grad(case)


def test_float32_gradients_stay_float32():
    for case in GRAD_CASES:
        if "float32" not in case.dtypes:
            continue
        values = case.arrays("float32")
        if any(isinstance(v, np.ndarray) and v.dtype == np.float64 for v in values.values()):
            continue
        check = _float32_gradient_dtypes(case)
        assert check, f"{case.id}: a float32 input received a non-float32 gradient"


def _float32_gradient_dtypes(case):
    import tape
    from tape.testing import _differentiable_leaves, _float_slots, _ordered, run_op

    tape.reset_global_tape()
    values = _ordered(case, case.arrays("float32"))
    slots = _float_slots(case, values)
    variables, outputs = run_op(case, values, slots)
    leaves = _differentiable_leaves(variables, REGISTRY[case.op].input_slots, slots)
    loss = None
    for out in outputs:
        if out.requires_grad:
            term = out.sum()
            loss = term if loss is None else loss + term
    if loss is None:
        return True
    return all(
        g is None or g.dtype == leaf.dtype for g, leaf in zip(tape.grad(loss, leaves), leaves)
    )


_DEVICE = EmulatedDevice()


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_kernels_and_gradients_run_on_the_emulated_gpu(case, lazy):
    """CPU equals GPU on the strict emulated device (tape.testing_device), eagerly and through
    the lazy scheduler: a kernel calling ``np.`` on a device array, or copying to the host, fails
    here instead of on a user's GPU."""
    check_on_device(case, _DEVICE, lazy=lazy)
