"""Pausing Python's cyclic garbage collector while the lazy scheduler works on a large tape.

A lazy step keeps every op it records alive until the step ends (a tape of 10^4-10^5 OpHandles,
Variables and tuples), and the collector's full scans, triggered by allocation counts, walk all
of them again each time: measured at 20-40% of a lazy step of a per-example tree model and of a
10^4-op chain. The scheduler's own phases (a lazy backward, a run) create no reference cycles,
so the collector is paused while they work; it resumes when the last paused phase (of any
thread) ends, and runs as usual in the user's code in between. A collector the user disabled
stays disabled.
"""

from __future__ import annotations

import contextlib
import gc
import threading

_LOCK = threading.Lock()
_state = {"depth": 0, "resume": False}


@contextlib.contextmanager
def paused():
    """Automatic collection off inside the block (re-entrant, across threads)."""
    with _LOCK:
        if _state["depth"] == 0:
            _state["resume"] = gc.isenabled()
            gc.disable()
        _state["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _state["depth"] -= 1
            if _state["depth"] == 0 and _state["resume"]:
                gc.enable()
