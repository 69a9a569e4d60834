"""Whether an interpreted lazy run autobatches: measured per model, kept where it wins.

Autobatching (``tape.passes.autobatch``) runs a group of independent ops as one kernel call and
pays for it with a schedule, gathers and scatters. Which side wins depends on the model and the
machine, and here, in Python, it is often the schedule: measured on this 2-core machine with
fresh trees every step, the per-example Tree RNN (64-128-wide vectors), Tree-LSTM and BiLSTM
tagger ran 20-40% slower autobatched than interpreted one op at a time, as their kernels take
1-2 us and the schedule, gathers and scatters cost more per op than the dispatch they save.

So ``tape.lazy(autobatch="auto")``, the default, measures instead of guessing
(``tape.measured_choice``). Per model (the first parameter its run reads stands for the model),
the first ``WARM_RUNS`` interpreted runs autobatch and the next does not; from then on each run
takes the mode whose cost per pending op is lower, batching only where it costs at most
``MARGIN`` of the other, and the other mode is probed again now and then. ``autobatch=True``
(or a heuristic's name) always batches, ``False`` never does.

Costs are per process and in memory only (``reset()`` forgets them); at most ``LIMIT`` models
are remembered, least recently used dropped.
"""

from __future__ import annotations

import collections

from tape.measured_choice import MARGIN, MAX_INTERVAL, PROBE, Measured, clock
from tape.variable import Variable

LIMIT = 64
# Batched runs of a new model before its first unbatched one. Two: the first is cold (a
# process's first batched run of a model pays for caches and allocations: the Tree-LSTM's
# measured ~7% dearer than the next), and a way's cost is the lowest of its runs, kept until
# it is probed again (``PROBE`` runs later), which a short run may never reach.
WARM_RUNS = 2
# Ops scanned from the start of a run for the parameter that names its model: a model's first
# ops read one (an embedding, a first layer's weight) in any realistic tape.
_SCAN = 64

_MODELS: collections.OrderedDict = collections.OrderedDict()  # key -> Measured (True: batched)


def model_key(pending):
    """The id of the first parameter (a persistable Variable, or a leaf requiring a gradient)
    that ``pending``'s first ops read, or None: what stands for the model in ``_MODELS``."""
    for op in pending[:_SCAN]:
        for var in op.args if op.defn.simple_inputs else op.input_vars():
            if var.__class__ is Variable and (var.persistable or (var._leaf and var.requires_grad)):
                return id(var)
    return None


def recorded_eagerly(ops):
    """How many of ``ops`` an eager tape would have recorded: those with an output that
    requires a gradient. Steps are compared per such op, as a speculated eager step
    (``tape.eager_speculation``) records no other."""
    count = 0
    for op in ops:
        results = op.results
        if results and results[0].__class__ is Variable:
            count += results[0].requires_grad
        else:
            count += any(var.requires_grad for var in op.output_vars())
    return count


def choose(key, probe=False):
    """Whether the next interpreted run of the model ``key`` autobatches; with ``probe``, the
    way not preferred now is tried (eager speculation's probe: ``tape.eager_speculation``)."""
    costs = _MODELS.get(key)
    if costs is None:
        costs = _MODELS[key] = Measured(first=True, patience=WARM_RUNS)
        if len(_MODELS) > LIMIT:
            _MODELS.popitem(last=False)
    else:
        _MODELS.move_to_end(key)
    return costs.probe() if probe else costs.choose()


def measured(key, batched, seconds, ops):
    """Records that an interpreted run of ``ops`` pending ops of model ``key`` took ``seconds``,
    autobatched or not; after a probe, sets when the next one comes."""
    costs = _MODELS.get(key)
    if costs is not None and ops > 0:
        costs.measured(batched, seconds / ops)


def prefers_batching(key):
    """Whether the model ``key`` currently runs autobatched (True until both modes are known)."""
    costs = _MODELS.get(key)
    return True if costs is None else costs.prefers_other()


def costs_of(key):
    """(seconds per op unbatched, batched), None where not yet measured: for ``explain``."""
    costs = _MODELS.get(key)
    return (None, None) if costs is None else (costs.usual, costs.other)


def reset():
    """Forgets every model's measurements."""
    _MODELS.clear()


__all__ = [
    "choose",
    "measured",
    "model_key",
    "prefers_batching",
    "costs_of",
    "reset",
    "clock",
    "MARGIN",
    "PROBE",
    "MAX_INTERVAL",
]
