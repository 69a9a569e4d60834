"""Max/avg pooling 1-D and 3-D, dilation, return_indices, max unpooling and adaptive pooling
against torch.nn (values, indices, gradients, gradients of gradients), integer max pooling, and
the layers' errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layers
import ops
import tape

torch = pytest.importorskip("torch")
F = torch.nn.functional
RNG = np.random.default_rng(0)


def _distinct(shape):
    """Shuffled values 0.05 apart: no ties, so the argmax is the same for both libraries."""
    return RNG.permutation(int(np.prod(shape))).reshape(shape) * 0.05 - 1.0


def _check(out, expected, pairs, cotangent=None):
    assert out.shape == tuple(expected.shape)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-12, atol=1e-14)
    cotangent = RNG.standard_normal(out.shape) if cotangent is None else cotangent
    ours = tape.grad((out * tape.Variable(cotangent)).sum(), [v for v, _ in pairs])
    theirs = torch.autograd.grad(expected, [t for _, t in pairs], torch.from_numpy(cotangent))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)


CONFIGS = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=2, stride=1, padding=1, dilation=2),
    dict(kernel_size=3, stride=2, dilation=2, ceil_mode=True),
]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_pool_layers_with_and_without_indices_equal_torch(nd, config):
    x0 = _distinct((2, 2) + (8, 7, 6)[:nd])
    for return_indices in (False, True):
        layer = getattr(layers, f"MaxPool{nd}D")(**config, return_indices=return_indices)
        module = getattr(torch.nn, f"MaxPool{nd}d")(**config, return_indices=return_indices)
        x, tx = tape.Variable(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
        out, expected = layer(x), module(tx)
        if return_indices:
            (out, index), (expected, t_index) = out, expected
            assert index.dtype == np.int64
            np.testing.assert_array_equal(index.numpy(), t_index.numpy())
        _check(out, expected, [(x, tx)])


@pytest.mark.parametrize("include_pad", [True, False])
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_avg_pool_layers_equal_torch(nd, include_pad):
    x0 = RNG.standard_normal((2, 3) + (7, 6, 5)[:nd])
    for config in (dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)):
        layer = getattr(layers, f"AvgPool{nd}D")(**config, count_include_pad=include_pad)
        module = getattr(torch.nn, f"AvgPool{nd}d")(**config, count_include_pad=include_pad)
        x, tx = tape.Variable(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
        _check(layer(x), module(tx), [(x, tx)])


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8])
@pytest.mark.parametrize("nd", [1, 2])
def test_max_pool_takes_integers_like_torch_forward_only(nd, dtype):
    """PyTorch max-pools integers (no gradient): so do we, indices included."""
    x0 = RNG.integers(0, 100, (2, 2) + (6, 7)[:nd]).astype(dtype)
    x = tape.Variable(x0)
    for config in (dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1, dilation=1)):
        out, index = getattr(layers, f"MaxPool{nd}D")(**config, return_indices=True)(x)
        t_out, t_index = getattr(F, f"max_pool{nd}d")(
            torch.from_numpy(x0.astype(np.int64)), **config, return_indices=True
        )
        assert out.dtype == dtype and not out.requires_grad
        np.testing.assert_array_equal(out.numpy(), t_out.numpy())
        # Ties: both take the first maximum in row-major order.
        np.testing.assert_array_equal(index.numpy(), t_index.numpy())
        np.testing.assert_array_equal(
            getattr(layers, f"MaxPool{nd}D")(**config)(x).numpy(), out.numpy()
        )


def test_avg_and_adaptive_avg_pooling_refuse_integers():
    x = tape.Variable(np.arange(16).reshape(1, 1, 4, 4))
    with pytest.raises(tape.DTypeError, match=r"input X must be floating point"):
        layers.AvgPool2D(2)(x)
    with pytest.raises(tape.DTypeError, match=r"expected: floating point"):
        layers.AdaptiveAvgPool2D(2)(x)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_unpool_inverts_max_pool_like_torch(nd):
    x0 = _distinct((2, 3) + (7, 6, 5)[:nd])
    pool = getattr(layers, f"MaxPool{nd}D")(2, stride=2, return_indices=True)
    unpool = getattr(layers, f"MaxUnpool{nd}D")(2, stride=2)
    x, tx = tape.Variable(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    out, index = pool(x)
    t_out, t_index = getattr(F, f"max_pool{nd}d")(tx, 2, 2, return_indices=True)
    size = x0.shape[2:]
    _check(
        unpool(out, index, output_size=size),
        getattr(torch.nn, f"MaxUnpool{nd}d")(2, 2)(t_out, t_index, output_size=size),
        [(x, tx)],
    )
    even = _distinct((1, 2) + (4, 6, 2)[:nd])
    restored = unpool(*pool(tape.Variable(even)))  # default: (L - 1) * stride - 2 * pad + k
    t_pooled = getattr(F, f"max_pool{nd}d")(torch.from_numpy(even), 2, 2, return_indices=True)
    expected = getattr(F, f"max_unpool{nd}d")(*t_pooled, 2, 2)
    np.testing.assert_array_equal(restored.numpy(), expected.numpy())


def test_max_unpool_errors():
    x = tape.Variable(np.ones((1, 1, 2)))
    with pytest.raises(ValueError, match=r"invalid output_size \(9,\)"):
        layers.MaxUnpool1D(2)(x, tape.Variable(np.zeros((1, 1, 2), np.int64)), output_size=(9,))
    with pytest.raises(tape.IndexingError, match=r"Indices hold a position outside the plane"):
        ops.max_unpool1d(x, tape.Variable(np.array([[[0, 4]]])), output_size=[4])
    with pytest.raises(tape.DTypeError, match=r"input Indices must be integer"):
        ops.max_unpool1d(x, tape.Variable(np.zeros((1, 1, 2))), output_size=[4])


@settings(max_examples=30, deadline=None)
@given(
    nd=st.sampled_from([1, 2, 3]),
    size=st.integers(1, 7),
    out=st.integers(1, 8),
    n=st.integers(0, 2),
)
def test_adaptive_pooling_equals_torch(nd, size, out, n):
    x0 = _distinct((n, 2) + (size,) * nd)
    x, tx = tape.Variable(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    mean = getattr(layers, f"AdaptiveAvgPool{nd}D")(out)(x)
    t_mean = getattr(F, f"adaptive_avg_pool{nd}d")(tx, out)
    top, index = getattr(layers, f"AdaptiveMaxPool{nd}D")(out, return_indices=True)(x)
    t_top, t_index = getattr(F, f"adaptive_max_pool{nd}d")(tx, out, return_indices=True)
    np.testing.assert_array_equal(index.numpy(), t_index.numpy())
    if n:
        _check(mean, t_mean, [(x, tx)])
        _check(top, t_top, [(x, tx)])


def test_adaptive_output_size_none_keeps_the_axis():
    x = tape.Variable(np.ones((1, 2, 5, 7, 3)))
    assert layers.AdaptiveMaxPool3D((2, None, 1))(x).shape == (1, 2, 2, 7, 1)
    with pytest.raises(ValueError, match=r"output_size must be an int >= 1 or 2 of them"):
        layers.AdaptiveAvgPool2D((0, 2))


@settings(max_examples=30, deadline=None)
@given(
    nd=st.sampled_from([1, 2, 3]),
    size=st.integers(1, 7),
    kernel=st.integers(1, 3),
    stride=st.integers(1, 3),
    padding=st.integers(0, 1),
    dilation=st.integers(1, 2),
    ceil_mode=st.booleans(),
)
def test_any_max_pool_with_indices_equals_torch(
    nd, size, kernel, stride, padding, dilation, ceil_mode
):
    if 2 * padding > kernel or dilation * (kernel - 1) + 1 > size + 2 * padding:
        return  # refused by both: the error tests cover it
    x0 = _distinct((2, 2) + (size,) * nd)
    config = dict(
        kernel_size=kernel, stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode
    )
    x, tx = tape.Variable(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    out, index = getattr(layers, f"MaxPool{nd}D")(**config, return_indices=True)(x)
    expected, t_index = getattr(F, f"max_pool{nd}d")(tx, **config, return_indices=True)
    np.testing.assert_array_equal(index.numpy(), t_index.numpy())
    if np.isinf(out.numpy()).any():
        # A window of padding only (dilation): -inf and PyTorch's index past the window, as it
        # does; its backward adds that window's gradient into the next plane, we give none.
        tape.backward(out, grad=RNG.standard_normal(out.shape))
        assert np.isfinite(x.grad().numpy()).all()
        return
    _check(out, expected, [(x, tx)])


@pytest.mark.parametrize("kind", ["with_index", "adaptive_max", "adaptive_avg"])
def test_double_backward_equals_torch(kind):
    """d/d(x, w) of sum(x * (dL/dx)^2) with L = <w, pool(x)>, dL/dx recorded (create_graph)."""
    x0 = _distinct((1, 2, 5, 6))
    if kind == "with_index":
        ours = lambda x: layers.MaxPool2D(3, 2, 1, return_indices=True)(x)[0]  # noqa: E731
        theirs = lambda x: F.max_pool2d(x, 3, 2, 1)  # noqa: E731
    elif kind == "adaptive_max":
        ours = lambda x: layers.AdaptiveMaxPool2D((3, 4))(x)  # noqa: E731
        theirs = lambda x: F.adaptive_max_pool2d(x, (3, 4))  # noqa: E731
    else:
        ours = lambda x: layers.AdaptiveAvgPool2D((3, 4))(x)  # noqa: E731
        theirs = lambda x: F.adaptive_avg_pool2d(x, (3, 4))  # noqa: E731
    x = tape.Variable(x0, requires_grad=True)
    out = ours(x)
    w = tape.Variable(RNG.standard_normal(out.shape), requires_grad=True)
    (gx,) = tape.grad((out * w).sum(), [x], create_graph=True)
    result = tape.grad((gx * gx * x).sum(), [x, w])
    tx, tw = torch.tensor(x0, requires_grad=True), torch.tensor(w.numpy(), requires_grad=True)
    (tgx,) = torch.autograd.grad((theirs(tx) * tw).sum(), [tx], create_graph=True)
    expected = torch.autograd.grad((tgx * tgx * tx).sum(), [tx, tw])
    for a, b in zip(result, expected, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: layers.MaxPool1D(0), r"kernel_size must be >= 1, got 0"),
        (lambda: layers.AvgPool3D(2, stride=0), r"stride must be >= 1, got 0"),
        (lambda: layers.MaxPool2D(2, dilation=(1, 0)), r"dilation must be >= 1"),
        (lambda: layers.MaxPool2D(2, padding=2), r"padding should be at most half of kernel size"),
        (lambda: layers.MaxUnpool2D((2, 2, 2)), r"kernel_size must be an int or a pair of ints"),
    ],
)
def test_layer_construction_refuses_bad_windows(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_op_errors_for_dilated_avg_pooling_and_windows_past_the_input():
    x = tape.Variable(np.ones((1, 1, 5)))
    with pytest.raises(tape.ShapeError, match=r"average pooling has no dilation"):
        ops.pool1d(x, pooling_type="avg", ksize=[2], dilations=[2])
    with pytest.raises(
        tape.ShapeError,
        match=r"window is larger than the padded input\n  expected: dilated ksize along L \(7\)",
    ):
        ops.pool1d(x, ksize=[3], dilations=[3])
    with pytest.raises(tape.ShapeError, match=r"input X must be 5-D"):
        ops.pool3d(x, ksize=[2, 2, 2])


def test_float32_stays_float32_through_every_pooling():
    x = tape.Variable(RNG.standard_normal((1, 2, 6, 6)).astype(np.float32), requires_grad=True)
    for layer in (
        layers.MaxPool2D(2, return_indices=True),
        layers.AdaptiveMaxPool2D(3),
        layers.AdaptiveAvgPool2D(4),
        layers.AvgPool2D(3, 1, 1),
    ):
        out = layer(x)
        out = out[0] if isinstance(out, tuple) else out
        (gx,) = tape.grad(out.sum(), [x])
        assert out.dtype == np.float32 and gx.dtype == np.float32
