"""BLAS control: the thread count is settable where numpy's BLAS allows it, small products run
single-threaded without changing the process setting, and the product policy keeps values."""

import sys

import numpy as np
import pytest

import tape
from ops import blas

matmul_module = sys.modules["ops.matmul"]
controllable = pytest.mark.skipif(
    blas.get_num_threads() is None, reason="numpy's BLAS exposes no thread control here"
)


@controllable
def test_set_num_threads_round_trips():
    before = blas.get_num_threads()
    try:
        assert tape.set_num_threads(1) is True
        assert tape.get_num_threads() == 1
    finally:
        blas.set_num_threads(before)


@controllable
def test_single_threaded_leaves_the_process_setting_alone():
    before = blas.get_num_threads()
    with blas.single_threaded():
        np.ones((4, 4)) @ np.ones((4, 4))
    assert blas.get_num_threads() == before


@pytest.mark.parametrize("m, k, n", [(3, 5, 7), (16, 64, 512), (200, 300, 100)])
def test_product_equals_numpy_for_plain_and_transposed_weights(m, k, n):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k))
    weight = rng.standard_normal((n, k))
    np.testing.assert_allclose(matmul_module.product(np, x, weight.T), x @ weight.T, rtol=1e-12)
    np.testing.assert_allclose(
        matmul_module.product(np, x, weight.T.copy()), x @ weight.T, rtol=1e-12
    )


def test_batched_products_are_unchanged():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((3, 5, 6))
    np.testing.assert_allclose(matmul_module.product(np, a, b), a @ b, rtol=1e-12)
