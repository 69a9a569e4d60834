"""How fused_elementwise chooses and caches backends, and its runs on the emulated GPU."""

import weakref

import numpy as np
import pytest

import ops
import tape
from ops import fused
from ops.fused_expression import Expression, Step
from ops.fusion_backends import blocked, numba_loops
from ops.fusion_backends.blocked import _Blocked, _cut
from tape.testing_device import EmulatedDevice, installed
from tests.ops.cases_fused import chain_expression
from tests.ops.fused_helpers import assert_same, run_backend, small_blocks

_AXIS = (("axis", -1),)


def _arithmetic(shape=(2048, 256)):
    """x * a + b, then relu: exact rules only."""
    steps = (
        Step("elementwise_mul", _AXIS, (("in", 0), ("in", 1)), ("mul", "m", None)),
        Step("elementwise_add", _AXIS, (("step", 0), ("in", 2)), ("add", "a", None)),
        Step("relu", (), (("step", 1),), ("relu", "r", None)),
    )
    vector = ((shape[-1],), "float32")
    return Expression(((shape, "float32"), vector, vector), shape, steps, (2,), (), ("float32",))


def _arrays(expression, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(d) for s, d in expression.inputs]


@pytest.fixture
def fresh_cache():
    fused.clear_cache()
    yield
    fused.clear_cache()


def test_auto_runs_one_block_on_the_reference_and_larger_ones_in_blocks(fresh_cache):
    small = chain_expression((8, 8), "float32")
    large = chain_expression((1024, 512), "float32")
    assert fused.kernel_for(small, np).backend == "reference"
    assert fused.kernel_for(large, np).backend == "blocked"


def test_auto_moves_vectorising_expressions_to_numba_once_they_paid_for_it(
    fresh_cache, monkeypatch
):
    monkeypatch.setattr(fused, "NUMBA_AFTER_SECONDS", 0.0)
    exact, libm = _arithmetic(), chain_expression((2048, 256), "float32")
    inputs = _arrays(exact)
    first = fused.kernel_for(exact, np)
    expected = first(*inputs)
    second = first(*inputs)
    assert first.backend == ("numba" if numba_loops.available() else "blocked")
    assert_same(second[0], expected[0], "numba against blocked")
    chain = fused.kernel_for(libm, np)
    chain(*_arrays(libm))
    chain(*_arrays(libm))
    # float32 tanh and exp: vectorised by ops.fusion_backends.vecmath, the whole loop vectorises
    assert chain.backend == ("numba" if numba_loops.available() else "blocked")
    wide = chain_expression((2048, 256), "float64")
    scalar = fused.kernel_for(wide, np)
    scalar(*_arrays(wide))
    scalar(*_arrays(wide))
    assert scalar.backend == "blocked"  # float64 tanh: scalar libm, numpy's loops are faster
    small = chain_expression((8, 8), "float32")
    tiny = fused.kernel_for(small, np)
    tiny(*_arrays(small))
    tiny(*_arrays(small))
    assert tiny.backend == ("numba" if numba_loops.available() else "reference")


@pytest.mark.skipif(not numba_loops.available(), reason="numba is not installed")
def test_a_kernel_that_may_still_move_is_unsettled_until_it_moved(fresh_cache, monkeypatch):
    """``fused.unsettled`` counts the kernels that ran lately and may still move to numba (a
    benchmark warms a step up until none may); one that moved, or ran long ago, is not."""
    monkeypatch.setattr(fused, "NUMBA_AFTER_SECONDS", 3600.0)  # (no move by time spent)
    monkeypatch.setattr(fused, "NUMBA_CACHED_SECONDS", 3600.0)
    monkeypatch.setattr(fused, "NUMBA_SUBMIT_CALLS", 10**9)  # (nor handed to a compile)
    monkeypatch.setattr(fused, "_ADAPTIVE", weakref.WeakSet())  # (other tests' kernels)
    expression = _arithmetic((64, 64))
    inputs = _arrays(expression)
    kernel = fused.kernel_for(expression, np)
    assert fused.unsettled() == 0  # (made, not yet run)
    kernel(*inputs)
    assert fused.unsettled() == 1
    assert fused.unsettled(within=0.0) == 0  # (it ran, but not within no time at all)
    adaptive = kernel.run if isinstance(kernel, fused._Located) else kernel
    adaptive.after = 0.0  # (it has paid for its compile now: moves at its next run)
    kernel(*inputs)
    assert adaptive.backend == "numba"
    assert fused.unsettled() == 0


