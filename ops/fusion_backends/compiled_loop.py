"""A hand-written numba loop for one op's kernel, compiled where fused kernels are and never in
the program: the compile process compiles it into the kernel cache, and the program loads it
from there once it is ready (milliseconds). Until then ``Loop.ready`` returns None and the
op runs its numpy kernel; so does every program without numba, a compile process or a kernel
cache (``usable``). Loading imports numba: see ``Loop`` for when a loop may.

An op's module gives the loop's source (a module defining ``fused``, with the names of
``numba_loops.kernel_globals``: ``np`` with ``vecmath``'s exp and tanh, ``radd``, ...) and the
numba types of its arguments, which must be the types of the arrays it is called with (another
type would compile in the program). A loop that may still move counts in
``ops.fused.unsettled``, so a benchmark's warm-up waits for it as for fused kernels.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from ops.fusion_backends import compile_process, kernel_cache, numba_loops

_RAISES = frozenset(("raise", "call", "log"))  # (numpy error handlers a loop cannot honour)


def usable():
    """Whether loops can be had at all: numba installed, fused kernels allowed on numba, and a
    compile process with a kernel cache to hand the machine code over."""
    from ops import fused

    return (
        fused.current_backend() in ("auto", "numba")
        and numba_loops.available()
        and compile_process.enabled()
    )


def numpy_raises():
    """Whether numpy's error state asks to raise (or call or log) on a floating-point error:
    then an op keeps numpy's passes, which do, where a loop sets no flags."""
    return not _RAISES.isdisjoint(np.geterr().values())


def array(dtype, ndim, writeable=True):
    """A C-contiguous array argument as a request names its numba type."""
    return [dtype.str, ndim, "C", not writeable]


class Loop:
    """One loop of ``source`` for ``arguments`` (``array``'s forms): asked of the compile
    process, and loaded once its machine code is on disk. ``spent`` and ``last`` are what
    ``ops.fused.unsettled`` reads (``spent`` None: it will not move).

    Loading imports numba, which adds ~100 MiB of resident code to the process for good
    (``bench_memory``'s eager MLP: 1.02x -> 1.21x the minimum when an SGD loop loaded at its
    first step). So a loop that ``imports`` is asked for after ``SUBMIT_CALLS`` calls, as a
    fused kernel is (lazy plans: their fused kernels pay the same import), and one that does
    not waits until something else has imported numba: eager mode alone never pays it."""

    SUBMIT_CALLS = 64

    __slots__ = ("source", "arguments", "imports", "calls", "loops", "key", "spent", "last")
    __slots__ += ("__weakref__",)

    def __init__(self, source, arguments, imports):
        from ops import fused

        self.source, self.arguments, self.imports = source, arguments, imports
        self.calls, self.loops, self.key, self.spent, self.last = 0, None, None, 0.0, 0.0
        fused._ADAPTIVE.add(self)

    def ready(self):
        """The compiled loop (numba's dispatcher), or None while it is not (yet) there."""
        if self.loops is not None or self.spent is None:
            return self.loops
        imported = "numba" in sys.modules
        if not imported and not self.imports:
            return None  # (not counted as unsettled: nothing here will import numba)
        self.last = time.perf_counter()
        if not imported:
            self.calls += 1
            if self.calls < self.SUBMIT_CALLS:
                return None
        if kernel_cache.compiled_before(self.source, True):
            return self._load()
        if self.key is None:
            self.key = kernel_cache.key(self.source, True)
            compile_process.submit(self.key, request(self.source, self.arguments))
        elif compile_process.state(self.key) == compile_process.READY:
            return self._load()
        elif compile_process.state(self.key) != compile_process.PENDING:
            self.spent = None  # (the compile failed: numpy for good)
        return None

    def _load(self):
        self.spent = None
        try:
            fused, cached = kernel_cache.function(
                self.source, True, numba_loops.kernel_globals(True)
            )
            if cached:
                self.loops = numba_loops._jit(fused, parallel=False, cache=True)
        except ImportError:  # (numba installed but broken: numpy's kernel stays)
            self.loops = None
        return self.loops


def loop(table, key, make):
    """``table[key]`` (an op module's loops), made by ``make(key)`` at its first use; None where
    loops cannot be had (``usable``)."""
    found = table.get(key)
    if found is None and usable():
        found = table[key] = make(key)
    return found


def request(source, arguments):
    """The compile process's request for a loop (what ``Loop`` submits): for tests, and to
    compile one ahead of time with ``numba_loops.compile_request``."""
    return {"source": source, "vectorised": True, "parallel": False, "arguments": arguments}


__all__ = ["Loop", "loop", "usable", "array", "request", "numpy_raises"]
