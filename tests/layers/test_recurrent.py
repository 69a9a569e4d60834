"""LSTM and GRU over whole sequences against torch.nn.LSTM / GRU with the state dict copied by
name: outputs, final states and the gradients of the input, the initial state and every
parameter, for stacked, bidirectional, batch-first, bias-free and unbatched configurations."""

import numpy as np
import pytest

import layers
import tape

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(11)

CONFIGS = [
    {},
    {"num_layers": 2},
    {"bidirectional": True},
    {"num_layers": 3, "bidirectional": True, "batch_first": True},
    {"bias": False, "batch_first": True},
]


def _pair(kind, config, dtype="float64"):
    ours = getattr(layers, kind)(3, 4, dtype=dtype, **config)
    theirs = getattr(torch.nn, kind)(3, 4, **config).to(getattr(torch, dtype))
    state = theirs.state_dict()
    assert [name for name, _ in ours.named_params()] == list(state)
    for name, param in ours.named_params():
        assert param.shape == tuple(state[name].shape), name
        param.set_value(state[name].numpy())
    return ours, theirs


def _run(kind, config, with_state, unbatched=False, dtype="float64", rtol=1e-10, atol=1e-12):
    ours, theirs = _pair(kind, config, dtype)
    steps, batch, directions = 5, 2, 2 if config.get("bidirectional") else 1
    layers_count = config.get("num_layers", 1) * directions
    if unbatched:
        shape, state_shape = (steps, 3), (layers_count, 4)
    else:
        shape = (batch, steps, 3) if config.get("batch_first") else (steps, batch, 3)
        state_shape = (layers_count, batch, 4)
    x = RNG.standard_normal(shape).astype(dtype)
    states = [
        RNG.standard_normal(state_shape).astype(dtype) for _ in range(kind == "LSTM" and 2 or 1)
    ]

    tape.reset_global_tape()
    xv = tape.Variable(x, requires_grad=True)
    sv = [tape.Variable(s, requires_grad=True) for s in states]
    hx = (tuple(sv) if kind == "LSTM" else sv[0]) if with_state else None
    out, final = ours(xv, hx)
    finals = list(final) if kind == "LSTM" else [final]
    weights = [RNG.standard_normal(v.shape).astype(dtype) for v in [out] + finals]
    loss = sum((v * tape.Variable(w)).sum() for v, w in zip([out] + finals, weights))
    leaves = [xv] + (sv if with_state else []) + ours.params()
    grads = tape.grad(loss, leaves)

    xt = torch.tensor(x, requires_grad=True)
    st = [torch.tensor(s, requires_grad=True) for s in states]
    their_hx = (tuple(st) if kind == "LSTM" else st[0]) if with_state else None
    their_out, their_final = theirs(xt, their_hx)
    their_finals = list(their_final) if kind == "LSTM" else [their_final]
    total = sum((v * torch.tensor(w)).sum() for v, w in zip([their_out] + their_finals, weights))
    total.backward()
    for got, want in zip([out] + finals, [their_out] + their_finals, strict=True):
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=rtol, atol=atol)
    wanted = [xt.grad] + ([t.grad for t in st] if with_state else [])
    wanted += [p.grad for p in theirs.parameters()]
    for got, want in zip(grads, wanted, strict=True):
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize(
    "config", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default"
)
@pytest.mark.parametrize("with_state", [False, True])
def test_sequence_layers_match_torch(kind, config, with_state):
    _run(kind, config, with_state)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_unbatched_sequences_match_torch(kind):
    _run(kind, {"num_layers": 2, "bidirectional": True}, with_state=True, unbatched=True)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_float32_stays_float32(kind):
    _run(kind, {"bidirectional": True}, with_state=True, dtype="float32", rtol=2e-5, atol=2e-6)


def test_a_single_step_sequence():
    _run("LSTM", {"num_layers": 2}, with_state=False)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_dropout_between_layers_only_in_training_and_reproducible(kind):
    layer = getattr(layers, kind)(3, 4, num_layers=2, dropout=0.5)
    x = RNG.standard_normal((6, 2, 3)).astype(np.float32)
    runs = []
    for _ in range(2):
        tape.seed(3)
        tape.reset_global_tape()
        runs.append(layer(tape.Variable(x))[0].numpy())
    np.testing.assert_array_equal(runs[0], runs[1])
    layer.eval()
    plain = layer(tape.Variable(x))[0].numpy()
    assert not np.allclose(plain, runs[0])
    dropless = getattr(layers, kind)(3, 4, num_layers=2)
    for ours, theirs in zip(dropless.params(), layer.params(), strict=True):
        ours.set_value(theirs.numpy())
    np.testing.assert_array_equal(dropless(tape.Variable(x))[0].numpy(), plain)


def test_each_direction_projects_all_inputs_with_one_product():
    lstm = layers.LSTM(3, 4, bidirectional=True)
    tape.reset_global_tape()
    lstm(tape.Variable(RNG.standard_normal((7, 2, 3)).astype(np.float32), requires_grad=True))
    types = [op.type for op in tape.get_global_tape().ops]
    assert types.count("lstm_cell") == 14
    assert types.count("matmul") == 2 * (1 + 7)  # per direction: the inputs, then h each step


def test_wrong_shapes_name_the_layer_and_the_shapes():
    lstm = layers.LSTM(3, 4, num_layers=2)
    with pytest.raises(ValueError, match=r"LSTM\(3, 4, num_layers=2\) expects input"):
        lstm(tape.Variable(np.zeros((5, 2, 6), np.float32)))
    bad = tape.Variable(np.zeros((1, 2, 4), np.float32))
    with pytest.raises(
        ValueError, match=r"initial state h0[\s\S]*expected: h0.shape == \(2, 2, 4\)"
    ):
        lstm(tape.Variable(np.zeros((5, 2, 3), np.float32)), (bad, bad))
    with pytest.raises(ValueError, match="at least one time step"):
        layers.GRU(3, 4)(tape.Variable(np.zeros((0, 2, 3), np.float32)))
    with pytest.raises(ValueError, match="GRU: argument 'num_layers' is out of range"):
        layers.GRU(3, 4, num_layers=0)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_lazy_mode_equals_eager(kind):
    layer = getattr(layers, kind)(3, 4, num_layers=2, bidirectional=True)
    x = RNG.standard_normal((6, 2, 3)).astype(np.float32)

    def run():
        tape.reset_global_tape()
        xv = tape.Variable(x, requires_grad=True)
        out = layer(xv)[0]
        (grad,) = tape.grad((out * out).sum(), [xv])
        return out.numpy(), grad.numpy()

    eager = run()
    with tape.lazy():
        lazy = run()
    for got, want in zip(lazy, eager, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
