"""What layers accept: bad constructor sizes and bad call inputs get the library's errors naming
the layer, the argument and the user's line; arrays and lists are wrapped as constants."""

import numpy as np
import pytest

import layers
import tape

BAD_CONSTRUCTORS = [
    (lambda: layers.Linear(-1, 3), "Linear: argument 'in_dim' is out of range", "-1"),
    (lambda: layers.Linear(2.5, 3), "Linear: argument 'in_dim' must be an int", "2.5 (float)"),
    (lambda: layers.Linear(3, "4"), "Linear: argument 'out_dim' must be an int", "'4' (str)"),
    (lambda: layers.Linear(True, 3), "Linear: argument 'in_dim' must be an int", "True"),
    (lambda: layers.Embedding(-1, 3), "Embedding: argument 'num_embeddings'", "-1"),
    (lambda: layers.Embedding(4, 0), "Embedding: argument 'embedding_dim'", "0"),
    (lambda: layers.LSTMCell(0, 3), "LSTMCell: argument 'input_size'", "0"),
    (lambda: layers.GRUCell(3, -2), "GRUCell: argument 'hidden_size'", "-2"),
    (lambda: layers.LSTM(3, 0), "LSTM: argument 'hidden_size'", "0"),
    (lambda: layers.GRU(3, 4, num_layers=0), "GRU: argument 'num_layers'", "0"),
    (lambda: layers.BatchNorm(0), "BatchNorm: argument 'num_features'", "0"),
    (lambda: layers.LayerNorm((4, -1)), "LayerNorm: argument 'normalized_shape'", "-1"),
    (lambda: layers.GroupNorm(0, 4), "GroupNorm: argument 'num_groups'", "0"),
    (lambda: layers.Conv2D(0, 1, 3), "Conv2D: argument 'in_channels'", "0"),
    (lambda: layers.Conv2D(1, 1, 0), "Conv2D: kernel_size must be >= 1", None),
    (lambda: layers.ConvTranspose1D(1, 1, 3, stride=0), "ConvTranspose1D: stride", None),
    (lambda: layers.MaxPool2D(0), "MaxPool2D: kernel_size must be >= 1", None),
    (lambda: layers.AdaptiveAvgPool2D(0), "AdaptiveAvgPool2D: output_size must be", None),
    (lambda: layers.MultiheadAttention(8, 0), "MultiheadAttention: argument 'num_heads'", "0"),
    (
        lambda: layers.TransformerEncoderLayer(8, 2, dim_feedforward=0),
        "TransformerEncoderLayer: argument 'dim_feedforward'",
        "0",
    ),
    (lambda: layers.PReLU(0), "PReLU: argument 'num_parameters'", "0"),
    (lambda: layers.Dropout(1.5), "Dropout: dropout probability must be between 0 and 1", None),
    (lambda: layers.MSELoss(reduction="avg"), "MSELoss: ", None),
]


@pytest.mark.parametrize("make, headline, actual", BAD_CONSTRUCTORS)
def test_bad_constructor_arguments_name_the_layer_argument_and_line(make, headline, actual):
    with pytest.raises(tape.AttrError) as info:
        make()
    message = str(info.value)
    assert message.startswith(headline)
    if actual is not None:
        assert f"actual:   {actual}" in message
    assert "recorded at: test_arguments.py:" in message
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)


@pytest.mark.parametrize("bad", [None, "abc", object(), {"x": 1}])
@pytest.mark.parametrize(
    "layer, argument",
    [
        (layers.Linear(3, 2), "x"),
        (layers.ReLU(), "x"),
        (layers.Conv2D(1, 1, 1), "x"),
        (layers.Sequential(layers.Linear(3, 2)), "x"),
        (layers.LSTMCell(3, 2), "x"),
        (layers.Embedding(4, 2), "ids"),
    ],
)
def test_calling_a_layer_with_a_non_array_names_the_layer_and_argument(layer, argument, bad):
    with pytest.raises(tape.InputError) as info:
        layer(bad)
    message = str(info.value)
    name = type(layer).__name__
    assert message.startswith(
        f"{name}: argument '{argument}' must be a Variable, an array or a (nested) list of numbers"
    )
    assert f"({type(bad).__name__})" in message
    assert "recorded at: test_arguments.py:" in message


def test_losses_name_the_target_argument():
    with pytest.raises(tape.InputError, match="MSELoss: argument 'target'"):
        layers.MSELoss()(tape.Variable(np.ones(3)), None)


def test_arrays_and_lists_are_wrapped_as_constants():
    layer = layers.Linear(3, 2)
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    expected = layer(tape.Variable(data)).numpy()
    np.testing.assert_array_equal(layer(data).numpy(), expected)
    np.testing.assert_array_equal(layer(x=data).numpy(), expected)
    from_list = layer(data.tolist())  # float64 data: numpy's promotion with float32 weights
    np.testing.assert_allclose(from_list.numpy(), expected, rtol=1e-6)
    assert layers.MSELoss()(data, data.tolist()).item() == 0.0
    # the caller's array stays theirs
    wrapped = layers.ReLU()(data)
    data[0, 0] = 100.0
    assert wrapped.numpy()[0, 0] == 0.0


def test_object_arrays_are_refused_with_the_layer_named():
    with pytest.raises(tape.InputError, match="Linear: argument 'x': data must be numeric"):
        layers.Linear(1, 1)(np.array([object()]))


def test_user_layers_keep_their_own_arguments():
    class Tree(layers.Function):
        def forward(self, x):
            return x

    tree = ("+", 1, 2)
    assert Tree()(tree) is tree and Tree()(None) is None


@pytest.mark.parametrize(
    "loss",
    [
        layers.MSELoss(),
        layers.HuberLoss(),
        layers.SmoothL1Loss(),
        layers.KLDivLoss(),
        layers.BCEWithLogitsLoss(),
        layers.BCELoss(),
    ],
)
def test_losses_refuse_a_target_that_would_broadcast(loss):
    prediction = tape.Variable(np.full((4, 1), 0.5))
    with pytest.raises(tape.ShapeError) as info:
        loss(prediction, np.full(4, 0.5))
    message = str(info.value)
    assert "target" in message and "(4,)" in message and "(4, 1)" in message
    assert "recorded at: test_arguments.py:" in message
    assert loss(prediction, np.full((4, 1), 0.5)).shape == ()
