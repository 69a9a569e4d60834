"""Loss layers: PyTorch's definitions, reductions, ignore_index and label smoothing."""

import numpy as np
import pytest

import layers
import tape
from tape.testing import gradcheck

RNG = np.random.default_rng(0)
LOGITS = RNG.standard_normal((6, 4)) * 2
LABELS = np.array([0, 3, 1, 1, 2, 3])


def _log_softmax(x, axis=-1):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _reduce(values, reduction, count=None):
    if reduction == "none":
        return values
    if reduction == "sum":
        return values.sum()
    return values.sum() / (values.size if count is None else count)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_is_the_reduced_squared_difference(reduction):
    x, y = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    out = layers.MSELoss(reduction)(tape.Variable(x), y)
    np.testing.assert_allclose(out.numpy(), _reduce((x - y) ** 2, reduction), rtol=1e-12)
    assert gradcheck(lambda a: layers.MSELoss(reduction)(a, y), [x])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_is_minus_the_log_softmax_of_the_target_class(reduction):
    out = layers.CrossEntropyLoss(reduction)(tape.Variable(LOGITS), LABELS)
    per_row = -_log_softmax(LOGITS)[np.arange(6), LABELS]
    np.testing.assert_allclose(out.numpy(), _reduce(per_row, reduction), rtol=1e-12)
    assert out.shape == ((6,) if reduction == "none" else ())


def test_ignored_targets_add_nothing_and_mean_counts_only_the_others():
    labels = LABELS.copy()
    labels[[1, 4]] = -100
    loss = layers.CrossEntropyLoss()
    tape.reset_global_tape()
    logits = tape.Variable(LOGITS, requires_grad=True)
    out = loss(logits, labels)
    kept = labels != -100
    per_row = -_log_softmax(LOGITS)[np.arange(6)[kept], labels[kept]]
    np.testing.assert_allclose(out.numpy(), per_row.mean(), rtol=1e-12)
    tape.backward(out)
    np.testing.assert_array_equal(logits.grad().numpy()[~kept], 0)
    custom = layers.CrossEntropyLoss(reduction="none", ignore_index=3)(
        tape.Variable(LOGITS), LABELS
    )
    assert (custom.numpy()[LABELS == 3] == 0).all() and (custom.numpy()[LABELS != 3] > 0).all()


def test_mean_over_only_ignored_targets_is_nan_like_pytorch():
    with np.errstate(invalid="ignore"):  # 0 / 0
        out = layers.CrossEntropyLoss()(tape.Variable(LOGITS), np.full(6, -100))
    assert np.isnan(out.numpy())


def test_label_smoothing_mixes_in_the_mean_over_classes():
    eps = 0.2
    out = layers.CrossEntropyLoss(label_smoothing=eps)(tape.Variable(LOGITS), LABELS)
    log_probs = _log_softmax(LOGITS)
    per_row = -(1 - eps) * log_probs[np.arange(6), LABELS] - eps / 4 * log_probs.sum(-1)
    np.testing.assert_allclose(out.numpy(), per_row.mean(), rtol=1e-12)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_gradients_match_finite_differences(smoothing):
    labels = LABELS.copy()
    labels[2] = -100
    loss = layers.CrossEntropyLoss(label_smoothing=smoothing)
    assert gradcheck(lambda x: loss(x, labels), [LOGITS])
    spatial = RNG.standard_normal((2, 3, 2, 2))
    spatial_labels = RNG.integers(0, 3, (2, 2, 2))
    assert gradcheck(
        lambda x: layers.CrossEntropyLoss("sum", label_smoothing=smoothing)(x, spatial_labels),
        [spatial],
    )


def test_probability_targets_and_unbatched_inputs_are_accepted():
    probs = np.exp(_log_softmax(RNG.standard_normal((6, 4))))
    out = layers.CrossEntropyLoss()(tape.Variable(LOGITS), probs)
    np.testing.assert_allclose(
        out.numpy(), -(probs * _log_softmax(LOGITS)).sum(-1).mean(), rtol=1e-12
    )
    single = layers.CrossEntropyLoss()(tape.Variable(LOGITS[0]), np.array(3))
    np.testing.assert_allclose(single.numpy(), -_log_softmax(LOGITS[0])[3], rtol=1e-12)


