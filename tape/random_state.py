"""The random generators behind random ops, seeded by ``tape.seed(n)`` for reproducible runs.

One generator per array module, shared by all threads (as ``torch.manual_seed``); random ops
draw from it when they run, and the scheduler keeps random ops in program order, so a seeded
run draws the same numbers eagerly and lazily.
"""

from __future__ import annotations

import threading

import numpy as np

_lock = threading.Lock()
_generators: dict = {}
_seed = None


def seed(n: int) -> None:
    """Re-seeds every random op: the same program after ``seed(n)`` draws the same numbers."""
    global _seed
    with _lock:
        _seed = int(n)
        _generators.clear()


def generator(xp):
    """The generator for array module ``xp`` (numpy.random.Generator or cupy's equivalent)."""
    gen = _generators.get(xp)
    if gen is None:
        with _lock:
            gen = _generators.get(xp)
            if gen is None:
                if xp is np:
                    gen = np.random.default_rng(_seed)
                else:
                    gen = xp.random.default_rng(_seed)
                _generators[xp] = gen
    return gen


def states():
    """The current state of every generator (see ``restore``)."""
    with _lock:
        return _seed, {xp: gen.bit_generator.state for xp, gen in _generators.items()}


def restore(saved):
    """Puts the generators back as ``states()`` found them (a failed lazy run's draws are
    undone, so the next run draws what it would have drawn)."""
    global _seed
    seed_value, generator_states = saved
    with _lock:
        if seed_value != _seed:
            return  # re-seeded since: the new seed decides
        for xp in list(_generators):
            if xp not in generator_states:
                del _generators[xp]  # created by the failed run: start it afresh
        for xp, state in generator_states.items():
            gen = _generators.get(xp)
            if gen is not None:
                gen.bit_generator.state = state
