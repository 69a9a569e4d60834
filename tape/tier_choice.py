"""Whether a lazy step runs its structure's compiled plan or the eager way: measured per structure.

A structure seen before compiles into a plan that fuses forward and backward (and, under
``compile=True``, the updates); a structure seen for the first time runs the eager way
(``tape.backward._after_forward``: the forward in tape order, then the gradient kernels at
once). The plan is the faster tier where it fuses or batches work (the unrolled LSTM: 0.75x
eager mode's time), and since a known step runs its plan whole at the backward without recording
gradient ops (``tape.step_program``) it also wins on tapes of tiny ops (the ``scaling`` chain of
4x4 ops: 0.65-0.7x eager mode's time; before, when numbering and replaying the gradient ops,
1.13-1.3x against the eager way's 1.05-1.1x). Which wins can still be close (the MLP: within a
few percent). Lazy mode must never be slower than eager, so each step's tier is chosen by
measuring both (``tape.measured_choice``: the plan first, for ``PATIENCE`` warm steps, then the
eager way as the alternative, taken where it costs at most ``MARGIN`` of the plan).

Steps are told apart by the lazy backwards of the global tape: a step is the time from one such
backward to the next, when both have the same ``sketch`` (a structure's cheap stand-in) and
nothing in between did work that a warm step does not do (``cold``: a plan compiled, a run
interpreted, a backward learnt or a structure met for the first time). So a step's time
includes its recording, both tiers' runs and the optimizer's update, and measures what the user
waits for. The eager way of a structure already known is warm whatever its forward's run does
(``warm_eager_way``): it is that tier's steady state, autobatched or interpreted as the options
say, and a tier never measured would be taken again and again.
A structure whose sketch was never seen always runs the eager way: nothing of it is cached yet.

The tiers agree within the rounding of the plan's rewrites (which reorder sums), so a choice
made by timing may change a result's last bits from one run of a script to the next;
``tape.lazy(exact=True)`` makes both tiers equal eager mode bit for bit, and
``compile=True`` always runs the plan.

Costs are per process and in memory only; ``reset()`` forgets them (``tape.replay.forget``).
"""

from __future__ import annotations

import threading

from tape.measured_choice import Measured, clock
from tape.remembered import Remembered

LIMIT = 256
# Warm steps of the plan before the eager way is first tried: the plan's cost is the lowest of
# a few steps (one may be slowed by a page fault or the collector), and a tape of 10^5 ops
# takes a second a step.
PATIENCE = 3
# The eager way is taken where it costs at most this share of the plan. Lower than
# autobatching's margin: the two tiers compute the same values (within rounding), so a choice
# that flips between two close tiers costs nothing, and a plan 3-7% slower than the eager way
# (the MLP benchmark) is worth leaving.
MARGIN = 0.97
_SKETCHES = Remembered(LIMIT)  # sketch -> Measured (True: the eager way), least recent first
_COLD = [0]  # cold work done so far (see ``cold``)
_open = threading.local()  # the step being timed: (sketch, eager way?, started, ops, cold)
_warm = threading.local()  # whether a known structure's eager way is running (warm_eager_way)
_LOCK = threading.Lock()


def sketch(tape, loss, retain_graph):
    """A cheap stand-in for a tape's structural key (~0.1 us per op, numbering costs ~1.4 us):
    its op definitions in order and the output shapes of its one-output ops, hashed, with the
    loss's shape. Equal structures give equal sketches; different ones usually do not (not the
    wiring, flags or attributes: the key compares those)."""
    ops = tape._ops
    return (
        len(ops),
        hash(tuple([None if op is None else op.defn for op in ops])),
        hash(tuple([op.results[0].shape for op in ops if op is not None and op.defn.fast])),
        loss.shape,
        bool(retain_graph),
    )


def cold():
    """Notes work a warm step does not do: the step being timed is not measured (except inside
    ``warm_eager_way``)."""
    if not getattr(_warm, "on", False):
        _COLD[0] += 1


class warm_eager_way:
    """The block of a known structure's eager way (``tape.replay``): its forward's run, batched
    or interpreted, is this tier's own work, so nothing in it makes the step cold."""

    def __enter__(self):
        self.outer = getattr(_warm, "on", False)
        _warm.on = True

    def __exit__(self, *exc):
        _warm.on = self.outer


def eager_way(sketched, ops):
    """Whether the lazy step whose backward of a tape of ``ops`` ops (sketch ``sketched``) starts
    now runs the eager way: a sketch never seen does (and is remembered), a known one as
    measured. Ends the step the previous backward started, measuring it if it was warm."""
    with _LOCK:  # (lazy steps of several threads share the table)
        return _eager_way(sketched, ops)


def _eager_way(sketched, ops):
    now = clock()
    previous = getattr(_open, "step", None)
    _open.step = None
    if previous is not None:
        earlier, eager, started, count, cold_at = previous
        timed = _SKETCHES.get(earlier)
        if timed is not None:
            if earlier == sketched and cold_at == _COLD[0]:
                timed.measured(eager, (now - started) / max(count, 1))
            else:
                timed.probing = False  # (a probe not measured: the next run probes again)
    costs = _SKETCHES.get(sketched)
    if costs is None:
        _SKETCHES.put(sketched, Measured(first=False, patience=PATIENCE, margin=MARGIN))
        cold()
        return True
    _SKETCHES.move_to_end(sketched)
    eager = costs.choose()
    _open.step = (sketched, eager, now, ops, _COLD[0])
    return eager


def known(sketched):
    """Whether a lazy backward met this sketch before (and it is still remembered)."""
    with _LOCK:
        return sketched in _SKETCHES


def seen(sketched):
    """Notes a sketch met by an eager step that lazy mode speculated (``tape.eager_speculation``):
    returns whether it was known; a new one is remembered as a first sighting is. The step the
    previous lazy backward started ends unmeasured."""
    with _LOCK:
        _end_unmeasured()
        if sketched in _SKETCHES:
            _SKETCHES.move_to_end(sketched)
            return True
        _SKETCHES.put(sketched, Measured(first=False, patience=PATIENCE, margin=MARGIN))
        cold()
        return False


def step_unmeasured():
    """Ends, unmeasured, the step the previous lazy backward started (an eager step between)."""
    with _LOCK:
        _end_unmeasured()


def _end_unmeasured():
    previous = getattr(_open, "step", None)
    _open.step = None
    if previous is not None:
        timed = _SKETCHES.get(previous[0])
        if timed is not None:
            timed.probing = False


def costs_of(sketched):
    """(seconds per op of the plan, of the eager way), None where not measured: for explain."""
    costs = _SKETCHES.get(sketched)
    return (None, None) if costs is None else (costs.usual, costs.other)


def reset():
    """Forgets every structure's sketch and costs."""
    with _LOCK:
        _SKETCHES.clear()
        _open.step = None


__all__ = ["sketch", "cold", "warm_eager_way", "eager_way", "known", "seen", "costs_of", "reset"]
