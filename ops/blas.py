"""BLAS thread control for numpy's BLAS (OpenBLAS or MKL), with no dependency beyond ctypes.

Measured here: OpenBLAS threads even tiny products, and on 2 shared cores that makes a 16x64 @
64x512 product several times slower than on one thread. ``single_threaded_below`` lets kernels
run small products on one thread; ``set_num_threads`` is the user's knob (as
``torch.set_num_threads``). Where the library cannot be found, everything degrades to a no-op.
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
_api = None  # (setter, getter, local setter) once probed; Nones when no BLAS could be found


def _loaded_blas_paths():
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:  # not Linux: nothing to probe
        return []
    paths = {line.split()[-1] for line in lines if "/" in line}
    return sorted(p for p in paths if "blas" in p.lower() or "mkl_rt" in p.lower())


def _probe():
    global _api
    if _api is None:
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
        _api = found
    return _api


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
        self.previous = None if local is None else local(1)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            _probe()[2](self.previous)


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
