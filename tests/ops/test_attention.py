"""scaled_dot_product_attention against torch's: boolean, additive and causal masks, rows that
attend to nothing, scale, broadcast batch axes, first and second gradients, dropout under
tape.seed, lazy mode, float32, and the errors."""

import math

import numpy as np
import pytest

import ops
import tape
from tape.testing import gradcheck

torch = pytest.importorskip("torch")
F = torch.nn.functional
RNG = np.random.default_rng(3)


def _qkv(batch=(2, 3), length=4, source=5, features=6, value_features=3):
    return (
        RNG.standard_normal(batch + (length, features)),
        RNG.standard_normal(batch + (source, features)),
        RNG.standard_normal(batch + (source, value_features)),
    )


def _compare(q, k, v, mask=None, mask_grad=False, **options):
    """Our output and the gradients of sum(out * w) w.r.t. q, k, v (and a float mask) equal
    torch's in float64."""
    tape.reset_global_tape()
    ours = [tape.Variable(a, requires_grad=True) for a in (q, k, v)]
    our_mask = None if mask is None else tape.Variable(mask, requires_grad=mask_grad)
    out = ops.scaled_dot_product_attention(*ours, attn_mask=our_mask, **options)
    weight = RNG.standard_normal(out.shape)
    wrt = ours + ([our_mask] if mask_grad else [])
    grads = tape.grad((out * tape.Variable(weight)).sum(), wrt)

    theirs = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    their_mask = None if mask is None else torch.tensor(mask, requires_grad=mask_grad)
    expected = F.scaled_dot_product_attention(*theirs, attn_mask=their_mask, **options)
    (expected * torch.tensor(weight)).sum().backward()
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    for got, want in zip(grads, theirs + ([their_mask] if mask_grad else []), strict=True):
        np.testing.assert_allclose(got.numpy(), want.grad.numpy(), rtol=1e-10, atol=1e-12)
    return out.numpy()


def test_plain_attention_matches_torch():
    _compare(*_qkv())


def test_scale_and_unbatched_inputs():
    _compare(*_qkv(batch=()), scale=0.3)


def test_boolean_mask_keeps_true_positions_and_empty_rows_give_zero():
    q, k, v = _qkv()
    mask = RNG.random((4, 5)) > 0.4
    mask[0] = True
    mask[2] = False  # a query that may attend to nothing
    out = _compare(q, k, v, mask)
    np.testing.assert_array_equal(out[..., 2, :], 0.0)


def test_boolean_mask_per_batch_and_head_broadcasts():
    q, k, v = _qkv()
    mask = RNG.random((2, 1, 4, 5)) > 0.3
    mask[..., 0] = True
    _compare(q, k, v, mask)


def test_additive_float_mask_gets_its_gradient_and_minus_inf_rows_give_zero():
    q, k, v = _qkv()
    mask = RNG.standard_normal((4, 5))
    mask[1, 2] = -math.inf
    _compare(q, k, v, mask, mask_grad=False)
    finite = RNG.standard_normal((3, 4, 5))
    _compare(q, k, v, finite, mask_grad=True)
    mask[3] = -math.inf
    out = _compare(q, k, v, mask)
    np.testing.assert_array_equal(out[..., 3, :], 0.0)


@pytest.mark.parametrize("length, source", [(4, 4), (3, 5), (5, 3)])
def test_causal_attention_matches_torch(length, source):
    _compare(*_qkv(length=length, source=source), is_causal=True)


def test_causal_output_ignores_later_positions():
    q, k, v = _qkv(batch=(1,), length=5, source=5)
    first = ops.scaled_dot_product_attention(q, k, v, is_causal=True).numpy()
    k2, v2 = k.copy(), v.copy()
    k2[:, 3:] += 10.0
    v2[:, 3:] -= 5.0
    second = ops.scaled_dot_product_attention(q, k2, v2, is_causal=True).numpy()
    np.testing.assert_allclose(first[:, :3], second[:, :3], rtol=1e-12)
    assert not np.allclose(first[:, 3:], second[:, 3:])


