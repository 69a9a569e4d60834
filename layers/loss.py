"""Loss layers with PyTorch's arguments and reductions, built from the registered loss ops.

``loss(input, target)``; ``reduction`` is "mean" (the default), "sum" or "none" (per element, in
the target's shape). Where targets can be ignored, "mean" divides by the number of targets that
are not, as PyTorch does (all ignored: nan).
"""

from __future__ import annotations

import numpy as np

from layers.function import Function
from ops.loss_more import check_probabilities
from ops.registry import REGISTRY
from ops.xp import array_module, as_array, default_module
from tape.errors import ShapeError, user_location
from tape.tape import state
from tape.variable import Variable

_REDUCTIONS = ("mean", "sum", "none")


def _op(name):
    return REGISTRY[name]


class _Loss(Function):
    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(
                f"reduction must be one of {', '.join(_REDUCTIONS)}, got {reduction!r}"
            )
        self.reduction = reduction

    def _reduce(self, loss, valid=None):
        """``loss`` reduced; for "mean" with ``valid`` (a 0/1 mask or per-element weights),
        divided by its sum, or by ``valid`` itself when it is that sum already (an int). A 0-d
        loss (one example's) is its own sum and mean: no op is recorded for them."""
        if self.reduction == "none":
            return loss
        scalar = len(loss.shape) == 0
        total = loss if scalar else _op("reduce_sum")(loss)
        if self.reduction == "sum":
            return total
        if valid is None:
            return loss if scalar else _op("mean")(loss)
        if valid.__class__ is int:
            return total if valid == 1 else total / Variable(np.asarray(valid, total.dtype))
        return total / _op("reduce_sum")(valid)

    def _denominator(self, target, weight, dtype):
        """For "mean" over class targets: weight[target] (1 without weights) where the target is
        not ``ignore_index``, else 0; "mean" divides by its sum (PyTorch's rule)."""
        if self.reduction != "mean":
            return None
        if weight is None:
            return _valid_count(target, self.ignore_index, dtype)
        valid = _valid(target, self.ignore_index, dtype)
        zero = Variable(np.zeros((), target.dtype))
        safe = _op("where")(_op("equal")(target, self.ignore_index), zero, target)
        return _op("gather")(weight, safe, axis=0) * valid

    def __repr__(self):
        return f"{type(self).__name__}(reduction={self.reduction!r})"


def _as_variable(value, dtype=None):
    if isinstance(value, Variable):
        return value
    return Variable(np.asarray(value, dtype=dtype))


def same_shape(layer, input, target):
    """Refuses a ``target`` whose shape differs from ``input``'s: the elementwise losses would
    broadcast (N, 1) against (N,) to (N, N) and silently average the wrong thing (PyTorch warns
    there; BCEWithLogitsLoss raises)."""
    if tuple(target.shape) != tuple(input.shape):
        raise ShapeError(
            None,
            f"{type(layer).__name__}: target and input shapes differ",
            expected=f"target.shape == input.shape == {tuple(input.shape)}",
            actual=f"target.shape={tuple(target.shape)}",
            hint="reshape one of them (e.g. target.reshape(input.shape)); broadcasting a loss's "
            "target is almost always a mistake",
            location=user_location(),
        )
    return target


def _signed(target):
    """Integer class targets as a signed type, so a negative ignore_index compares with them."""
    if target.dtype.kind == "i":
        return target
    if target.dtype.kind != "u":
        raise TypeError(f"class targets must be integers, got dtype {target.dtype}")
    return _op("cast")(target, out_dtype="int64")


def _valid(target, ignore_index, dtype):
    """1.0 where the target is not ``ignore_index``, else 0.0 (a constant: no gradient)."""
    return _op("cast")(_op("not_equal")(target, ignore_index), out_dtype=dtype)


def _valid_count(target, ignore_index, dtype):
    """What "mean" divides by: the number of targets that are not ``ignore_index``, as an int
    in eager mode, where the targets are a host array known now (counting records no op, which
    for a loss per example is most of its ops), else ``_valid``'s mask: a lazy tape or one
    recording every op may become a Program, whose targets are placeholders fed later, and
    targets on a device or all ignored (PyTorch's nan) take the mask too."""
    current = state.tape
    if current is None or current.lazy or current.record_all:
        return _valid(target, ignore_index, dtype)
    value = target._value
    if value.__class__ is np.ndarray and target._pending is None and not target.requires_grad:
        count = int(np.count_nonzero(value != ignore_index))
        if count:
            return count
    return _valid(target, ignore_index, dtype)


def _class_axis(logits):
    # PyTorch: (C,) unbatched, else (N, C, d1, ...) with classes on axis 1.
    return 0 if len(logits.shape) == 1 else 1


