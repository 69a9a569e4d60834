"""LSTMCell and GRUCell: PyTorch's equations, gate order, parameter layout and init."""

import math

import numpy as np
import pytest

import layers
import tape
from tests.layers.numeric import check_layer_gradients

RNG = np.random.default_rng(0)


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _lstm_reference(cell, x, h, c):
    z = x @ cell.weight_ih.numpy().T + cell.bias_ih.numpy()
    z = z + h @ cell.weight_hh.numpy().T + cell.bias_hh.numpy()
    i, f, g, o = np.split(z, 4, axis=-1)  # PyTorch's gate order
    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    return _sigmoid(o) * np.tanh(c), c


def _gru_reference(cell, x, h):
    gi = x @ cell.weight_ih.numpy().T + cell.bias_ih.numpy()
    gh = h @ cell.weight_hh.numpy().T + cell.bias_hh.numpy()
    (i_r, i_z, i_n), (h_r, h_z, h_n) = np.split(gi, 3, axis=-1), np.split(gh, 3, axis=-1)
    r, z = _sigmoid(i_r + h_r), _sigmoid(i_z + h_z)
    n = np.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


def test_lstm_step_follows_the_equations_with_gates_i_f_g_o():
    cell = layers.LSTMCell(3, 4, dtype="float64")
    x, h, c = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 4)), RNG.standard_normal((2, 4))
    h_new, c_new = cell(tape.Variable(x), (tape.Variable(h), tape.Variable(c)))
    h_ref, c_ref = _lstm_reference(cell, x, h, c)
    np.testing.assert_allclose(h_new.numpy(), h_ref, rtol=1e-12)
    np.testing.assert_allclose(c_new.numpy(), c_ref, rtol=1e-12)


def test_gru_step_follows_the_equations_with_gates_r_z_n():
    cell = layers.GRUCell(3, 4, dtype="float64")
    x, h = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 4))
    out = cell(tape.Variable(x), tape.Variable(h))
    np.testing.assert_allclose(out.numpy(), _gru_reference(cell, x, h), rtol=1e-12)


def test_without_a_state_the_cells_start_from_zeros():
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    lstm, gru = layers.LSTMCell(3, 4), layers.GRUCell(3, 4)
    zeros = np.zeros((2, 4), np.float32)
    h, c = lstm(tape.Variable(x))
    h_ref, c_ref = _lstm_reference(lstm, x, zeros, zeros)
    np.testing.assert_allclose(h.numpy(), h_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c.numpy(), c_ref, rtol=1e-5, atol=1e-6)
    assert h.dtype == np.float32
    np.testing.assert_allclose(
        gru(tape.Variable(x)).numpy(), _gru_reference(gru, x, zeros), rtol=1e-5, atol=1e-6
    )


def test_unbatched_inputs_give_unbatched_states():
    cell = layers.LSTMCell(3, 4, dtype="float64")
    x = RNG.standard_normal(3)
    h, c = cell(tape.Variable(x))
    np.testing.assert_allclose(
        h.numpy(), _lstm_reference(cell, x, np.zeros(4), np.zeros(4))[0], rtol=1e-12
    )
    assert layers.GRUCell(3, 4)(tape.Variable(x.astype(np.float32))).shape == (4,)


def test_parameters_have_pytorchs_names_layout_and_init():
    tape.seed(0)
    cell = layers.LSTMCell(30, 100)
    assert [(name, p.shape) for name, p in cell.named_params()] == [
        ("weight_ih", (400, 30)),
        ("weight_hh", (400, 100)),
        ("bias_ih", (400,)),
        ("bias_hh", (400,)),
    ]
    gru = layers.GRUCell(30, 100)
    assert [p.shape for p in gru.params()] == [(300, 30), (300, 100), (300,), (300,)]
    bound = 1 / math.sqrt(100)
    values = np.concatenate([p.numpy().ravel() for p in cell.params()])
    assert np.abs(values).max() <= bound
    assert abs(values.std() / (bound / math.sqrt(3)) - 1) < 0.05


def test_cells_without_bias_have_only_weights():
    cell = layers.LSTMCell(3, 4, bias=False, dtype="float64")
    assert [name for name, _ in cell.named_params()] == ["weight_ih", "weight_hh"]
    assert repr(cell) == "LSTMCell(3, 4, bias=False)"
    x = RNG.standard_normal((2, 3))
    h, _ = cell(tape.Variable(x))
    zi = x @ cell.weight_ih.numpy().T
    i, _, g, o = np.split(zi, 4, axis=-1)
    np.testing.assert_allclose(
        h.numpy(), _sigmoid(o) * np.tanh(_sigmoid(i) * np.tanh(g)), rtol=1e-12
    )


