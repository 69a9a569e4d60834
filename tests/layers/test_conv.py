"""Conv2D and the conv2d op: shapes, PyTorch's init, values and gradients (numpy loops and
torch.nn.functional.conv2d), gradients of gradients, error messages, and a small CNN step."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layers
import ops
import tape
from tests.layers.numeric import check_layer_gradients
from tests.ops.cases_conv import conv_reference

RNG = np.random.default_rng(0)


def _randn(*shape):
    return RNG.standard_normal(shape)


def test_weight_and_bias_shapes_follow_pytorch():
    conv = layers.Conv2D(6, 4, kernel_size=(3, 2), groups=2)
    assert conv.weight.shape == (4, 3, 3, 2) and conv.bias.shape == (4,)
    assert [name for name, _ in conv.named_params()] == ["weight", "bias"]
    no_bias = layers.Conv2D(2, 3, 1, bias=False)
    assert no_bias.bias is None and no_bias.params() == [no_bias.weight]


def test_default_init_is_uniform_within_one_over_sqrt_fan_in():
    tape.seed(3)
    conv = layers.Conv2D(8, 64, kernel_size=3, groups=2)
    bound = 1 / math.sqrt(8 // 2 * 3 * 3)
    for param in conv.params():
        values = param.numpy()
        assert values.dtype == np.float32
        assert np.abs(values).max() <= bound
        # Uniform over the whole interval, not a narrow or shifted one.
        assert np.abs(values).max() > 0.9 * bound and abs(values.mean()) < 0.2 * bound


def test_seeded_init_is_reproducible():
    tape.seed(7)
    first = layers.Conv2D(3, 4, 3).weight.numpy()
    tape.seed(7)
    assert np.array_equal(first, layers.Conv2D(3, 4, 3).weight.numpy())


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"stride": 2, "padding": 1},
        {"stride": (1, 2), "padding": (2, 0), "dilation": (2, 1)},
        {"groups": 2, "padding": 1},
        {"padding": "same", "dilation": 2},
        {"padding": "valid", "bias": False},
    ],
)
def test_forward_matches_a_loop_over_taps(kwargs):
    conv = layers.Conv2D(4, 6, kernel_size=3, dtype="float64", **kwargs)
    x = _randn(2, 4, 6, 5)
    attrs = conv._conv_attrs
    expected = conv_reference(
        x,
        conv.weight.numpy(),
        strides=attrs["strides"],
        paddings=attrs["paddings"],
        dilations=attrs["dilations"],
        groups=attrs["groups"],
    )
    if conv.bias is not None:
        expected = expected + conv.bias.numpy()[:, None, None]
    np.testing.assert_allclose(conv(tape.Variable(x)).numpy(), expected, rtol=1e-12, atol=1e-12)


def test_same_padding_keeps_the_spatial_size_even_for_even_kernels():
    conv = layers.Conv2D(1, 1, kernel_size=(4, 3), padding="same")
    assert conv(tape.Variable(np.ones((1, 1, 5, 7), np.float32))).shape == (1, 1, 5, 7)


def test_gradients_of_parameters_and_input_match_finite_differences():
    conv = layers.Conv2D(
        4, 2, kernel_size=(2, 3), stride=(2, 1), padding=1, groups=2, dtype="float64"
    )
    check_layer_gradients(conv, conv, [_randn(2, 4, 3, 4)])


def test_float32_stays_float32_through_forward_and_backward():
    conv = layers.Conv2D(3, 4, 3, padding=1)
    x = tape.Variable(np.ones((2, 3, 5, 5), np.float32), requires_grad=True)
    out = conv(x)
    tape.backward(out.sum())
    assert out.dtype == np.float32
    assert all(v.grad().dtype == np.float32 for v in (x, conv.weight, conv.bias))


def test_layer_errors_name_the_rule():
    with pytest.raises(
        ValueError,
        match=r"in_channels \(3\) and out_channels \(4\) must be "
        r"divisible by groups \(2\)",
    ):
        layers.Conv2D(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="padding='same' needs stride 1"):
        layers.Conv2D(3, 4, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="kernel_size must be an int or a pair of ints"):
        layers.Conv2D(3, 4, (3, 3, 3))


def test_op_errors_say_which_shapes_disagree():
    x = tape.Variable(np.ones((1, 3, 5, 5), np.float32))
    with pytest.raises(tape.ShapeError) as err:
        ops.conv2d(x, np.ones((4, 2, 3, 3), np.float32))
    message = str(err.value)
    assert "op 'conv2d'" in message and "Input channels do not match the Filter" in message
    assert "Input.shape[1] == Filter.shape[1] * groups (2 * 1 = 2)" in message
    assert "recorded at: test_conv.py" in message
    with pytest.raises(tape.ShapeError, match=r"channels are not divisible by groups"):
        ops.conv2d(x, np.ones((4, 1, 3, 3), np.float32), groups=2)
    with pytest.raises(
        tape.ShapeError,
        match=r"kernel is larger than the padded input\n"
        r"  expected: dilated kernel \(7, 3\) <= padded input \(5, 5\)",
    ):
        ops.conv2d(x, np.ones((4, 3, 4, 3), np.float32), dilations=[2, 1])
    with pytest.raises(tape.ShapeError, match="Input and Filter must be 4-D"):
        ops.conv2d(x, np.ones((4, 3, 3), np.float32))
    with pytest.raises(tape.DTypeError, match="input Filter must be floating point"):
        ops.conv2d(x, np.ones((4, 3, 3, 3), np.int32))
    with pytest.raises(tape.AttrError, match="attribute 'strides' has an invalid value"):
        ops.conv2d(x, np.ones((4, 3, 3, 3), np.float32), strides=[0, 1])


def test_second_order_gradient_of_a_gradient_penalty():
    """d/dW of |dL/dX|^2, with dL/dX itself recorded (create_graph), equals finite differences."""
    w0, x0, v = _randn(3, 2, 2, 2), _randn(2, 2, 4, 4), _randn(2, 3, 3, 3)

    def penalty(w):
        tape.reset_global_tape()
        x = tape.Variable(x0, requires_grad=True)
        out = ops.conv2d(x, w, paddings=[0, 1], strides=[1, 2])
        (gx,) = tape.grad((out * tape.Variable(v)).sum(), [x], create_graph=True)
        return (gx * gx).sum()

    w = tape.Variable(w0, requires_grad=True)
    (analytic,) = tape.grad(penalty(w), [w])
    direction = _randn(*w0.shape)
    eps = 1e-6
    plus = penalty(tape.Variable(w0 + eps * direction)).numpy()
    minus = penalty(tape.Variable(w0 - eps * direction)).numpy()
    np.testing.assert_allclose(
        np.sum(analytic.numpy() * direction), (plus - minus) / (2 * eps), rtol=1e-6
    )


# --- against PyTorch --------------------------------------------------------------------------

GEOMETRIES = [
    dict(stride=1, padding=0, dilation=1, groups=1),
    dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2),
    dict(stride=2, padding=2, dilation=2, groups=4),
    dict(stride=(1, 3), padding=(0, 1), dilation=1, groups=1),
]


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_values_and_gradients_equal_torch(geometry):
    torch = pytest.importorskip("torch")
    x0, w0, b0 = _randn(3, 4, 9, 8), _randn(8, 4 // geometry["groups"], 3, 2), _randn(8)
    x, w, b = (tape.Variable(a, requires_grad=True) for a in (x0, w0, b0))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x0, w0, b0))
    pair = layers.conv.pair
    attrs = dict(
        strides=pair(geometry["stride"], "s"),
        paddings=pair(geometry["padding"], "p"),
        dilations=pair(geometry["dilation"], "d"),
        groups=geometry["groups"],
    )
    tape.reset_global_tape()
    out = ops.elementwise_add(ops.conv2d(x, w, **attrs), b, axis=1)
    expected = torch.nn.functional.conv2d(tx, tw, tb, **geometry)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    cotangent = _randn(*out.shape)
    tape.backward(out, grad=cotangent)
    expected.backward(torch.tensor(cotangent))
    for ours, theirs in ((x, tx), (w, tw), (b, tb)):
        np.testing.assert_allclose(ours.grad().numpy(), theirs.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_double_backward_equals_torch():
    torch = pytest.importorskip("torch")
    x0, w0, v = _randn(2, 4, 6, 6), _randn(6, 2, 3, 3), _randn(2, 6, 3, 4)
    tape.reset_global_tape()
    x, w = tape.Variable(x0, requires_grad=True), tape.Variable(w0, requires_grad=True)
    out = ops.conv2d(x, w, strides=[2, 1], paddings=[1, 1], groups=2, dilations=[1, 2])
    gx, gw = tape.grad((out * tape.Variable(v)).sum(), [x, w], create_graph=True)
    second = tape.grad((gx * gx).sum() + (gw * gw * gw).sum(), [x, w])
    tx, tw = torch.tensor(x0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    tout = torch.nn.functional.conv2d(tx, tw, stride=(2, 1), padding=1, groups=2, dilation=(1, 2))
    tgx, tgw = torch.autograd.grad((tout * torch.tensor(v)).sum(), [tx, tw], create_graph=True)
    expected = torch.autograd.grad((tgx * tgx).sum() + (tgw**3).sum(), [tx, tw])
    for ours, theirs in zip(second, expected, strict=True):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-9, atol=1e-10)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(0, 2),
    groups=st.sampled_from([1, 2]),
    per_group=st.integers(1, 2),
    out_per_group=st.integers(1, 2),
    size=st.tuples(st.integers(1, 7), st.integers(1, 7)),
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    padding=st.tuples(st.integers(0, 2), st.integers(0, 2)),
    dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)),
)
def test_any_valid_geometry_equals_torch(
    n, groups, per_group, out_per_group, size, kernel, stride, padding, dilation
):
    torch = pytest.importorskip("torch")
    span = [d * (k - 1) + 1 for k, d in zip(kernel, dilation, strict=True)]
    if any(s > h + 2 * p for s, h, p in zip(span, size, padding, strict=True)):
        return  # kernel larger than the padded input: the error test covers it
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((n, groups * per_group) + size)
    w0 = rng.standard_normal((groups * out_per_group, per_group) + kernel)
    out = ops.conv2d(
        tape.Variable(x0),
        tape.Variable(w0),
        strides=stride,
        paddings=padding,
        dilations=dilation,
        groups=groups,
    )
    expected = torch.nn.functional.conv2d(
        torch.tensor(x0),
        torch.tensor(w0),
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
    )
    assert out.shape == tuple(expected.shape)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-10, atol=1e-12)


def test_a_small_cnn_training_step_equals_torch():
    """Conv2D -> BatchNorm2d -> ReLU -> MaxPool2D -> Linear: loss and every gradient."""
    torch = pytest.importorskip("torch")
    tape.seed(0)
    conv = layers.Conv2D(3, 4, 3, padding=1, dtype="float64")
    bn = layers.BatchNorm2d(4, dtype="float64")
    pool = layers.MaxPool2D(2)
    fc = layers.Linear(4 * 3 * 3, 5, dtype="float64")
    x0 = _randn(6, 3, 6, 6)
    tape.reset_global_tape()
    hidden = pool(ops.relu(bn(conv(tape.Variable(x0)))))
    loss = ops.mean(fc(ops.reshape(hidden, shape=[6, -1])) ** 2)
    tape.backward(loss)

    t_conv = torch.nn.Conv2d(3, 4, 3, padding=1).double()
    t_bn, t_fc = torch.nn.BatchNorm2d(4).double(), torch.nn.Linear(36, 5).double()
    with torch.no_grad():
        t_conv.weight.copy_(torch.tensor(conv.weight.numpy()))
        t_conv.bias.copy_(torch.tensor(conv.bias.numpy()))
        t_fc.weight.copy_(torch.tensor(fc.weight.numpy().T))
        t_fc.bias.copy_(torch.tensor(fc.bias.numpy()))
    t_hidden = torch.nn.functional.max_pool2d(torch.relu(t_bn(t_conv(torch.tensor(x0)))), 2)
    t_loss = (t_fc(t_hidden.reshape(6, -1)) ** 2).mean()
    t_loss.backward()
    np.testing.assert_allclose(loss.numpy(), t_loss.item(), rtol=1e-12)
    pairs = [
        (conv.weight, t_conv.weight.grad),
        (conv.bias, t_conv.bias.grad),
        (bn.weight, t_bn.weight.grad),
        (bn.bias, t_bn.bias.grad),
        (fc.weight, t_fc.weight.grad.T),
        (fc.bias, t_fc.bias.grad),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours.grad().numpy(), theirs.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(bn.running_var.numpy(), t_bn.running_var.numpy(), rtol=1e-12)
