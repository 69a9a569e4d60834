"""The numba backend's packed outputs and flat loops (``ops.fusion_backends.numba_loops``).

A small expression's full outputs are rows of one block per (shape, dtype) and a loop over
equal shapes walks one flat axis: both only change how the loop stores and counts, never a
value, so every case here is compared bit for bit with the reference backend (exact rules
only), and the outputs must behave as arrays of their own.
"""

import numpy as np
import pytest

from ops.fused_expression import Expression, Reduction, Step
from ops.fusion_backends import numba_loops, reference
from tests.ops.fused_helpers import assert_same

pytestmark = pytest.mark.skipif(not numba_loops.available(), reason="numba is not installed")

_AXIS = (("axis", -1),)


def _step(op, args, attrs=_AXIS):
    return Step(op, attrs, args, (op, f"{op}_0", None))


def _ladder(shape, dtype, length, reductions=()):
    """h = (h + p) * p, ``length`` times, every step an output: the chain of the scaling
    benchmark without its tanh (exact rules, so bit for bit)."""
    steps, h = [], ("in", 0)
    for _ in range(length):
        steps.append(_step("elementwise_add", (h, ("in", 1))))
        steps.append(_step("elementwise_mul", (("step", len(steps) - 1), ("in", 1))))
        h = ("step", len(steps) - 1)
    outputs = tuple(range(len(steps)))
    dtypes = (dtype,) * (len(outputs) + len(reductions))
    inputs = ((shape, dtype), (shape, dtype))
    return Expression(inputs, shape, tuple(steps), outputs, tuple(reductions), dtypes)


def _mixed(dtype="float32"):
    """Outputs of three shapes and two dtypes: a full (3, 4) chain, its (1, 4) vector's steps,
    a bool comparison and a 0-d constant's step."""
    steps = (
        _step("elementwise_add", (("in", 1), ("in", 1))),  # (1, 4)
        _step("elementwise_mul", (("step", 0), ("in", 1))),  # (1, 4)
        _step("elementwise_add", (("in", 0), ("step", 1))),  # (3, 4)
        _step("elementwise_mul", (("step", 2), ("in", 0))),  # (3, 4)
        _step("greater_than", (("step", 3), ("in", 0))),  # (3, 4) bool
        _step("greater_than", (("step", 2), ("in", 0))),  # (3, 4) bool
        _step("elementwise_add", (("in", 2), ("in", 2))),  # ()
    )
    inputs = (((3, 4), dtype), ((1, 4), dtype), ((), dtype))
    dtypes = (dtype,) * 4 + ("bool", "bool", dtype)
    return Expression(inputs, (3, 4), steps, (0, 1, 2, 3, 4, 5, 6), (), dtypes)


def _inputs(expression, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.0, s).astype(d) for s, d in expression.inputs]


def _assert_like_reference(expression, inputs):
    got = numba_loops.compile(expression, np)(*inputs)
    expected = reference.compile(expression, np)(*inputs)
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g.__class__ is np.ndarray and g.shape == e.shape, f"output {k}"
        assert_same(g, e, f"output {k}")
    return got


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_small_expressions_outputs_are_rows_of_one_block_equal_to_the_reference(dtype):
    expression = _ladder((4, 4), dtype, 12)
    packing = numba_loops.Packing(expression, chunks=1)
    assert packing.alone == [] and len(packing.blocks) == 1
    assert packing.blocks[0][0] == (24, 4, 4)
    assert numba_loops.flat_loop(expression, 1)  # (two inputs, one block: it vectorises)
    outs = _assert_like_reference(expression, _inputs(expression))
    assert all(o.flags.c_contiguous and o.flags.writeable for o in outs)


def test_packed_outputs_are_independent_arrays():
    expression = _ladder((4, 4), "float32", 4)
    outs = numba_loops.compile(expression, np)(*_inputs(expression))
    before = [o.copy() for o in outs]
    outs[3][...] = -1.0
    for k, (o, b) in enumerate(zip(outs, before, strict=True)):
        if k != 3:
            assert_same(o, b, f"output {k} after writing output 3")
    assert not any(np.shares_memory(outs[3], o) for k, o in enumerate(outs) if k != 3)


def test_outputs_of_several_shapes_and_dtypes_pack_by_shape_and_dtype():
    expression = _mixed()
    packing = numba_loops.Packing(expression, chunks=1)
    shapes = sorted((shape, dtype.name) for shape, dtype, _ in packing.blocks)
    assert shapes == [((2, 1, 4), "float32"), ((2, 3, 4), "bool"), ((2, 3, 4), "float32")]
    assert packing.alone == [6]  # (the 0-d output: rows of a 0-d block would be scalars)
    assert not numba_loops.flat_loop(expression, 1)  # (a (1, 4) input is not the whole shape)
    _assert_like_reference(expression, _inputs(expression))


def test_a_flat_loop_reads_non_contiguous_inputs_in_their_logical_order():
    expression = _ladder((5, 3), "float64", 3)
    assert numba_loops.flat_loop(expression, 1)
    x, p = _inputs(expression)
    transposed = [np.ascontiguousarray(x.T).T, np.ascontiguousarray(p.T).T]
    assert not transposed[0].flags.c_contiguous
    _assert_like_reference(expression, transposed)
    _assert_like_reference(expression, [x[:, ::-1], p[::-1]])


def test_a_flat_loop_keeps_a_sum_over_every_axis():
    total = Reduction(5, (0, 1), False, False, ())
    expression = _ladder((6, 8), "float64", 3, reductions=(total,))
    assert numba_loops.flat_loop(expression, 1)
    inputs = _inputs(expression)
    got = numba_loops.compile(expression, np)(*inputs)
    expected = reference.compile(expression, np)(*inputs)
    for g, e in zip(got[:-1], expected[:-1], strict=True):
        assert_same(g, e, "full output")
    np.testing.assert_allclose(got[-1], expected[-1], rtol=1e-15)  # (summed in another order)
    assert got[-1].shape == ()


def test_large_outputs_stay_arrays_of_their_own():
    expression = _ladder((64, 128), "float32", 2)  # 4 outputs of 32 KiB: over PACK_MAX_BYTES
    packing = numba_loops.Packing(expression, chunks=1)
    assert packing.blocks == [] and packing.alone == [0, 1, 2, 3]
    outs = _assert_like_reference(expression, _inputs(expression))
    assert all(o.base is None for o in outs)


def test_many_arrays_keep_the_loop_nest():
    """Past VECTOR_ARRAYS arrays the loop does not vectorise: no flat views are made."""
    steps = tuple(
        _step("elementwise_add", (("in", k), ("in", k + 1)))
        for k in range(numba_loops.VECTOR_ARRAYS + 1)
    )
    shape = (4, 4)
    inputs = tuple((shape, "float32") for _ in range(numba_loops.VECTOR_ARRAYS + 2))
    expression = Expression(inputs, shape, steps, (len(steps) - 1,), (), ("float32",))
    assert not numba_loops.flat_loop(expression, 1)
    _assert_like_reference(expression, _inputs(expression))


@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (1, 1)], ids=["no-rows", "no-columns", "one"])
def test_size_zero_and_size_one_shapes_pack_too(shape):
    expression = _ladder(shape, "float32", 3)
    outs = _assert_like_reference(expression, _inputs(expression))
    assert all(o.shape == shape for o in outs)
