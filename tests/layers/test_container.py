"""Sequential: chains layers, indexes and iterates like a list, names parameters by position."""

import numpy as np
import pytest

import layers
import ops
import tape
from tests.layers.numeric import check_layer_gradients


def _model():
    return layers.Sequential(
        layers.Linear(3, 5, dtype="float64"), layers.Tanh(), layers.Linear(5, 2, dtype="float64")
    )


def test_calls_its_layers_in_order():
    model = _model()
    x = np.random.default_rng(0).standard_normal((4, 3))
    first, second = model[0], model[2]
    hidden = np.tanh(x @ first.weight.numpy() + first.bias.numpy())
    expected = hidden @ second.weight.numpy() + second.bias.numpy()
    np.testing.assert_allclose(model(tape.Variable(x)).numpy(), expected, rtol=1e-12)


def test_is_indexable_sliceable_iterable_and_sized():
    model = _model()
    assert len(model) == 3
    assert [type(layer).__name__ for layer in model] == ["Linear", "Tanh", "Linear"]
    assert model[-1] is model[2]
    head = model[:2]
    assert isinstance(head, layers.Sequential) and len(head) == 2 and head[0] is model[0]
    assert len(layers.Sequential()) == 0


def test_parameters_are_named_by_position_in_order():
    model = _model()
    names = [name for name, _ in model.named_params()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert model.params() == model[0].params() + model[2].params()


def test_append_adds_a_layer_and_its_parameters():
    model = layers.Sequential(layers.Linear(3, 4))
    model.append(layers.ReLU()).append(layers.Linear(4, 1))
    assert [name for name, _ in model.named_params()][-2:] == ["2.weight", "2.bias"]
    assert model(tape.Variable(np.ones((2, 3), np.float32))).shape == (2, 1)


def test_plain_callables_are_layers_without_parameters():
    model = layers.Sequential(layers.Linear(3, 4), ops.relu)
    assert model(tape.Variable(np.ones((2, 3), np.float32))).shape == (2, 4)
    assert len(model.params()) == 2
    with pytest.raises(TypeError, match="Sequential layers must be callable, got int"):
        layers.Sequential(3)


def test_train_and_eval_reach_every_layer():
    model = layers.Sequential(layers.Linear(3, 4), layers.Sequential(layers.ReLU()))
    model.eval()
    assert not model.training and not model[0].training and not model[1][0].training
    model.train()
    assert model[1][0].training


def test_gradients_match_finite_differences():
    model = _model()
    check_layer_gradients(model, model, [np.random.default_rng(1).standard_normal((4, 3))])
