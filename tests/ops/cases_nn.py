"""Cases for the nn ops: softmax, log_softmax, one_hot and the losses, with their gradient ops.

References are written in float64 numpy straight from the definitions (softmax as exp / sum,
cross-entropy as -log of the picked probability), independent of the kernels' stable forms.
Labels are integers and are not differentiated; soft labels and sigmoid labels are.
"""

import numpy as np

from tape.testing import OpCase


def _softmax(x, axis=-1):
    e = np.exp(x.astype(np.float64) - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x, axis=-1):
    return np.log(_softmax(x, axis))


def _labels(shape, classes, ignored=()):
    """Integer class indices of ``shape``; the flat positions in ``ignored`` are set to -100."""

    def make(rng, dtype):
        label = rng.integers(0, classes, shape)
        label.reshape(-1)[list(ignored)] = -100
        return label

    return make


def _soft_labels(shape, total=1.0):
    """Probabilities along the last axis (scaled to sum to ``total``)."""

    def make(rng, dtype):
        p = rng.uniform(0.1, 1.0, shape)
        return (total * p / p.sum(axis=-1, keepdims=True)).astype(dtype)

    return make


def _probabilities(shape):
    return lambda rng, dtype: rng.uniform(0.0, 1.0, shape).astype(dtype)


def _swce_reference(logits, label, axis=-1, ignore_index=-100, soft_label=False):
    prob = _softmax(logits, axis)
    if soft_label:
        return prob, -(label * _log_softmax(logits, axis)).sum(axis=axis, keepdims=True)
    axis = axis % logits.ndim
    if label.ndim < logits.ndim:
        label = np.expand_dims(label, axis)
    ignored = label == ignore_index
    picked = np.take_along_axis(prob, np.where(ignored, 0, label), axis=axis)
    return prob, np.where(ignored, 0.0, -np.log(picked))


def _swce_grad_reference(label, prob, gloss, axis=-1, ignore_index=-100, soft_label=False):
    if soft_label:
        return (label.sum(axis=axis, keepdims=True) * prob - label) * gloss
    axis = axis % prob.ndim
    if label.ndim < prob.ndim:
        label = np.expand_dims(label, axis)
    ignored = label == ignore_index
    onehot = (
        np.arange(prob.shape[axis]).reshape([-1 if i == axis else 1 for i in range(prob.ndim)])
        == label
    )
    return np.where(ignored, 0.0, (prob - onehot) * gloss)


def _sce_reference(x, label, ignore_index=-100, normalize=False, gout=None):
    x = x.astype(np.float64)
    out = np.maximum(x, 0) - x * label + np.log(1 + np.exp(-np.abs(x)))
    if gout is not None:  # the gradient op: (sigmoid(x) - label) * gout
        out = (1 / (1 + np.exp(-x)) - label) * gout
    kept = label != ignore_index
    out = np.where(kept, out, 0.0)
    return out / max(kept.sum(), 1) if normalize else out


def _ignore_some(shape, positions):
    def make(rng, dtype):
        label = rng.uniform(0.0, 1.0, shape)
        label.reshape(-1)[list(positions)] = -100
        return label.astype(dtype)

    return make


def _mse_reference(x, y, reduction="mean"):
    squared = (x.astype(np.float64) - y) ** 2
    return {"mean": np.mean, "sum": np.sum}.get(reduction, lambda a: a)(squared)


def _softmax_grad_reference(out, gout, axis=-1):
    return out * (gout - (gout * out).sum(axis=axis, keepdims=True))


def _log_softmax_grad_reference(out, gout, axis=-1):
    return gout - np.exp(out) * gout.sum(axis=axis, keepdims=True)


def _one_hot_reference(x, depth, dtype="float32"):
    return (x[..., None] == np.arange(depth)).astype(dtype)


def _swce(inputs, attrs=None, name="", **options):
    return OpCase(
        "softmax_with_cross_entropy",
        inputs,
        attrs or {},
        reference=_swce_reference,
        name=name,
        **options,
    )


