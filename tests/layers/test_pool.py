"""MaxPool2D, AvgPool2D and the pool2d op: values and gradients against per-window loops and
torch.nn.functional, ties, ceil mode, padding, gradients of gradients and error messages."""

import numpy as np
import pytest

import layers
import ops
import tape
from tests.layers.numeric import check_layer_gradients
from tests.ops.cases_pool import distinct, pool_grad_reference, pool_reference

RNG = np.random.default_rng(0)


def test_stride_defaults_to_the_kernel_size():
    pool = layers.MaxPool2D(3)
    assert pool.stride == (3, 3)
    assert pool(tape.Variable(np.ones((1, 2, 7, 6), np.float32))).shape == (1, 2, 2, 2)
    assert layers.AvgPool2D((2, 3), stride=1)(tape.Variable(np.ones((1, 1, 4, 4)))).shape == (
        1,
        1,
        3,
        2,
    )


@pytest.mark.parametrize(
    "layer, attrs",
    [
        (layers.MaxPool2D(2), {"pooling_type": "max", "ksize": (2, 2)}),
        (
            layers.MaxPool2D(3, stride=2, padding=1, ceil_mode=True),
            {
                "pooling_type": "max",
                "ksize": (3, 3),
                "strides": (2, 2),
                "paddings": (1, 1),
                "ceil_mode": True,
            },
        ),
        (
            layers.AvgPool2D((3, 2), stride=(2, 1), padding=(1, 0)),
            {
                "pooling_type": "avg",
                "ksize": (3, 2),
                "strides": (2, 1),
                "paddings": (1, 0),
                "exclusive": False,
            },
        ),
        (
            layers.AvgPool2D(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
            {
                "pooling_type": "avg",
                "ksize": (3, 3),
                "strides": (2, 2),
                "paddings": (1, 1),
                "ceil_mode": True,
                "exclusive": True,
            },
        ),
    ],
)
def test_layers_match_the_window_loop_reference(layer, attrs):
    x = distinct((2, 2, 7, 6))(RNG, np.float64)
    np.testing.assert_allclose(
        layer(tape.Variable(x)).numpy(), pool_reference(x, **attrs), rtol=1e-12
    )
    check_layer_gradients(layer, layer, [x])


def test_max_pool_gradient_goes_to_the_first_maximum_of_a_window():
    x = tape.Variable(np.array([[[[1.0, 3.0], [3.0, 0.0]]]]), requires_grad=True)
    tape.backward(ops.pool2d(x, ksize=[2, 2]).sum())
    np.testing.assert_array_equal(x.grad().numpy(), [[[[0.0, 1.0], [0.0, 0.0]]]])


def test_a_nan_is_the_maximum_and_its_first_occurrence_takes_the_gradient():
    x = tape.Variable(np.array([[[[1.0, np.nan], [np.nan, 5.0]]]]), requires_grad=True)
    out = ops.pool2d(x, ksize=[2, 2])
    tape.backward(out.sum())
    assert np.isnan(out.numpy()).all()
    np.testing.assert_array_equal(x.grad().numpy(), [[[[0.0, 1.0], [0.0, 0.0]]]])


def test_overlapping_windows_add_their_gradients():
    x0 = distinct((1, 1, 5, 5))(RNG, np.float64)
    x = tape.Variable(x0, requires_grad=True)
    attrs = {"pooling_type": "max", "ksize": [3, 3], "strides": [1, 1]}
    gout = RNG.standard_normal((1, 1, 3, 3))
    tape.backward(ops.pool2d(x, **attrs), grad=gout)
    np.testing.assert_allclose(x.grad().numpy(), pool_grad_reference(x0, gout, **attrs))


def test_float32_stays_float32():
    x = tape.Variable(RNG.standard_normal((2, 3, 4, 4)).astype(np.float32), requires_grad=True)
    for layer in (layers.MaxPool2D(2, padding=1), layers.AvgPool2D(3, 1, 1)):
        out = layer(x)
        (gx,) = tape.grad(out.sum(), [x])
        assert out.dtype == np.float32 and gx.dtype == np.float32


def test_errors_say_which_rule_failed():
    x = tape.Variable(np.ones((1, 1, 4, 4), np.float32))
    with pytest.raises(tape.ShapeError) as err:
        ops.pool2d(x, ksize=[2, 2], paddings=[2, 0])
    assert (
        "op 'pool2d'" in str(err.value)
        and "padding is more than half the window" in str(err.value)
        and "expected: paddings along H <= ksize / 2 = 1.0" in str(err.value)
    )
    with pytest.raises(
        tape.ShapeError,
        match=r"window is larger than the padded input\n"
        r"  expected: ksize along W \(5\) <= padded size \(4\)",
    ):
        layers.MaxPool2D((2, 5))(x)
    with pytest.raises(tape.ShapeError, match=r"input X must be 4-D"):
        layers.AvgPool2D(2)(tape.Variable(np.ones((4, 4))))
    with pytest.raises(
        tape.AttrError,
        match=r"attribute 'pooling_type' has an invalid value\n"
        r"  expected: one of \['max', 'avg'\]",
    ):
        ops.pool2d(x, pooling_type="min", ksize=[2, 2])
    with pytest.raises(tape.AttrError, match="missing required attribute 'ksize'"):
        ops.pool2d(x)


# --- against PyTorch --------------------------------------------------------------------------

CONFIGS = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), ceil_mode=True),
    dict(kernel_size=(2, 4), stride=(3, 3), padding=(0, 2), ceil_mode=True),
    dict(kernel_size=1, stride=2),
    dict(kernel_size=2, ceil_mode=True),
]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("kind", ["max", "avg_include_pad", "avg_exclude_pad"])
def test_values_and_gradients_equal_torch(config, kind):
    torch = pytest.importorskip("torch")
    functional = torch.nn.functional
    x0 = RNG.standard_normal((2, 3, 8, 7))
    if kind == "max":
        layer, reference = layers.MaxPool2D(**config), functional.max_pool2d
    else:
        include = kind == "avg_include_pad"
        layer = layers.AvgPool2D(**config, count_include_pad=include)
        reference = lambda x, **c: functional.avg_pool2d(x, count_include_pad=include, **c)
    x, tx = tape.Variable(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    out, expected = layer(x), reference(tx, **config)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-12)
    cotangent = RNG.standard_normal(out.shape)
    tape.backward(out, grad=cotangent)
    expected.backward(torch.tensor(cotangent))
    np.testing.assert_allclose(x.grad().numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "config",
    [
        dict(kernel_size=3, stride=(2, 1), padding=1, ceil_mode=True),
        dict(kernel_size=2),  # windows tiling X: the gradient is written without accumulating
        dict(kernel_size=2, stride=3),
    ],
)
def test_max_pool_ties_route_like_torch(config):
    torch = pytest.importorskip("torch")
    x0 = RNG.integers(0, 3, (2, 2, 8, 7)).astype(np.float64)
    x, tx = tape.Variable(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    out = layers.MaxPool2D(**config)(x)
    expected = torch.nn.functional.max_pool2d(tx, **config)
    cotangent = RNG.standard_normal(out.shape)
    tape.backward(out, grad=cotangent)
    expected.backward(torch.tensor(cotangent))
    np.testing.assert_allclose(x.grad().numpy(), tx.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("out_given", [True, False])
@pytest.mark.parametrize("attrs", [{"ksize": [2, 2]}, {"ksize": [2, 2], "paddings": [1, 1]}])
def test_max_pool_grad_with_or_without_out_routes_nan_and_inf_like_where(attrs, out_given, dtype):
    """Out (pool2d's output) only saves recomputing the maxima; a NaN is the maximum, and an
    inf or NaN in Out@GRAD reaches only the maximum's element (the selection is a bit mask as
    wide as each float dtype)."""
    x0 = np.array([[[[1.0, np.nan, 2.0, 0.0], [np.nan, 5.0, 2.0, 2.0]]]], dtype)
    gout0 = np.full((1, 1) + ((1, 2) if "paddings" not in attrs else (2, 3)), np.inf, dtype)
    gout0[..., 0] = np.nan
    x, gout = tape.Variable(x0), tape.Variable(gout0)
    out = ops.pool2d(x, **attrs) if out_given else None
    gx = ops.pool2d_grad(x, gout, out, **attrs).numpy()
    if "paddings" in attrs:  # windows: rows {0}, {1} by columns {0}, {1, 2}, {3}
        expected = [[[[np.nan, np.inf, 0.0, np.inf], [np.nan, np.inf, 0.0, np.inf]]]]
    else:
        expected = [[[[0.0, np.nan, np.inf, 0.0], [0.0, 0.0, 0.0, 0.0]]]]
    assert gx.dtype == dtype
    np.testing.assert_array_equal(gx, np.array(expected, dtype))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_max_pool_grad_of_a_strided_gradient_equals_torch(dtype):
    """Disjoint windows written straight into dX, from a non-contiguous Out@GRAD with negative
    values and ties (the first maximum takes the gradient, as in PyTorch)."""
    torch = pytest.importorskip("torch")
    x0 = RNG.integers(-2, 3, (2, 3, 6, 8)).astype(dtype)
    gout0 = RNG.standard_normal((2, 3, 4, 3)).astype(dtype).swapaxes(2, 3)
    gx = ops.pool2d_grad(tape.Variable(x0), tape.Variable(gout0), None, ksize=[2, 2]).numpy()
    tx = torch.tensor(x0.astype(np.float64), requires_grad=True)
    torch.nn.functional.max_pool2d(tx, 2).backward(torch.tensor(gout0.astype(np.float64)))
    assert gx.dtype == dtype
    np.testing.assert_array_equal(gx.astype(np.float64), tx.grad.numpy())


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_double_backward_equals_torch(kind):
    """Gradient of a function of dL/dX with respect to the cotangent weights and X."""
    torch = pytest.importorskip("torch")
    x0 = distinct((1, 2, 5, 5))(RNG, np.float64)
    w0 = RNG.standard_normal((1, 2, 3, 3))
    x, w = tape.Variable(x0, requires_grad=True), tape.Variable(w0, requires_grad=True)
    out = ops.pool2d(
        x, pooling_type=kind, ksize=[3, 3], strides=[2, 2], paddings=[1, 1], exclusive=False
    )
    (gx,) = tape.grad((out * w).sum(), [x], create_graph=True)
    ours = tape.grad((gx * gx * x).sum(), [x, w])
    tx, tw = torch.tensor(x0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    pool = torch.nn.functional.max_pool2d if kind == "max" else torch.nn.functional.avg_pool2d
    (tgx,) = torch.autograd.grad((pool(tx, 3, 2, 1) * tw).sum(), [tx], create_graph=True)
    theirs = torch.autograd.grad((tgx * tgx * tx).sum(), [tx, tw])
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)


def test_a_one_element_window_pools_to_a_copy_of_the_input():
    x0 = RNG.standard_normal((1, 2, 3, 4))
    out = ops.pool2d(tape.Variable(x0), ksize=[1, 1]).numpy()
    np.testing.assert_array_equal(out, x0)
    assert not np.shares_memory(out, x0)
