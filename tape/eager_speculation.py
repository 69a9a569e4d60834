"""Whether the next lazy step on the global tape records eagerly: a graph new at every step.

A lazy step of a structure never seen runs the eager way (``tape.backward._after_forward``):
its forward in tape order at the backward, then the gradient kernels at once, nothing cached.
Recording that forward lazily first -- an output without a value, an op on the pending list, the
user's line, then a run over the list -- costs 10-20% more than running each op as it is
recorded (the ``scaling`` and per-example benchmarks), and buys nothing when the next step's
structure is new again: nothing is learnt, nothing batched. A DyNet-style model whose graph
follows the data (trees, parses, sentences) is such a model at every step.

So after a lazy step (``STREAK`` in a row) whose structure was new and whose forward ran
unbatched (autobatching off, or ``autobatch="auto"`` having measured the unbatched run cheaper
for the model), ``reset_global_tape()`` in the ``tape.lazy()`` block makes an eager tape: the
step runs as eager mode runs it, values and gradients bit for bit. Every ``SKETCH_EVERY``-th
such step's backward takes the structure's sketch (``tape.tier_choice``), so a structure that
starts to repeat is noticed: a known sketch ends the streak and the next step records lazily
again, on the way to its compiled plan. Where the block may autobatch, a speculated step now
and then records lazily anyway and autobatches (a probe, ``autobatch_choice.choose``'s), so
the choice is measured again: the ``PROBE``-th speculated step, and after each probe that left
the choice as it was, twice as many as before, up to ``MAX_INTERVAL`` (as
``tape.measured_choice`` spaces its probes). A probe costs 10-20% of its step, so a settled
model pays about 0.02% for them. With ``autobatch=False`` or ``exact=True`` there is no choice
to measure and no probe. ``tape.explain()`` says when a step was speculated.

Only steps that lazy mode would run the eager way are speculated: the options must interpret new
structures (no ``compile=True``, threads > 1, ``validate`` or ``debug``).

The streak, probes and sketches are kept per ``tape.lazy()`` block (its ``with`` line and
options) and thread: a loop over trees that are new at every step does not make the steps of a
fixed model's loop in another block eager (where the two alternate, each of that model's steps
would be).
"""

from __future__ import annotations

import threading

from tape import autobatch_choice, tier_choice

# New, unbatched lazy steps in a row before the next one records eagerly. One: a wrong guess
# (the next structure repeats) costs an eager step instead of the eager way's (about the same)
# and delays the structure's compiled plan by a step.
STREAK = 1
# Speculated steps per sketched one. A sketch costs ~1% of an eager step of small ops (the
# ``scaling`` chain), which is what speculation saves over recording lazily; a model whose
# structure starts to repeat is noticed within two sketched steps (one remembers the sketch,
# the next meets it), or, cycling through k structures, within k + 1.
SKETCH_EVERY = 4
PROBE = 32  # the first probe's interval in speculated steps (a probe records lazily instead)
MAX_INTERVAL = 1024  # the interval a probe that changed nothing doubles, up to this

BLOCKS = 64  # lazy blocks remembered per thread (the least recently entered is forgotten)


class _Block:
    """One lazy block's speculation (per thread): its streak of new structures, speculated
    steps since the last probe, speculated steps since the last sketch, doublings of the probe
    interval, whether its current step is a probe, and the model its speculated step times."""

    __slots__ = ("streak", "speculated", "unsketched", "doublings", "probing", "timed")

    def __init__(self):
        self.streak = self.speculated = self.unsketched = self.doublings = 0
        self.probing, self.timed = False, None


_state = threading.local()  # (this thread's blocks by site, and the block steps now use)


def _block():
    block = getattr(_state, "block", None)
    if block is None:
        block = _state.block = _Block()
    return block


