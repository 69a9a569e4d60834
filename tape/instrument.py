"""Observation hooks: the profiler and anomaly mode see every op as it runs.

Whether anyone is watching is one module-level value: ``tape.tape._HOOK`` (read once per recorded
op, on the hot path) and ``ACTIVE`` here (read once per lazy run); both are None unless a
``tape.profile()`` or ``tape.detect_anomaly()`` block is open, so an unobserved op pays one global
load and compare. While they are set:

- eager ops (forward, and the gradient ops of an eager backward) are timed around the recording
  call (inference and kernel) and checked by ``_Observer.record``;
- a lazy run's kernels are wrapped (``observed_steps`` for the interpreted tier,
  ``observed_plan`` for compiled plans), so each kernel call is timed and checked;
- backward notes which forward op it is asking for gradient ops (``making_gradient_of``): an
  eager gradient op is attributed to it directly, a lazy one through its recorded location, a
  ``GradLocation`` (the backward call's line, carrying the forward op), which the IR and the
  fusion pass pass on unchanged.
"""

from __future__ import annotations

import threading
import time

from tape import transaction
from tape.errors import user_location

ACTIVE = None  # the observer while a profile or anomaly block is open; None otherwise
_profilers = []  # open profilers, innermost last
_checks = [0]  # open anomaly blocks (detect_anomaly, lazy(check_finite=True))
_local = threading.local()  # .forward: the forward OpHandle backward makes gradient ops for
_clock = time.perf_counter_ns


class GradLocation(str):
    """A lazy gradient op's recorded-at line (the user's backward call), carrying
    ``forward``: (type, name, location) of the forward op it belongs to, or None."""

    forward = None


class OpInfo:
    """What an observer knows about one op run: type, instance name, user's line, whether
    backward ran it, and the forward op (type, name, location) a gradient op belongs to."""

    __slots__ = ("type", "name", "location", "backward", "forward")

    def __init__(self, type, name, location, backward, forward):
        self.type, self.name, self.location = type, name, location
        self.backward, self.forward = backward, forward

    @classmethod
    def of(cls, type, name, location):
        """From a lazy op's recorded location (a GradLocation marks a gradient op)."""
        forward = getattr(location, "forward", None)
        return cls(type, name, location, isinstance(location, GradLocation), forward)


def attach(profiler=None, check=False):
    """Starts observing for ``profiler`` and/or anomaly checks."""
    if profiler is not None:
        _profilers.append(profiler)
    if check:
        _checks[0] += 1
    _publish()


def detach(profiler=None, check=False):
    """Undoes one ``attach``."""
    if profiler is not None and profiler in _profilers:
        _profilers.remove(profiler)
    if check:
        _checks[0] -= 1
    _publish()


def checking():
    """Whether anomaly checks are on (they compile fresh lazy plans: see tape.lazy)."""
    return _checks[0] > 0


def _publish():
    global ACTIVE
    import tape.tape as engine

    ACTIVE = _OBSERVER if (_profilers or _checks[0]) else None
    engine._HOOK = ACTIVE


class making_gradient_of:
    """Backward asks ``op``'s gradient maker for gradient ops inside this block."""

    __slots__ = ("op", "saved")

    def __init__(self, op):
        self.op = op

    def __enter__(self):
        self.saved = getattr(_local, "forward", None)
        _local.forward = self.op

    def __exit__(self, *exc):
        _local.forward = self.saved


def _described(op):
    return None if op is None else (op.type, op.name, op.location)


class _Observer:
    """Times and checks ops for the open profilers and anomaly blocks."""

    def record(self, tape, defn, args, attrs, given):
        """``tape.tape.record`` observed (it calls this instead of itself while observing)."""
        from tape.tape import record, state

        forward = getattr(_local, "forward", None)
        backward = forward is not None or state.trusted or state.location is not None
        before = len(tape._ops)
        if tape.lazy:  # records only: the run that computes the op is observed instead
            out = record(tape, defn, args, attrs, given, True)
            if state.location is not None:  # a lazy backward: tag its ops (see GradLocation)
                for op in tape._ops[before:]:
                    if op is not None and not isinstance(op.location, GradLocation):
                        op.location = GradLocation(op.location or state.location)
                        op.location.forward = _described(forward)
            return out
        location = user_location()
        inputs = _input_arrays(defn, args) if _checks[0] and defn.inplace else None
        step = transaction.state.step  # (an update's new values wait there for the commit)
        staged = len(step.writes) if step is not None else 0
        start = _clock()
        out = record(tape, defn, args, attrs, given, True)
        end = _clock()
        op = tape._ops[before] if len(tape._ops) > before else None
        if op is not None and op.location is None:
            op.location = location  # so a later backward can name this op's line
        name = op.name if op is not None else f"{defn.type}_{before}"
        info = OpInfo(defn.type, name, location, backward, _described(forward))
        written = {id(var): value for var, value in step.writes[staged:]} if step else None
        outputs = _arrays(out, written)
        if _checks[0]:
            from tape.anomaly import check

            check(info, defn, outputs, inputs or _input_arrays(defn, args))
        for profiler in _profilers:
            profiler.add(info, start, end, outputs)
        return out

    def wrap(self, kernel, info):
        """``kernel`` timed and checked as the op ``info`` describes."""
        profilers, checks = tuple(_profilers), _checks[0] > 0

        def observed(xp, attrs, *values):
            start = _clock()
            result = kernel(xp, attrs, *values)
            end = _clock()
            outputs = _arrays(result)
            if checks:
                from tape.anomaly import check_run

                check_run(info, xp, attrs, values, outputs)
            for profiler in profilers:
                profiler.add(info, start, end, outputs)
            return result

        return observed


_OBSERVER = _Observer()


def observed_steps(ops, steps):
    """The interpreted tier's steps (``tape.interpret``) with their kernels observed."""
    return [
        (ACTIVE.wrap(step[0], OpInfo.of(op.type, op.name, op.location)),) + tuple(step[1:])
        for op, step in zip(ops, steps)
    ]


def observed_plan(plan):
    """A compiled plan (``tape.passes.plan``) whose kernels are observed."""
    import dataclasses

    instructions = tuple(
        (kind, ACTIVE.wrap(kernel, OpInfo.of(*meta)), attrs, ins, out, free)
        for (kind, kernel, attrs, ins, out, free), meta in zip(plan.instructions, plan.meta)
    )
    return dataclasses.replace(plan, instructions=instructions)


def _arrays(result, written=None):
    """The arrays in an op's result (a Variable, an array, or nested tuples/lists of them);
    ``written`` maps id(Variable) to a new value an open step has not committed yet."""
    found = []
    stack = [result]
    while stack:
        item = stack.pop()
        if item is None:
            continue
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
            continue
        value = getattr(item, "_value", item)  # a Variable's buffer, or the array itself
        if written:
            value = written.get(id(item), value)
        if value is not None and hasattr(value, "dtype"):
            found.append(value)
    return found


def _input_arrays(defn, args):
    """(slot, array) for each input of an eager op (lists flattened as slot[i])."""
    pairs = []
    for slot, entry in zip(defn.input_slots, args):
        if entry is None:
            continue
        if entry.__class__ is list:
            pairs += [(f"{slot}[{i}]", v._value) for i, v in enumerate(entry)]
        else:
            pairs.append((slot, entry._value))
    return [(slot, value) for slot, value in pairs if value is not None]


__all__ = [
    "ACTIVE",
    "GradLocation",
    "OpInfo",
    "attach",
    "detach",
    "checking",
    "making_gradient_of",
    "observed_steps",
    "observed_plan",
]
