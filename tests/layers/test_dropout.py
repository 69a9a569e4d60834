"""Dropout: inverted dropout while training, the identity in eval mode, reproducible by seed."""

import numpy as np
import pytest

import layers
import tape


def _ones(shape=(200, 100)):
    return tape.Variable(np.ones(shape, np.float32))


def test_training_zeroes_a_fraction_p_and_scales_the_rest_by_one_over_one_minus_p():
    tape.seed(0)
    out = layers.Dropout(0.3)(_ones()).numpy()
    assert set(np.unique(out).tolist()) == {0.0, np.float32(1 / 0.7).item()}
    dropped = np.mean(out == 0)
    assert abs(dropped - 0.3) < 4 * np.sqrt(0.3 * 0.7 / out.size)
    assert abs(out.mean() - 1.0) < 0.02  # the expectation is kept
    assert out.dtype == np.float32


def test_eval_mode_is_the_identity_and_records_nothing():
    drop = layers.Dropout(0.5).eval()
    tape.reset_global_tape()
    x = tape.Variable(np.ones((2, 3), np.float32), requires_grad=True)
    assert drop(x) is x
    assert len(tape.get_global_tape()) == 0
    drop.train()
    assert drop(x) is not x


def test_seeded_runs_drop_the_same_elements_and_successive_calls_differ():
    drop = layers.Dropout(0.5)
    tape.seed(7)
    first, second = drop(_ones()).numpy(), drop(_ones()).numpy()
    tape.seed(7)
    np.testing.assert_array_equal(drop(_ones()).numpy(), first)
    assert not np.array_equal(first, second)


def test_gradient_flows_through_kept_elements_only_with_the_same_scale():
    tape.reset_global_tape()
    x = tape.Variable(np.random.default_rng(0).uniform(1, 2, (30, 20)), requires_grad=True)
    out = layers.Dropout(0.4)(x)
    tape.backward(out.sum())
    np.testing.assert_allclose(x.grad().numpy(), out.numpy() / x.numpy(), rtol=1e-12)


def test_p_zero_is_the_identity_and_p_one_drops_everything():
    x = tape.Variable(np.ones((3, 4), np.float32), requires_grad=True)
    assert layers.Dropout(0.0)(x) is x
    tape.reset_global_tape()
    out = layers.Dropout(1.0)(x)
    np.testing.assert_array_equal(out.numpy(), 0)
    tape.backward(out.sum())
    np.testing.assert_array_equal(x.grad().numpy(), 0)


def test_sequential_eval_switches_its_dropout_off():
    model = layers.Sequential(layers.Linear(4, 4), layers.Dropout(0.9))
    x = tape.Variable(np.ones((2, 4), np.float32))
    model.eval()
    np.testing.assert_array_equal(model(x).numpy(), model[0](x).numpy())


def test_an_invalid_probability_is_rejected():
    with pytest.raises(ValueError, match="between 0 and 1, got 1.5"):
        layers.Dropout(1.5)
