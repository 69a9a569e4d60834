"""One background thread that compiles fused kernels while the program goes on in numpy.

numba compiles a fused group in 0.3-2.5 s (``numba_loops``). Compiled on the thread that runs the
group, that time is a stall, so ``ops.fused`` waits until a group has spent as long in numpy
before it moves: a plan of a few dozen small recurring groups (a 10^3-op chain of 4x4 ops, its
backward fused into ~40 groups of 8 structures) then needs thousands of steps before its kernels
pay. Here the compile runs beside the program, which keeps running the group in numpy and takes
the kernel at the first call after it is ready; on two cores the program loses at most the
compile's share of the interpreter lock (llvmlite releases it while LLVM optimises and emits
code, the bulk of a compile).

One daemon thread, jobs in the order they came: compiles never compete with each other for the
cores, and a program that exits does not wait for them (a kernel half-written to the disk cache
is never read: ``kernel_cache`` writes atomically). ``FLUIDTAPE_BACKGROUND_COMPILE=0`` compiles
on the calling thread instead, as before.
"""

from __future__ import annotations

import os
import queue
import threading

ENABLED = os.environ.get("FLUIDTAPE_BACKGROUND_COMPILE", "1") not in ("", "0")


class Job:
    """A compile handed to the background thread: ``done()``, then ``result`` (the compiled
    callable) or ``error`` (the exception the compile raised)."""

    __slots__ = ("work", "result", "error", "_done")

    def __init__(self, work):
        self.work, self.result, self.error = work, None, None
        self._done = threading.Event()

    def done(self):
        return self._done.is_set()

    def wait(self, timeout=None):
        return self._done.wait(timeout)

    def _run(self):
        try:
            self.result = self.work()
        except BaseException as err:  # (reported through the job, never lost in the thread)
            self.error = err
        finally:
            self.work = None
            self._done.set()


_jobs = queue.SimpleQueue()
_worker = [None]
_lock = threading.Lock()


def submit(work):
    """Runs ``work()`` on the background thread; returns its ``Job``."""
    job = Job(work)
    with _lock:
        if _worker[0] is None or not _worker[0].is_alive():
            _worker[0] = threading.Thread(target=_serve, name="fluidtape-compile", daemon=True)
            _worker[0].start()
        _jobs.put(job)
    return job


def _serve():
    while True:
        _jobs.get()._run()


def _forget():
    """A forked child has no worker thread: the next submit starts one (queued jobs are the
    parent's)."""
    global _jobs, _lock
    _jobs, _lock = queue.SimpleQueue(), threading.Lock()
    _worker[0] = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)


__all__ = ["Job", "submit", "ENABLED"]