def _shared(kernel):
    """The compiled kernel a group's callable runs (``ops.fused._Located`` wraps it)."""
    return kernel.run if isinstance(kernel, fused._Located) else kernel


def test_equal_expressions_share_one_compiled_kernel(fresh_cache):
    one, two = chain_expression((4, 3), "float32"), chain_expression((4, 3), "float32")
    assert one is not two and one == two and hash(one) == hash(two)
    automatic = _shared(fused.kernel_for(one, np))
    assert _shared(fused.kernel_for(two, np)) is automatic
    with fused.backend("blocked"):
        assert _shared(fused.kernel_for(two, np)) is not automatic  # one per backend setting


def _divide_group(origin):
    """x / y + x, the division recorded at ``origin`` (a loop body fused at each iteration)."""
    steps = (
        Step("elementwise_div", _AXIS, (("in", 0), ("in", 1)), origin),
        Step("elementwise_add", _AXIS, (("step", 0), ("in", 0)), ("add", "a", None)),
    )
    inputs = (((8, 4), "float32"), ((8, 4), "float32"))
    return Expression(inputs, (8, 4), steps, (1,), (), ("float32",))


@pytest.mark.parametrize("name", ["auto", "reference", "blocked"])
def test_groups_of_one_structure_share_a_kernel_and_each_names_its_own_op(fresh_cache, name):
    first = _divide_group(("elementwise_div", "div_3", "loop.py:7 in body"))
    later = _divide_group(("elementwise_div", "div_40", "loop.py:9 in body"))
    assert first != later and first.structure == later.structure
    x, y = np.ones((8, 4), np.float32), np.full((8, 4), 2.0, np.float32)
    with fused.backend(name):
        one, two = fused.kernel_for(first, np), fused.kernel_for(later, np)
        assert _shared(one) is _shared(two)
        np.testing.assert_array_equal(two(x, y)[0], x / y + x)
        y[3, 1] = 0.0
        for kernel, op, line in ((one, "div_3", "loop.py:7"), (two, "div_40", "loop.py:9")):
            with np.errstate(divide="raise"), pytest.raises(tape.ExecutionError) as info:
                kernel(x, y)
            assert f"({op})" in str(info.value) and f"recorded at: {line} in body" in str(
                info.value
            )


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="unknown fusion backend 'fast'; valid: auto, reference"):
        fused.set_backend("fast")
    assert fused.current_backend() == "auto"


def test_blocked_runs_steps_on_broadcast_vectors_once_before_the_blocks():
    vector = ((64,), "float64")
    steps = (
        Step("elementwise_mul", _AXIS, (("in", 1), ("in", 2)), ("mul", "m", None)),
        Step("tanh", (), (("step", 0),), ("tanh", "t", None)),
        Step("elementwise_add", _AXIS, (("in", 0), ("step", 1)), ("add", "a", None)),
    )
    expression = Expression(
        (((512, 64), "float64"), vector, vector), (512, 64), steps, (2,), (), ()
    )
    expression = Expression(
        *[getattr(expression, f) for f in ("inputs", "shape", "steps")],
        (2, 1),
        (),
        ("float64", "float64"),
    )
    with small_blocks(1024):
        plan = _Blocked(expression, np, *_cut(expression))
    assert plan.fixed == {0, 1} and len(plan.program.code) == 1
    x, a, b = _arrays(expression)
    outs = plan.run(x, a, b)
    assert_same(outs[0], x + np.tanh(a * b), "blocked")
    assert_same(outs[1], np.tanh(a * b), "hoisted output")


