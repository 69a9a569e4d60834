"""The fused LSTM step beyond the sweep: which gradient ops a backward records, shared gradient
Variables, the hidden Gates output's gradient, and the error messages users see."""

import warnings

import numpy as np
import pytest

import ops
import tape
from tests.ops.cases_rnn import lstm_cell_grad_reference, lstm_cell_reference

RNG = np.random.default_rng(0)


def _inputs(batch=2, hidden=3, dtype=np.float64):
    shapes = [
        (batch, 4 * hidden),
        (batch, 4 * hidden),
        (batch, hidden),
        (4 * hidden,),
        (4 * hidden,),
    ]
    return [tape.Variable(RNG.standard_normal(s).astype(dtype), requires_grad=True) for s in shapes]


def _loss(h, c, seed=1):
    rng = np.random.default_rng(seed)
    return (h * rng.standard_normal(h.shape)).sum() + (c * rng.standard_normal(c.shape)).sum()


def _recorded_types(create_graph, lazy):
    with tape.lazy(lazy):
        tape.reset_global_tape()
        inputs = _inputs()
        tape.grad(_loss(*ops.lstm_cell(*inputs)), inputs, create_graph=create_graph)
        return [op.type for op in tape.get_global_tape().ops]


def test_an_ordinary_backward_records_one_fused_gradient_op():
    types = _recorded_types(create_graph=False, lazy=True)
    assert types.count("lstm_cell") == 1 and types.count("lstm_cell_grad") == 1
    assert "concat" not in types and "sigmoid_grad" not in types


def test_a_differentiable_gradient_is_composed_from_registered_ops():
    types = _recorded_types(create_graph=True, lazy=False)
    assert "lstm_cell_grad" not in types
    assert {"split", "concat", "sigmoid_grad", "tanh_grad"} <= set(types)


def test_fused_and_composed_gradients_agree():
    values = [v.numpy() for v in _inputs()]
    results = []
    for create_graph in (False, True):
        tape.reset_global_tape()
        inputs = [tape.Variable(v, requires_grad=True) for v in values]
        grads = tape.grad(_loss(*ops.lstm_cell(*inputs)), inputs, create_graph=create_graph)
        results.append([g.numpy() for g in grads])
    for fused, composed in zip(*results, strict=True):
        np.testing.assert_allclose(fused, composed, rtol=1e-12, atol=1e-15)


def test_projections_share_one_gradient_and_the_biases_share_another():
    tape.reset_global_tape()
    inputs = _inputs()
    g_gi, g_gh, g_c, g_bih, g_bhh = tape.grad(_loss(*ops.lstm_cell(*inputs)), inputs)
    assert g_gi is g_gh and g_bih is g_bhh
    np.testing.assert_allclose(g_bih.numpy(), g_gi.numpy().sum(axis=0), rtol=1e-12)
    assert g_c.shape == (2, 3)


def test_gradient_of_the_hidden_gates_output_is_the_activations_derivative():
    tape.reset_global_tape()
    gi, gh, c, bias_ih, bias_hh = _inputs()
    ops.lstm_cell(gi, gh, c, bias_ih, bias_hh)
    gates = tape.get_global_tape().ops[-1].results[2]  # not returned, but a loss could read it
    weight = RNG.standard_normal(gates.shape)
    (g_gi,) = tape.grad((gates * weight).sum(), [gi])
    i, f, g, o = np.split(gates.numpy(), 4, axis=-1)
    slope = np.concatenate([i * (1 - i), f * (1 - f), 1 - g**2, o * (1 - o)], axis=-1)
    np.testing.assert_allclose(g_gi.numpy(), weight * slope, rtol=1e-12)


def test_float32_stays_float32_forward_and_backward():
    tape.reset_global_tape()
    inputs = _inputs(dtype=np.float32)
    h, c = ops.lstm_cell(*inputs)
    assert h.dtype == c.dtype == np.float32
    assert all(g.dtype == np.float32 for g in tape.grad(_loss(h, c), inputs))


