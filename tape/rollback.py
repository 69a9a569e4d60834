"""A failed lazy run fails alone: its ops are dropped and what it was to change stays as it was.

A lazy run commits nothing until its whole plan has run (kernels write new buffers, never their
inputs), so after any exception -- a kernel error, Ctrl-C, a MemoryError -- parameters and
optimizer state still hold their pre-run values. ``abort`` then makes the tape usable again:

- the run's ops leave the pending list, so nothing re-runs them (no update applied twice, no
  error repeated by every later request, reset or save);
- outputs the run computed before it failed keep their values where their op is pure (eager
  mode would have them too); the other outputs are marked ``Failed``: reading one raises a
  GraphError naming the failure. Variables the run was to update in place (parameters,
  optimizer state) simply keep their values;
- leaf gradients recorded by a backward in the run go back to what they were before it;
- the optimizer's counters (step counts) recorded with the dropped updates are restored
  (``tape._undo``), and so is the random generators' state, so the next step draws exactly
  what it would have drawn had the failed run never started;
- inputs the run was to free keep their values.
"""

from __future__ import annotations

from tape import random_state
from tape.variable import Failed


class Snapshot:
    """What a run may disturb before it commits: the random generators' states (only when
    the plan draws random numbers) and the inputs whose values the run takes over."""

    __slots__ = ("generators", "released", "produced")

    def __init__(self, random, produced=frozenset()):
        self.generators = random_state.states() if random else None
        self.released = []
        self.produced = produced  # ids of the Variables the run itself computes

    def release(self, var):
        """Frees ``var``'s value; one the run did not compute (an input it takes over) is
        remembered for ``abort``. What the run computed is freed for real: a failed run
        recomputes it, so keeping it would hold every buffer of the run until its end."""
        if id(var) not in self.produced:
            self.released.append((var, var._value))
        var._value = None


def computed_values(variables, produced, vals, limit):
    """``abort``'s ``computed``: {id of Variable: value} for the slots among ``produced`` below
    ``limit`` (a rewrite's own slots, or a plan's gradient slots, have no Variable) that the
    failed run had computed, out of its slot values ``vals``."""
    return {id(variables[s]): vals[s] for s in produced if s < limit and vals[s] is not None}


def abort(tape, ops, error, snapshot, computed):
    """Drops ``ops`` (the failed run's recorded ops) from ``tape`` and undoes what the run did
    to the tape's state (see the module docstring); ``computed`` maps ids of Variables to the
    values the run had computed for them."""
    if snapshot.generators is not None:
        random_state.restore(snapshot.generators)
    for var, value in snapshot.released:
        if var._value is None:
            var._value = value
    failed = Failed(error)
    for op in ops:
        _settle(op, failed, computed)
    # Pending ops outside the run that read what it failed to compute can never run either
    # (tape order is topological: one scan finds them all).
    for op in tape._pending_ops:
        if any(v._pending is failed for v in op.input_vars()):
            ops.append(op)
            _settle(op, failed, {})
    dropped = {id(op) for op in ops}
    tape._pending_ops = [op for op in tape._pending_ops if id(op) not in dropped]
    _restore_leaf_gradients(tape)
    undo, tape._undo = tape._undo, []
    for op, callback in reversed(undo):
        if id(op) in dropped:
            callback()
        else:
            tape._undo.append((op, callback))


def _settle(op, failed, computed):
    """The outputs of a dropped op keep the values computed for them (a pure op), or their
    old values (updated in place), or are marked ``failed``."""
    from tape.trace import effectful

    inputs = op.input_vars()
    pure = not effectful(op.defn)
    for var in op.output_vars():
        if any(var is v for v in inputs):
            var._pending = None
        elif not pure:  # a random draw the restored generator will make again
            var._value, var._pending = None, failed
        elif id(var) in computed:
            var._value, var._pending = computed[id(var)], None
        elif var._value is not None:  # computed (and stored) before the failure
            var._pending = None
        else:
            var._pending = failed


def _restore_leaf_gradients(tape):
    """Each leaf whose gradient is now Failed gets back the gradient it had before."""
    entries, tape._leaf_grads = tape._leaf_grads, []
    for grad_ref, leaf_ref, previous in reversed(entries):
        grad, leaf = grad_ref(), leaf_ref()
        if grad is None or leaf is None or grad._pending.__class__ is not Failed:
            if grad is not None and leaf is not None:
                tape._leaf_grads.append((grad_ref, leaf_ref, previous))
            continue
        if leaf._grad is grad:
            leaf._grad = previous
    tape._leaf_grads.reverse()


__all__ = ["Snapshot", "abort"]
