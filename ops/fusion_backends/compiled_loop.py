"""A hand-written numba loop for one op's kernel, compiled where fused kernels are and never in
the program: the compile process compiles it into the kernel cache, and the program loads it
from there once it is ready (milliseconds). Until then ``Loop.ready`` returns None and the
op runs its numpy kernel; so does every program without numba, a compile process or a
kernel cache (``usable``).

An op's module gives the loop's source (a module defining ``fused``, with the names of
``numba_loops.kernel_globals``: ``np`` with ``vecmath``'s exp and tanh, ``radd``, ...) and the
numba types of its arguments, which must be the types of the arrays it is called with (another
type would compile in the program). A loop that may still move counts in
``ops.fused.unsettled``, so a benchmark's warm-up waits for it as for fused kernels.
"""

from __future__ import annotations

import time

from ops.fusion_backends import compile_process, kernel_cache, numba_loops


def usable():
    """Whether loops can be had at all: numba installed, fused kernels allowed on numba, and
    a compile process with a kernel cache to hand the machine code over."""
    from ops import fused

    return (
        fused.current_backend() in ("auto", "numba")
        and numba_loops.available()
        and compile_process.enabled()
    )


def array(dtype, ndim, writeable=True):
    """A C-contiguous array argument as a request names its numba type."""
    return [dtype.str, ndim, "C", not writeable]


class Loop:
    """One loop of ``source`` for ``arguments`` (``array``'s forms): asked of the compile
    process at the first ``ready``, loaded once its machine code is on disk. ``spent`` and
    ``last`` are what ``ops.fused.unsettled`` reads (``spent`` None: it will not move)."""

    __slots__ = ("source", "arguments", "loops", "key", "spent", "last", "__weakref__")

    def __init__(self, source, arguments):
        from ops import fused

        self.source, self.arguments = source, arguments
        self.loops, self.key, self.spent, self.last = None, None, 0.0, 0.0
        fused._ADAPTIVE.add(self)

    def ready(self):
        """The compiled loop (numba's dispatcher), or None while it is not (yet) there."""
        if self.loops is not None or self.spent is None:
            return self.loops
        self.last = time.perf_counter()
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


def request(source, arguments):
    """The compile process's request for a loop (what ``Loop`` submits): for tests, and to
    compile one ahead of time with ``numba_loops.compile_request``."""
    return {"source": source, "vectorised": True, "parallel": False, "arguments": arguments}


__all__ = ["Loop", "usable", "array", "request"]
