"""Stale variables: outputs of a tape that ``reset_global_tape()`` ended.

A Variable outlives the tape that recorded it (truncated BPTT carries the hidden state into the
next iteration). Its *value* stays usable as a constant -- ``h.detach()`` says so explicitly and
makes a leaf that backward stops at -- but its *history* ended with its tape: a backward that
reaches it cannot go on. ``reset_global_tape`` marks the outputs of the ops the old tape still
held (one attribute per output, off the record path), so that backward can say which op created
the variable, where (for lazy ops and under ``tape.track_memory()``; eager ops keep no line) and
where the tape was reset. Outputs whose ops an earlier backward already released are reported
as such. A lazy value the old tape had not computed yet is still computed on request (eager mode
would have it), so reading values never fails.
"""

from __future__ import annotations

import threading

from tape.errors import GraphError, user_location


class _Ended(threading.local):
    last_plan = None  # the last lazy plan of a tape reset_global_tape() ended (tape.memory)


ended = _Ended()


def tape_ended(tape):
    """What ``reset_global_tape`` does to the tape it replaces: remembers its last lazy plan
    (for ``tape.memory_report``) and marks its variables (``mark_ended``)."""
    plan = getattr(tape, "_last_plan", None)
    if plan is not None:
        ended.last_plan = plan
    if tape._ops:
        mark_ended(tape)


def mark_ended(tape):
    """Marks the outputs of ``tape``'s ops as created on a tape that was reset here (those a
    backward already released say so themselves, and a backward never follows one that
    requires no gradient: a training loop's tape, gradient ops included, costs a flag test per
    op here)."""
    ended_at = None
    for op in tape._ops:
        if op is None:
            continue
        results = op.results
        first = results[0] if results else None
        if first.__class__ is not list and first is not None and len(results) == 1:
            if first._released or not first.requires_grad:
                continue
        if ended_at is None:
            ended_at = user_location()
        origin = (op.type, op.index, op.location, ended_at)
        for var in op.output_vars():
            if not var._leaf:  # (an update op's output is its parameter: not stale)
                var._origin = origin


def unreachable(var):
    """The error for a gradient reaching ``var``, which the tape being differentiated did not
    record."""
    hint = (
        "to use its value as a constant in a new iteration (truncated BPTT), pass "
        "v.detach() for that variable v"
    )
    origin = getattr(var, "_origin", None)
    if origin is not None:
        op_type, op_index, created_at, ended_at = origin
        return GraphError(
            "backward",
            f"gradient reached '{var.name}', created by op '{op_type}' ({op_type}_{op_index}) "
            "on a tape "
            "that reset_global_tape() ended",
            actual=f"created at {created_at or 'an eager op (no line kept)'}; "
            f"tape reset at {ended_at}",
            hint=hint,
            location=user_location(),
        )
    if var._released:
        return GraphError(
            "backward",
            f"gradient reached '{var.name}', whose ops were released by an earlier backward",
            hint="pass retain_graph=True to the first backward to differentiate twice; " + hint,
            location=user_location(),
        )
    return GraphError(
        "backward",
        f"gradient reached '{var.name}', which this tape did not record",
        hint="it was recorded on another tape (was reset_global_tape called in between?); " + hint,
        location=user_location(),
    )


__all__ = ["mark_ended", "unreachable"]
