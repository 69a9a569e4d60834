"""Random ops: reproducibility under ``tape.seed``, the per-op ``seed`` attribute, dropout's
evaluation mode and gradient, and attribute errors."""

import numpy as np
import pytest

import ops
import tape


def _draws():
    """One of each random op, in a fixed order."""
    x = tape.Variable(np.ones((6, 7), np.float32))
    return [
        ops.uniform_random(shape=[3, 4]).numpy(),
        ops.gaussian_random(shape=[5], mean=1.0, std=2.0, dtype="float64").numpy(),
        ops.dropout(x, dropout_prob=0.5)[1].numpy(),
        ops.uniform_random(shape=[2]).numpy(),
    ]


def test_seed_reproduces_the_same_draws():
    tape.seed(123)
    first = _draws()
    tape.seed(123)
    second = _draws()
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


def test_different_seeds_draw_differently():
    tape.seed(1)
    first = _draws()
    tape.seed(2)
    second = _draws()
    for a, b in zip(first, second, strict=True):
        assert not np.array_equal(a, b)


def test_ops_draw_from_the_global_generator_natively_in_float32():
    tape.seed(7)
    uniform = ops.uniform_random(shape=[4, 5], min=0.0, max=1.0).numpy()
    normal = ops.gaussian_random(shape=[6]).numpy()
    rng = np.random.default_rng(7)
    np.testing.assert_array_equal(uniform, rng.random((4, 5), dtype=np.float32))
    np.testing.assert_array_equal(normal, rng.standard_normal(6, dtype=np.float32))


def test_uniform_range_is_scaled_from_the_unit_draw():
    tape.seed(3)
    scaled = ops.uniform_random(shape=[100], min=2.0, max=6.0).numpy()
    unit = np.random.default_rng(3).random(100, dtype=np.float32)
    np.testing.assert_allclose(scaled, unit * 4.0 + 2.0, rtol=1e-6)
    assert scaled.dtype == np.float32


def test_seed_attribute_repeats_its_draws_and_leaves_the_global_generator_alone():
    tape.seed(5)
    expected = ops.uniform_random(shape=[8]).numpy()
    tape.seed(5)
    seeded = [ops.gaussian_random(shape=[3, 3], seed=42).numpy() for _ in range(3)]
    after = ops.uniform_random(shape=[8]).numpy()
    for draw in seeded[1:]:
        np.testing.assert_array_equal(draw, seeded[0])
    np.testing.assert_array_equal(after, expected)
    tape.seed(99)  # the global seed does not change a seeded op
    np.testing.assert_array_equal(ops.gaussian_random(shape=[3, 3], seed=42).numpy(), seeded[0])
    assert not np.array_equal(ops.gaussian_random(shape=[3, 3], seed=43).numpy(), seeded[0])


def test_seeded_dropout_draws_the_same_mask_every_time():
    x = tape.Variable(np.ones((10, 10), np.float32))
    masks = [ops.dropout(x, dropout_prob=0.5, seed=9)[1].numpy() for _ in range(2)]
    np.testing.assert_array_equal(masks[0], masks[1])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dropout_in_evaluation_is_the_identity(dtype):
    x = tape.Variable(
        np.random.default_rng(0).standard_normal((4, 6)).astype(dtype), requires_grad=True
    )
    out, mask = ops.dropout(x, dropout_prob=0.6, is_test=True)
    np.testing.assert_array_equal(out.numpy(), x.numpy())
    assert out.dtype == x.dtype
    tape.backward(out.sum())
    np.testing.assert_array_equal(x.grad().numpy(), np.ones((4, 6), dtype))
    np.testing.assert_array_equal(mask.numpy(), np.ones((4, 6), dtype))


def test_downgrade_in_infer_scales_at_evaluation_and_not_in_training():
    x = tape.Variable(np.full((50, 50), 2.0, np.float32))
    out, _ = ops.dropout(x, dropout_prob=0.25, is_test=True, mode="downgrade_in_infer")
    np.testing.assert_allclose(out.numpy(), 1.5)
    out, mask = ops.dropout(x, dropout_prob=0.25, mode="downgrade_in_infer")
    assert set(np.unique(out.numpy())) <= {0.0, 2.0}
    assert set(np.unique(mask.numpy())) == {0.0, 1.0}


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_gradient_is_the_mask_times_the_scale(p):
    tape.reset_global_tape()
    rng = np.random.default_rng(1)
    x = tape.Variable(rng.uniform(1.0, 2.0, (30, 40)).astype(np.float32), requires_grad=True)
    weight = rng.standard_normal((30, 40)).astype(np.float32)
    out, mask = ops.dropout(x, dropout_prob=p)
    tape.backward((out * tape.Variable(weight)).sum())
    kept = out.numpy() != 0
    assert set(np.unique(mask.numpy())) <= {0.0, np.float32(1.0 / (1.0 - p))}
    np.testing.assert_array_equal(mask.numpy() != 0, kept)
    expected = weight * kept * np.float32(1.0 / (1.0 - p))
    np.testing.assert_allclose(x.grad().numpy(), expected, rtol=1e-6)
    assert x.grad().dtype == np.float32
    assert np.all(x.grad().numpy()[~kept] == 0)


def test_dropout_gradient_does_not_flow_through_the_mask():
    tape.reset_global_tape()
    x = tape.Variable(np.ones((20, 20)), requires_grad=True)
    _, mask = ops.dropout(x, dropout_prob=0.5)
    (gx,) = tape.grad(mask.sum(), [x])
    assert gx is None or not np.any(gx.numpy())


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda x: ops.dropout(x, dropout_prob=1.0),
            "attribute 'dropout_prob' has an invalid value",
        ),
        (lambda x: ops.dropout(x, mode="scale"), "expected: one of ['upscale_in_train', "),
        (lambda x: ops.uniform_random(shape=[2], dtype="int32"), "a floating-point dtype"),
        (
            lambda x: ops.gaussian_random(shape=[2], std=-1.0),
            "attribute 'std' has an invalid value",
        ),
        (lambda x: ops.uniform_random(), "missing required attribute 'shape'"),
        (lambda x: ops.uniform_random(shape=[2, -1]), "attribute 'shape' has a negative dimension"),
    ],
)
def test_bad_attributes_are_reported_at_the_call(call, message):
    x = tape.Variable(np.ones((2, 2), np.float32))
    with pytest.raises((ValueError, TypeError)) as info:
        call(x)
    assert message in str(info.value)
    assert "test_random_ops.py" in str(info.value)


def test_dropout_rejects_integer_inputs():
    with pytest.raises(TypeError, match="input X must be floating point"):
        ops.dropout(tape.Variable(np.ones((2, 2), np.int64)))
