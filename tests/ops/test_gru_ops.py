"""The fused GRU step beyond the sweep: which gradient ops a backward records, how the two
projections' gradients differ, the hidden outputs and their gradients, and the error messages."""

import warnings

import numpy as np
import pytest

import ops
import tape
from tests.ops.cases_rnn import gru_cell_grad_reference, gru_cell_reference

RNG = np.random.default_rng(0)


def _inputs(lead=(2,), hidden=3, dtype=np.float64, bias=True):
    shapes = [lead + (3 * hidden,), lead + (3 * hidden,), lead + (hidden,)]
    shapes += [(3 * hidden,), (3 * hidden,)] if bias else []
    return [tape.Variable(RNG.standard_normal(s).astype(dtype), requires_grad=True) for s in shapes]


def _loss(h, seed=1):
    return (h * np.random.default_rng(seed).standard_normal(h.shape)).sum()


def _recorded_types(create_graph, lazy):
    with tape.lazy(lazy):
        tape.reset_global_tape()
        inputs = _inputs()
        tape.grad(_loss(ops.gru_cell(*inputs)), inputs, create_graph=create_graph)
        return [op.type for op in tape.get_global_tape().ops]


def test_an_ordinary_backward_records_one_fused_gradient_op():
    types = _recorded_types(create_graph=False, lazy=True)
    assert types.count("gru_cell") == 1 and types.count("gru_cell_grad") == 1
    assert "concat" not in types and "sigmoid_grad" not in types


def test_a_differentiable_gradient_is_composed_from_registered_ops():
    types = _recorded_types(create_graph=True, lazy=False)
    assert "gru_cell_grad" not in types
    assert {"split", "concat", "sigmoid_grad", "tanh_grad"} <= set(types)


@pytest.mark.parametrize("lead, bias", [((2,), True), ((2,), False), ((), True), ((3, 2), True)])
def test_fused_and_composed_gradients_agree(lead, bias):
    values = [v.numpy() for v in _inputs(lead, bias=bias)]
    results = []
    for create_graph in (False, True):
        tape.reset_global_tape()
        inputs = [tape.Variable(v, requires_grad=True) for v in values]
        grads = tape.grad(_loss(ops.gru_cell(*inputs)), inputs, create_graph=create_graph)
        results.append([g.numpy() for g in grads])
    for fused, composed in zip(*results, strict=True):
        np.testing.assert_allclose(fused, composed, rtol=1e-12, atol=1e-15)