def test_saturated_gates_warn_of_nothing():
    gi = tape.Variable(np.array([[-1e3, 1e3, 50.0, -1e3]], np.float32), requires_grad=True)
    gh, c = _variables((1, 4), (1, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h, c_next = ops.lstm_cell(gi, gh, c + 1.0)
        (g_gi,) = tape.grad(_loss(h, c_next), [gi])
    np.testing.assert_array_equal(c_next.numpy(), [[1.0]])  # f = 1 keeps C, i = 0 drops g
    np.testing.assert_array_equal(h.numpy(), [[0.0]])  # o = 0
    assert np.all(np.isfinite(g_gi.numpy()))


def _variables(*shapes, dtype=np.float32):
    return [tape.Variable(np.zeros(s, dtype)) for s in shapes]


@pytest.mark.parametrize(
    "shapes, message",
    [
        (
            ((2, 8), (2, 12), (2, 2)),
            r"Gi and Gh must have the same shape\n.*Gi.shape == Gh.shape\n"
            r".*Gi.shape=\(2, 8\), Gh.shape=\(2, 12\)",
        ),
        (
            ((2, 10), (2, 10), (2, 2)),
            r"the last axis of Gi must hold 4 gates \(i, f, g, o\)\n.*Gi.shape == \(..., 4 \* H\)\n"
            r".*Gi.shape=\(2, 10\)",
        ),
        (((), (), ()), r"the last axis of Gi must hold 4 gates.*\n.*\n.*Gi.shape=\(\)"),
        (
            ((2, 8), (2, 8), (3, 2)),
            r"the leading axes of C and Gi differ\n.*C.shape\[:-1\] == Gi.shape\[:-1\] == \(2,\)\n"
            r".*C.shape=\(3, 2\), Gi.shape=\(2, 8\)",
        ),
        (
            ((2, 8), (2, 8), (2, 3)),
            r"the last axis of C must be a quarter of Gi's.*\n"
            r".*C.shape\[-1\] == Gi.shape\[-1\] / 4 == 2\n.*C.shape=\(2, 3\), Gi.shape=\(2, 8\)",
        ),
        (
            ((8,), (8,), (2,), (8,), (2, 8)),
            r"BiasHh must hold one value per gate unit\n"
            r".*BiasHh.shape == \(8,\) \(Gi.shape\[-1\]\)\n"
            r".*BiasHh.shape=\(2, 8\)",
        ),
    ],
)
def test_bad_shapes_name_the_slots_and_shapes(shapes, message):
    with pytest.raises(ValueError, match=r"op 'lstm_cell' \(lstm_cell_\d+\): " + message):
        ops.lstm_cell(*_variables(*shapes))


def test_bad_dtypes_name_the_slot():
    gi, gh, c = _variables((2, 8), (2, 8), (2, 2))
    with pytest.raises(
        TypeError,
        match=r"input C must be floating point\n.*float16, float32 or float64\n.*int64",
    ):
        ops.lstm_cell(gi, gh, tape.Variable(np.zeros((2, 2), np.int64)))
    ints = _variables((2, 8), (2, 8), (2, 2), dtype=np.int32)
    with pytest.raises(
        TypeError,
        match=r"input Gi must be floating point\n"
        r".*float16, float32 or float64\n.*int32",
    ):
        ops.lstm_cell(*ints)


def test_the_gradient_op_checks_its_optional_gradients_too():
    gates, c, cout, g_hout = _variables((2, 8), (2, 2), (2, 2), (2, 3))
    with pytest.raises(
        ValueError,
        match=r"op 'lstm_cell_grad'.*: the last axis of Hout@GRAD "
        r"must be a quarter of Gates's",
    ):
        ops.lstm_cell_grad(gates, c, cout, g_hout)


def test_the_gradient_reference_is_the_forward_references_derivative():
    """The sweep checks lstm_cell_grad against a reference; that reference is checked here
    against central differences of lstm_cell's reference (z = Gi, Gh = 0)."""
    z, c = RNG.standard_normal(8), RNG.standard_normal(2)
    g_hout, g_cout = RNG.standard_normal(2), RNG.standard_normal(2)

    def objective(z, c):
        h, c_next, _ = lstm_cell_reference(z, np.zeros(8), c)
        return np.sum(g_hout * h) + np.sum(g_cout * c_next)

    _, cout, gates = lstm_cell_reference(z, np.zeros(8), c)
    gz, gc, _ = lstm_cell_grad_reference(gates, c, cout, g_hout, g_cout)
    eps = 1e-6
    for got, array, perturbed in (
        (gz, z, lambda d: objective(z + d, c)),
        (gc, c, lambda d: objective(z, c + d)),
    ):
        unit = np.eye(array.size)
        numeric = [(perturbed(eps * e) - perturbed(-eps * e)) / (2 * eps) for e in unit]
        np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-9)