def test_float32_losses_stay_float32():
    logits = tape.Variable(LOGITS.astype(np.float32), requires_grad=True)
    tape.reset_global_tape()
    out = layers.CrossEntropyLoss(label_smoothing=0.1)(logits, LABELS.astype(np.int32))
    tape.backward(out)
    assert out.dtype == np.float32 and logits.grad().dtype == np.float32


def test_a_target_of_the_wrong_shape_names_the_op_and_the_shapes():
    with pytest.raises(ValueError) as info:
        layers.CrossEntropyLoss()(tape.Variable(LOGITS), np.zeros(5, np.int64))
    message = str(info.value)
    assert "op 'softmax_with_cross_entropy'" in message and "Label does not match Logits" in message
    assert "Label.shape=(5,)" in message and "test_loss.py" in message


def test_invalid_arguments_are_rejected():
    with pytest.raises(ValueError, match="reduction must be one of mean, sum, none, got 'avg'"):
        layers.MSELoss("avg")
    with pytest.raises(ValueError, match="label_smoothing must be between 0 and 1, got 1.5"):
        layers.CrossEntropyLoss(label_smoothing=1.5)
    with pytest.raises(TypeError, match="class targets must be integers, got dtype bool"):
        layers.NLLLoss()(tape.Variable(LOGITS), np.array([True] * 6))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_picks_minus_the_target_log_probability(reduction):
    log_probs = _log_softmax(LOGITS)
    labels = LABELS.copy()
    labels[0] = -100
    out = layers.NLLLoss(reduction)(tape.Variable(log_probs), labels)
    kept = labels != -100
    per_row = np.where(kept, -log_probs[np.arange(6), np.where(kept, labels, 0)], 0.0)
    np.testing.assert_allclose(out.numpy(), _reduce(per_row, reduction, kept.sum()), rtol=1e-12)
    assert gradcheck(lambda x: layers.NLLLoss(reduction)(x, labels), [log_probs])


def _bce_reference(x, y, pos_weight=1.0):
    log_sig, log_one_minus = -np.logaddexp(0, -x), -np.logaddexp(0, x)
    return -(pos_weight * y * log_sig + (1 - y) * log_one_minus)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_bce_with_logits_is_the_binary_cross_entropy_of_the_sigmoid(reduction):
    x, y = RNG.standard_normal((4, 3)) * 3, RNG.uniform(0, 1, (4, 3))
    out = layers.BCEWithLogitsLoss(reduction)(tape.Variable(x), y)
    np.testing.assert_allclose(out.numpy(), _reduce(_bce_reference(x, y), reduction), rtol=1e-12)
    assert gradcheck(lambda a: layers.BCEWithLogitsLoss(reduction)(a, y), [x])


def test_pos_weight_scales_the_positive_term():
    x, y = RNG.standard_normal((4, 3)) * 3, RNG.integers(0, 2, (4, 3)).astype(np.float64)
    pos_weight = np.array([0.5, 2.0, 3.0])
    loss = layers.BCEWithLogitsLoss(pos_weight=pos_weight)
    np.testing.assert_allclose(
        loss(tape.Variable(x), y).numpy(), _bce_reference(x, y, pos_weight).mean(), rtol=1e-12
    )
    assert gradcheck(lambda a: loss(a, y), [x])
    # Integer 0/1 targets are converted to the logits' dtype.
    np.testing.assert_allclose(
        loss(tape.Variable(x), y.astype(np.int64)).numpy(),
        _bce_reference(x, y, pos_weight).mean(),
        rtol=1e-12,
    )


