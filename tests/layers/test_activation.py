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


# ---- the activations of issue 10: each checked against its torch.nn module -----------------------

# Points on and around every kink (0, +-1, +-3, 6) and far out, where overflow would show.
_EDGES = np.array([-1000.0, -30.0, -6.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0, 30.0, 1000.0])


def _torch_pairs(torch):
    nn = torch.nn
    return [
        (layers.SiLU(), nn.SiLU()),
        (layers.Mish(), nn.Mish()),
        (layers.SELU(), nn.SELU()),
        (layers.CELU(), nn.CELU()),
        (layers.CELU(0.5), nn.CELU(0.5)),
        (layers.Softsign(), nn.Softsign()),
        (layers.Hardswish(), nn.Hardswish()),
        (layers.Hardsigmoid(), nn.Hardsigmoid()),
        (layers.Hardtanh(), nn.Hardtanh()),
        (layers.Hardtanh(-0.5, 2.0), nn.Hardtanh(-0.5, 2.0)),
        (layers.ReLU6(), nn.ReLU6()),
        (layers.LogSigmoid(), nn.LogSigmoid()),
        (layers.GLU(), nn.GLU()),
        (layers.GLU(dim=0), nn.GLU(dim=0)),
    ]


def _compare_with_torch(torch, ours, theirs, x, grad_rtol=1e-10):
    weight = np.random.default_rng(2).standard_normal(theirs(torch.from_numpy(x)).shape)
    xt = torch.from_numpy(x).requires_grad_()
    expected = theirs(xt)
    (expected * torch.from_numpy(weight)).sum().backward()
    tape.reset_global_tape()
    xv = tape.Variable(x, requires_grad=True)
    out = ours(xv)
    (gx,) = tape.grad((out * tape.Variable(weight)).sum(), [xv])
    np.testing.assert_allclose(
        out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=repr(ours)
    )
    np.testing.assert_allclose(
        gx.numpy(), xt.grad.numpy(), rtol=grad_rtol, atol=1e-12, err_msg=repr(ours)
    )
    return gx.numpy(), weight


def test_new_activation_layers_match_torch_on_random_inputs_and_kinks():
    torch = pytest.importorskip("torch")
    random = np.random.default_rng(1).standard_normal((4, 6)) * 3
    kinks = np.stack([_EDGES, -_EDGES])  # GLU halves dim 0 (2 rows) or dim -1 (13: odd)
    for ours, theirs in _torch_pairs(torch):
        # PyTorch's hardsigmoid backward multiplies by 1.0f / 6.0f, a float32 constant, even in
        # float64 (a relative error of 3e-8); ours is exact, as the last check shows.
        rtol = 1e-7 if ours.op_type == "hardsigmoid" else 1e-10
        _compare_with_torch(torch, ours, theirs, random, rtol)
        if ours.op_type != "glu" or ours._attrs["dim"] == 0:
            _compare_with_torch(torch, ours, theirs, kinks, rtol)
    gx, weight = _compare_with_torch(
        torch, layers.Hardsigmoid(), torch.nn.Hardsigmoid(), kinks, 1e-7
    )
    inside = (kinks > -3) & (kinks < 3)
    np.testing.assert_allclose(gx, np.where(inside, weight / 6, 0.0), rtol=1e-15, atol=0)


def test_new_activation_layers_say_what_they_are_and_only_prelu_has_a_parameter():
    torch = pytest.importorskip("torch")
    assert all(ours.params() == [] for ours, _ in _torch_pairs(torch))
    assert repr(layers.Hardtanh(-2.0, 2.0)) == "Hardtanh(min_val=-2.0, max_val=2.0)"
    assert repr(layers.CELU(0.5)) == "CELU(alpha=0.5)"
    assert repr(layers.GLU(dim=1)) == "GLU(dim=1)"
    assert repr(layers.PReLU(3)) == "PReLU(num_parameters=3)"
    assert [name for name, _ in layers.PReLU(3).named_params()] == ["weight"]


@pytest.mark.parametrize("layer", [layers.SiLU(), layers.Mish(), layers.CELU(0.7), layers.GLU()])
def test_new_smooth_activation_layers_pass_gradcheck(layer):
    assert gradcheck(layer, [_X])


def test_invalid_arguments_of_the_new_layers_are_rejected():
    with pytest.raises(ValueError, match=r"max_val \(1.0\) must be greater than min_val \(1.0\)"):
        layers.Hardtanh(1.0, 1.0)
    with pytest.raises(ValueError, match="attribute 'alpha' has an invalid value"):
        layers.CELU(0.0)
    with pytest.raises(ValueError, match=r"PReLU: argument 'num_parameters' is out of range"):
        layers.PReLU(0)
    with pytest.raises(ValueError, match="X's extent along dim -1 must be even"):
        layers.GLU()(tape.Variable(np.ones((2, 3))))


@pytest.mark.parametrize("num_parameters, shape", [(1, (4, 3, 5, 5)), (3, (4, 3, 5, 5)), (1, (7,))])
def test_prelu_matches_torch_including_its_weight_gradient(num_parameters, shape):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).standard_normal(shape)
    x.flat[0] = 0.0  # PyTorch's slope at 0 is the weight
    theirs = torch.nn.PReLU(num_parameters, init=0.25).double()
    ours = layers.PReLU(num_parameters, init=0.25, dtype="float64")
    np.testing.assert_array_equal(ours.weight.numpy(), theirs.weight.detach().numpy())
    weight = np.random.default_rng(4).standard_normal(shape)
    xt = torch.from_numpy(x).requires_grad_()
    expected = theirs(xt)
    (expected * torch.from_numpy(weight)).sum().backward()
    tape.reset_global_tape()
    xv = tape.Variable(x, requires_grad=True)
    out = ours(xv)
    gx, gw = tape.grad((out * tape.Variable(weight)).sum(), [xv, ours.weight])
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw.numpy(), theirs.weight.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_prelu_trains_in_float32_and_its_gradient_keeps_the_parameter_dtype():
    import optim

    act = layers.PReLU(2)
    x = tape.Variable(np.array([[-1.0, -2.0], [-3.0, 4.0]], np.float32))
    loss = act(x).sum()
    tape.backward(loss)
    assert act.weight.grad().dtype == np.float32
    np.testing.assert_allclose(act.weight.grad().numpy(), [-4.0, -2.0])
    optim.SGD(lr=0.1)(act.params())
    np.testing.assert_allclose(act.weight.numpy(), [0.25 + 0.4, 0.25 + 0.2], rtol=1e-6)