def test_blocked_reuses_two_buffers_for_the_whole_chain():
    expression = chain_expression((4096, 256), "float32")
    plan = _Blocked(expression, np, *_cut(expression))
    assert plan.program.buffers == [((None, 256), np.dtype("float32"))] * 2
    assert blocked.BLOCK_BYTES == 1024 * 1024 and plan.chunk == 1024


@pytest.mark.parametrize("name", ["auto", "reference", "blocked", "cupy"])
def test_fused_kernels_run_on_the_emulated_gpu(name, fresh_cache):
    """On a device, each backend computes with the device module and never copies to the host."""
    device = EmulatedDevice()
    expression = chain_expression((64, 16), "float64")
    arrays = _arrays(expression)
    expected = run_backend("reference", expression, arrays)
    with installed(device), fused.backend(name):
        variables = [tape.Variable(device.asarray(a)) for a in arrays]
        device.reset_counts()
        outs = ops.fused_elementwise(variables, expression=expression)
        values = [o.value() for o in outs]
        assert device.counts["to_host"] == 0
        assert all(isinstance(v, device.ndarray) for v in values)
        got = [device.asnumpy(v) for v in values]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


def test_exact_keeps_every_output_bit_for_bit(fresh_cache):
    """exact=True (lazy mode's exact): no reassociated reductions, no libm from numba."""
    with_sums = chain_expression((2048, 256), "float32")
    arrays = _arrays(with_sums)
    assert fused.kernel_for(with_sums, np, exact=True).backend == "reference"
    assert fused.kernel_for(with_sums, np).backend == "blocked"
    plain = Expression(
        *[getattr(with_sums, f) for f in ("inputs", "shape", "steps", "outputs")],
        (),
        with_sums.dtypes[:2],
    )
    with fused.backend("numba"):
        assert fused.kernel_for(plain, np, exact=True).backend == "blocked"
    variables = [tape.Variable(a) for a in arrays]
    got = ops.fused_elementwise(variables, expression=with_sums, exact=True)
    want = run_backend("reference", with_sums, arrays)
    for g, w in zip(got, want):
        assert_same(g.numpy(), w, "exact")


@pytest.mark.parametrize("shape", [(), (1,), (3, 4)], ids=["0-d", "one element", "matrix"])
def test_generated_kernels_give_arrays_never_numpy_scalars(fresh_cache, shape):
    """A ufunc on 0-d arrays gives a numpy scalar: the engine only ever holds arrays."""
    steps = (
        Step("elementwise_mul", _AXIS, (("in", 0), ("in", 1)), ("mul", "m", None)),
        Step("elementwise_add", _AXIS, (("step", 0), ("in", 1)), ("add", "a", None)),
        Step("tanh", (), (("step", 1),), ("tanh", "t", None)),
    )
    expression = Expression(
        ((shape, "float32"), (shape, "float32")), shape, steps, (0, 1, 2), (), ("float32",) * 3
    )
    inputs = _arrays(expression)
    kernel = fused.kernel_for(expression, np)
    assert kernel.backend == "reference"
    outs = kernel(*inputs)
    assert [out.__class__ for out in outs] == [np.ndarray] * 3
    expected = np.tanh(inputs[0] * inputs[1] + inputs[1])
    np.testing.assert_array_equal(outs[2], expected)


def test_fused_groups_that_stay_in_numpy_never_import_numba():
    """numba and LLVM are ~70 MiB of resident code: only a compile imports them."""
    import subprocess
    import sys

    script = (
        "import sys, numpy as np, tape, ops\n"
        "x = tape.Variable(np.ones((64, 64), np.float32), requires_grad=True)\n"
        "for _ in range(6):\n"
        "    with tape.lazy():\n"
        "        tape.reset_global_tape()\n"
        "        tape.backward((ops.tanh(x * 2.0 + 1.0) * x).sum())\n"
        "        x.grad()\n"
        "print('numba' in sys.modules, 'llvmlite' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["False", "False"]