def _constant_array(value):
    """A weight given as an array, list or Variable, kept as an array (a constant)."""
    if isinstance(value, Variable):
        value = value.value()
    value = as_array(value)
    if value.dtype.kind not in "iuf":
        raise TypeError(f"weights must be numbers, got dtype {value.dtype}")
    return value


def _class_weights(weight):
    if weight is None:
        return None
    weight = _constant_array(weight)
    if weight.ndim != 1:
        raise ValueError(f"weight must hold one weight per class (C,), got shape {weight.shape}")
    return weight


def _weight_like(weight, input):
    """The constant ``weight`` as a Variable of the input's dtype, on the input's device."""
    if weight is None:
        return None
    value = input._value
    xp = array_module(value) if value is not None else default_module()
    return Variable(xp.asarray(weight, dtype=input.dtype))


def _along(weight, axis, input):
    """The (C,) class weights shaped to broadcast along ``axis`` of ``input``."""
    shape = [1] * len(input.shape)
    shape[axis] = input.shape[axis]
    return _op("reshape")(weight, shape=tuple(shape))


class CrossEntropyLoss(_Loss):
    """Softmax cross-entropy of logits against class indices (or class probabilities), as
    ``torch.nn.CrossEntropyLoss``.

    Args:
        reduction: "mean", "sum" or "none".
        ignore_index: targets equal to it add nothing and are not counted by "mean".
        label_smoothing: eps in [0, 1]; the target becomes (1 - eps) * onehot + eps / C, so
            loss = (1 - eps) * w[y] * -log p[y] + eps / C * sum_c w[c] * -log p[c] (PyTorch's).
        weight: None or one weight per class (C,), a constant (no gradient). "mean" then divides
            by the sum of w[y] over the targets that are not ignored (PyTorch's rule, also for
            the smoothing term); for probability targets it divides by the number of samples.

    ``input`` is (N, C), (N, C, d1, ...) or (C,); ``target`` holds integer classes of shape
    (N,), (N, d1, ...) or (), or probabilities of ``input``'s shape. Without weight and
    smoothing one fused ``softmax_with_cross_entropy`` op does the work; otherwise
    ``log_softmax`` and ``nll_loss``.

    >>> import numpy as np, tape, layers
    >>> logits = tape.Variable(np.log(np.array([[0.5, 0.25, 0.25]])))
    >>> float(layers.CrossEntropyLoss()(logits, np.array([0])).numpy()) == float(np.log(2))
    True
    """

    def __init__(self, reduction="mean", ignore_index=-100, label_smoothing=0.0, weight=None):
        super().__init__(reduction)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be between 0 and 1, got {label_smoothing}")
        self.ignore_index, self.label_smoothing = int(ignore_index), float(label_smoothing)
        self.weight = _class_weights(weight)

    def forward(self, input, target):
        axis = _class_axis(input)
        target = _as_variable(target)
        if target.dtype.kind == "f":
            return self._soft(input, target, axis)
        target = _signed(target)
        if self.weight is None and self.label_smoothing == 0.0:
            attrs = {"axis": axis, "ignore_index": self.ignore_index}
            nll = _op("softmax_with_cross_entropy")(input, target, **attrs).loss
            loss = _op("reshape")(nll, shape=target.shape)  # drop the size-1 class axis
            valid = None
            if self.reduction == "mean":
                valid = _valid_count(target, self.ignore_index, input.dtype)
            return self._reduce(loss, valid)
        log_probs = _op("log_softmax")(input, axis=axis)
        weight = _weight_like(self.weight, input)
        loss = _op("nll_loss")(log_probs, target, weight, axis=axis, ignore_index=self.ignore_index)
        eps = self.label_smoothing
        if eps > 0.0:
            spread = log_probs if weight is None else log_probs * _along(weight, axis, input)
            smooth = -_op("reduce_sum")(spread, axis=axis) * _valid(
                target, self.ignore_index, input.dtype
            )
            loss = loss * (1.0 - eps) + smooth * (eps / input.shape[axis])
        return self._reduce(loss, self._denominator(target, weight, input.dtype))

    def _soft(self, input, target, axis):
        if self.label_smoothing > 0.0:
            classes = input.shape[axis]
            target = _op("scale")(
                target, scale=1.0 - self.label_smoothing, bias=self.label_smoothing / classes
            )
        if self.weight is not None:
            weighted = target * _along(_weight_like(self.weight, input), axis, input)
            log_probs = _op("log_softmax")(input, axis=axis)
            return self._reduce(-_op("reduce_sum")(log_probs * weighted, axis=axis))
        loss = _op("softmax_with_cross_entropy")(input, target, axis=axis, soft_label=True).loss
        shape = tuple(d for i, d in enumerate(input.shape) if i != axis)
        return self._reduce(_op("reshape")(loss, shape=shape))

    def __repr__(self):
        return (
            f"CrossEntropyLoss(reduction={self.reduction!r}, ignore_index="
            f"{self.ignore_index}, label_smoothing={self.label_smoothing})"
        )


