"""Transactions: the new values of a step are computed first, then committed together.

Kernels never write into their inputs, so an update op (an optimizer's, batch norm's running
statistics) produces new buffers; committing is rebinding Variables to them. An eager optimizer
step collects its rebindings in a ``Step`` and commits them once every update has been computed;
a lazy run commits its writes after the whole plan ran (``tape.lazy``). Either way a failure or
an interrupt before the commit leaves every parameter and state as it was, and the commit
itself is a handful of attribute stores that ``uninterrupted`` shields from Ctrl-C.

>>> import numpy as np, tape
>>> v = tape.Variable(np.zeros(2, np.float32))
>>> with Step() as step:
...     step.write(v, np.ones(2, np.float32))
...     v.numpy()  # nothing is committed before the step ends
array([0., 0.], dtype=float32)
>>> v.numpy()
array([1., 1.], dtype=float32)
"""

from __future__ import annotations

import threading

try:  # (the C functions under ``signal``'s: without its enum conversions, ~10 us per commit)
    from _signal import SIGINT
    from _signal import getsignal as _get_handler
    from _signal import signal as _set_handler
except ImportError:  # pragma: no cover  (a Python without CPython's _signal)
    from signal import SIGINT
    from signal import getsignal as _get_handler
    from signal import signal as _set_handler

_MAIN = threading.main_thread()


class uninterrupted:
    """Context manager deferring SIGINT (KeyboardInterrupt) until the block is done.

    Python raises KeyboardInterrupt only in the main thread, between any two bytecodes; inside
    the block a SIGINT is remembered and the previous handler runs when the block ends, so a
    commit is never cut in half. A no-op in other threads and where SIGINT is not handled in
    Python (ignored, or the default action).
    """

    __slots__ = ("previous", "caught")

    def __enter__(self):
        self.previous = None
        if threading.current_thread() is _MAIN:
            previous = _get_handler(SIGINT)
            if callable(previous):
                self.caught = []
                self.previous = previous
                _set_handler(SIGINT, self._remember)
        return self

    def _remember(self, signum, frame):
        self.caught.append(frame)

    def __exit__(self, *exc):
        previous = self.previous
        if previous is not None:
            _set_handler(SIGINT, previous)
            if self.caught:
                previous(SIGINT, self.caught[0])
        return False


class _State(threading.local):
    step = None


state = _State()


class Step:
    """Collects the new values written by in-place ops (``write``) and callbacks (``on_commit``)
    while it is open; commits all of them when the block ends without an exception, none
    otherwise. Steps nest: an inner step commits into the outer one."""

    __slots__ = ("writes", "callbacks", "outer")

    def __init__(self):
        self.writes, self.callbacks = [], []

    def __enter__(self):
        self.outer, state.step = state.step, self
        return self

    def write(self, var, value):
        self.writes.append((var, value))

    def __exit__(self, exc_type, *exc):
        state.step = self.outer
        if exc_type is not None:
            return False
        if self.outer is not None:
            self.outer.writes.extend(self.writes)
            self.outer.callbacks.extend(self.callbacks)
            return False
        commit(self.writes, self.callbacks)
        return False


def commit(writes, callbacks=()):
    """Rebinds each Variable to its new value and runs the callbacks, shielded from Ctrl-C;
    then checks that no recorded op still needed an old value (``tape.guard``)."""
    from tape import guard

    with uninterrupted():
        for var, value in writes:
            var._value, var._pending = value, None
        for callback in callbacks:
            callback()
    if writes:
        guard.note_writes([var for var, _ in writes], "an in-place update")


def write(var, value):
    """Gives ``var`` its new ``value``: at once, or at the commit of the open step."""
    step = state.step
    if step is None:
        commit(((var, value),))
    else:
        step.writes.append((var, value))


def on_commit(callback):
    """Runs ``callback`` when the open step commits (at once when no step is open)."""
    step = state.step
    if step is None:
        callback()
    else:
        step.callbacks.append(callback)


__all__ = ["Step", "uninterrupted", "commit", "write", "on_commit"]