def test_a_gru_without_bias_follows_the_equations_without_bias():
    cell = layers.GRUCell(3, 4, bias=False, dtype="float64")
    assert [name for name, _ in cell.named_params()] == ["weight_ih", "weight_hh"]
    x, h = RNG.standard_normal(3), RNG.standard_normal(4)
    gi, gh = cell.weight_ih.numpy() @ x, cell.weight_hh.numpy() @ h
    r, z = _sigmoid(gi[:4] + gh[:4]), _sigmoid(gi[4:8] + gh[4:8])
    n = np.tanh(gi[8:] + r * gh[8:])
    out = cell(tape.Variable(x), tape.Variable(h))
    np.testing.assert_allclose(out.numpy(), (1 - z) * n + z * h, rtol=1e-12)


def test_an_lstm_step_is_two_projections_and_one_fused_cell_op():
    cell = layers.LSTMCell(3, 4)
    x = tape.Variable(np.ones((2, 3), np.float32))
    tape.reset_global_tape()
    cell(x)
    assert [op.type for op in tape.get_global_tape().ops] == ["matmul", "matmul", "lstm_cell"]


def test_a_gru_step_is_two_projections_and_one_fused_cell_op():
    cell = layers.GRUCell(3, 4)
    x = tape.Variable(np.ones((2, 3), np.float32))
    tape.reset_global_tape()
    cell(x)
    assert [op.type for op in tape.get_global_tape().ops] == ["matmul", "matmul", "gru_cell"]


def test_lstm_gradients_match_finite_differences():
    cell = layers.LSTMCell(3, 2, dtype="float64")
    inputs = [RNG.standard_normal((2, 3)), RNG.standard_normal((2, 2)), RNG.standard_normal((2, 2))]
    check_layer_gradients(cell, lambda x, h, c: cell(x, (h, c)), inputs)


def test_gru_gradients_match_finite_differences():
    cell = layers.GRUCell(3, 2, dtype="float64")
    inputs = [RNG.standard_normal((2, 3)), RNG.standard_normal((2, 2))]
    check_layer_gradients(cell, cell, inputs)


def test_gradients_through_an_unrolled_sequence_match_finite_differences():
    cell = layers.LSTMCell(2, 3, dtype="float64")

    def unrolled(xs):
        state = None
        for t in range(xs.shape[0]):
            state = cell(xs[t], state)
        return state[0]

    check_layer_gradients(cell, unrolled, [RNG.standard_normal((4, 2, 2))])


def test_wrong_input_or_state_shapes_name_the_cell_and_the_shapes():
    cell = layers.LSTMCell(3, 4)
    with pytest.raises(ValueError) as info:
        cell(tape.Variable(np.ones((2, 5), np.float32)))
    assert "op 'matmul': LSTMCell(3, 4) expects input of shape (batch, 3) or (3,)" in str(
        info.value
    )
    assert "X.shape=(2, 5), weight_ih.shape=(16, 3)" in str(info.value)
    h = tape.Variable(np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"(?s)state c does not match.*c.shape == \(2, 4\)"):
        cell(tape.Variable(np.ones((2, 3), np.float32)), (h, tape.Variable(np.ones((2, 3)))))
    with pytest.raises(ValueError, match=r"GRUCell state h does not match"):
        layers.GRUCell(3, 4)(
            tape.Variable(np.ones((2, 3), np.float32)), tape.Variable(np.ones((3, 4), np.float32))
        )


def _copy_to_torch(ours, theirs, torch):
    with torch.no_grad():
        for name, param in ours.named_params():
            getattr(theirs, name).copy_(torch.tensor(param.numpy()))


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell"])
def test_unrolled_outputs_and_gradients_match_torch(kind):
    torch = pytest.importorskip("torch")
    ours = getattr(layers, kind)(3, 5, dtype="float64")
    theirs = getattr(torch.nn, kind)(3, 5).double()
    _copy_to_torch(ours, theirs, torch)
    xs = RNG.standard_normal((4, 2, 3))
    state_t, state = None, None
    tape.reset_global_tape()
    for x in xs:
        state_t = theirs(torch.from_numpy(x), state_t)
        state = ours(tape.Variable(x), state)
    out_t = state_t[0] if kind == "LSTMCell" else state_t
    out = state[0] if kind == "LSTMCell" else state
    weight = RNG.standard_normal(out.shape)
    (out_t * torch.from_numpy(weight)).sum().backward()
    tape.backward((out * tape.Variable(weight)).sum())
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), rtol=1e-10)
    for name, param in ours.named_params():
        np.testing.assert_allclose(
            param.grad().numpy(),
            getattr(theirs, name).grad.numpy(),
            rtol=1e-9,
            atol=1e-12,
            err_msg=name,
        )
