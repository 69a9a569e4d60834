"""MultiheadAttention and TransformerEncoderLayer against torch.nn with the state dict copied
(Linear weights transposed): outputs, attention weights and the gradients of the inputs and
every parameter, for self- and cross-attention, every mask kind, batch-first and unbatched
layouts, pre- and post-norm, relu and gelu; dropout reproducible under tape.seed."""

import numpy as np
import pytest

import layers
import tape

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(13)
_TRANSPOSED = ("out_proj.weight", "linear1.weight", "linear2.weight")
# torch warns when a boolean padding mask meets a float attention mask (both are valid)
pytestmark = pytest.mark.filterwarnings("ignore:Support for mismatched")


def copy_from_torch(ours, theirs):
    """Loads a torch module's state dict into our layer: the mapping this test documents."""
    state = theirs.state_dict()
    assert [name for name, _ in ours.named_params()] == list(state)
    for name, param in ours.named_params():
        value = state[name].numpy()
        param.set_value(value.T if name.endswith(_TRANSPOSED) else value)


def _randomize(module):
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, dtype=param.dtype) * 0.5)


def _leaves(layer):
    """The layer's parameters, and whether each one's gradient is PyTorch's transposed."""
    return [(p, name.endswith(_TRANSPOSED)) for name, p in layer.named_params()]


def _grads(ours_out, theirs_out, our_leaves, their_leaves, rtol=1e-10, atol=1e-12):
    """``our_leaves``: Variables, or (Variable, transposed) pairs for parameters."""
    pairs = [leaf if isinstance(leaf, tuple) else (leaf, False) for leaf in our_leaves]
    our_leaves = [leaf for leaf, _ in pairs]
    outs = [o for o in ours_out if o is not None]
    refs = [r for r in theirs_out if r is not None]
    weights = [RNG.standard_normal(o.shape) for o in outs]
    loss = sum((o * tape.Variable(w)).sum() for o, w in zip(outs, weights))
    grads = tape.grad(loss, our_leaves)
    sum((r * torch.tensor(w)).sum() for r, w in zip(refs, weights)).backward()
    for got, want in zip(outs, refs, strict=True):
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=rtol, atol=atol)
    for got, (_, transposed), leaf in zip(grads, pairs, their_leaves, strict=True):
        got = got.numpy().T if transposed else got.numpy()
        np.testing.assert_allclose(got, leaf.grad.numpy(), rtol=rtol, atol=atol)


def _mha_pair(embed=8, heads=2, batch_first=False, bias=True):
    ours = layers.MultiheadAttention(
        embed, heads, batch_first=batch_first, bias=bias, dtype="float64"
    )
    theirs = torch.nn.MultiheadAttention(embed, heads, batch_first=batch_first, bias=bias).double()
    _randomize(theirs)
    copy_from_torch(ours, theirs)
    return ours, theirs


def _run_mha(ours, theirs, inputs, **kwargs):
    tape.reset_global_tape()
    our_inputs = [tape.Variable(x, requires_grad=True) for x in inputs]
    their_inputs = [torch.tensor(x, requires_grad=True) for x in inputs]
    our_args = our_inputs * 3 if len(inputs) == 1 else our_inputs
    their_args = their_inputs * 3 if len(inputs) == 1 else their_inputs
    their_kwargs = {
        k: (torch.tensor(v) if isinstance(v, np.ndarray) else v) for k, v in kwargs.items()
    }
    out = ours(*our_args, **kwargs)
    expected = theirs(*their_args, **their_kwargs)
    _grads(out, expected, our_inputs + _leaves(ours), their_inputs + list(theirs.parameters()))
    return out


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("average", [True, False])
def test_self_attention_matches_torch(batch_first, average):
    ours, theirs = _mha_pair(batch_first=batch_first)
    x = RNG.standard_normal((2, 5, 8) if batch_first else (5, 2, 8))
    out, weights = _run_mha(ours, theirs, [x], average_attn_weights=average)
    assert weights.shape == ((2, 5, 5) if average else (2, 2, 5, 5))


def test_cross_attention_with_padding_and_float_mask_matches_torch():
    ours, theirs = _mha_pair(embed=12, heads=3, batch_first=True)
    q, k, v = (RNG.standard_normal(s) for s in ((2, 4, 12), (2, 6, 12), (2, 6, 12)))
    padding = np.zeros((2, 6), bool)
    padding[0, 4:] = True
    padding[1, 5] = True
    mask = RNG.standard_normal((4, 6))
    _run_mha(ours, theirs, [q, k, v], key_padding_mask=padding, attn_mask=mask)


def test_per_head_boolean_mask_and_no_bias_match_torch():
    ours, theirs = _mha_pair(bias=False)
    q, k, v = (RNG.standard_normal(s) for s in ((3, 2, 8), (4, 2, 8), (4, 2, 8)))
    mask = RNG.random((2 * 2, 3, 4)) > 0.6
    mask[..., 0] = False
    _run_mha(ours, theirs, [q, k, v], attn_mask=mask, need_weights=False)