def test_the_projections_gradients_differ_only_in_the_n_block():
    tape.reset_global_tape()
    inputs = _inputs()
    h = ops.gru_cell(*inputs)
    rz = tape.get_global_tape().ops[-1].results[1].numpy()
    g_gi, g_gh, _, g_bih, g_bhh = (g.numpy() for g in tape.grad(_loss(h), inputs))
    np.testing.assert_array_equal(g_gh[:, :6], g_gi[:, :6])  # r and z: the same sums
    np.testing.assert_allclose(g_gh[:, 6:], g_gi[:, 6:] * rz[:, :3], rtol=1e-12)  # dn' r
    np.testing.assert_allclose(g_bih, g_gi.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(g_bhh, g_gh.sum(axis=0), rtol=1e-12)


def test_the_hidden_outputs_are_the_activated_gates_and_the_hidden_n_projection():
    tape.reset_global_tape()
    inputs = _inputs()
    hout = ops.gru_cell(*inputs)
    _, rz, n, ghn = tape.get_global_tape().ops[-1].results  # not returned; a loss could read them
    expected = gru_cell_reference(*(v.numpy() for v in inputs))
    for got, want in zip((hout, rz, n, ghn), expected, strict=True):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


def test_gradients_of_the_hidden_outputs_reach_the_projections():
    tape.reset_global_tape()
    gi, gh, h, bias_ih, bias_hh = _inputs()
    ops.gru_cell(gi, gh, h, bias_ih, bias_hh)
    _, rz, n, ghn = tape.get_global_tape().ops[-1].results
    w_r, w_z, w_n, w_ghn = (RNG.standard_normal(h.shape) for _ in range(4))
    loss = (rz * np.hstack([w_r, w_z])).sum() + (n * w_n).sum() + (ghn * w_ghn).sum()
    g_gi, g_gh = tape.grad(loss, [gi, gh])
    (r, z), n = np.split(rz.numpy(), 2, axis=-1), n.numpy()
    g_n = w_n * (1 - n**2)  # n = tanh(Gi_n + b_in + r * Ghn)
    g_r, g_z = (w_r + g_n * ghn.numpy()) * r * (1 - r), w_z * z * (1 - z)
    np.testing.assert_allclose(g_gi.numpy(), np.hstack([g_r, g_z, g_n]), rtol=1e-12)
    np.testing.assert_allclose(g_gh.numpy(), np.hstack([g_r, g_z, w_ghn + g_n * r]), rtol=1e-12)


@pytest.mark.parametrize("hidden_output", [1, 2, 3])
def test_a_gradient_reaching_one_hidden_output_only_is_composed(hidden_output):
    """Without Hout's gradient the fused op does not apply; the composed one fills zeros."""
    tape.reset_global_tape()
    inputs = _inputs()
    ops.gru_cell(*inputs)
    out = tape.get_global_tape().ops[-1].results[hidden_output]
    grads = tape.grad(out.sum(), inputs[:3])
    assert "gru_cell_grad" not in [op.type for op in tape.get_global_tape().ops]
    assert grads[2] is None  # H reaches the hidden outputs only through Hout
    assert all(np.all(np.isfinite(g.numpy())) for g in grads[:2])


def test_float32_stays_float32_forward_and_backward():
    tape.reset_global_tape()
    inputs = _inputs(dtype=np.float32)
    h = ops.gru_cell(*inputs)
    assert h.dtype == np.float32
    assert all(g.dtype == np.float32 for g in tape.grad(_loss(h), inputs))


def test_saturated_gates_warn_of_nothing():
    gi = tape.Variable(np.array([[-1e3, 1e3, 50.0]], np.float32), requires_grad=True)
    gh, h = _variables((1, 3), (1, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h_next = ops.gru_cell(gi, gh, h + 2.0)
        (g_gi,) = tape.grad(_loss(h_next), [gi])
    np.testing.assert_array_equal(h_next.numpy(), [[2.0]])  # z = 1 keeps H
    assert np.all(np.isfinite(g_gi.numpy()))


def _variables(*shapes, dtype=np.float32):
    return [tape.Variable(np.zeros(s, dtype)) for s in shapes]


@pytest.mark.parametrize(
    "shapes, message",
    [
        (
            ((2, 6), (2, 9), (2, 2)),
            r"Gi and Gh must have the same shape\n.*Gi.shape == Gh.shape\n"
            r".*Gi.shape=\(2, 6\), Gh.shape=\(2, 9\)",
        ),
        (
            ((2, 8), (2, 8), (2, 2)),
            r"the last axis of Gi must hold 3 gates \(r, z, n\)\n.*Gi.shape == \(..., 3 \* H\)\n"
            r".*Gi.shape=\(2, 8\)",
        ),
        (((), (), ()), r"the last axis of Gi must hold 3 gates.*\n.*\n.*Gi.shape=\(\)"),
        (
            ((2, 6), (2, 6), (3, 2)),
            r"the leading axes of H and Gi differ\n.*H.shape\[:-1\] == Gi.shape\[:-1\] == \(2,\)\n"
            r".*H.shape=\(3, 2\), Gi.shape=\(2, 6\)",
        ),
        (
            ((2, 6), (2, 6), (2, 3)),
            r"the last axis of H must be a third of Gi's \(one value per gate r, z, n\)\n"
            r".*H.shape\[-1\] == Gi.shape\[-1\] / 3 == 2\n.*H.shape=\(2, 3\), Gi.shape=\(2, 6\)",
        ),
        (
            ((6,), (6,), (2,), (2,)),
            r"BiasIh must hold one value per gate unit\n"
            r".*BiasIh.shape == \(6,\) \(Gi.shape\[-1\]\)\n"
            r".*BiasIh.shape=\(2,\)",
        ),
    ],
)
def test_bad_shapes_name_the_slots_and_shapes(shapes, message):
    with pytest.raises(ValueError, match=r"op 'gru_cell' \(gru_cell_\d+\): " + message):
        ops.gru_cell(*_variables(*shapes))


def test_bad_dtypes_name_the_slot():
    gi, gh, h = _variables((2, 6), (2, 6), (2, 2))
    with pytest.raises(
        TypeError, match=r"input H must be floating point\n.*float16, float32 or float64\n.*int64"
    ):
        ops.gru_cell(gi, gh, tape.Variable(np.zeros((2, 2), np.int64)))
    with pytest.raises(
        TypeError,
        match=r"input Gi must be floating point\n.*float16, float32 or float64\n.*int32",
    ):
        ops.gru_cell(*_variables((2, 6), (2, 6), (2, 2), dtype=np.int32))


def test_the_gradient_op_checks_its_inputs_too():
    rz, n, ghn, h, g_hout = _variables((2, 4), (2, 2), (2, 2), (2, 2), (2, 3))
    with pytest.raises(
        ValueError,
        match=r"op 'gru_cell_grad'.*: the last axis of Hout@GRAD must be half of RZ's "
        r"\(one value per gate r, z\)",
    ):
        ops.gru_cell_grad(rz, n, ghn, h, g_hout)


def test_the_gradient_reference_is_the_forward_references_derivative():
    """The sweep checks gru_cell_grad against a reference; that reference is checked here
    against central differences of gru_cell's reference."""
    gi, gh, h, g_hout = (RNG.standard_normal(n) for n in (6, 6, 2, 2))

    def objective(gi, gh, h):
        return np.sum(g_hout * gru_cell_reference(gi, gh, h)[0])

    _, rz, n, ghn = gru_cell_reference(gi, gh, h)
    expected = gru_cell_grad_reference(rz, n, ghn, h, g_hout)
    eps, arrays = 1e-6, [gi, gh, h]
    for k, got in enumerate(expected):
        numeric = []
        for unit in np.eye(arrays[k].size):
            plus, minus = list(arrays), list(arrays)
            plus[k], minus[k] = arrays[k] + eps * unit, arrays[k] - eps * unit
            numeric.append((objective(*plus) - objective(*minus)) / (2 * eps))
        np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-9)
