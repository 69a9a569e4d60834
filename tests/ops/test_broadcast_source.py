"""A unary op on a large broadcast view runs on the view's source and broadcasts the result:
same values, no pass over the full shape (``ops.unary.broadcast_source``)."""

import numpy as np
import pytest

import ops
import tape
from ops.registry import REGISTRY
from ops.unary import broadcast_source


@pytest.mark.parametrize(
    "source, shape",
    [
        (np.float32(1.5), (512, 256)),  # a sum's gradient: one value everywhere
        (np.arange(256, dtype=np.float32), (512, 256)),  # a row broadcast over rows
        (np.arange(512, dtype=np.float64).reshape(512, 1), (512, 256)),  # a column
        (np.full((1, 3, 1), -2.0, np.float32), (64, 3, 512)),  # several broadcast axes
    ],
)
def test_neg_of_a_broadcast_view_equals_neg_of_the_full_array_without_a_full_pass(source, shape):
    view = np.broadcast_to(source, shape)
    small = broadcast_source(view)
    assert small is not None and small.size == np.size(source)
    out = REGISTRY["neg"].kernel(np, {}, view)
    assert out.shape == shape and out.dtype == view.dtype
    np.testing.assert_array_equal(out, -np.ascontiguousarray(view))
    assert 0 in out.strides and not out.flags.writeable  # (still a broadcast view)


def test_small_or_dense_arrays_have_no_broadcast_source():
    assert broadcast_source(np.ones((512, 256), np.float32)) is None
    assert broadcast_source(np.broadcast_to(np.float32(1), (4, 4))) is None  # (under 256 KiB)
    assert broadcast_source(np.ones((1024, 512), np.float32)[:, ::2]) is None  # strided, no 0


def test_a_subtraction_after_a_sum_differentiates_through_the_broadcast_gradient():
    rng = np.random.default_rng(0)
    x = tape.Variable(rng.standard_normal((512, 256)).astype(np.float32), requires_grad=True)
    y = tape.Variable(rng.standard_normal((512, 256)).astype(np.float32), requires_grad=True)
    loss = (ops.tanh(x) - y * x).sum()
    tape.backward(loss)
    xv, yv = x.numpy(), y.numpy()
    np.testing.assert_allclose(x.grad().numpy(), 1 - np.tanh(xv) ** 2 - yv, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(y.grad().numpy(), -xv)
