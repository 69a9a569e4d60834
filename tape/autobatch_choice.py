"""Whether an interpreted lazy run autobatches: measured per model, kept where it wins.

Autobatching (``tape.passes.autobatch``) runs a group of independent ops as one kernel call and
pays for it with a schedule, gathers and scatters. Which side wins depends on the model and the
machine, and here, in Python, it is often the schedule: measured on this 2-core machine with
fresh trees every step, the per-example Tree RNN (64-128-wide vectors), Tree-LSTM and BiLSTM
tagger ran 20-40% slower autobatched than interpreted one op at a time, as their kernels take
1-2 us and the schedule, gathers and scatters cost more per op than the dispatch they save.

So ``tape.lazy(autobatch="auto")``, the default, measures instead of guessing. Per model (the
first parameter its run reads stands for the model), the first interpreted run autobatches
and the second does not; from then on each run takes the mode whose cost per pending op (an
exponential moving average of the interpreted run's time, ``WEIGHT`` on the newest run) is
lower, batching only where it costs at most ``MARGIN`` of the other. The other mode is probed
again after ``PROBE`` runs (its estimate replaced by the probe's time, as the old one is
stale); each probe it loses doubles that interval (up to ``MAX_INTERVAL``), so a settled
choice costs at most one run in ``MAX_INTERVAL`` in the slower mode, and a probe that wins
switches the choice and resets the interval. ``autobatch=True`` (or a heuristic's name) always
batches, ``False`` never does.

Costs are per process and in memory only (``reset()`` forgets them); at most ``LIMIT`` models
are remembered, least recently used dropped.
"""

from __future__ import annotations

import collections
import time

from tape.variable import Variable

PROBE = 8
# Batching must cost at most this share of running one op at a time: where the two are close
# (the Tree RNN's 64-wide vectors), a step's noise (+-30% here) would flip the choice back and
# forth, and not batching is what the user would otherwise get.
MARGIN = 0.9
MAX_INTERVAL = 128
WEIGHT = 0.3
LIMIT = 64
# Ops scanned from the start of a run for the parameter that names its model: a model's first
# ops read one (an embedding, a first layer's weight) in any realistic tape.
_SCAN = 64

clock = time.perf_counter


class _Costs:
    """One model's measurements: cost per op (seconds) unbatched and batched, runs taken, the
    run at which the other mode is probed next and the current interval between probes."""

    __slots__ = ("plain", "batched", "runs", "next_probe", "interval", "probing")

    def __init__(self):
        self.plain = self.batched = None
        self.runs, self.next_probe, self.interval, self.probing = 0, PROBE, PROBE, False

    def faster_batched(self):
        return self.batched <= MARGIN * self.plain


_MODELS: collections.OrderedDict = collections.OrderedDict()


def model_key(pending):
    """The id of the first parameter (a persistable Variable, or a leaf requiring a gradient)
    that ``pending``'s first ops read, or None: what stands for the model in ``_MODELS``."""
    for op in pending[:_SCAN]:
        for var in op.args:
            if var.__class__ is Variable and (var.persistable or (var._leaf and var.requires_grad)):
                return id(var)
    return None


def choose(key):
    """Whether the next interpreted run of the model ``key`` autobatches."""
    costs = _MODELS.get(key)
    if costs is None:
        costs = _MODELS[key] = _Costs()
        if len(_MODELS) > LIMIT:
            _MODELS.popitem(last=False)
    else:
        _MODELS.move_to_end(key)
    if costs.batched is None:
        return True
    if costs.plain is None:
        return False
    costs.runs += 1
    best = costs.faster_batched()
    costs.probing = costs.runs >= costs.next_probe
    return best != costs.probing


def measured(key, batched, seconds, ops):
    """Records that an interpreted run of ``ops`` pending ops of model ``key`` took ``seconds``,
    autobatched or not; after a probe, sets when the next one comes."""
    costs = _MODELS.get(key)
    if costs is None or ops <= 0:
        return
    per_op = seconds / ops
    old = costs.batched if batched else costs.plain
    if old is not None and not costs.probing:
        per_op = old + WEIGHT * (per_op - old)
    # (a probe replaces its mode's estimate: that one is as old as the previous probe)
    if batched:
        costs.batched = per_op
    else:
        costs.plain = per_op
    if costs.probing:
        costs.probing = False
        won = costs.faster_batched() == batched
        costs.interval = PROBE if won else min(2 * costs.interval, MAX_INTERVAL)
        costs.next_probe = costs.runs + costs.interval


def prefers_batching(key):
    """Whether the model ``key`` currently runs autobatched (True until both modes are known)."""
    costs = _MODELS.get(key)
    if costs is None or costs.batched is None or costs.plain is None:
        return True
    return costs.faster_batched()


def costs_of(key):
    """(seconds per op unbatched, batched), None where not yet measured: for ``explain``."""
    costs = _MODELS.get(key)
    return (None, None) if costs is None else (costs.plain, costs.batched)


def reset():
    """Forgets every model's measurements."""
    _MODELS.clear()


__all__ = ["choose", "measured", "model_key", "prefers_batching", "costs_of", "reset"]
