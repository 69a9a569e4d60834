"""Fault injection in the manner of SQLite's tests: make the k-th kernel call (or file write, or
file read) fail, for every k, and check that nothing was lost or half-applied."""

from __future__ import annotations

import contextlib

from ops.registry import REGISTRY
from tape.passes.plan import CACHE


class Injector:
    """Counts calls and raises ``error`` at call number ``at`` (None: never, just count)."""

    def __init__(self):
        self.calls, self.at, self.error, self.fired = 0, None, None, False

    def arm(self, at, error):
        self.calls, self.at, self.error, self.fired = 0, at, error, False

    def disarm(self):
        self.calls, self.at, self.error = 0, None, None

    def tick(self):
        self.calls += 1
        if self.calls == self.at:
            self.fired = True
            # A fresh exception each time: raising one instance again would chain every earlier
            # traceback (and the frames, tapes and Variables they hold) onto it.
            if isinstance(self.error, type):
                raise self.error()
            raise type(self.error)(*self.error.args)


@contextlib.contextmanager
def kernels_injected():
    """Every registered kernel goes through one Injector while the block runs. Plans cache the
    kernels they were built with, so the plan cache is emptied on the way in and out."""
    injector = Injector()
    saved = {}
    for defn in REGISTRY.values():
        saved[defn.type] = (defn.kernel, dict(defn.kernels))
        for place, kernel in defn.kernels.items():
            defn.kernels[place] = _wrapped(kernel, injector)
        defn.kernel = _wrapped(defn.kernel, injector)
    CACHE.clear()
    try:
        yield injector
    finally:
        for defn in REGISTRY.values():
            defn.kernel, defn.kernels = saved[defn.type][0], saved[defn.type][1]
        CACHE.clear()


def _wrapped(kernel, injector):
    def inject(xp, attrs, *args):
        injector.tick()
        return kernel(xp, attrs, *args)

    inject.__wrapped__ = kernel
    return inject


class FailingFile:
    """A file object whose ``write`` goes through an Injector."""

    def __init__(self, file, injector):
        self._file, self._injector = file, injector

    def write(self, data):
        self._injector.tick()
        return self._file.write(data)

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._file.__exit__(*exc)