SOFTMAX_CASES = [
    OpCase("softmax", {"X": (3, 4)}, reference=_softmax, double_grad=True),
    OpCase("softmax", {"X": (3, 4)}, {"axis": 0}, reference=_softmax, name="axis0"),
    OpCase(
        "softmax",
        {"X": (2, 3, 4)},
        {"axis": 1},
        reference=_softmax,
        double_grad=True,
        name="3d_axis1",
    ),
    OpCase(
        "softmax",
        {"X": lambda rng, dt: (rng.standard_normal((2, 3)) + 1000).astype(dt)},
        reference=_softmax,
        grad=False,
        name="large_logits_stable",
    ),
    OpCase("softmax", {"X": (0, 4)}, reference=_softmax, name="size0"),
    OpCase(
        "softmax_grad",
        {"Out": (3, 4), "Out@GRAD": (3, 4)},
        reference=_softmax_grad_reference,
        double_grad=True,
    ),
    OpCase(
        "softmax_grad",
        {"Out": (2, 3, 2), "Out@GRAD": (2, 3, 2)},
        {"axis": 1},
        reference=_softmax_grad_reference,
        name="axis1",
    ),
    OpCase("log_softmax", {"X": (3, 4)}, reference=_log_softmax, double_grad=True),
    OpCase(
        "log_softmax",
        {"X": (2, 3, 4)},
        {"axis": 0},
        reference=_log_softmax,
        double_grad=True,
        name="3d_axis0",
    ),
    OpCase(
        "log_softmax",
        {"X": lambda rng, dt: (rng.standard_normal((2, 3)) * 100).astype(dt)},
        reference=_log_softmax,
        grad=False,
        name="spread_logits_stable",
    ),
    OpCase(
        "log_softmax_grad",
        {"Out": (3, 4), "Out@GRAD": (3, 4)},
        reference=_log_softmax_grad_reference,
        double_grad=True,
    ),
    OpCase(
        "one_hot",
        {"X": np.array([[0, 2], [3, 1]])},
        {"depth": 4},
        reference=_one_hot_reference,
        grad=False,
    ),
    OpCase(
        "one_hot",
        {"X": np.array([1, 0, 1], np.int32)},
        {"depth": 2, "dtype": "int64"},
        reference=_one_hot_reference,
        grad=False,
        name="int64_out",
    ),
]

SWCE_CASES = [
    _swce({"Logits": (4, 5), "Label": _labels((4, 1), 5)}, double_grad=True),
    _swce({"Logits": (4, 5), "Label": _labels((4,), 5)}, name="label_without_class_axis"),
    _swce(
        {"Logits": (5, 4), "Label": _labels((5, 1), 4, ignored=(1, 3))},
        double_grad=True,
        name="ignore_index_rows",
    ),
    _swce(
        {"Logits": (4, 3), "Label": np.array([0, 2, 1, 2])},
        {"ignore_index": 2},
        name="ignore_a_real_class",
    ),
    _swce(
        {"Logits": (2, 4, 3), "Label": _labels((2, 1, 3), 4)},
        {"axis": 1},
        double_grad=True,
        name="axis1",
    ),
    _swce(
        {"Logits": (2, 4, 3), "Label": _labels((2, 3), 4, ignored=(2,))},
        {"axis": 1},
        name="axis1_dropped_label",
    ),
    _swce(
        {"Logits": (3, 4), "Label": _soft_labels((3, 4))},
        {"soft_label": True},
        double_grad=True,
        name="soft_label",
    ),
    _swce(
        {"Logits": (3, 4), "Label": _soft_labels((3, 4), total=1.5)},
        {"soft_label": True},
        name="soft_label_unnormalized",
    ),
    _swce(
        {
            "Logits": lambda rng, dt: (rng.standard_normal((3, 4)) * 50).astype(dt),
            "Label": _labels((3, 1), 4),
        },
        grad=False,
        name="large_logits_stable",
    ),
    _swce({"Logits": (0, 3), "Label": _labels((0, 1), 3)}, name="empty_batch"),
    OpCase(
        "softmax_with_cross_entropy_grad",
        {
            "Label": _labels((4, 1), 3, ignored=(2,)),
            "Softmax": _probabilities((4, 3)),
            "Loss@GRAD": (4, 1),
        },
        reference=_swce_grad_reference,
        double_grad=True,
    ),
    OpCase(
        "softmax_with_cross_entropy_grad",
        {"Label": _soft_labels((3, 4)), "Softmax": _probabilities((3, 4)), "Loss@GRAD": (3, 1)},
        {"soft_label": True},
        reference=_swce_grad_reference,
        double_grad=True,
        name="soft_label",
    ),
    OpCase(
        "softmax_with_cross_entropy_grad",
        {"Label": _labels((2, 3), 4), "Softmax": _probabilities((2, 4, 3)), "Loss@GRAD": (2, 1, 3)},
        {"axis": 1},
        reference=_swce_grad_reference,
        name="axis1_dropped_label",
    ),
]

