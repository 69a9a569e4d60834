"""Conv1D, Conv3D, the transposed convolution layers and their ops against torch.nn (copied
weights), over hypothesis-drawn geometries; gradients of gradients; construction and op errors;
mixed float dtypes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layers
import ops
import tape
from tests.layers.torch_compare import assert_matches_torch

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"stride": 2, "padding": 1},
        {"padding": "same", "dilation": 2},
        {"padding": "valid", "bias": False},
        {"groups": 2, "padding": 2, "dilation": 3, "stride": 3},
    ],
)
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_layers_equal_torch_with_copied_weights(nd, kwargs):
    size = (9, 8, 7)[:nd] if nd < 3 else (7, 6, 8)
    ours = getattr(layers, f"Conv{nd}D")(4, 6, 3, dtype="float64", **kwargs)
    theirs = getattr(torch.nn, f"Conv{nd}d")(4, 6, 3, **kwargs)
    assert_matches_torch(ours, theirs, RNG.standard_normal((2, 4) + size))


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"stride": 2, "padding": 1, "output_padding": 1},
        {"groups": 2, "dilation": 2, "bias": False},
        {"stride": (1, 3, 2), "padding": (0, 1, 1), "output_padding": (0, 2, 1)},
        {"dilation": 3, "output_padding": 2},  # output_padding beyond padding: the end cropped
    ],
)
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_transposed_layers_equal_torch_with_copied_weights(nd, kwargs):
    kwargs = {k: v[:nd] if isinstance(v, tuple) else v for k, v in kwargs.items()}
    ours = getattr(layers, f"ConvTranspose{nd}D")(4, 6, 3, dtype="float64", **kwargs)
    theirs = getattr(torch.nn, f"ConvTranspose{nd}d")(4, 6, 3, **kwargs)
    assert ours.weight.shape == tuple(theirs.weight.shape)
    assert_matches_torch(ours, theirs, RNG.standard_normal((2, 4) + (4, 3, 5)[:nd]))


def test_transposed_layer_output_size_picks_the_output_padding_as_torch():
    ours = layers.ConvTranspose2D(3, 2, 3, stride=2, padding=1, dtype="float64")
    theirs = torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1)
    x0 = RNG.standard_normal((1, 3, 4, 5))
    for size in [(7, 9), (8, 10), (1, 2, 8, 9)]:
        assert_matches_torch(
            ours,
            theirs,
            x0,
            call=lambda x, size=size: ours(x, output_size=size),
            torch_call=lambda x, size=size: theirs(x, output_size=size),
        )
    with pytest.raises(ValueError, match=r"valid sizes range from \(7, 9\) to \(8, 10\)"):
        ours(tape.Variable(x0), output_size=(9, 9))


def test_default_init_matches_torch_bounds():
    """PyTorch reads a transposed weight (C_in, C_out/groups, k) as (out, in, k) for fan_in."""
    tape.seed(0)
    layer = layers.ConvTranspose1D(8, 64, 5, groups=2)
    bound = 1 / np.sqrt(64 // 2 * 5)
    for param in layer.params():
        values = param.numpy()
        assert np.abs(values).max() <= bound and np.abs(values).max() > 0.9 * bound


# --- hypothesis: any valid geometry equals torch -----------------------------------------------

_GEOMETRY = dict(
    nd=st.sampled_from([1, 2, 3]),
    n=st.integers(0, 2),
    groups=st.sampled_from([1, 2]),
    in_per_group=st.integers(1, 2),
    out_per_group=st.integers(1, 2),
    size=st.integers(1, 6),
    kernel=st.integers(1, 3),
    stride=st.integers(1, 3),
    padding=st.integers(0, 2),
    dilation=st.integers(1, 2),
)


@settings(max_examples=40, deadline=None)
@given(**_GEOMETRY)
def test_any_convolution_equals_torch(
    nd, n, groups, in_per_group, out_per_group, size, kernel, stride, padding, dilation
):
    if dilation * (kernel - 1) + 1 > size + 2 * padding:
        return  # the kernel does not fit: the error tests cover it
    x0 = RNG.standard_normal((n, groups * in_per_group) + (size,) * nd)
    w0 = RNG.standard_normal((groups * out_per_group, in_per_group) + (kernel,) * nd)
    geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    x, w = tape.Variable(x0, requires_grad=True), tape.Variable(w0, requires_grad=True)
    out = getattr(ops, f"conv{nd}d")(
        x,
        w,
        strides=[stride] * nd,
        paddings=[padding] * nd,
        dilations=[dilation] * nd,
        groups=groups,
    )
    tx, tw = torch.tensor(x0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    expected = getattr(torch.nn.functional, f"conv{nd}d")(tx, tw, **geometry)
    _compare_with_gradients(out, expected, [(x, tx), (w, tw)])


@settings(max_examples=40, deadline=None)
@given(**_GEOMETRY, extra=st.integers(0, 2))
def test_any_transposed_convolution_equals_torch(
    nd, n, groups, in_per_group, out_per_group, size, kernel, stride, padding, dilation, extra
):
    extra = min(extra, max(stride, dilation) - 1)
    if (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + extra + 1 < 1:
        return  # an empty output: the error tests cover it
    x0 = RNG.standard_normal((n, groups * in_per_group) + (size,) * nd)
    w0 = RNG.standard_normal((groups * in_per_group, out_per_group) + (kernel,) * nd)
    x, w = tape.Variable(x0, requires_grad=True), tape.Variable(w0, requires_grad=True)
    out = getattr(ops, f"conv_transpose{nd}d")(
        x,
        w,
        strides=[stride] * nd,
        paddings=[padding] * nd,
        output_padding=[extra] * nd,
        dilations=[dilation] * nd,
        groups=groups,
    )
    tx, tw = torch.tensor(x0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    expected = getattr(torch.nn.functional, f"conv_transpose{nd}d")(
        tx,
        tw,
        stride=stride,
        padding=padding,
        output_padding=extra,
        groups=groups,
        dilation=dilation,
    )
    _compare_with_gradients(out, expected, [(x, tx), (w, tw)])


def _compare_with_gradients(out, expected, pairs):
    assert out.shape == tuple(expected.shape)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    if out.numpy().size == 0:
        return
    cotangent = RNG.standard_normal(out.shape)
    ours = tape.grad((out * tape.Variable(cotangent)).sum(), [v for v, _ in pairs])
    theirs = torch.autograd.grad(expected, [t for _, t in pairs], torch.from_numpy(cotangent))
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("transposed", [False, True])
def test_double_backward_equals_torch(transposed):
    """A gradient penalty through conv1d / conv_transpose1d: d/d(x, w) of |dL/dx|^2 + |dL/dw|^3."""
    x0, w0 = RNG.standard_normal((2, 4, 7)), RNG.standard_normal((4, 2, 3))
    attrs = dict(strides=[2], paddings=[1], dilations=[2], groups=2)
    kwargs = dict(stride=2, padding=1, dilation=2, groups=2)
    op, function = ops.conv1d, torch.nn.functional.conv1d
    if transposed:
        op, function = ops.conv_transpose1d, torch.nn.functional.conv_transpose1d
        attrs["output_padding"], kwargs["output_padding"] = [1], 1
    x, w = tape.Variable(x0, requires_grad=True), tape.Variable(w0, requires_grad=True)
    out = op(x, w, **attrs)
    v = RNG.standard_normal(out.shape)
    gx, gw = tape.grad((out * tape.Variable(v)).sum(), [x, w], create_graph=True)
    ours = tape.grad((gx * gx).sum() + (gw * gw * gw).sum(), [x, w])
    tx, tw = torch.tensor(x0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    tout = function(tx, tw, **kwargs)
    tgx, tgw = torch.autograd.grad((tout * torch.tensor(v)).sum(), [tx, tw], create_graph=True)
    theirs = torch.autograd.grad((tgx * tgx).sum() + (tgw**3).sum(), [tx, tw])
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-10)


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: layers.Conv2D(1, 1, 0), r"kernel_size must be >= 1, got 0"),
        (lambda: layers.Conv1D(2, 2, 3, stride=-1), r"stride must be >= 1, got -1"),
        (lambda: layers.Conv3D(2, 2, 3, dilation=(1, 0, 1)), r"dilation must be >= 1"),
        (lambda: layers.Conv2D(2, 2, 3, padding=-1), r"padding must be >= 0"),
        (lambda: layers.Conv1D(3, 4, 3, groups=2), r"must be divisible by groups \(2\)"),
        (lambda: layers.Conv1D(2, 4, 3, groups=0), r"Conv1D: argument 'groups' is out of range"),
        (lambda: layers.Conv3D(2, 4, (3, 3)), r"kernel_size must be an int or 3 ints"),
        (lambda: layers.ConvTranspose2D(2, 2, 0), r"kernel_size must be >= 1"),
        (lambda: layers.ConvTranspose2D(4, 3, 3, groups=2), r"must be divisible by groups"),
        (
            lambda: layers.ConvTranspose1D(2, 2, 3, stride=2, output_padding=2),
            r"output_padding must be smaller than either stride or dilation",
        ),
        (lambda: layers.ConvTranspose1D(2, 2, 3, padding="same"), r"not supported"),
    ],
)
def test_layer_construction_refuses_bad_geometry(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_zero_sized_kernel_is_refused_at_the_op():
    x = tape.Variable(np.ones((1, 1, 4, 4), np.float32))
    with pytest.raises(tape.ShapeError) as err:
        ops.conv2d(x, np.ones((1, 1, 0, 0), np.float32))
    message = str(err.value)
    assert "op 'conv2d'" in message and "Filter has an empty kernel" in message
    assert "expected: kernel sizes >= 1" in message and "Filter.shape=(1, 1, 0, 0)" in message
    with pytest.raises(tape.ShapeError, match="Filter has an empty kernel"):
        ops.conv_transpose1d(tape.Variable(np.ones((1, 1, 4))), np.ones((1, 1, 0)))


def test_op_attribute_and_shape_errors_name_the_rule():
    x = tape.Variable(np.ones((1, 2, 5)))
    with pytest.raises(tape.AttrError, match=r"attribute 'strides' has an invalid value\n"):
        ops.conv1d(x, np.ones((2, 2, 3)), strides=[-1])
    with pytest.raises(tape.AttrError, match=r"expected: one int >= 1"):
        ops.conv1d(x, np.ones((2, 2, 3)), dilations=[1, 1])
    with pytest.raises(tape.ShapeError, match=r"channels are not divisible by groups"):
        ops.conv1d(x, np.ones((3, 1, 3)), groups=2)
    with pytest.raises(tape.ShapeError, match=r"Input and Filter must be 5-D"):
        ops.conv3d(x, np.ones((2, 2, 3)))
    with pytest.raises(
        tape.ShapeError, match=r"output_padding must be smaller than the stride or the dilation"
    ):
        ops.conv_transpose1d(x, np.ones((2, 2, 3)), strides=[2], output_padding=[2])
    with pytest.raises(tape.ShapeError, match=r"the output would be empty"):
        ops.conv_transpose1d(tape.Variable(np.ones((1, 2, 1))), np.ones((2, 2, 1)), paddings=[1])
    with pytest.raises(tape.DTypeError, match=r"input Input must be floating point"):
        ops.conv1d(tape.Variable(np.ones((1, 2, 5), np.int64)), np.ones((2, 2, 3)))


# --- dtypes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("Layer", [layers.Conv1D, layers.Conv2D, layers.ConvTranspose1D])
def test_float64_input_promotes_with_float32_weights(Layer):
    """numpy's rule: float64 data and float32 parameters give float64 outputs, and every
    gradient has its variable's dtype (the float32 parameters' gradients stay float32)."""
    layer = Layer(2, 3, 3)
    shape = (2, 2) + (6,) * (2 if Layer is layers.Conv2D else 1)
    x0 = RNG.standard_normal(shape)
    x = tape.Variable(x0, requires_grad=True)
    out = layer(x)
    assert out.dtype == np.float64
    tape.backward(out.sum())
    assert x.grad().dtype == np.float64
    assert layer.weight.grad().dtype == np.float32 and layer.bias.grad().dtype == np.float32
    # Values equal the float64 computation with the float32 parameters' exact values.
    ref = getattr(layers, Layer.__name__)(2, 3, 3, dtype="float64")
    for mine, theirs in zip(layer.params(), ref.params(), strict=True):
        theirs.set_value(mine.numpy().astype(np.float64))
    expected = ref(tape.Variable(x0))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-12)


@pytest.mark.parametrize("nd", [1, 3])
def test_float32_stays_float32(nd):
    layer = getattr(layers, f"Conv{nd}D")(2, 3, 3, padding=1)
    x = tape.Variable(np.ones((1, 2) + (4,) * nd, np.float32), requires_grad=True)
    out = layer(x)
    (gx, gw) = tape.grad(out.sum(), [x, layer.weight])
    assert out.dtype == gx.dtype == gw.dtype == np.float32
