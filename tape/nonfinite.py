"""NaN bisection: re-run the ops a value came from, one by one, to find the first non-finite one.

``tape.find_first_nonfinite(loss)`` needs no user code re-run: the tape holds every op ``loss``
depends on (eager: the ops a gradient flows through; lazy: every op, run or pending) with its
attributes and inputs. The ops are re-run in tape order from the values of the Variables none of
them produces (parameters, inputs, constants) and each result is checked; a random op reuses
the values it drew while they are held (a lazy run may have freed them: it then draws anew).
The first op with a non-finite output is reported; None when all are finite. Values are read
as they are now, so call it before an optimizer step changes the parameters.
"""

from __future__ import annotations

import dataclasses

from tape.anomaly import describe, finite
from tape.errors import GraphError, InputError, user_location
from tape.variable import Variable


@dataclasses.dataclass(frozen=True)
class NonFiniteReport:
    """The first op that produced a non-finite value: its type, instance name, the user's line
    that recorded it, the output slot, and per input ``(slot, finite, description)``; ``step``
    is its position among the ``ops`` re-run."""

    op: str
    name: str
    location: str | None
    output: str
    output_summary: str
    inputs: tuple
    step: int
    ops: int

    def __str__(self):
        lines = [
            f"first non-finite value: op '{self.op}' ({self.name}), "
            f"op {self.step + 1} of {self.ops} re-run",
            f"  output {self.output}: {self.output_summary}",
        ]
        lines += [
            f"  input {slot}: {'finite' if ok else 'non-finite'} ({text})"
            for slot, ok, text in self.inputs
        ]
        lines.append(
            f"  recorded at: {self.location}"
            if self.location
            else "  recorded at: unknown (an eager op keeps its line only when recorded inside "
            "tape.detect_anomaly(), tape.profile() or tape.lazy())"
        )
        return "\n".join(lines)


def find_first_nonfinite(value, tape=None):
    """Re-runs the recorded ops ``value`` depends on and reports the first non-finite output.

    Args:
        value: a Variable (usually the loss) recorded on ``tape``.
        tape: the tape it was recorded on (default: the global tape).

    Returns:
        A ``NonFiniteReport``, or None if every op's outputs are finite.

    >>> import numpy as np, tape, ops
    >>> tape.reset_global_tape()  # doctest: +ELLIPSIS
    Tape(...)
    >>> w = tape.Variable(np.array([1.0, -1.0], np.float32), requires_grad=True)
    >>> report = tape.find_first_nonfinite(ops.exp(ops.log(w)).sum())
    >>> report.op, report.inputs[0][1]
    ('log', True)
    """
    from tape.tape import get_global_tape, run_kernel

    if not isinstance(value, Variable):
        raise InputError(
            "find_first_nonfinite",
            "expects a Variable",
            actual=type(value).__name__,
            location=user_location(),
        )
    tape = get_global_tape() if tape is None else tape
    ops = _ancestors(tape, value)
    values = {}
    for step, op in enumerate(ops):
        defn = op.defn
        args = [_inputs(entry, values) for entry in op.args]
        if defn.random and all(v._value is not None for v in op.output_vars()):
            results = [_stored(entry) for entry in op.results]  # the numbers it drew
        else:
            results = run_kernel(defn, op.attrs, args)
        for slot, entry, result in zip(defn.output_slots, op.results, results):
            if entry is None:
                continue
            pairs = zip(entry, result) if entry.__class__ is list else ((entry, result),)
            for var, array in pairs:
                values[id(var)] = array
                if not finite(array):
                    return _report(op, slot, array, args, step, len(ops))
    return None


def _ancestors(tape, value):
    """The recorded ops ``value`` depends on, in tape order."""
    wanted, chosen = {id(value)}, []
    for op in reversed(tape.ops):
        if any(id(v) in wanted for v in op.output_vars()) and not op.defn.side_effect:
            chosen.append(op)
            wanted.update(id(v) for v in op.input_vars())
    if not chosen:
        raise GraphError(
            "find_first_nonfinite",
            f"no recorded op on this tape produces '{value.name}'",
            hint="pass the tape it was recorded on (tape=...), and call it before backward "
            "releases the ops (or backward with retain_graph=True)",
            location=user_location(),
        )
    chosen.reverse()
    return chosen


def _inputs(entry, values):
    if entry is None:
        return None
    if entry.__class__ is list:
        return [_input(v, values) for v in entry]
    return _input(entry, values)


def _input(var, values):
    array = values.get(id(var))
    if array is not None:
        return array
    if var._value is None or var._pending is not None:
        return var._array()  # a pending input no recorded op produces: computed elsewhere
    return var._value


def _stored(entry):
    if entry is None:
        return None
    return [v._value for v in entry] if entry.__class__ is list else entry._value


def _report(op, slot, array, args, step, count):
    inputs = []
    for name, entry in zip(op.defn.input_slots, args):
        if entry is None:
            continue
        pairs = (
            [(f"{name}[{i}]", v) for i, v in enumerate(entry)]
            if isinstance(entry, list)
            else [(name, entry)]
        )
        inputs += [(s, finite(v), describe(v)) for s, v in pairs if hasattr(v, "dtype")]
    return NonFiniteReport(
        op.type, op.name, op.location, slot, describe(array), tuple(inputs), step, count
    )


__all__ = ["find_first_nonfinite", "NonFiniteReport"]
