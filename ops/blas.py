"""BLAS thread control for numpy's BLAS (OpenBLAS or MKL), with no dependency beyond ctypes.

Measured here: OpenBLAS threads even tiny products, and on 2 shared cores that makes a 16x64 @
64x512 product several times slower than on one thread (on 2 idle cores, twice as fast:
``ops.matmul.ThreadChoice`` measures which). ``single_threaded`` lets kernels run a product on
one thread; ``set_num_threads`` is the user's knob (as ``torch.set_num_threads``). Where the
library cannot be found, everything degrades to a no-op.
"""

from __future__ import annotations

import ctypes
import threading

_SETTERS = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
    "MKL_Set_Num_Threads",
)
_GETTERS = (
    "scipy_openblas_get_num_threads64_",
    "scipy_openblas_get_num_threads",
    "openblas_get_num_threads64_",
    "openblas_get_num_threads",
    "MKL_Get_Max_Threads",
)
_LOCAL_SETTER = "openblas_set_num_threads_local"  # per calling thread, returns the old count
_lock = threading.Lock()
_probe_lock = threading.Lock()
_api = None  # (setter, getter, local setter) once probed; Nones when no BLAS could be found
# Whether the "local" setting is in fact one setting for every thread (probed): numpy 2.4's
# bundled OpenBLAS is built so. Then ``single_threaded`` blocks of several threads share it:
# the first to enter sets one thread, the last to leave restores the count (``_shared``: [blocks
# open, the count to restore]). Restoring per block there let a pool worker leaving last put
# back the one thread the calling thread had set: every later product of the process ran on one
# BLAS thread (measured: lazy steps of the `parallel` benchmark 6.5 -> 9.1 ms after a pool run).
_shared_local = False
_shared = [0, None]
_SHARED = object()  # (``single_threaded.previous`` of a block counted in ``_shared``)
_open = threading.local()  # .depth: this thread's open blocks, where the setting is per thread


def _loaded_blas_paths():
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:  # not Linux: nothing to probe
        return []
    paths = {line.split()[-1] for line in lines if "/" in line}
    return sorted(p for p in paths if "blas" in p.lower() or "mkl_rt" in p.lower())


def _probe():
    if _api is None:
        with _probe_lock:  # (once, by one thread: the locality probe sets counts for a moment)
            if _api is None:
                _find_api()
    return _api


def _find_api():
    """Sets ``_api`` from the BLAS numpy loaded (and ``_shared_local``)."""
    global _api
    import numpy  # noqa: F401  (makes sure numpy's BLAS is loaded before probing)

    found = (None, None, None)
    for path in _loaded_blas_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        setter = next((getattr(lib, n) for n in _SETTERS if hasattr(lib, n)), None)
        getter = next((getattr(lib, n) for n in _GETTERS if hasattr(lib, n)), None)
        if setter is not None and getter is not None:
            found = (setter, getter, getattr(lib, _LOCAL_SETTER, None))
            break
    if found[2] is not None:
        _probe_locality(found[2])
    _api = found


def _probe_locality(local):
    """Sets ``_shared_local``: whether a count one thread sets is what the others see."""
    global _shared_local
    mine = local(2)
    seen = []

    def other():
        previous = local(3)
        seen.append(previous)
        local(previous)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    _shared_local = seen == [2]
    local(mine)


def get_num_threads():
    """The BLAS thread count, or None when numpy's BLAS cannot be controlled."""
    getter = _probe()[1]
    return None if getter is None else int(getter())


def set_num_threads(count):
    """Sets the BLAS thread count for the process; returns False when it cannot be controlled."""
    setter = _probe()[0]
    if setter is None:
        return False
    with _lock:
        setter(int(count))
    return True


class single_threaded:
    """Context manager running the BLAS calls of the calling thread on one BLAS thread.

    Used by kernels around small products, where waking a second thread costs more than it saves.
    Needs OpenBLAS's per-thread setting (0.3.27 and later); elsewhere it changes nothing.
    """

    __slots__ = ("previous",)

    def __enter__(self):
        local = _probe()[2]
        if local is None:
            self.previous = None
        elif not _shared_local:
            self.previous = local(1)
            _open.depth = getattr(_open, "depth", 0) + 1
        else:
            with _lock:
                if not _shared[0]:
                    _shared[1] = local(1)
                _shared[0] += 1
            self.previous = _SHARED
        return self

    def __exit__(self, *exc):
        previous = self.previous
        if previous is _SHARED:
            with _lock:
                _shared[0] -= 1
                if not _shared[0]:
                    _probe()[2](_shared[1])
        elif previous is not None:
            _probe()[2](previous)
            _open.depth -= 1


def single_threaded_open():
    """Whether a ``single_threaded`` block is open on this thread (or, where the setting is one
    for the whole process, on any thread): its BLAS is meant to run on one thread."""
    if _shared_local:
        return _shared[0] > 0
    return getattr(_open, "depth", 0) > 0


class blas_threads:
    """Context manager setting the process's BLAS thread count for its duration.

    >>> import tape
    >>> with tape.blas_threads(1):
    ...     pass
    """

    def __init__(self, count):
        self.count = int(count)

    def __enter__(self):
        self.previous = get_num_threads()
        set_num_threads(self.count)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            set_num_threads(self.previous)
