"""Pausing Python's cyclic garbage collector while a step builds and runs a large tape.

A lazy step keeps every op it records alive until the step ends (a tape of 10^4-10^5 OpHandles,
Variables and tuples), and the collector's full scans, triggered by allocation counts, walk all
of them again each time -- with the plan cache's analyses besides: measured at 20-40% of a lazy
step of a per-example tree model and of a 10^4-op chain. The scheduler creates no reference
cycles on this path, and the objects die together when the step ends, so the collector is
paused for the step: from the first op a lazy tape records with nothing pending until the run
that computes them ends (or the lazy block is left, or the global tape reset). The library's own
phases (a lazy backward, a run) pause it too, re-entrantly and across threads. The pause is
bounded: a lazy tape that records ``STEP_LIMIT`` ops without running resumes collection, and
cycles the user's code made meanwhile are collected as soon as it resumes. A collector the user
disabled stays disabled.

An eager step on the global tape is paused the same way, from its first recorded op until its
backward drops the ops, the tape is reset or ``EAGER_STEP_LIMIT`` ops were recorded (then it
stays on until the next step): a per-example Tree-LSTM's eager step keeps ~40k ops alive until
its backward, and the collector took 12-18% of it. A tape made by hand is never paused in eager
mode.
"""

from __future__ import annotations

import contextlib
import gc
import threading

STEP_LIMIT = 1 << 20  # ops a lazy tape records with the collector paused, at most
# Ops an eager global tape records with the collector paused, at most: no lazy block bounds an
# eager step, and a tape that never reaches a backward or a reset (an evaluation run without
# no_grad) must not keep the collector off for long. A per-example Tree-LSTM step records ~40k.
EAGER_STEP_LIMIT = 1 << 16
RUN_LIMIT = 8  # lazy runs in one pause, at most

_LOCK = threading.Lock()
_state = {"depth": 0, "resume": False, "step": False, "runs": 0}


def _enter():
    if _state["depth"] == 0:
        _state["resume"] = gc.isenabled()
        gc.disable()
    _state["depth"] += 1


def _leave():
    _state["depth"] -= 1
    if _state["depth"] == 0 and _state["resume"]:
        gc.enable()


@contextlib.contextmanager
def paused():
    """Automatic collection off inside the block (re-entrant, across threads)."""
    with _LOCK:
        _enter()
    try:
        yield
    finally:
        with _LOCK:
            _leave()


def step_started():
    """A lazy tape recorded its first pending op: pause until ``step_ended`` (one step pause
    at a time, process-wide)."""
    with _LOCK:
        if not _state["step"]:
            _state["step"], _state["runs"] = True, 0
            _enter()


def run_ended():
    """A lazy run ended: the step's pause ends after ``RUN_LIMIT`` of them."""
    if _state["step"]:
        _state["runs"] += 1
        if _state["runs"] >= RUN_LIMIT:
            step_ended()


def step_ended():
    """The global tape was reset (or the lazy block left, or a limit reached): end the step's
    pause."""
    if _state["step"]:
        with _LOCK:
            if _state["step"]:
                _state["step"] = False
                _leave()
