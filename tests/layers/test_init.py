"""Initializers draw from the distribution their formula names, reproducibly under tape.seed."""

import math

import numpy as np
import pytest

import tape
from layers import init


def _draw(initializer, shape, dtype="float32", seed=0):
    tape.seed(seed)
    return initializer(shape, dtype).numpy()


def _assert_uniform(sample, low, high):
    assert sample.min() >= low and sample.max() <= high
    n = sample.size
    half = (high - low) / 2
    std = (high - low) / math.sqrt(12)
    assert abs(sample.mean() - (low + high) / 2) < 6 * std / math.sqrt(n)
    assert abs(sample.std() / std - 1) < 0.02
    # The draw fills its range: both ends are approached.
    assert sample.min() < low + 0.01 * half and sample.max() > high - 0.01 * half


def _assert_normal(sample, mean, std):
    n = sample.size
    assert abs(sample.mean() - mean) < 6 * std / math.sqrt(n)
    assert abs(sample.std() / std - 1) < 0.02
    # About 68% of the mass within one standard deviation.
    assert abs(np.mean(np.abs(sample - mean) < std) - 0.6827) < 0.01


def test_constant_zeros_and_ones_fill_exactly_in_the_requested_dtype():
    for dtype in ("float32", "float64"):
        out = init.constant(2.5)((2, 3), dtype)
        assert out.dtype == np.dtype(dtype) and out.shape == (2, 3)
        np.testing.assert_array_equal(out.numpy(), np.full((2, 3), 2.5))
    np.testing.assert_array_equal(init.zeros()((4,)).numpy(), np.zeros(4, np.float32))
    np.testing.assert_array_equal(init.ones()((4,)).numpy(), np.ones(4, np.float32))


def test_uniform_and_normal_match_their_parameters():
    _assert_uniform(_draw(init.uniform(-0.3, 0.7), (200, 300)), -0.3, 0.7)
    _assert_normal(_draw(init.normal(1.5, 0.2), (200, 300)), 1.5, 0.2)
    assert _draw(init.normal(), (5,), "float64").dtype == np.float64


def test_fans_follow_pytorch_for_conv_weights_and_the_seed_layout_for_linear():
    assert init.calculate_fans((16, 3, 5, 5)) == (3 * 25, 16 * 25)
    assert init.calculate_fans((20, 30)) == (30, 20)
    assert init.calculate_fans((20, 30), layout="in_out") == (20, 30)
    with pytest.raises(ValueError, match=r"at least 2 dimensions, got shape \(7,\)"):
        init.calculate_fans((7,))
    with pytest.raises(ValueError, match="unknown weight layout 'nchw'"):
        init.calculate_fans((2, 3), layout="nchw")


def test_xavier_uniform_bound_is_gain_times_sqrt_6_over_fan_sum():
    shape = (64, 32, 3, 3)
    fan_in, fan_out = 32 * 9, 64 * 9
    bound = 2.0 * math.sqrt(6.0 / (fan_in + fan_out))
    _assert_uniform(_draw(init.xavier_uniform(gain=2.0), shape), -bound, bound)


def test_xavier_normal_std_is_gain_times_sqrt_2_over_fan_sum():
    std = math.sqrt(2.0 / (300 + 200))
    _assert_normal(_draw(init.xavier_normal(), (200, 300)), 0.0, std)


def test_kaiming_uniform_with_a_sqrt5_is_pytorchs_linear_default():
    # (in_dim, out_dim) layout: fan_in is the first dimension.
    sample = _draw(init.kaiming_uniform(a=math.sqrt(5), layout="in_out"), (400, 150))
    _assert_uniform(sample, -1 / math.sqrt(400), 1 / math.sqrt(400))


def test_kaiming_normal_uses_the_chosen_fan_and_gain():
    shape = (128, 64, 3, 3)
    std = math.sqrt(2.0) / math.sqrt(128 * 9)  # relu gain, fan_out
    _assert_normal(_draw(init.kaiming_normal(mode="fan_out", nonlinearity="relu"), shape), 0.0, std)
    std = math.sqrt(2.0 / (1 + 0.2**2)) / math.sqrt(64 * 9)  # leaky_relu with slope a=0.2
    _assert_normal(_draw(init.kaiming_normal(a=0.2), shape), 0.0, std)


def test_initializers_are_reproducible_under_tape_seed():
    for make in (
        lambda: init.uniform(),
        lambda: init.normal(),
        lambda: init.xavier_uniform(),
        lambda: init.kaiming_normal(),
    ):
        first = _draw(make(), (6, 5), seed=3)
        np.testing.assert_array_equal(first, _draw(make(), (6, 5), seed=3))
        assert not np.array_equal(first, _draw(make(), (6, 5), seed=4))


def test_an_initializer_records_one_op_on_a_private_tape_and_returns_a_plain_variable():
    global_tape = tape.reset_global_tape()
    out = init.normal()((3, 2))
    assert len(global_tape) == 0
    assert isinstance(out, tape.Variable) and not out.requires_grad


def test_with_layout_binds_only_unbound_fan_initializers():
    unbound = init.kaiming_uniform()
    assert init.with_layout(unbound, "in_out").layout == "in_out"
    assert unbound.layout is None
    fixed = init.xavier_normal(layout="out_in")
    assert init.with_layout(fixed, "in_out") is fixed
    constant = init.constant(1.0)
    assert init.with_layout(constant, "in_out") is constant


def test_zero_size_weights_initialise_to_empty_arrays():
    assert init.kaiming_uniform()((0, 4)).shape == (0, 4)


def test_invalid_arguments_are_rejected_with_their_values():
    with pytest.raises(ValueError, match="mode must be 'fan_in' or 'fan_out', got 'fan'"):
        init.kaiming_uniform(mode="fan")
    with pytest.raises(ValueError, match="unsupported nonlinearity 'swish'"):
        init.kaiming_normal(nonlinearity="swish")
    with pytest.raises(ValueError, match="low <= high, got low=1, high=0"):
        init.uniform(1, 0)
    with pytest.raises(ValueError, match="std >= 0, got -1"):
        init.normal(0, -1)


def test_fans_and_gains_agree_with_torch():
    torch = pytest.importorskip("torch")
    for shape in [(5, 7), (16, 3, 5, 5), (4, 2, 3)]:
        fans = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
        assert init.calculate_fans(shape) == fans
    for name, param in [
        ("relu", None),
        ("tanh", None),
        ("leaky_relu", None),
        ("leaky_relu", 0.3),
        ("selu", None),
        ("sigmoid", None),
    ]:
        assert init.calculate_gain(name, param) == pytest.approx(
            torch.nn.init.calculate_gain(name, param)
        )
