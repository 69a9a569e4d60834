"""The nn ops beyond the sweep: softmax cross-entropy's label forms, ignored rows and return
value, agreement with PyTorch's losses, and the error messages users see."""

import numpy as np
import pytest

import ops
import tape


def _logits(shape=(6, 5), dtype=np.float32, seed=0):
    data = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return tape.Variable(data, requires_grad=True)


def test_softmax_with_cross_entropy_returns_softmax_and_loss_by_name():
    tape.reset_global_tape()
    result = ops.softmax_with_cross_entropy(_logits(), np.array([0, 1, 2, 3, 4, 0]))
    softmax, loss = result
    assert result.softmax is softmax and result.loss is loss
    assert softmax.shape == (6, 5) and loss.shape == (6, 1)
    assert loss.dtype == np.float32
    np.testing.assert_allclose(softmax.numpy().sum(axis=1), 1.0, rtol=1e-6)


def test_labels_with_and_without_the_class_axis_agree():
    labels = np.array([4, 0, 2, 2, 1, 3])
    results = []
    for label in (labels, labels.reshape(-1, 1)):
        tape.reset_global_tape()
        logits = _logits()
        _, loss = ops.softmax_with_cross_entropy(logits, tape.Variable(label))
        tape.backward(loss.mean())
        results.append((loss.numpy(), logits.grad().numpy()))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_ignored_rows_have_zero_loss_and_zero_gradient():
    tape.reset_global_tape()
    logits = _logits()
    _, loss = ops.softmax_with_cross_entropy(logits, np.array([[1], [-100], [3], [-100], [0], [2]]))
    tape.backward(loss.sum())
    assert np.all(loss.numpy()[[1, 3]] == 0) and np.all(loss.numpy()[[0, 2, 4, 5]] > 0)
    grad = logits.grad().numpy()
    assert np.all(grad[[1, 3]] == 0)
    np.testing.assert_allclose(grad.sum(axis=1), 0.0, atol=1e-6)  # softmax minus one-hot


def test_gradient_through_both_outputs_sums_the_two_paths():
    tape.reset_global_tape()
    logits = _logits(dtype=np.float64)
    label = np.array([0, 1, 2, 3, 4, 0])
    softmax, loss = ops.softmax_with_cross_entropy(logits, label)
    weight = np.random.default_rng(1).standard_normal((6, 5))
    (both,) = tape.grad(loss.sum() + (softmax * weight).sum(), [logits])
    tape.reset_global_tape()
    (via_loss,) = tape.grad(ops.softmax_with_cross_entropy(logits, label)[1].sum(), [logits])
    tape.reset_global_tape()
    (via_softmax,) = tape.grad((ops.softmax(logits) * weight).sum(), [logits])
    np.testing.assert_allclose(both.numpy(), via_loss.numpy() + via_softmax.numpy(), rtol=1e-12)


def test_losses_match_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((7, 4))
    label = np.array([0, 3, -100, 1, 2, -100, 3])
    soft = rng.dirichlet(np.ones(4), size=7)
    target = rng.uniform(size=(7, 4))
    other = rng.standard_normal((7, 4))
    t_logits = torch.tensor(logits, requires_grad=True)
    cases = [
        (
            lambda x: ops.softmax_with_cross_entropy(x, label).loss.reshape(-1),
            lambda x: torch.nn.functional.cross_entropy(x, torch.tensor(label), reduction="none"),
        ),
        (
            lambda x: ops.softmax_with_cross_entropy(x, soft, soft_label=True).loss.reshape(-1),
            lambda x: torch.nn.functional.cross_entropy(x, torch.tensor(soft), reduction="none"),
        ),
        (
            lambda x: ops.sigmoid_cross_entropy_with_logits(x, target),
            lambda x: torch.nn.functional.binary_cross_entropy_with_logits(
                x, torch.tensor(target), reduction="none"
            ),
        ),
        (
            lambda x: ops.mse(x, other),
            lambda x: torch.nn.functional.mse_loss(x, torch.tensor(other)),
        ),
        (
            lambda x: ops.mse(x, other, reduction="sum"),
            lambda x: torch.nn.functional.mse_loss(x, torch.tensor(other), reduction="sum"),
        ),
    ]
    for ours, theirs in cases:
        tape.reset_global_tape()
        x = tape.Variable(logits, requires_grad=True)
        out = ours(x)
        tape.backward(out.sum())
        expected = theirs(t_logits)
        (t_grad,) = torch.autograd.grad(expected.sum(), [t_logits])
        np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(x.grad().numpy(), t_grad.numpy(), rtol=1e-12, atol=1e-14)


def test_one_hot_appends_a_class_axis():
    out = ops.one_hot(tape.Variable(np.array([[2, 0, 1]])), depth=3)
    np.testing.assert_array_equal(out.numpy(), [[[0, 0, 1], [1, 0, 0], [0, 1, 0]]])
    assert out.dtype == np.float32 and not out.requires_grad


def _raises(error, call, *messages):
    with pytest.raises(error) as info:
        call()
    text = str(info.value)
    for message in messages:
        assert message in text, text
    assert "test_nn_ops.py" in text, text


def test_label_errors_name_the_problem():
    x = _logits()
    _raises(
        TypeError,
        lambda: ops.softmax_with_cross_entropy(x, np.ones((6, 1))),
        "Label must hold integer class indices",
        "hint: pass soft_label=True",
    )
    _raises(
        ValueError,
        lambda: ops.softmax_with_cross_entropy(x, np.zeros(5, np.int64)),
        "Label does not match Logits",
        "expected: Label.shape == (6, 1) or (6,)",
        "actual:   Label.shape=(5,)",
    )
    _raises(
        ValueError,
        lambda: ops.softmax_with_cross_entropy(x, np.zeros((6, 2), np.int64)),
        "Label does not match Logits",
    )
    # Label values are only seen when the kernel runs.
    _raises(
        tape.ExecutionError,
        lambda: ops.softmax_with_cross_entropy(x, np.full(6, 5)),
        "kernel failed: ValueError: class index 5 is outside [0, 5)",
    )
    _raises(
        ValueError,
        lambda: ops.softmax_with_cross_entropy(x, np.ones((6, 4), np.float32), soft_label=True),
        "soft labels must have Logits' shape",
    )
    _raises(
        ValueError,
        lambda: ops.softmax_with_cross_entropy(x, np.zeros(6, np.int64), axis=2),
        "axis 2 is out of range",
    )


def test_other_nn_errors():
    x = _logits()
    _raises(
        TypeError,
        lambda: ops.softmax(tape.Variable(np.ones((2, 2), np.int64))),
        "input X must be floating point",
    )
    _raises(
        ValueError, lambda: ops.mse(x, np.ones((3,), np.float32)), "cannot be broadcast together"
    )
    _raises(
        ValueError,
        lambda: ops.mse(x, x, reduction="avg"),
        "attribute 'reduction' has an invalid value",
        "one of ['mean', 'sum', 'none']",
    )
    _raises(
        ValueError,
        lambda: ops.sigmoid_cross_entropy_with_logits(x, np.ones((6,), np.float32)),
        "Label must have X's shape",
    )
    _raises(
        tape.ExecutionError,
        lambda: ops.one_hot(tape.Variable(np.array([0, 3])), depth=3),
        "class index 3 is outside [0, 3)",
    )
    _raises(
        TypeError,
        lambda: ops.one_hot(tape.Variable(np.array([0.0])), depth=3),
        "input X must hold integer class indices",
    )