def _torch_pair(torch, ours, theirs, x, target, torch_target):
    xt = torch.from_numpy(x).requires_grad_()
    expected = theirs(xt, torch_target)
    weight = RNG.standard_normal(expected.shape)
    (expected * torch.from_numpy(weight)).sum().backward()
    tape.reset_global_tape()
    xv = tape.Variable(x, requires_grad=True)
    out = ours(xv, target)
    (gx,) = tape.grad((out * tape.Variable(weight)).sum(), [xv])
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.15])
def test_cross_entropy_matches_torch_with_ignore_index_and_label_smoothing(reduction, smoothing):
    torch = pytest.importorskip("torch")
    labels = LABELS.copy()
    labels[[0, 3]] = 2
    for ignore_index in (-100, 2):
        ours = layers.CrossEntropyLoss(reduction, ignore_index, smoothing)
        theirs = torch.nn.CrossEntropyLoss(
            reduction=reduction, ignore_index=ignore_index, label_smoothing=smoothing
        )
        _torch_pair(torch, ours, theirs, LOGITS, labels, torch.from_numpy(labels))
    spatial, spatial_labels = RNG.standard_normal((2, 4, 3)), RNG.integers(0, 4, (2, 3))
    spatial_labels[0, 1] = -100
    _torch_pair(
        torch,
        layers.CrossEntropyLoss(reduction, label_smoothing=smoothing),
        torch.nn.CrossEntropyLoss(reduction=reduction, label_smoothing=smoothing),
        spatial,
        spatial_labels,
        torch.from_numpy(spatial_labels),
    )
    probs = np.exp(_log_softmax(RNG.standard_normal((6, 4))))
    _torch_pair(
        torch,
        layers.CrossEntropyLoss(reduction, label_smoothing=smoothing),
        torch.nn.CrossEntropyLoss(reduction=reduction, label_smoothing=smoothing),
        LOGITS,
        probs,
        torch.from_numpy(probs),
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_mse_and_bce_match_torch(reduction):
    torch = pytest.importorskip("torch")
    nn = torch.nn
    labels = LABELS.copy()
    labels[1] = -100
    _torch_pair(
        torch,
        layers.NLLLoss(reduction),
        nn.NLLLoss(reduction=reduction),
        _log_softmax(LOGITS),
        labels,
        torch.from_numpy(labels),
    )
    spatial, spatial_labels = RNG.standard_normal((2, 4, 3)), RNG.integers(0, 4, (2, 3))
    _torch_pair(
        torch,
        layers.NLLLoss(reduction),
        nn.NLLLoss(reduction=reduction),
        _log_softmax(spatial, 1),
        spatial_labels,
        torch.from_numpy(spatial_labels),
    )
    y = RNG.standard_normal((6, 4))
    _torch_pair(
        torch,
        layers.MSELoss(reduction),
        nn.MSELoss(reduction=reduction),
        LOGITS,
        y,
        torch.from_numpy(y),
    )
    probs = RNG.uniform(0, 1, (6, 4))
    pos_weight = np.array([1.0, 2.0, 0.5, 3.0])
    _torch_pair(
        torch,
        layers.BCEWithLogitsLoss(reduction, pos_weight=pos_weight),
        nn.BCEWithLogitsLoss(reduction=reduction, pos_weight=torch.from_numpy(pos_weight)),
        LOGITS,
        probs,
        torch.from_numpy(probs),
    )


def _cross_entropy_mean(logits, labels, ignore_index=-100):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    valid = labels != ignore_index
    picked = log_probs[np.arange(len(labels)), np.where(valid, labels, 0)]
    return -(picked * valid).sum() / valid.sum()


def test_eager_mean_divides_by_the_targets_not_ignored_without_recording_the_count():
    logits = np.random.default_rng(0).standard_normal((4, 3))
    labels = np.array([0, -100, 2, 1])
    tape.reset_global_tape()
    loss = layers.CrossEntropyLoss()(tape.Variable(logits), tape.Variable(labels))
    kinds = [op.type for op in tape.get_global_tape().ops]
    assert "not_equal" not in kinds and "cast" not in kinds
    np.testing.assert_allclose(loss.numpy(), _cross_entropy_mean(logits, labels), rtol=1e-12)


def test_a_program_recorded_lazily_counts_the_targets_it_is_fed():
    """Targets recorded on a lazy tape are placeholders: the count of those not ignored is
    computed from what each run feeds, not from the values the placeholder had."""
    recording = tape.Tape(lazy=True)
    previous, tape.tape.state.tape = tape.tape.state.tape, recording
    try:
        x = tape.Variable(np.zeros((4, 3)), name="x")
        labels = tape.Variable(np.zeros(4, np.int64), name="labels")
        loss = layers.CrossEntropyLoss()(x, labels)
        loss.name = "loss"
    finally:
        tape.tape.state.tape = previous
    program = tape.Program.from_tape(recording)
    logits = np.random.default_rng(1).standard_normal((4, 3))
    fed = np.array([1, -100, -100, 2])
    (got,) = tape.Executor().run(program, feed={"x": logits, "labels": fed}, fetch_list=["loss"])
    np.testing.assert_allclose(np.asarray(got), _cross_entropy_mean(logits, fed), rtol=1e-12)
