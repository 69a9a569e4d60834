"""sigmoid, sigmoid_grad, tanh_grad, relu_grad, silu, quick_gelu and silu_grad compute in one
buffer the very ufuncs of their formulas (fresh temporaries of large arrays cost page faults):
bit for bit the plain expressions, for 0-d, broadcast and non-contiguous inputs, float32 and
float64."""

import numpy as np
import pytest

from ops.registry import REGISTRY


def _sigmoid(x):
    with np.errstate(over="ignore"):  # (below x = -88 in float32: 1 / (1 + inf) = 0)
        return 1.0 / (1.0 + np.exp(-x))


CASES = [
    ((300, 7), (300, 7)),
    ((), ()),
    ((5, 1), (5, 4)),  # (the gradient broadcast against the output)
    ((5, 4), (4,)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("out_shape, gout_shape", CASES)
def test_kernels_equal_their_formulas_bit_for_bit(dtype, out_shape, gout_shape):
    rng = np.random.default_rng(0)
    x = np.asarray(rng.uniform(-100.0, 100.0, out_shape), dtype)
    gout = np.asarray(rng.standard_normal(gout_shape), dtype)
    np.testing.assert_array_equal(REGISTRY["sigmoid"].kernel(np, {}, x), _sigmoid(x))
    out = np.tanh(x)
    np.testing.assert_array_equal(
        REGISTRY["tanh_grad"].kernel(np, {}, out, gout), gout * (1.0 - out * out)
    )
    out = _sigmoid(x)
    np.testing.assert_array_equal(
        REGISTRY["sigmoid_grad"].kernel(np, {}, out, gout), gout * out * (1.0 - out)
    )
    out = np.asarray(np.maximum(x, 0))
    if out.ndim:
        out[..., :1] = np.nan  # (a NaN output passes its gradient, as in PyTorch)
    np.testing.assert_array_equal(
        REGISTRY["relu_grad"].kernel(np, {}, out, gout), gout * ~(out <= 0)
    )
    np.testing.assert_array_equal(REGISTRY["silu"].kernel(np, {}, x), x * _sigmoid(x))
    np.testing.assert_array_equal(REGISTRY["quick_gelu"].kernel(np, {}, x), x * _sigmoid(x * 1.702))
    if gout.shape == x.shape:  # (silu_grad takes X and Out@GRAD of one shape)
        for beta in (1.0, 1.702):
            bx = x * beta if beta != 1.0 else x
            s = _sigmoid(bx)
            np.testing.assert_array_equal(
                REGISTRY["silu_grad"].kernel(np, {"beta": beta}, x, gout),
                gout * (s * (1.0 + bx * (1.0 - s))),
            )


def test_a_non_contiguous_input_is_read_not_written():
    x = np.linspace(-5.0, 5.0, 40).reshape(8, 5).T  # (a transposed view)
    before = x.copy()
    np.testing.assert_array_equal(REGISTRY["sigmoid"].kernel(np, {}, x), _sigmoid(before))
    gout = np.ones_like(x)
    REGISTRY["tanh_grad"].kernel(np, {}, x, gout)
    REGISTRY["sigmoid_grad"].kernel(np, {}, x, gout)
    REGISTRY["relu_grad"].kernel(np, {}, x, gout)
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(gout, np.ones_like(x))