def test_second_derivatives_match_torch():
    q, k, v = _qkv(batch=(2,), length=3, source=4, features=2, value_features=2)
    mask = RNG.random((3, 4)) > 0.3
    mask[:, 0] = True
    direction = RNG.standard_normal(q.shape)

    tape.reset_global_tape()
    ours = [tape.Variable(a, requires_grad=True) for a in (q, k, v)]
    out = ops.scaled_dot_product_attention(*ours, attn_mask=mask)
    (gq,) = tape.grad((out * out).sum(), [ours[0]], create_graph=True)
    second = tape.grad((gq * tape.Variable(direction)).sum(), ours)

    theirs = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
    expected = F.scaled_dot_product_attention(*theirs, attn_mask=torch.tensor(mask))
    (tq,) = torch.autograd.grad((expected * expected).sum(), [theirs[0]], create_graph=True)
    want = torch.autograd.grad((tq * torch.tensor(direction)).sum(), theirs)
    for got, w in zip(second, want, strict=True):
        np.testing.assert_allclose(got.numpy(), w.numpy(), rtol=1e-9, atol=1e-11)


def test_gradients_match_finite_differences_with_a_causal_mask():
    q, k, v = _qkv(batch=(1,), length=3, source=3, features=2, value_features=2)

    def attend(q, k, v):
        return ops.scaled_dot_product_attention(q, k, v, is_causal=True)

    assert gradcheck(attend, [q, k, v])


def test_dropout_is_drawn_by_the_random_op_and_repeats_under_tape_seed():
    q, k, v = _qkv()
    results = []
    for _ in range(2):
        tape.seed(11)
        tape.reset_global_tape()
        results.append(ops.scaled_dot_product_attention(q, k, v, dropout_p=0.5).numpy())
    np.testing.assert_array_equal(results[0], results[1])
    plain = ops.scaled_dot_product_attention(q, k, v).numpy()
    assert not np.allclose(results[0], plain)
    tape.reset_global_tape()
    x = tape.Variable(q, requires_grad=True)
    ops.scaled_dot_product_attention(x, k, v, dropout_p=0.5)
    types = [op.type for op in tape.get_global_tape().ops]
    assert types == ["matmul", "scale", "softmax", "dropout", "matmul"]


def test_dropout_keeps_the_expected_value():
    q, k, v = _qkv(batch=(400,), length=2, source=3, features=2, value_features=1)
    tape.seed(0)
    dropped = ops.scaled_dot_product_attention(q, k, v, dropout_p=0.3).numpy()
    plain = ops.scaled_dot_product_attention(q, k, v).numpy()
    assert abs(dropped.mean() - plain.mean()) < 0.1 * abs(plain).mean()


def test_lazy_mode_equals_eager():
    q, k, v = _qkv()
    mask = RNG.random((4, 5)) > 0.5
    mask[1] = False
    eager = ops.scaled_dot_product_attention(q, k, v, attn_mask=mask).numpy()
    with tape.lazy():
        tape.reset_global_tape()
        lazy = ops.scaled_dot_product_attention(q, k, v, attn_mask=mask).numpy()
    np.testing.assert_allclose(lazy, eager, rtol=1e-12)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
def test_float32_stays_float32(mask_kind):
    q, k, v = (a.astype(np.float32) for a in _qkv())
    mask = {"none": None, "bool": RNG.random((4, 5)) > 0.2, "float": np.zeros((4, 5))}[mask_kind]
    tape.reset_global_tape()
    x = tape.Variable(q, requires_grad=True)
    out = ops.scaled_dot_product_attention(x, k, v, attn_mask=mask, dropout_p=0.1)
    assert out.dtype == np.float32
    (grad,) = tape.grad(out.sum(), [x])
    assert grad.dtype == np.float32


def test_errors_name_the_problem():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="attn_mask or is_causal, not both"):
        ops.scaled_dot_product_attention(q, k, v, attn_mask=np.ones((4, 5), bool), is_causal=True)
    with pytest.raises(ValueError, match=r"query, key and value do not fit together"):
        ops.scaled_dot_product_attention(q, k[..., :2], v)
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\)"):
        ops.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    with pytest.raises(TypeError, match="query must be floating point"):
        ops.scaled_dot_product_attention(q.astype(np.int64), k, v)
