"""Kernels on large broadcast views (``ops.broadcast_views``): a unary op runs on the view's
source and broadcasts the result, a product with ones broadcast is the other factor -- the same
values as the full computation, with no pass over the full shape, as read-only views."""

import numpy as np
import pytest

import ops
import tape
from ops.broadcast_views import broadcast_source, times_one
from ops.registry import REGISTRY


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


def _mul(x, y):
    return REGISTRY["elementwise_mul"].kernel(np, {"axis": -1}, x, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_product_with_ones_broadcast_is_the_other_factor_bit_for_bit(dtype):
    rng = np.random.default_rng(0)
    other = rng.standard_normal((512, 256)).astype(dtype)
    other[0, :4] = [np.nan, np.inf, -0.0, -np.inf]
    ones = np.broadcast_to(np.ones((), dtype), other.shape)
    for product in (_mul(ones, other), _mul(other, ones)):
        np.testing.assert_array_equal(product.view(np.uint8), (other * 1).view(np.uint8))
        assert np.shares_memory(product, other) and not product.flags.writeable


@pytest.mark.parametrize(
    "ones, other",
    [
        (np.broadcast_to(np.float32(2.0), (512, 256)), np.ones((512, 256), np.float32)),
        (np.broadcast_to(np.float64(1.0), (512, 256)), np.ones((512, 256), np.float32)),
        (np.broadcast_to(np.arange(256, dtype=np.float32), (512, 256)), np.ones((512, 256))),
        (np.broadcast_to(np.float32(1.0), (512, 256)), np.ones((256,), np.float32)),
    ],
    ids=["not one", "other dtype", "not one value", "other broadcast"],
)
def test_other_products_are_computed(ones, other):
    assert times_one(ones, other) is None
    product = _mul(ones, other)
    np.testing.assert_array_equal(product, np.multiply(ones, other))
    assert not np.shares_memory(product, other)


def test_a_gradient_that_is_a_forward_value_is_never_written_in_place():
    rng = np.random.default_rng(1)
    a = tape.Variable(rng.standard_normal((512, 256)).astype(np.float32), requires_grad=True)
    b = tape.Variable(rng.standard_normal((512, 256)).astype(np.float32), requires_grad=True)
    b_before = b.numpy().copy()
    # d/da sum(a * b) is b itself (a view of b's buffer); a's second and third contributions
    # are then added to it, which must not write into b
    tape.backward((a * b).sum() + (a * 2.0).sum() + a.sum())
    np.testing.assert_array_equal(b.numpy(), b_before)
    np.testing.assert_allclose(a.grad().numpy(), b_before + 3.0, rtol=1e-6)
    np.testing.assert_array_equal(b.grad().numpy(), a.numpy())
