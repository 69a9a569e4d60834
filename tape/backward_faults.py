"""A backward that fails fails alone: the tape stays usable, and the same call again resumes it.

An eager backward drops each op as soon as its gradient ran, which frees the forward buffers only
that op held (seed: "release memory on backward"). So when a gradient kernel fails part-way
(an error, Ctrl-C, a MemoryError), the ops after the failure point are already gone and a fresh
backward could not get through them. Instead the failed scan leaves its progress on the tape --
the op it stopped at and the gradients flowing into the ops not yet differentiated -- and the
same backward call again continues from there: the gradients equal an uninterrupted backward's.
Nothing else is left half done: the failing op's output gradients go back to the pending ones,
its outputs are no longer marked released, gradient ops the scan recorded (lazy mode,
``create_graph``) leave the tape, and leaf gradients are only ever committed after a whole scan
succeeded (``tape.backward``). A lazy backward, which drops nothing, simply starts again.

Errors name the gradient op, the forward op it differentiates and that op's line (kept for lazy
ops and under ``tape.track_memory()``; otherwise the line of the backward call).
"""

from __future__ import annotations

from tape.errors import ExecutionError, FluidError, GraphError, user_location


class Progress:
    """Where a failed eager backward stopped: the op ``index`` to differentiate next and the
    ``pending`` gradients at that point, for the same call (``key``) on the same op list."""

    __slots__ = ("key", "ops", "index", "pending", "wanted", "error")

    def __init__(self, key, ops, index, pending, wanted, error):
        self.key, self.ops, self.index, self.pending = key, ops, index, pending
        self.wanted, self.error = wanted, error


class _Key:
    """Which backward call a scan is: the same loss and seed objects, flags and wanted ids."""

    __slots__ = ("loss", "seed", "rest")

    def __init__(self, loss, seed, flags, wanted):
        self.loss, self.seed = loss, seed
        self.rest = (flags, None if wanted is None else tuple(wanted))

    def __eq__(self, other):
        return self.loss is other.loss and self.seed is other.seed and self.rest == other.rest

    __hash__ = None


def resumable(tape, loss, seed, retain_graph, create_graph, wanted):
    """The progress of a failed backward to resume if this call repeats it, else None (and
    any other call forgets it: a different backward starts afresh)."""
    progress = tape._resume
    if progress is None:
        return None
    tape._resume = None
    key = _Key(loss, seed, (bool(retain_graph), bool(create_graph)), wanted)
    if progress.ops is not tape._ops or progress.key != key:
        return None
    if progress.index is None:
        raise GraphError(
            "backward",
            "an earlier backward failed while adding up gradients and cannot be resumed",
            actual=f"{type(progress.error).__name__}: {progress.error}".splitlines()[0],
            hint="its ops were released: record the step (the forward) again",
            location=user_location(),
        )
    if wanted is not None:
        wanted.update((k, v) for k, v in progress.wanted.items() if v is not None)
    return progress


class Scan:
    """One reverse scan's starting point and what to put back if it fails."""

    __slots__ = ("tape", "key", "recorded", "recorded_pending", "start", "pending", "marked")

    def __init__(self, tape, loss, seed, flags, wanted, progress, drop):
        self.tape, self.key = tape, _Key(loss, seed, flags, wanted)
        self.recorded, self.recorded_pending = len(tape._ops), len(tape._pending_ops)
        if progress is None:
            self.start, self.pending = len(tape._ops) - 1, None
        else:
            self.start, self.pending = progress.index, progress.pending
        # Outputs this scan marked released; an eager scan drops the ops instead, and only
        # the failing op's outputs need unmarking.
        self.marked = None if drop else []

    def fail(self, error, op, index, taken, summing, wanted):
        """Puts the tape back after ``error`` at op ``index`` (``taken``: the pending entry, or
        a tuple of them, popped for it; ``summing``: whether some gradients were already added
        to its inputs)."""
        tape = self.tape
        if not summing and taken is not None:
            for item in (taken,) if taken.__class__ is list else taken:
                self.pending[id(item[0])] = item
        if self.marked is None:
            if op is not None:
                for var in op.output_vars():
                    var._released = False
        else:
            for var in self.marked:
                var._released = False
        if len(tape._ops) > self.recorded:  # gradient ops recorded by the failed scan
            del tape._ops[self.recorded :]
            tape._structure = None
        del tape._pending_ops[self.recorded_pending :]
        if self.marked is None and index is not None:
            kept = None if wanted is None else dict(wanted)
            tape._resume = Progress(
                self.key, tape._ops, None if summing else index, self.pending, kept, error
            )


def in_gradient(op, error):
    """The error to raise for ``error`` escaping the gradient maker of forward op ``op``."""
    if not isinstance(error, Exception):
        return error  # Ctrl-C and the like pass through unchanged
    where = op.location
    hint = None
    if where is None:
        hint = (
            f"backward was called at {user_location()}; eager ops keep no line of their own "
            "(lazy mode and tape.track_memory() record it)"
        )
    if isinstance(error, ExecutionError):
        return ExecutionError(
            error.op,
            f"{error.headline}\n  in the gradient of op '{op.type}' ({op.name})",
            hint=hint,
            location=where,
        )
    if isinstance(error, FluidError):
        return error.with_context(name=op.name, location=where)
    return ExecutionError(
        op.type,
        f"gradient maker failed: {type(error).__name__}: {error}",
        name=op.name,
        hint=hint,
        location=where,
    )


__all__ = ["Progress", "Scan", "resumable", "in_gradient"]
