"""Activation layers: each is its op with PyTorch's constructor arguments, and has no params."""

import math

import numpy as np
import pytest

import layers
import tape
from tape.testing import gradcheck


def _erf(x):
    return np.vectorize(math.erf)(x)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# |x| >= 0.1 keeps the finite differences away from the kinks at 0.
_X = np.random.default_rng(0).uniform(0.1, 3.0, (3, 4)) * np.array([1, -1, 1, -1])

REFERENCES = [
    (layers.ReLU(), lambda x: np.maximum(x, 0)),
    (layers.Tanh(), np.tanh),
    (layers.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    (layers.GELU(), lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    (
        layers.GELU(approximate="tanh"),
        lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    ),
    (layers.LeakyReLU(), lambda x: np.where(x > 0, x, 0.01 * x)),
    (layers.LeakyReLU(0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    (layers.ELU(alpha=0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    (layers.Softplus(), lambda x: np.log1p(np.exp(x))),
    (
        layers.Softplus(beta=2.0, threshold=1.0),
        lambda x: np.where(2 * x > 1.0, x, np.log1p(np.exp(2 * x)) / 2),
    ),
    (layers.Softmax(), lambda x: _softmax(x, -1)),
    (layers.Softmax(axis=0), lambda x: _softmax(x, 0)),
    (layers.LogSoftmax(), lambda x: np.log(_softmax(x, -1))),
    (layers.LogSoftmax(axis=0), lambda x: np.log(_softmax(x, 0))),
]
_IDS = [repr(layer) for layer, _ in REFERENCES]


@pytest.mark.parametrize("layer, reference", REFERENCES, ids=_IDS)
def test_forward_matches_the_formula(layer, reference):
    for dtype in (np.float32, np.float64):
        out = layer(tape.Variable(_X.astype(dtype)))
        assert out.dtype == dtype and out.shape == _X.shape
        np.testing.assert_allclose(
            out.numpy(),
            reference(_X),
            rtol=1e-5 if dtype == np.float32 else 1e-12,
            atol=1e-6 if dtype == np.float32 else 1e-14,
        )


@pytest.mark.parametrize("layer, reference", REFERENCES, ids=_IDS)
def test_gradients_match_finite_differences(layer, reference):
    # Softplus(threshold=1) switches branch at x = 0.5: keep the inputs clear of it.
    x = _X if layer.op_type != "softplus" else _X + 0.3 * (np.abs(_X - 0.5) < 0.05)
    assert gradcheck(layer, [x])


def test_activations_have_no_parameters_and_say_what_they_are():
    assert all(layer.params() == [] for layer, _ in REFERENCES)
    assert repr(layers.LeakyReLU(0.2)) == "LeakyReLU(alpha=0.2)"
    assert repr(layers.Softmax(axis=1)) == "Softmax(axis=1)"


def test_invalid_arguments_are_rejected():
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh', got 'erf'"):
        layers.GELU(approximate="erf")
    with pytest.raises(TypeError, match="attribute 'axis' has the wrong type"):
        layers.Softmax(axis=1.5)


def test_outputs_match_torch():
    torch = pytest.importorskip("torch")
    nn = torch.nn
    pairs = [
        (layers.ReLU(), nn.ReLU()),
        (layers.Tanh(), nn.Tanh()),
        (layers.Sigmoid(), nn.Sigmoid()),
        (layers.GELU(), nn.GELU()),
        (layers.GELU("tanh"), nn.GELU(approximate="tanh")),
        (layers.LeakyReLU(0.2), nn.LeakyReLU(0.2)),
        (layers.ELU(0.7), nn.ELU(0.7)),
        (layers.Softplus(2.0, 1.0), nn.Softplus(2.0, 1.0)),
        (layers.Softmax(0), nn.Softmax(0)),
        (layers.LogSoftmax(1), nn.LogSoftmax(1)),
    ]
    x = np.random.default_rng(1).standard_normal((4, 5)) * 3
    for ours, theirs in pairs:
        xt = torch.from_numpy(x).requires_grad_()
        expected = theirs(xt)
        weight = np.random.default_rng(2).standard_normal(x.shape)
        (expected * torch.from_numpy(weight)).sum().backward()
        tape.reset_global_tape()
        xv = tape.Variable(x, requires_grad=True)
        out = ours(xv)
        (gx,) = tape.grad((out * tape.Variable(weight)).sum(), [xv])
        np.testing.assert_allclose(
            out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=repr(ours)
        )
        np.testing.assert_allclose(
            gx.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=repr(ours)
        )
