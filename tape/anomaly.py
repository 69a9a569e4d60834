"""Anomaly mode: every op's outputs are checked for NaN and Inf as it runs.

``with tape.detect_anomaly():`` (or ``tape.lazy(check_finite=True)``) checks each op of eager
mode, of an eager backward and of every lazy run (both tiers; a fused group is re-run step by
step on its inputs so the op inside it that went non-finite is named). The first non-finite
output raises a ``tape.NonFiniteError`` naming the op, whether each input was already
non-finite, the user's line, and for a gradient op the forward op and line it belongs to. A lazy
run that raises is rolled back like any failed run. Checking costs a pass over every output
(and a compile of each lazy plan, so recorded lines are current): a debugging mode.
"""

from __future__ import annotations

from ops.xp import array_module
from tape import instrument
from tape.errors import NonFiniteError


class detect_anomaly:
    """Context manager (or decorator): raise at the first op producing NaN or Inf.

    Process-wide while open (ops other threads run are checked too); blocks nest.

    >>> import numpy as np, tape, ops
    >>> x = tape.Variable(np.array([1.0, -1.0], np.float32))
    >>> with tape.detect_anomaly():
    ...     try:
    ...         ops.log(x)
    ...     except tape.NonFiniteError as err:
    ...         print(str(err).splitlines()[0])
    op 'log' (log_0): output Out holds non-finite values (1 NaN, 0 Inf of 2)
    """

    def __init__(self, enabled=True):
        self.enabled = bool(enabled)

    def __enter__(self):
        instrument.attach(check=self.enabled)
        return self

    def __exit__(self, *exc):
        instrument.detach(check=self.enabled)

    def __call__(self, function):
        import functools

        @functools.wraps(function)
        def checked(*args, **kwargs):
            with detect_anomaly(self.enabled):
                return function(*args, **kwargs)

        return checked


def finite(array):
    """Whether every element of ``array`` is finite (integers and bools always are)."""
    if array.dtype.kind not in "fc":
        return True
    return bool(array_module(array).isfinite(array).all())


def describe(array):
    """A short description of an input or output array for the error message."""
    text = f"shape {tuple(array.shape)}, {array.dtype}"
    if array.dtype.kind in "fc" and array.size:
        xp = array_module(array)
        nan, inf = int(xp.isnan(array).sum()), int(xp.isinf(array).sum())
        if nan or inf:
            text += f", {nan} NaN, {inf} Inf"
    return text


def check(info, defn, outputs, inputs):
    """Raises NonFiniteError if an output of an eager op is not finite; ``inputs`` are
    (slot, array) pairs."""
    for index, value in enumerate(outputs):
        if not finite(value):
            slot = _output_slot(defn, index, len(outputs))
            raise _error(info, slot, value, inputs)


def check_run(info, xp, attrs, values, outputs):
    """The check of one kernel call of a lazy run (``values`` per input slot)."""
    from ops.registry import REGISTRY

    defn = REGISTRY.get(info.type)
    if info.type == "fused_elementwise":
        _check_steps(info, xp, attrs["expression"], values[0])
    for index, value in enumerate(outputs):
        if not finite(value):
            inputs = _pairs(defn.input_slots if defn else (), values)
            raise _error(info, _output_slot(defn, index, len(outputs)), value, inputs)


def _check_steps(info, xp, expression, inputs):
    """Re-runs a fused group step by step on its inputs; raises naming the first step (the op
    it came from) whose value is not finite."""
    from ops.fused_expression import resolve
    from ops.fusion_backends import as_array, step_kernels
    from ops.registry import REGISTRY

    values = []
    for (kernel, attrs), step in zip(step_kernels(expression, xp), expression.steps):
        args = [resolve(arg, inputs, values) for arg in step.args]
        value = as_array(kernel(xp, attrs, *args), xp)
        values.append(value)
        if not finite(value):
            kind, name, location = step.origin
            step_info = instrument.OpInfo.of(kind, name, location)
            slots = REGISTRY[step.op].input_slots
            raise _error(step_info, "Out", value, _pairs(slots, args))


def _pairs(slots, values):
    pairs = []
    for slot, entry in zip(slots, values):
        if entry is None:
            continue
        if isinstance(entry, list):
            pairs += [(f"{slot}[{i}]", v) for i, v in enumerate(entry)]
        else:
            pairs.append((slot, entry))
    return [(slot, value) for slot, value in pairs if hasattr(value, "dtype")]


def _output_slot(defn, index, count):
    slots = defn.output_slots if defn is not None else ()
    if len(slots) == count:
        return slots[index]
    return slots[0] + f"[{index}]" if len(slots) == 1 else f"output {index}"


def _error(info, slot, value, inputs):
    xp = array_module(value)
    nan, inf = int(xp.isnan(value).sum()), int(xp.isinf(value).sum())
    kind = "gradient op" if info.backward else "op"
    hint = (
        "an input was already non-finite: the op that produced it ran before anomaly "
        "checks started, or outside them"
        if any(not finite(v) for _, v in inputs)
        else f"this {kind} made finite inputs non-finite"
    )
    return NonFiniteError(
        info.type,
        f"output {slot} holds non-finite values ({nan} NaN, {inf} Inf of {value.size})",
        inputs=[(s, finite(v), describe(v)) for s, v in inputs],
        forward=info.forward,
        hint=hint,
        name=info.name,
        location=info.location,
    )


__all__ = ["detect_anomaly", "finite", "check", "check_run"]
