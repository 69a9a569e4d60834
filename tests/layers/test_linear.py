"""Linear and Mean: the seed's ops, PyTorch's default init, any-rank inputs, gradients."""

import math

import numpy as np
import pytest

import layers
import ops
import tape
from layers import init
from tests.layers.numeric import check_layer_gradients


def _relu(x):
    return np.maximum(x, 0)


def test_a_call_records_the_seeds_mul_add_and_activation_ops():
    layer = layers.Linear(3, 2, act="relu")
    tape.reset_global_tape()
    out = layer(tape.Variable(np.ones((4, 3), np.float32), requires_grad=True))
    recorded = tape.get_global_tape().ops
    assert [op.type for op in recorded] == ["mul", "elementwise_add", "relu"]
    assert recorded[0].attrs == {"x_num_col_dims": 1, "y_num_col_dims": 1}
    assert recorded[1].attrs == {"axis": 1}
    assert recorded[0].inputs["Y"] == [layer.weight] and recorded[1].inputs["Y"] == [layer.bias]
    assert out.shape == (4, 2) and out.dtype == np.float32


def test_forward_is_act_of_x_times_weight_plus_bias():
    tape.seed(0)
    layer = layers.Linear(5, 3, act="tanh")
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    np.testing.assert_allclose(
        layer(tape.Variable(x)).numpy(), np.tanh(x @ w + b), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 1, 3, 5), (5,), (0, 5)])
def test_inputs_of_any_rank_are_transformed_along_their_last_axis(shape):
    layer = layers.Linear(5, 4, act="relu")
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    out = layer(tape.Variable(x))
    expected = _relu(x @ layer.weight.numpy() + layer.bias.numpy())
    assert out.shape == shape[:-1] + (4,)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_the_seeds_constant_init_is_available():
    layer = layers.Linear(3, 2, weight_init=init.constant(1.0), bias_init=init.constant(1.0))
    np.testing.assert_array_equal(layer.weight.numpy(), np.ones((3, 2), np.float32))
    out = layer(tape.Variable(np.arange(6, dtype=np.float32).reshape(2, 3)))
    np.testing.assert_array_equal(out.numpy(), [[4, 4], [13, 13]])


def test_default_init_is_pytorchs_uniform_within_one_over_sqrt_in_dim():
    tape.seed(0)
    layer = layers.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    for param in layer.params():
        values = param.numpy()
        assert np.abs(values).max() <= bound
        assert abs(values.std() / (bound / math.sqrt(3)) - 1) < 0.05


def test_unbound_fan_initializers_see_the_in_out_layout():
    tape.seed(0)
    layer = layers.Linear(900, 100, weight_init=init.kaiming_normal(nonlinearity="relu"))
    # fan_in is in_dim (900), not out_dim: std = sqrt(2 / 900)
    assert abs(layer.weight.numpy().std() / math.sqrt(2 / 900) - 1) < 0.05


def test_params_are_weight_then_bias_and_bias_can_be_left_out():
    layer = layers.Linear(3, 2)
    assert layer.params() == [layer.weight, layer.bias]
    assert all(p.requires_grad and p.persistable for p in layer.params())
    no_bias = layers.Linear(3, 2, bias=False)
    assert no_bias.params() == [no_bias.weight]
    tape.reset_global_tape()
    no_bias(tape.Variable(np.ones((1, 3), np.float32), requires_grad=True))
    assert [op.type for op in tape.get_global_tape().ops] == ["mul"]


def test_gradients_match_finite_differences():
    layer = layers.Linear(4, 3, act="tanh", dtype="float64")
    x = np.random.default_rng(2).standard_normal((5, 4))
    check_layer_gradients(layer, layer, [x])
    x3 = np.random.default_rng(3).standard_normal((2, 3, 4))
    check_layer_gradients(layer, layer, [x3])


def test_float32_layers_keep_float32_gradients():
    layer = layers.Linear(3, 2, act="sigmoid")
    tape.reset_global_tape()
    tape.backward(ops.mean(layer(tape.Variable(np.ones((4, 3), np.float32)))))
    assert [p.grad().dtype for p in layer.params()] == [np.float32, np.float32]


def test_a_wrong_feature_size_names_the_op_the_layer_and_the_shapes():
    layer = layers.Linear(3, 2)
    with pytest.raises(ValueError) as info:
        layer(tape.Variable(np.ones((8, 4), np.float32)))
    message = str(info.value)
    assert "op 'mul': Linear(in_dim=3, out_dim=2) expects 3 input features" in message
    assert "X.shape=(8, 4), weight.shape=(3, 2)" in message
    assert "test_linear.py" in message  # the user's line


def test_an_unknown_activation_is_rejected_at_construction():
    with pytest.raises(TypeError, match="(?s)unknown op type.*did you mean relu"):
        layers.Linear(3, 2, act="rleu")


def test_any_one_input_activation_op_works_by_name():
    x = np.random.default_rng(4).standard_normal((2, 3)).astype(np.float32)
    for act in ("relu", "tanh", "sigmoid", "gelu", "softmax"):
        layer = layers.Linear(3, 4, act=act)
        out = layer(tape.Variable(x))
        assert out.shape == (2, 4)
    softmax = layers.Linear(3, 4, act="softmax")(tape.Variable(x)).numpy()
    np.testing.assert_allclose(softmax.sum(-1), 1.0, rtol=1e-6)


def test_mean_is_the_mean_of_all_elements():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = layers.Mean()(tape.Variable(x))
    assert out.shape == () and out.numpy() == x.mean()
    assert layers.Mean().params() == []


def test_outputs_and_gradients_match_torch():
    torch = pytest.importorskip("torch")
    layer = layers.Linear(5, 3, act="relu", dtype="float64")
    reference = torch.nn.Linear(5, 3).double()
    with torch.no_grad():
        reference.weight.copy_(torch.tensor(layer.weight.numpy().T))
        reference.bias.copy_(torch.tensor(layer.bias.numpy()))
    x = np.random.default_rng(5).standard_normal((6, 5))
    tape.reset_global_tape()
    out = layer(tape.Variable(x))
    tape.backward(ops.mean(out))
    expected = torch.relu(reference(torch.from_numpy(x)))
    expected.mean().backward()
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(
        layer.weight.grad().numpy(), reference.weight.grad.numpy().T, rtol=1e-12
    )
    np.testing.assert_allclose(layer.bias.grad().numpy(), reference.bias.grad.numpy(), rtol=1e-12)
