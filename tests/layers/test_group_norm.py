"""GroupNorm against torch.nn.GroupNorm: outputs and gradients of input, weight and bias for
1-d to 3-d inputs, one group, one channel per group, without affine, float32; and its errors."""

import numpy as np
import pytest

import layers
import tape

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(5)


def _check(groups, shape, affine=True, dtype="float64", rtol=1e-10, atol=1e-12):
    channels = shape[1]
    ours = layers.GroupNorm(groups, channels, eps=1e-3, affine=affine, dtype=dtype)
    theirs = torch.nn.GroupNorm(groups, channels, eps=1e-3, affine=affine).to(getattr(torch, dtype))
    if affine:
        weight, bias = RNG.standard_normal(channels), RNG.standard_normal(channels)
        ours.weight.set_value(weight.astype(dtype))
        ours.bias.set_value(bias.astype(dtype))
        with torch.no_grad():
            theirs.weight.copy_(torch.tensor(weight))
            theirs.bias.copy_(torch.tensor(bias))
    x = (RNG.standard_normal(shape) * 3 + 1).astype(dtype)
    cotangent = RNG.standard_normal(shape).astype(dtype)

    tape.reset_global_tape()
    xv = tape.Variable(x, requires_grad=True)
    out = ours(xv)
    leaves = [xv] + ours.params()
    grads = tape.grad((out * tape.Variable(cotangent)).sum(), leaves)

    xt = torch.tensor(x, requires_grad=True)
    expected = theirs(xt)
    (expected * torch.tensor(cotangent)).sum().backward()
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=rtol, atol=atol)
    wanted = [xt.grad] + ([theirs.weight.grad, theirs.bias.grad] if affine else [])
    for got, want in zip(grads, wanted, strict=True):
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize(
    "groups, shape",
    [(2, (3, 4)), (2, (2, 6, 5)), (3, (2, 6, 3, 4)), (1, (2, 4, 3)), (4, (2, 4, 2, 2, 2))],
)
def test_group_norm_matches_torch(groups, shape):
    _check(groups, shape)


def test_group_norm_without_affine_and_one_channel_per_group():
    _check(4, (2, 4, 5), affine=False)


def test_float32_stays_float32():
    _check(2, (2, 4, 3), dtype="float32", rtol=1e-5, atol=1e-5)


def test_parameters_and_errors():
    gn = layers.GroupNorm(2, 6)
    assert [name for name, _ in gn.named_params()] == ["weight", "bias"]
    assert gn.weight.shape == (6,) and (gn.weight.numpy() == 1).all()
    assert not layers.GroupNorm(2, 6, affine=False).params()
    with pytest.raises(ValueError, match=r"num_channels \(5\) must be divisible by num_groups"):
        layers.GroupNorm(2, 5)
    with pytest.raises(ValueError, match=r"expects 6 channels[\s\S]*actual:   X.shape=\(2, 5, 3\)"):
        gn(tape.Variable(np.zeros((2, 5, 3), np.float32)))
