"""Axis edge cases, checked against PyTorch: a 0-d array takes ``axis=0`` or ``axis=-1`` (PyTorch
gives a scalar one axis), and an axis out of range is both a ValueError and an IndexError."""

import numpy as np
import pytest
import torch

import ops
import tape

_SCALAR = 1.5


def _scalar(requires_grad=False):
    tape.reset_global_tape()
    return tape.Variable(np.array(_SCALAR), requires_grad=requires_grad)


_REDUCTIONS = [
    ("reduce_sum", lambda t, d, k: torch.sum(t, d, keepdim=k)),
    ("reduce_mean", lambda t, d, k: torch.mean(t, d, keepdim=k)),
    ("reduce_max", lambda t, d, k: torch.amax(t, d, keepdim=k)),
    ("reduce_min", lambda t, d, k: torch.amin(t, d, keepdim=k)),
    ("logsumexp", lambda t, d, k: torch.logsumexp(t, d, keepdim=k)),
]


@pytest.mark.parametrize("axis", [0, -1, [0], [-1]])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op, reference", _REDUCTIONS, ids=[r[0] for r in _REDUCTIONS])
def test_reductions_of_a_0d_array_over_axis_0_or_minus_1(op, reference, axis, keepdim):
    x = _scalar(requires_grad=True)
    out = ops.REGISTRY[op](x, axis=axis, keepdim=keepdim)
    t = torch.tensor(_SCALAR, dtype=torch.float64, requires_grad=True)
    expected = reference(t, axis, keepdim)
    assert out.shape == tuple(expected.shape) == ()
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy())
    (gx,) = tape.grad(out, [x])
    expected.backward()
    np.testing.assert_allclose(gx.numpy(), t.grad.numpy())


@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize(
    "op, reference", [("softmax", torch.softmax), ("log_softmax", torch.log_softmax)]
)
def test_softmax_of_a_0d_array(op, reference, axis):
    x = _scalar(requires_grad=True)
    out = ops.REGISTRY[op](x, axis=axis)
    t = torch.tensor(_SCALAR, dtype=torch.float64, requires_grad=True)
    expected = reference(t, axis)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy())
    assert out.shape == ()
    (gx,) = tape.grad(out, [x], create_graph=True)
    (tgx,) = torch.autograd.grad(expected, [t], create_graph=True)
    np.testing.assert_allclose(gx.numpy(), tgx.detach().numpy())
    # The gradient ops (softmax_grad, log_softmax_grad) take the scalar's axis too.
    (ggx,) = tape.grad((gx * gx).sum(), [x])
    (tggx,) = torch.autograd.grad(tgx * tgx, [t], allow_unused=True)
    expected_ggx = 0.0 if tggx is None else tggx.numpy()
    np.testing.assert_allclose(0.0 if ggx is None else ggx.numpy(), expected_ggx)


@pytest.mark.parametrize("axes", [[0], [-1]])
def test_squeeze_of_a_0d_array(axes):
    x = _scalar(requires_grad=True)
    out = ops.squeeze(x, axes=axes)
    assert out.shape == () and out.numpy() == torch.squeeze(torch.tensor(_SCALAR), axes[0]).item()
    (gx,) = tape.grad(out, [x])
    assert gx.shape == () and gx.numpy() == 1.0


@pytest.mark.parametrize(
    "call",
    [
        lambda x: ops.reduce_sum(x, axis=1),
        lambda x: ops.reduce_mean(x, axis=-2),
        lambda x: ops.reduce_max(x, axis=1),
        lambda x: ops.logsumexp(x, axis=1),
        lambda x: ops.softmax(x, axis=1),
        lambda x: ops.squeeze(x, axes=[1]),
    ],
)
def test_0d_axes_beyond_minus_1_and_0_are_rejected_as_pytorch_does(call):
    with pytest.raises(IndexError, match="axis -?[12] is out of range"):
        call(_scalar())
    with pytest.raises(IndexError):
        torch.sum(torch.tensor(_SCALAR), 1)


def test_repeated_axes_of_a_0d_array_are_an_error():
    with pytest.raises(ValueError, match="repeated axis"):
        ops.reduce_sum(_scalar(), axis=[0, -1])


def test_axis_out_of_range_is_an_index_error_and_a_value_error():
    tape.reset_global_tape()
    x = tape.Variable(np.ones((2, 3), np.float32))
    for call in (lambda: ops.reduce_sum(x, axis=2), lambda: ops.softmax(x, axis=-3)):
        with pytest.raises(tape.AxisError) as info:
            call()
        err = info.value
        assert isinstance(err, IndexError) and isinstance(err, ValueError)
        assert isinstance(err, tape.ShapeError)
        assert "out of range" in str(err) and "-2 <= axis < 2" in str(err)
    with pytest.raises(IndexError, match="op 'reduce_sum'"):
        ops.reduce_sum(x, axis=2)