class NLLLoss(_Loss):
    """-weight[target] * input[target] for log-probabilities ``input`` (N, C), (N, C, d1, ...)
    or (C,) and integer targets (N,), (N, d1, ...) or () (op ``nll_loss``); ``ignore_index`` and
    ``weight`` as in CrossEntropyLoss ("mean" divides by the sum of the picked weights).

    >>> import numpy as np, tape, layers
    >>> log_probs = tape.Variable(np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.6, 0.3]])))
    >>> layers.NLLLoss(reduction="none")(log_probs, np.array([0, 2])).numpy().round(4)
    array([0.6931, 1.204 ])
    """

    def __init__(self, reduction="mean", ignore_index=-100, weight=None):
        super().__init__(reduction)
        self.ignore_index = int(ignore_index)
        self.weight = _class_weights(weight)

    def forward(self, input, target):
        axis = _class_axis(input)
        target = _signed(_as_variable(target))
        weight = _weight_like(self.weight, input)
        loss = _op("nll_loss")(input, target, weight, axis=axis, ignore_index=self.ignore_index)
        return self._reduce(loss, self._denominator(target, weight, input.dtype))


class BCELoss(_Loss):
    """Binary cross-entropy of probabilities ``input`` in [0, 1] against ``target`` of the same
    shape: -w * (y * log x + (1 - y) * log(1 - x)) with each log clamped at -100, as
    ``torch.nn.BCELoss`` (op ``bce_loss``). ``weight`` (broadcasting against ``input``)
    rescales each element.

    >>> import numpy as np, tape, layers
    >>> loss = layers.BCELoss()(tape.Variable(np.array([0.5, 0.5])), np.array([0.0, 1.0]))
    >>> bool(np.isclose(loss.numpy(), np.log(2)))
    True
    """

    def __init__(self, reduction="mean", weight=None):
        super().__init__(reduction)
        self.weight = None if weight is None else _constant_array(weight)

    def forward(self, input, target):
        target = _as_variable(target, input.dtype)
        if tuple(target.shape) != tuple(input.shape):
            raise ShapeError(
                "bce_loss",
                "BCELoss needs a target of the input's shape",
                expected=f"target.shape == {input.shape}",
                actual=f"target.shape={target.shape}",
                location=user_location(),
            )
        value = input._value
        if value is not None and input._pending is None:
            check_probabilities(array_module(value), value)
        loss = _op("bce_loss")(input, target)
        if self.weight is not None:
            loss = loss * _weight_like(self.weight, input)
        return self._reduce(loss)


class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy of sigmoid(input) against probabilities ``target`` (same shape),
    computed stably from the logits (op ``sigmoid_cross_entropy_with_logits``).

    ``pos_weight`` (a number or an array broadcasting against the last axis) scales the loss of
    positive targets: l = -(p * y * log s(x) + (1 - y) * log(1 - s(x))), as in PyTorch.

    >>> import numpy as np, tape, layers
    >>> loss = layers.BCEWithLogitsLoss()(tape.Variable(np.zeros(2)), np.array([0.0, 1.0]))
    >>> bool(np.isclose(loss.numpy(), np.log(2)))
    True
    """

    def __init__(self, reduction="mean", pos_weight=None):
        super().__init__(reduction)
        self.pos_weight = (
            None
            if pos_weight is None
            else np.asarray(pos_weight.numpy() if isinstance(pos_weight, Variable) else pos_weight)
        )

    def forward(self, input, target):
        target = same_shape(self, input, _as_variable(target, input.dtype))
        if target.dtype != input.dtype:
            target = _op("cast")(target, out_dtype=input.dtype)
        loss = _op("sigmoid_cross_entropy_with_logits")(input, target)
        if self.pos_weight is not None:
            # p*y*softplus(-x) = y*softplus(-x) (already in the loss) + (p-1)*y*softplus(-x),
            # and softplus(-x) is the same op against an all-ones target.
            ones = _op("fill_ones_like")(input)
            softplus_neg = _op("sigmoid_cross_entropy_with_logits")(input, ones)
            extra = self._pos_weight_minus_one(input)
            loss = loss + softplus_neg * (target * extra)
        return self._reduce(loss)

    def _pos_weight_minus_one(self, input):
        value = input._value
        xp = array_module(value) if value is not None else default_module()
        return Variable(xp.asarray(self.pos_weight - 1.0, dtype=input.dtype))


__all__ = ["CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss"]