LOSS_CASES = [
    OpCase(
        "sigmoid_cross_entropy_with_logits",
        {"X": (3, 4), "Label": _probabilities((3, 4))},
        reference=_sce_reference,
        double_grad=True,
    ),
    OpCase(
        "sigmoid_cross_entropy_with_logits",
        {
            "X": lambda rng, dt: (rng.standard_normal((2, 3)) * 40).astype(dt),
            "Label": _probabilities((2, 3)),
        },
        reference=_sce_reference,
        grad=False,
        name="large_logits_stable",
    ),
    # Perturbing an ignored label would un-ignore it: only X is differentiated there.
    OpCase(
        "sigmoid_cross_entropy_with_logits",
        {"X": (3, 4), "Label": _ignore_some((3, 4), (0, 5, 6))},
        {"normalize": True},
        reference=_sce_reference,
        grad_inputs=("X",),
        double_grad=True,
        name="ignore_normalize",
    ),
    OpCase(
        "sigmoid_cross_entropy_with_logits",
        {"X": (2, 3), "Label": _ignore_some((2, 3), (1,))},
        reference=_sce_reference,
        grad_inputs=("X",),
        name="ignore",
    ),
    OpCase(
        "sigmoid_cross_entropy_with_logits",
        {"X": (4,), "Label": _probabilities((4,))},
        {"normalize": True},
        reference=_sce_reference,
        double_grad=True,
        name="normalize",
    ),
    OpCase(
        "sigmoid_cross_entropy_with_logits_grad",
        {"X": (3, 4), "Label": _probabilities((3, 4)), "Out@GRAD": (3, 4)},
        reference=lambda x, label, g, **a: _sce_reference(x, label, gout=g, **a),
        double_grad=True,
    ),
    OpCase(
        "sigmoid_cross_entropy_with_logits_grad",
        {"X": (2, 3), "Label": _ignore_some((2, 3), (4,)), "Out@GRAD": (2, 3)},
        {"normalize": True},
        reference=lambda x, label, g, **a: _sce_reference(x, label, gout=g, **a),
        grad_inputs=("X", "Out@GRAD"),
        double_grad=True,
        name="ignore_normalize",
    ),
    OpCase("mse", {"X": (3, 4), "Y": (3, 4)}, reference=_mse_reference, double_grad=True),
    OpCase(
        "mse",
        {"X": (3, 4), "Y": (3, 4)},
        {"reduction": "sum"},
        reference=_mse_reference,
        double_grad=True,
        name="sum",
    ),
    OpCase(
        "mse",
        {"X": (2, 3), "Y": (2, 3)},
        {"reduction": "none"},
        reference=_mse_reference,
        double_grad=True,
        name="none",
    ),
    OpCase("mse", {"X": (4, 3), "Y": (3,)}, reference=_mse_reference, name="broadcast_y"),
    OpCase(
        "mse",
        {"X": (2, 1), "Y": (1, 3)},
        {"reduction": "none"},
        reference=_mse_reference,
        name="broadcast_both_none",
    ),
]

CASES = SOFTMAX_CASES + SWCE_CASES + LOSS_CASES
