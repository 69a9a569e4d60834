"""Cases for nll_loss (class weights, ignored targets, any class axis), bce_loss, kl_div and
huber_loss: references in float64 numpy straight from PyTorch's definitions."""

import numpy as np

from tape.testing import OpCase


def _labels(shape, classes, ignored=(), ignore_index=-100):
    def make(rng, dtype):
        label = rng.integers(0, classes, shape)
        label.reshape(-1)[list(ignored)] = ignore_index
        return label

    return make


def _positive(shape, low=0.1, high=1.0):
    return lambda rng, dtype: rng.uniform(low, high, shape).astype(dtype)


def _nll_reference(x, label, weight=None, axis=1, ignore_index=-100):
    axis = 0 if x.ndim == 1 else axis % x.ndim
    classes = x.shape[axis]
    weight = np.ones(classes) if weight is None else weight.astype(np.float64)
    ignored = label == ignore_index
    safe = np.where(ignored, 0, label)
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    picked = np.take_along_axis(moved, safe[..., None], axis=-1)[..., 0]
    return np.where(ignored, 0.0, -weight[safe] * picked)


def _nll_grad_reference(label, weight, gout, axis=1, ignore_index=-100, depth=1):
    weight = np.ones(depth) if weight is None else weight.astype(np.float64)
    ignored = label == ignore_index
    safe = np.where(ignored, 0, label)
    onehot = (safe[..., None] == np.arange(depth)) & ~ignored[..., None]
    grad = -(onehot * (weight[safe] * gout)[..., None])
    return np.moveaxis(grad, -1, axis)


def _bce_reference(x, y):
    x = x.astype(np.float64)
    with np.errstate(divide="ignore"):
        log_x, log_rest = np.maximum(np.log(x), -100), np.maximum(np.log(1 - x), -100)
    return -(y * log_x + (1 - y) * log_rest)


def _kl_reference(x, target, log_target=False):
    x = x.astype(np.float64)
    if log_target:
        return np.exp(target) * (target - x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(target == 0, 0.0, target * np.log(target)) - target * x


def _huber_reference(x, y, delta=1.0):
    d = x.astype(np.float64) - y
    return np.where(np.abs(d) < delta, 0.5 * d**2, delta * (np.abs(d) - 0.5 * delta))


def _probabilities(shape, low=0.05, high=0.95):
    return lambda rng, dtype: rng.uniform(low, high, shape).astype(dtype)


NLL_CASES = [
    OpCase("nll_loss", {"X": (4, 5), "Label": _labels((4,), 5)}, reference=_nll_reference),
    OpCase(
        "nll_loss",
        {"X": (5, 4), "Label": _labels((5,), 4, ignored=(1, 3)), "Weight": _positive((4,))},
        reference=_nll_reference,
        grad_inputs=("X",),
        name="weight_ignore",
    ),
    OpCase(
        "nll_loss",
        {"X": (2, 4, 3), "Label": _labels((2, 3), 4, ignored=(2,)), "Weight": _positive((4,))},
        reference=_nll_reference,
        grad_inputs=("X",),
        name="spatial",
    ),
    OpCase(
        "nll_loss",
        {"X": (3, 2, 4), "Label": _labels((3, 2), 4)},
        {"axis": -1},
        reference=_nll_reference,
        name="classes_last",
    ),
    OpCase(
        "nll_loss", {"X": (5,), "Label": np.array(3)}, reference=_nll_reference, name="unbatched"
    ),
    OpCase(
        "nll_loss",
        {
            "X": (3, 4),
            "Label": _labels((3,), 4),
            "Weight": lambda rng, dt: rng.uniform(0.1, 1.0, 4),  # float64 whatever X's dtype
        },
        reference=_nll_reference,
        grad_inputs=("X",),
        name="float64_weight_promotes",
    ),
    OpCase(
        "nll_loss",
        {"X": (4, 3), "Label": np.array([0, 2, 1, 2])},
        {"ignore_index": 2},
        reference=_nll_reference,
        name="ignore_a_real_class",
    ),
    OpCase(
        "nll_loss", {"X": (0, 3), "Label": _labels((0,), 3)}, reference=_nll_reference, name="empty"
    ),
    OpCase(
        "nll_loss_grad",
        {"Label": _labels((4,), 3, ignored=(1,)), "Weight": _positive((3,)), "Out@GRAD": (4,)},
        {"depth": 3},
        reference=_nll_grad_reference,
        grad_inputs=("Out@GRAD",),
        double_grad=True,
    ),
    OpCase(
        "nll_loss_grad",
        {"Label": _labels((2, 3), 4), "Out@GRAD": (2, 3)},
        {"depth": 4, "axis": 1},
        reference=_nll_grad_reference,
        double_grad=True,
        name="spatial",
    ),
]

ELEMENTWISE_CASES = [
    OpCase(
        "bce_loss",
        {"X": _probabilities((3, 4)), "Y": _probabilities((3, 4), 0.0, 1.0)},
        reference=_bce_reference,
        double_grad=True,
    ),
    OpCase(
        "bce_loss",
        {"X": np.array([0.0, 1.0, 0.0, 1.0, 0.5]), "Y": np.array([0.0, 1.0, 1.0, 0.0, 0.3])},
        reference=_bce_reference,
        grad=False,
        name="log_clamped_at_minus_100",
    ),
    OpCase(
        "bce_loss",
        {"X": np.array([-0.5, 1.5, 0.5]), "Y": np.array([1.0, 0.0, 1.0])},
        reference=lambda x, y: np.array([np.nan, np.nan, np.log(2.0)]),
        grad=False,
        name="outside_zero_one_is_nan",
    ),
    OpCase(
        "bce_loss",
        {"X": _probabilities((2, 3)), "Y": _probabilities((3,), 0.0, 1.0)},
        reference=_bce_reference,
        double_grad=True,
        name="broadcast_target",
    ),
    OpCase(
        "kl_div",
        {"X": (3, 4), "Target": _positive((3, 4))},
        reference=_kl_reference,
        double_grad=True,
    ),
    OpCase(
        "kl_div",
        {"X": (3, 4), "Target": (3, 4)},
        {"log_target": True},
        reference=_kl_reference,
        double_grad=True,
        name="log_target",
    ),
    OpCase(
        "kl_div",
        {"X": (2, 3), "Target": np.array([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])},
        reference=_kl_reference,
        grad_inputs=("X",),
        double_grad=True,
        name="zero_targets",
    ),
    OpCase(
        "kl_div",
        {"X": (2, 3), "Target": _positive((3,))},
        reference=_kl_reference,
        double_grad=True,
        name="broadcast_target",
    ),
    OpCase(
        "huber_loss",
        {"X": lambda rng, dt: (2 * rng.standard_normal((3, 4))).astype(dt), "Y": (3, 4)},
        reference=_huber_reference,
        double_grad=True,
    ),
    OpCase(
        "huber_loss",
        {"X": lambda rng, dt: (2 * rng.standard_normal((3, 4))).astype(dt), "Y": (4,)},
        {"delta": 0.5},
        reference=_huber_reference,
        double_grad=True,
        name="delta_broadcast",
    ),
    OpCase("huber_loss", {"X": (), "Y": ()}, reference=_huber_reference, name="scalar"),
]

CASES = NLL_CASES + ELEMENTWISE_CASES
