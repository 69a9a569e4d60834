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
step runs as eager mode runs it, values and gradients bit for bit. Its backward still takes the
structure's sketch (``tape.tier_choice``), so a structure that starts to repeat is noticed: a
known sketch ends the streak and the next step records lazily again, on the way to its
compiled plan. Every ``PROBE``-th speculated step records lazily anyway, so autobatching's
choice is measured again now and then. ``tape.explain()`` says when a step was speculated.

Only steps that lazy mode would run the eager way are speculated: the options must interpret new
structures (no ``compile=True``, threads > 1, ``validate`` or ``debug``).
"""

from __future__ import annotations

import threading

from tape import tier_choice

# New, unbatched lazy steps in a row before the next one records eagerly. One: a wrong guess
# (the next structure repeats) costs an eager step instead of the eager way's (about the same)
# and delays the structure's compiled plan by a step.
STREAK = 1
PROBE = 32  # every PROBE-th speculated step records lazily instead

_state = threading.local()  # (this thread's streak, its speculated steps)


def next_step_eager():
    """Whether the global tape ``reset_global_tape`` is making in a lazy block records eagerly."""
    from tape.lazy import interprets_new_structures

    if getattr(_state, "streak", 0) < STREAK or not interprets_new_structures():
        return False
    _state.speculated = getattr(_state, "speculated", 0) + 1
    return _state.speculated % PROBE != 0


def lazy_step(new_and_unbatched):
    """Notes a lazy step's backward: whether its structure was new and its forward ran
    unbatched (the streak grows) or not (it ends)."""
    _state.streak = getattr(_state, "streak", 0) + 1 if new_and_unbatched else 0


def eager_step(sketched):
    """Notes a speculated step's backward (its structure's ``sketch``): a new structure grows
    the streak, one seen before ends it, so the next step records lazily."""
    _state.streak = 0 if tier_choice.seen(sketched) else getattr(_state, "streak", 0) + 1


def streak():
    """This thread's streak of new structures (for ``tape.explain``)."""
    return getattr(_state, "streak", 0)


def reset():
    """Forgets this thread's streak (tests start afresh)."""
    _state.streak = _state.speculated = 0


__all__ = ["next_step_eager", "lazy_step", "eager_step", "streak", "reset", "STREAK", "PROBE"]
