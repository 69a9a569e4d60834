"""Loss and distance layers against torch.nn: values and input gradients in float64 for every
reduction, class weights, ignore_index, label smoothing, probability targets, the log clamp of
BCELoss, KLDivLoss's log_target and "batchmean", Huber/smooth-L1 thresholds and p-norms."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import layers
import tape

torch = pytest.importorskip("torch")
F = torch.nn.functional
RNG = np.random.default_rng(7)
REDUCTIONS = ["mean", "sum", "none"]


def _ours(layer, inputs, grad_of=(0,)):
    """(value, gradients of sum(out * w) for the inputs in ``grad_of``) of our layer."""
    tape.reset_global_tape()
    variables = [tape.Variable(x, requires_grad=i in grad_of) for i, x in enumerate(inputs)]
    out = layer(*variables)
    weight = np.random.default_rng(1).standard_normal(out.shape)
    grads = tape.grad((out * tape.Variable(weight)).sum(), [variables[i] for i in grad_of])
    return out.numpy(), [g.numpy() for g in grads], weight


def _theirs(fn, inputs, weight, grad_of=(0,)):
    tensors = [torch.tensor(x, requires_grad=i in grad_of) for i, x in enumerate(inputs)]
    out = fn(*tensors)
    (out * torch.tensor(weight)).sum().backward()
    return out.detach().numpy(), [tensors[i].grad.numpy() for i in grad_of]


def _compare(layer, fn, inputs, grad_of=(0,), rtol=1e-10, atol=1e-12):
    value, grads, weight = _ours(layer, inputs, grad_of)
    expected, expected_grads = _theirs(fn, inputs, weight, grad_of)
    np.testing.assert_allclose(value, expected, rtol=rtol, atol=atol)
    for got, want in zip(grads, expected_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _labels(shape, classes, ignored=()):
    labels = RNG.integers(0, classes, shape)
    labels.reshape(-1)[list(ignored)] = -100
    return labels


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.15])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_with_weight_ignore_index_and_smoothing(reduction, smoothing, weighted):
    logits, labels = RNG.standard_normal((6, 4)), _labels((6,), 4, ignored=(1, 4))
    weight = RNG.uniform(0.2, 2.0, 4) if weighted else None
    layer = layers.CrossEntropyLoss(reduction, label_smoothing=smoothing, weight=weight)
    loss = torch.nn.CrossEntropyLoss(
        weight=None if weight is None else torch.tensor(weight),
        reduction=reduction,
        label_smoothing=smoothing,
    )
    _compare(lambda x, y: layer(x, y), lambda x, y: loss(x, y), [logits, labels])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_spatial_targets_with_weights(reduction):
    logits, labels = RNG.standard_normal((2, 3, 4, 5)), _labels((2, 4, 5), 3, ignored=(0, 7))
    weight = RNG.uniform(0.2, 2.0, 3)
    layer = layers.CrossEntropyLoss(reduction, label_smoothing=0.1, weight=weight)
    loss = torch.nn.CrossEntropyLoss(
        weight=torch.tensor(weight), reduction=reduction, label_smoothing=0.1
    )
    _compare(layer, loss, [logits, labels])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_with_probability_targets_weight_and_smoothing(reduction):
    logits = RNG.standard_normal((5, 3))
    target = RNG.dirichlet(np.ones(3), 5)
    weight = RNG.uniform(0.2, 2.0, 3)
    layer = layers.CrossEntropyLoss(reduction, label_smoothing=0.2, weight=weight)
    loss = torch.nn.CrossEntropyLoss(
        weight=torch.tensor(weight), reduction=reduction, label_smoothing=0.2
    )
    _compare(layer, loss, [logits, target], grad_of=(0, 1))


def test_unbatched_cross_entropy_with_weight():
    logits, weight = RNG.standard_normal(4), RNG.uniform(0.2, 2.0, 4)
    layer = layers.CrossEntropyLoss(weight=weight, label_smoothing=0.1)
    loss = torch.nn.CrossEntropyLoss(weight=torch.tensor(weight), label_smoothing=0.1)
    _compare(layer, loss, [logits, np.array(2)])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_with_weight_and_ignore_index(reduction, weighted):
    log_probs = np.log(RNG.dirichlet(np.ones(5), 7))
    labels = _labels((7,), 5)
    labels[[0, 5]] = 2
    weight = RNG.uniform(0.2, 2.0, 5) if weighted else None
    layer = layers.NLLLoss(reduction, ignore_index=2, weight=weight)
    loss = torch.nn.NLLLoss(
        weight=None if weight is None else torch.tensor(weight),
        reduction=reduction,
        ignore_index=2,
    )
    _compare(layer, loss, [log_probs, labels])


def test_weighted_nll_mean_divides_by_the_picked_weights():
    log_probs = np.log(np.array([[0.5, 0.5], [0.2, 0.8], [0.9, 0.1]]))
    weight = np.array([1.0, 3.0])
    out = layers.NLLLoss(weight=weight)(tape.Variable(log_probs), np.array([0, 1, -100]))
    expected = -(1.0 * log_probs[0, 0] + 3.0 * log_probs[1, 1]) / (1.0 + 3.0)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)


def test_class_weights_must_be_one_per_class():
    with pytest.raises(ValueError, match=r"one weight per class \(C,\), got shape \(2, 2\)"):
        layers.CrossEntropyLoss(weight=np.ones((2, 2)))
    layer = layers.NLLLoss(weight=np.ones(3))
    with pytest.raises(ValueError, match=r"Weight must hold one weight per class"):
        layer(tape.Variable(np.zeros((2, 4))), np.array([0, 1]))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_bce_loss_matches_torch(reduction, weighted):
    x, y = RNG.uniform(0.05, 0.95, (4, 3)), RNG.uniform(0, 1, (4, 3))
    weight = RNG.uniform(0.5, 2.0, 3) if weighted else None
    layer = layers.BCELoss(reduction, weight=weight)
    loss = torch.nn.BCELoss(
        weight=None if weight is None else torch.tensor(weight), reduction=reduction
    )
    _compare(layer, loss, [x, y], grad_of=(0, 1))


def test_bce_clamps_the_logs_at_minus_100_and_floors_the_gradient_like_torch():
    x, y = np.array([0.0, 1.0, 0.0, 1.0, 0.5]), np.array([0.0, 1.0, 1.0, 0.0, 0.3])
    layer = layers.BCELoss(reduction="none")
    _compare(layer, torch.nn.BCELoss(reduction="none"), [x, y])
    value = layer(tape.Variable(x), y).numpy()
    np.testing.assert_array_equal(value[:4], [0.0, 0.0, 100.0, 100.0])


def test_bce_rejects_values_outside_zero_one_and_other_target_shapes():
    with pytest.raises(Exception, match="between 0 and 1"):
        layers.BCELoss()(tape.Variable(np.array([1.5])), np.array([1.0]))
    with pytest.raises(ValueError, match=r"target of the input's shape"):
        layers.BCELoss()(tape.Variable(np.array([0.5, 0.5])), np.array([1.0]))


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss")
@pytest.mark.parametrize("reduction", REDUCTIONS + ["batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_loss_matches_torch(reduction, log_target):
    x = np.log(RNG.dirichlet(np.ones(4), 3))
    target = RNG.dirichlet(np.ones(4), 3)
    target[0, 1] = 0.0
    if log_target:
        target = np.log(RNG.dirichlet(np.ones(4), 3))
    layer = layers.KLDivLoss(reduction, log_target=log_target)
    loss = torch.nn.KLDivLoss(reduction=reduction, log_target=log_target)
    _compare(layer, loss, [x, target], grad_of=(0, 1) if log_target else (0,))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("delta", [1.0, 0.3])
def test_huber_loss_matches_torch(reduction, delta):
    x, y = 2 * RNG.standard_normal((4, 5)), RNG.standard_normal((4, 5))
    layer = layers.HuberLoss(reduction, delta=delta)
    _compare(layer, torch.nn.HuberLoss(reduction, delta=delta), [x, y], grad_of=(0, 1))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("beta", [1.0, 0.25, 0.0])
def test_smooth_l1_loss_matches_torch(reduction, beta):
    x, y = 2 * RNG.standard_normal((4, 5)), RNG.standard_normal((4, 5))
    layer = layers.SmoothL1Loss(reduction, beta=beta)
    _compare(layer, torch.nn.SmoothL1Loss(reduction=reduction, beta=beta), [x, y], grad_of=(0, 1))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cosine_similarity_matches_torch(dim):
    x1, x2 = RNG.standard_normal((3, 4, 2)), RNG.standard_normal((3, 4, 2))
    layer = layers.CosineSimilarity(dim=dim)
    _compare(layer, torch.nn.CosineSimilarity(dim=dim), [x1, x2], grad_of=(0, 1))


def test_cosine_similarity_clamps_each_norm_like_torch_gradients_included():
    x1 = 1e-9 * RNG.standard_normal((2, 3))
    x1[1] = 0.0
    x2 = RNG.standard_normal((2, 3))
    layer = layers.CosineSimilarity(dim=1, eps=1e-6)
    _compare(layer, torch.nn.CosineSimilarity(dim=1, eps=1e-6), [x1, x2], grad_of=(0, 1))


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, 0.5, math.inf, 0.0])
@pytest.mark.parametrize("keepdim", [False, True])
def test_pairwise_distance_matches_torch(p, keepdim):
    x1, x2 = RNG.standard_normal((5, 4)), RNG.standard_normal((5, 4))
    layer = layers.PairwiseDistance(p=p, keepdim=keepdim)
    theirs = torch.nn.PairwiseDistance(p=p, keepdim=keepdim)
    if p == 0.0:  # a count: no gradient reaches the inputs, as in PyTorch
        tape.reset_global_tape()
        x = tape.Variable(x1, requires_grad=True)
        out = layer(x, x2)
        np.testing.assert_array_equal(
            out.numpy(), theirs(torch.tensor(x1), torch.tensor(x2)).numpy()
        )
        assert tape.grad(out.sum(), [x]) == [None]
        return
    _compare(layer, theirs, [x1, x2], grad_of=(0, 1))


def test_pairwise_max_norm_shares_the_gradient_between_ties():
    x1, x2 = np.array([[1.0, -3.0, 3.0, 0.5]]), np.zeros((1, 4))
    layer = layers.PairwiseDistance(p=math.inf, eps=0.0)
    _compare(layer, torch.nn.PairwiseDistance(p=math.inf, eps=0.0), [x1, x2])


@settings(max_examples=25, deadline=None)
@given(
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=3, max_side=3),
    p=st.sampled_from([1.0, 2.0, math.inf]),
)
def test_distances_broadcast_like_torch(shapes, p):
    (s1, s2), result = shapes.input_shapes, shapes.result_shape
    x1, x2 = RNG.standard_normal(s1), RNG.standard_normal(s2)
    _compare(
        layers.PairwiseDistance(p=p),
        torch.nn.PairwiseDistance(p=p),
        [x1, x2],
        grad_of=(0, 1),
        rtol=1e-9,
        atol=1e-10,
    )
    dim = len(result) - 1
    _compare(
        layers.CosineSimilarity(dim=dim),
        torch.nn.CosineSimilarity(dim=dim),
        [x1, x2],
        grad_of=(0, 1),
        rtol=1e-9,
        atol=1e-10,
    )


@pytest.mark.parametrize(
    "layer, inputs",
    [
        (layers.CrossEntropyLoss(weight=[1.0, 2.0, 3.0]), "classes"),
        (layers.NLLLoss(weight=[1.0, 2.0, 3.0]), "classes"),
        (layers.BCELoss(weight=[1.0, 2.0, 3.0]), "probabilities"),
        (layers.KLDivLoss("batchmean"), "probabilities"),
        (layers.HuberLoss(), "probabilities"),
        (layers.SmoothL1Loss(beta=0.5), "probabilities"),
        (layers.CosineSimilarity(), "probabilities"),
        (layers.PairwiseDistance(), "probabilities"),
    ],
)
def test_float32_stays_float32_values_and_gradients(layer, inputs):
    tape.reset_global_tape()
    x = tape.Variable(RNG.uniform(0.1, 0.9, (4, 3)).astype(np.float32), requires_grad=True)
    if inputs == "classes":
        target = np.array([0, 2, 1, -100])
    else:
        target = RNG.uniform(0.1, 0.9, (4, 3)).astype(np.float32)
    out = layer(x, target)
    assert out.dtype == np.float32
    (grad,) = tape.grad(out.sum(), [x])
    assert grad.dtype == np.float32


@pytest.mark.parametrize(
    "layer, kind",
    [
        (layers.CrossEntropyLoss(weight=[1.0, 2.0, 3.0], label_smoothing=0.1), "classes"),
        (layers.NLLLoss(weight=[1.0, 2.0, 3.0]), "classes"),
        (layers.BCELoss(), "probabilities"),
        (layers.KLDivLoss("batchmean"), "probabilities"),
        (layers.SmoothL1Loss(beta=0.5), "probabilities"),
        (layers.CosineSimilarity(), "probabilities"),
        (layers.PairwiseDistance(p=3.0), "probabilities"),
    ],
)
def test_lazy_mode_equals_eager(layer, kind):
    x = RNG.uniform(0.1, 0.9, (4, 3))
    target = np.array([0, 2, 1, -100]) if kind == "classes" else RNG.uniform(0.1, 0.9, (4, 3))

    def run():
        tape.reset_global_tape()
        xv = tape.Variable(x, requires_grad=True)
        out = layer(xv, target)
        (grad,) = tape.grad(out.sum(), [xv])
        return out.numpy(), grad.numpy()

    eager = run()
    with tape.lazy():
        lazy = run()
    for got, want in zip(lazy, eager, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