def enter(site):
    """Makes the block at ``site`` (a ``tape.lazy()`` block's ``with`` line and options:
    (code, line, settings)) the one the next steps use; returns the block used until now, for
    ``leave``."""
    blocks = getattr(_state, "blocks", None)
    if blocks is None:
        blocks = _state.blocks = {}
    block = blocks.pop(site, None)
    if block is None:
        block = _Block()
        if len(blocks) >= BLOCKS:
            del blocks[next(iter(blocks))]
    blocks[site] = block  # (most recent last)
    previous = getattr(_state, "block", None)
    _state.block = block
    return previous


def leave(previous):
    """Restores the block ``enter`` replaced (an enclosing lazy block's); after the outermost
    block the one just left stays current (``streak`` and ``interval`` describe it)."""
    if previous is not None:
        _state.block = previous


def next_step_eager():
    """Whether the global tape ``reset_global_tape`` is making in a lazy block records eagerly."""
    from tape.lazy import always_batches, interprets_new_structures, may_autobatch

    block = _block()
    if block.streak < STREAK or not interprets_new_structures():
        return False
    if always_batches():  # (a streak made by steps with other options: these batch)
        return False
    block.speculated += 1
    if block.speculated < interval() or not may_autobatch():
        return True
    block.speculated, block.probing = 0, True
    return False


def probing():
    """Whether the step ``next_step_eager`` just declined is a probe: its run tries the way
    ``autobatch="auto"`` does not prefer now (``tape.lazy.run_before_backward``)."""
    return _block().probing


def lazy_step(new_and_unbatched):
    """Notes a lazy step's backward: whether its structure was new and its forward ran
    unbatched (the streak grows) or not (it ends). After a probe, sets when the next comes."""
    block = _block()
    block.streak = block.streak + 1 if new_and_unbatched else 0
    if block.probing:
        block.probing = False
        block.doublings = block.doublings + 1 if new_and_unbatched else 0


def interval():
    """Speculated steps from one probe to the next: ``PROBE``, doubled after each probe that
    changed nothing, up to ``MAX_INTERVAL``."""
    return min(PROBE << min(_block().doublings, 16), MAX_INTERVAL)


def eager_step(sketch, ops):
    """Notes a speculated step's backward (its tape's ``ops``): every ``SKETCH_EVERY``-th, its
    structure's ``sketch()`` says whether it repeats; a new structure grows the streak, one
    seen before ends it, so the next step records lazily. So does a model that autobatching
    would batch (``autobatch_choice``: one it never measured batches first), as the streak
    may have been made by another model's steps in the same block."""
    from tape.lazy import may_autobatch

    block = _block()
    key = autobatch_choice.model_key(ops) if may_autobatch() else None
    if key is not None and autobatch_choice.prefers_batching(key):
        block.streak = 0
        tier_choice.step_unmeasured()
        return
    block.timed = (key, len(ops)) if key is not None else None
    block.unsketched += 1
    if block.unsketched < SKETCH_EVERY:
        tier_choice.step_unmeasured()
        block.streak += 1
        return
    block.unsketched = 0
    block.streak = 0 if tier_choice.seen(sketch()) else block.streak + 1


def eager_step_done(tape):
    """Times a speculated step whose backward is done, from its tape's start, as the unbatched
    way of its model (``autobatch_choice``): what autobatching must beat is this step, not a
    lazily recorded one (recording lazily costs 10-20% more)."""
    block = _block()
    timed, block.timed = block.timed, None
    started = tape.started
    if timed is not None and started is not None:
        autobatch_choice.measured(timed[0], False, autobatch_choice.clock() - started, timed[1])


def streak():
    """The current block's streak of new structures (for ``tape.explain``)."""
    return _block().streak


def reset():
    """Forgets this thread's streaks (tests start afresh)."""
    _state.block, _state.blocks = None, {}


__all__ = [
    "enter",
    "leave",
    "next_step_eager",
    "lazy_step",
    "eager_step",
    "eager_step_done",
    "probing",
    "streak",
    "reset",
    "interval",
    "STREAK",
    "SKETCH_EVERY",
    "PROBE",
    "MAX_INTERVAL",
    "BLOCKS",
]