def test_unbatched_attention_matches_torch():
    ours, theirs = _mha_pair()
    out, weights = _run_mha(ours, theirs, [RNG.standard_normal((5, 8))])
    assert out.shape == (5, 8) and weights.shape == (5, 5)


def test_is_causal_builds_the_causal_mask():
    ours, theirs = _mha_pair(batch_first=True)
    x = RNG.standard_normal((2, 5, 8))
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    tape.reset_global_tape()
    out, weights = ours(*[tape.Variable(x)] * 3, is_causal=True)
    expected, expected_weights = theirs(*[torch.tensor(x)] * 3, attn_mask=causal)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(weights.numpy(), expected_weights.detach().numpy(), atol=1e-12)
    assert np.all(np.triu(weights.numpy()[0], 1) == 0)


def test_attention_dropout_in_training_only_and_reproducible():
    mha = layers.MultiheadAttention(8, 2, dropout=0.5, batch_first=True)
    x = tape.Variable(RNG.standard_normal((2, 5, 8)).astype(np.float32))
    runs = []
    for _ in range(2):
        tape.seed(4)
        tape.reset_global_tape()
        runs.append(mha(x, x, x)[0].numpy())
    np.testing.assert_array_equal(runs[0], runs[1])
    mha.eval()
    a, b = mha(x, x, x)[0].numpy(), mha(x, x, x)[0].numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, runs[0]) and a.dtype == np.float32


def test_mha_errors():
    with pytest.raises(ValueError, match=r"embed_dim \(10\) must be divisible by num_heads \(3\)"):
        layers.MultiheadAttention(10, 3)
    mha = layers.MultiheadAttention(8, 2)
    with pytest.raises(ValueError, match=r"expects query, key and value \(L, N, E\)"):
        mha(*[tape.Variable(np.zeros((5, 2, 6), np.float32))] * 3)


ENCODER_CONFIGS = [
    {"norm_first": False, "activation": "relu", "batch_first": False},
    {"norm_first": True, "activation": "gelu", "batch_first": True},
    {"norm_first": False, "activation": "gelu", "batch_first": True, "bias": False},
]


@pytest.mark.parametrize("config", ENCODER_CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_encoder_layer_matches_torch(config):
    ours = layers.TransformerEncoderLayer(8, 2, 16, dropout=0.0, dtype="float64", **config)
    theirs = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, **config).double()
    _randomize(theirs)
    copy_from_torch(ours, theirs)
    theirs.train()  # the reference (non-fused) path; dropout is 0
    shape = (2, 5, 8) if config["batch_first"] else (5, 2, 8)
    x = RNG.standard_normal(shape)
    padding = np.zeros((2, 5), bool)
    padding[1, 3:] = True
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    tape.reset_global_tape()
    xv = tape.Variable(x, requires_grad=True)
    out = ours(xv, src_mask=causal.numpy(), src_key_padding_mask=padding, is_causal=True)
    xt = torch.tensor(x, requires_grad=True)
    expected = theirs(
        xt, src_mask=causal, src_key_padding_mask=torch.tensor(padding), is_causal=True
    )
    _grads([out], [expected], [xv] + _leaves(ours), [xt] + list(theirs.parameters()))


def test_encoder_layer_with_a_custom_activation_and_float32():
    layer = layers.TransformerEncoderLayer(8, 2, 16, activation=lambda h: h * 0.5, batch_first=True)
    x = tape.Variable(RNG.standard_normal((2, 3, 8)).astype(np.float32), requires_grad=True)
    out = layer(x)
    (grad,) = tape.grad(out.sum(), [x])
    assert out.dtype == grad.dtype == np.float32
    with pytest.raises(ValueError, match="activation must be 'relu', 'gelu' or a function"):
        layers.TransformerEncoderLayer(8, 2, activation="swish")


def _value_and_input_grad(layer, x, **kwargs):
    tape.reset_global_tape()
    xv = tape.Variable(x, requires_grad=True)
    out = layer(xv, **kwargs)
    (grad,) = tape.grad((out * out).sum(), [xv])
    return out.numpy(), grad.numpy()


def test_encoder_layer_lazy_mode_equals_eager():
    layer = layers.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    x = RNG.standard_normal((2, 5, 8)).astype(np.float32)
    padding = np.zeros((2, 5), bool)
    padding[0, 4] = True
    eager = _value_and_input_grad(layer, x, src_key_padding_mask=padding, is_causal=True)
    with tape.lazy():
        lazy = _value_and_input_grad(layer, x, src_key_padding_mask=padding, is_causal=True)
    for got, want in zip(lazy, eager, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
