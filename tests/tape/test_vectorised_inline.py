"""A vectorised program's elementwise steps and slices run as inline numpy expressions
(``ops.call._INLINE``) on arrays below ``buffers.MIN_BYTES``, their kernels above: either way
every value and gradient is bit for bit what the same function gives eagerly, one example
at a time (elementwise ops batch without reassociating anything)."""

import contextlib
import warnings

import numpy as np
import pytest

import ops
import tape
from ops import buffers

ROWS = 24  # (examples: one group's members)


def _cell(x, y):
    """Every op ``_INLINE`` lists, and slices, forward and (through backward) their gradients."""
    a = ops.tanh(x[1:]) * ops.sigmoid(y[:-1])
    b = (x[:-1] + y[1:]) / (2.0 + ops.sigmoid(x[1:]))
    return a - b * ops.tanh(y[1:])


def _examples(rows, width, dtypes, seed=0):
    """Pairs (x, y) of ``dtypes``; y needs a gradient only where both have one dtype (a traced
    function's gradients leave its call packed in one array of one dtype)."""
    rng = np.random.default_rng(seed)
    wants = (True, dtypes[0] == dtypes[1])
    return [
        tuple(
            tape.Variable((rng.standard_normal(width) * 4).astype(dtype), requires_grad=want)
            for dtype, want in zip(dtypes, wants, strict=True)
        )
        for _ in range(rows)
    ]


def _values_and_grads(examples, fn, lazy):
    with tape.lazy(compile=False) if lazy else contextlib.nullcontext():
        tape.reset_global_tape()
        # (x * 1.0: values computed in the step, read per example; leaves that need a
        # gradient would be passed as parameters, shared by every call)
        outs = [fn(x * 1.0, y * 1.0) for x, y in examples]
        tape.backward(ops.stack([out.sum() for out in outs]).sum())
        values = [out.numpy() for out in outs]
        grads = [[v.grad().numpy() for v in pair if v.requires_grad] for pair in examples]
    for pair in examples:
        for v in pair:
            v.clear_grad()
    return values, grads


@pytest.mark.parametrize(
    "dtypes",
    [("float32", "float32"), ("float64", "float64"), ("float32", "float64")],
    ids=["float32", "float64", "mixed"],
)
@pytest.mark.parametrize(
    "width", [9, 2 * buffers.MIN_BYTES // 4 // ROWS], ids=["inline", "kernels"]
)
def test_batched_elementwise_steps_equal_eager_bit_for_bit(dtypes, width):
    examples = _examples(ROWS, width, dtypes)
    eager = _values_and_grads(examples, _cell, lazy=False)
    batched = _values_and_grads(examples, tape.traced(_cell), lazy=True)
    for got, want in zip(batched[0], eager[0], strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    for got, want in zip(batched[1], eager[1], strict=True):
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


def test_inlined_sigmoid_reports_no_overflow_as_eager_reports_none():
    x = tape.Variable(np.array([-200.0, 0.0, 200.0], np.float32), requires_grad=True)
    examples = [(x, x)] * 3
    with np.errstate(over="warn"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        eager = _values_and_grads(examples, _cell, lazy=False)
        batched = _values_and_grads(examples, tape.traced(_cell), lazy=True)
    assert [str(w.message) for w in caught] == []
    for got, want in zip(batched[0], eager[0], strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(batched[1], eager[1], strict=True):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
