"""The dtype rule at the layer level: float64 data (numpy's, pandas', scikit-learn's default) into
float32 layers computes in float64, and every parameter gets a float32 gradient its optimizer
takes, in eager and lazy mode; the results equal the same layer held in float64."""

import contextlib

import numpy as np
import pytest

import layers
import ops
import optim
import tape

# (name, layer factory taking a dtype, call returning one output Variable)
_LAYERS = [
    ("Linear", lambda d: layers.Linear(3, 2, act="relu", dtype=d), lambda layer, x: layer(x)),
    ("LayerNorm", lambda d: layers.LayerNorm(3, dtype=d), lambda layer, x: layer(x)),
    ("BatchNorm", lambda d: layers.BatchNorm(3, dtype=d), lambda layer, x: layer(x)),
    ("LSTMCell", lambda d: layers.LSTMCell(3, 2, dtype=d), lambda layer, x: layer(x)[0]),
    ("LSTMCell_state", lambda d: layers.LSTMCell(3, 2, dtype=d), lambda cell, x: _lstm(cell, x)),
    ("GRUCell", lambda d: layers.GRUCell(3, 2, dtype=d), lambda layer, x: layer(x, layer(x))),
    (
        "Conv2D",
        lambda d: layers.Conv2D(1, 2, 2, padding=1, dtype=d),
        lambda layer, x: layer(_image(x)),
    ),
    (
        "ConvTranspose2D",
        lambda d: layers.ConvTranspose2D(1, 2, 2, stride=2, dtype=d),
        lambda layer, x: layer(_image(x)),
    ),
    ("PReLU", lambda d: layers.PReLU(3, dtype=d), lambda layer, x: layer(x)),
]


def _image(x):
    return x.reshape((1, 1, 4, 3))


def _lstm(cell, x):
    """Two steps, the second from a float32 state the user made (float64 input, float32 h, c)."""
    h, c = cell(x)
    zeros = tape.Variable(np.zeros((4, 2), np.float32))
    h2, c2 = cell(x, (zeros, zeros))
    return h + h2 + c + c2


def _run(factory, call, x, dtype, lazy, steps=2):
    """Output, parameter gradients (before the last step) and parameters after ``steps`` steps."""
    tape.seed(0)
    layer = factory("float32")
    if dtype == "float64":  # the same layer held in float64
        values = [p.numpy() for p in layer.params()]
        layer = factory("float64")
        for p, value in zip(layer.params(), values, strict=True):
            p.set_value(value.astype(np.float64))
    sgd = optim.SGD(0.1)
    for _ in range(steps):
        with tape.lazy() if lazy else contextlib.nullcontext():
            tape.reset_global_tape()
            out = call(layer, tape.Variable(x))
            tape.backward(ops.mean(out * out))
            grads = [p.grad().numpy() for p in layer.params()]
            sgd(layer.params())
            value = out.numpy()
        tape.reset_global_tape()
    return value, grads, [p.numpy() for p in layer.params()]


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
@pytest.mark.parametrize("name, factory, call", _LAYERS, ids=[c[0] for c in _LAYERS])
def test_float64_data_into_float32_layers(name, factory, call, lazy):
    x = np.random.default_rng(1).standard_normal((4, 3))  # float64, as numpy makes it
    out, grads, params = _run(factory, call, x, "float32", lazy)
    ref_out, ref_grads, ref_params = _run(factory, call, x, "float64", lazy)
    assert out.dtype == np.float64, f"{name}: output {out.dtype}"
    np.testing.assert_allclose(out, ref_out, rtol=1e-6, atol=1e-7)
    for g, ref in zip(grads, ref_grads, strict=True):
        assert g.dtype == np.float32, f"{name}: a float32 parameter got a {g.dtype} gradient"
        np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-6)
    for p, ref in zip(params, ref_params, strict=True):
        assert p.dtype == np.float32
        np.testing.assert_allclose(p, ref, rtol=1e-5, atol=1e-6)


def test_float32_data_stays_float32_end_to_end():
    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    for name, factory, call in _LAYERS:
        out, grads, _ = _run(factory, call, x, "float32", lazy=False, steps=1)
        assert out.dtype == np.float32, name
        assert all(g.dtype == np.float32 for g in grads), name


def test_integer_data_into_a_linear_layer_promotes_as_numpy():
    layer = layers.Linear(3, 2)
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    tape.reset_global_tape()
    out = layer(tape.Variable(x))
    weight, bias = (p.numpy() for p in layer.params())
    assert out.dtype == (x @ weight + bias).dtype == np.float64
    np.testing.assert_allclose(out.numpy(), x @ weight.astype(np.float64) + bias, rtol=1e-12)
    tape.backward(ops.mean(out))
    assert [p.grad().dtype for p in layer.params()] == [np.float32, np.float32]
    optim.Adam(0.01)(layer.params())  # accepted: the gradients have the parameters' dtype


def test_float64_data_through_an_optimizer_with_create_graph():
    """Gradients of gradients keep the rule: the recorded casts are differentiable."""
    layer = layers.Linear(3, 1)
    x = tape.Variable(np.random.default_rng(2).standard_normal((5, 3)), requires_grad=True)
    tape.reset_global_tape()
    out = ops.mean(ops.tanh(layer(x)))
    (gx,) = tape.grad(out, [x], create_graph=True)
    assert gx.dtype == np.float64
    tape.backward(ops.mean(gx * gx))
    assert all(p.grad().dtype == np.float32 for p in layer.params())
