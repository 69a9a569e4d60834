"""Upsample and interpolate against torch.nn.Upsample / F.interpolate: every mode, sizes and
scale factors (hypothesis), align_corners, gradients and gradients of gradients, errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layers
import ops
import tape
from layers.upsample import interpolate

torch = pytest.importorskip("torch")
F = torch.nn.functional
RNG = np.random.default_rng(0)
MODES = {
    1: ["nearest", "nearest-exact", "linear", "area"],
    2: ["nearest", "nearest-exact", "bilinear", "bicubic", "area"],
    3: ["nearest", "nearest-exact", "trilinear", "area"],
}
SMOOTH = ("linear", "bilinear", "bicubic", "trilinear")


def _torch_backward_is_its_forwards(x_shape, kwargs):
    """Where a scale factor disagrees with the sizes, PyTorch's backward kernels map an axis
    whose length is unchanged (or doubled, nearest) by the identity (or i // 2) although its
    forward applied the factor: 1-D and 3-D nearest, and bicubic. There its gradient is not
    its forward's; ours is (the sweep checks it by finite differences)."""
    mode, factors = kwargs["mode"], kwargs.get("scale_factor")
    if factors is None or kwargs.get("recompute_scale_factor"):
        return True
    if not isinstance(factors, tuple):
        factors = (factors,) * (len(x_shape) - 2)
    for n, f in zip(x_shape[2:], factors, strict=True):
        out = int(n * f)
        if mode == "nearest" and len(x_shape) != 4 and out in (n, 2 * n) and f != out / n:
            return False
        if mode == "bicubic" and out == n and f != 1:
            return False
    return True


def _compare(x0, dtype=np.float64, **kwargs):
    x = tape.Variable(x0.astype(dtype), requires_grad=True)
    tx = torch.tensor(x0.astype(dtype), requires_grad=True)
    out, expected = layers.Upsample(**kwargs)(x), torch.nn.Upsample(**kwargs)(tx)
    assert out.shape == tuple(expected.shape) and out.dtype == dtype
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=tol, atol=tol)
    if out.numpy().size == 0 or not _torch_backward_is_its_forwards(x0.shape, kwargs):
        return
    cotangent = RNG.standard_normal(out.shape).astype(dtype)
    (gx,) = tape.grad((out * tape.Variable(cotangent)).sum(), [x])
    (tgx,) = torch.autograd.grad(expected, [tx], torch.from_numpy(cotangent))
    assert gx.dtype == dtype
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=tol, atol=tol)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    nd=st.sampled_from([1, 2, 3]),
    n=st.integers(0, 2),
    size=st.integers(1, 6),
    by_scale=st.booleans(),
)
def test_any_mode_size_and_scale_equals_torch(data, nd, n, size, by_scale):
    mode = data.draw(st.sampled_from(MODES[nd]))
    kwargs = {"mode": mode}
    if mode in SMOOTH:
        kwargs["align_corners"] = data.draw(st.booleans())
    if by_scale:
        factors = st.floats(0.5, 3.5).map(lambda f: round(f, 2))
        kwargs["scale_factor"] = tuple(data.draw(factors) for _ in range(nd))
        if any(int(size * f) < 1 for f in kwargs["scale_factor"]):
            return  # an empty output: refused by both
        kwargs["recompute_scale_factor"] = data.draw(st.sampled_from([None, True]))
    else:
        kwargs["size"] = tuple(data.draw(st.integers(1, 9)) for _ in range(nd))
    _compare(RNG.standard_normal((n, 2) + (size,) * nd), **kwargs)


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
def test_float32_matches_torch_in_float32(mode):
    _compare(RNG.standard_normal((2, 3, 5, 7)), np.float32, scale_factor=1.7, mode=mode)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "nearest", "area"])
def test_double_backward_equals_torch(mode):
    x0 = RNG.standard_normal((1, 2, 4, 5))
    kwargs = dict(size=(7, 3), mode=mode)
    x = tape.Variable(x0, requires_grad=True)
    out = interpolate(x, **kwargs)
    w = tape.Variable(RNG.standard_normal(out.shape), requires_grad=True)
    (gx,) = tape.grad((out * w).sum(), [x], create_graph=True)
    ours = tape.grad((gx * gx * gx).sum(), [w])
    tx, tw = torch.tensor(x0, requires_grad=True), torch.tensor(w.numpy(), requires_grad=True)
    (tgx,) = torch.autograd.grad((F.interpolate(tx, **kwargs) * tw).sum(), [tx], create_graph=True)
    theirs = torch.autograd.grad((tgx**3).sum(), [tw])
    np.testing.assert_allclose(ours[0].numpy(), theirs[0].numpy(), rtol=1e-10, atol=1e-12)


def test_scale_factor_rounds_the_output_size_down_and_keeps_the_factor_for_coordinates():
    x = tape.Variable(np.arange(5, dtype=np.float64).reshape(1, 1, 5))
    attrs = layers.upsample.interpolate_attrs((5,), scale_factor=1.5, mode="linear")
    assert attrs["out_size"] == (7,) and attrs["scales"] == (1.5,)
    recomputed = layers.upsample.interpolate_attrs((5,), scale_factor=1.5, recompute=True)
    assert recomputed["scales"] is None
    assert layers.Upsample(scale_factor=0.5)(x).shape == (1, 1, 2)


def test_errors_name_the_rule():
    x = tape.Variable(np.ones((1, 1, 4, 4)))
    with pytest.raises(ValueError, match="give exactly one of size and scale_factor"):
        layers.Upsample()
    with pytest.raises(ValueError, match="unknown mode 'cubic'"):
        layers.Upsample(size=3, mode="cubic")
    with pytest.raises(ValueError, match="align_corners can only be set"):
        layers.Upsample(size=3, align_corners=True)(x)
    with pytest.raises(tape.ShapeError, match=r"mode 'trilinear' resamples 3 spatial axes"):
        ops.interpolate(x, mode="trilinear", out_size=[2, 2])
    with pytest.raises(tape.ShapeError, match=r"input X must be 3-D with non-empty spatial axes"):
        ops.interpolate(x, mode="linear", out_size=[8])
    with pytest.raises(tape.AttrError, match=r"align_corners only applies"):
        ops.interpolate(x, mode="area", out_size=[2, 2], align_corners=True)
    with pytest.raises(tape.AttrError, match=r"attribute 'out_size' has an invalid value"):
        ops.interpolate(x, out_size=[0, 2])
    with pytest.raises(tape.DTypeError, match=r"input X must be floating point"):
        ops.interpolate(tape.Variable(np.ones((1, 1, 4), np.int64)), out_size=[8])
