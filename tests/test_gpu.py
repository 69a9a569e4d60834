"""CPU equals GPU: every op case runs on cupy arrays when cupy and a CUDA device are present.

Skipped cleanly on machines without them (the kernels are written once against ``xp``, so the
CPU suite already exercises the same code).
"""

import numpy as np
import pytest

import tape
from ops.registry import REGISTRY
from ops.xp import gpu_available
from tests.ops.test_registry_sweep import CASES

pytestmark = pytest.mark.skipif(not gpu_available(), reason="needs cupy and a CUDA device")


def _to_gpu(value):
    import cupy

    if value is None:
        return None
    if isinstance(value, list):
        return [_to_gpu(v) for v in value]
    return cupy.asarray(value)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_gpu_forward_equals_cpu(case):
    from tape.testing import _ordered, run_op

    defn = REGISTRY[case.op]
    if defn.random:
        pytest.skip("random streams differ between numpy and cupy")
    values = _ordered(case, case.arrays("float64"))
    tape.reset_global_tape()
    _, cpu = run_op(
        case,
        [None if v is None else (list(v) if isinstance(v, list) else v.copy()) for v in values],
    )
    tape.reset_global_tape()
    with tape.device("gpu"):
        _, gpu = run_op(case, [_to_gpu(v) for v in values])
    for c, g in zip(cpu, gpu):
        assert not isinstance(g.value(), np.ndarray)
        np.testing.assert_allclose(g.numpy(), c.numpy(), rtol=1e-10, atol=1e-12)


def test_gpu_backward_equals_cpu():
    import ops

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 2))
    grads = []
    for convert in (np.asarray, _to_gpu):
        tape.reset_global_tape()
        x, w = (
            tape.Variable(convert(a), requires_grad=True),
            tape.Variable(convert(b), requires_grad=True),
        )
        tape.backward(ops.mean(ops.relu(x @ w)))
        grads.append((x.grad().numpy(), w.grad().numpy()))
    for cpu, gpu in zip(*grads):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-10)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("backend", ["auto", "reference", "cupy"])
def test_gpu_fused_kernels_equal_cpu(backend, dtype):
    """A fused chain (broadcast vectors, a constant, two outputs, two reductions) on cupy equals
    the CPU's reference: cupy.fuse's kernels within the device's libm differences."""
    from ops import fused
    from tests.ops.cases_fused import chain_expression
    from tests.ops.fused_helpers import libm_tol, run_backend

    expression = chain_expression((512, 64), dtype)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(d) for s, d in expression.inputs]
    expected = run_backend("reference", expression, arrays)
    import cupy

    with fused.backend(backend):
        got = fused.kernel_for(expression, cupy)(*[cupy.asarray(a) for a in arrays])
    rtol, atol = libm_tol(expression)
    for g, e in zip(got, expected):
        assert isinstance(g, cupy.ndarray) and g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(cupy.asnumpy(g), e, rtol=max(rtol, 1e-5), atol=max(atol, 1e-5))
