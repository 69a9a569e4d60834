"""The array module: numpy on the CPU, cupy on NVIDIA GPUs, chosen from the arrays themselves.

Kernels are written once against ``xp`` and serve both places. cupy is optional: when it is not
installed (or no device is present) everything runs on numpy and GPU requests fail clearly.

The 'gpu' module is one slot, filled with cupy at import when a device is usable.
``install_gpu_module`` puts another cupy-compatible module there: the test suite installs the
strict emulated device of ``tape.testing_device`` so that every kernel's GPU path runs on
machines without a GPU.
"""

from __future__ import annotations

import threading

import numpy as np

_NDARRAY = np.ndarray
_state = threading.local()


class _Gpu:
    """The installed GPU array module, its array type, and the module holding ``scatter_add``
    (cupyx for cupy; an emulation provides its own)."""

    __slots__ = ("module", "ndarray", "extras")

    def __init__(self, module, extras):
        self.module, self.ndarray, self.extras = module, module.ndarray, extras


def _detect_cupy():
    try:  # cupy is an extra; its absence is the normal case on CPU-only machines
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # ImportError, or cupy present without a usable device
        return None
    return _Gpu(cupy, None)


_gpu = _detect_cupy()


def install_gpu_module(module, extras=None):
    """Makes ``module`` the 'gpu' array module (None: no GPU); returns what was installed before,
    to pass back here when done.

    ``module`` must look like cupy to the library: ``ndarray`` (its array type), ``asarray``,
    ``asnumpy`` and numpy's functions and ufuncs; ``extras`` provides ``scatter_add`` (default:
    ``module`` itself). Arrays of the previous module keep working only with that module.

    >>> from tape.testing_device import EmulatedDevice
    >>> previous = install_gpu_module(EmulatedDevice())
    >>> gpu_available()
    True
    >>> _ = install_gpu_module(*previous)
    """
    global _gpu
    before = (None, None) if _gpu is None else (_gpu.module, _gpu.extras)
    _gpu = None if module is None else _Gpu(module, module if extras is None else extras)
    return before


def gpu_available() -> bool:
    return _gpu is not None


def array_module(array):
    """numpy for numpy arrays, the GPU module (cupy) for its arrays."""
    if type(array) is _NDARRAY or _gpu is None:
        return np
    return _gpu.module if isinstance(array, _gpu.ndarray) else np


def default_place() -> str:
    return getattr(_state, "place", "cpu")


def default_module():
    """The array module for ops with no array inputs (fills, random): the current place's."""
    return module_for(default_place())


def module_for(place: str):
    if place == "cpu":
        return np
    if place == "gpu":
        if _gpu is None:
            raise RuntimeError("place 'gpu' requested but cupy or a CUDA device is not available")
        return _gpu.module
    raise ValueError(f"unknown place {place!r}; valid: 'cpu', 'gpu'")


class device:
    """Context manager choosing where fills and random ops allocate: ``with device("gpu"): ...``."""

    def __init__(self, place):
        module_for(place)
        self.place = place

    def __enter__(self):
        self.previous = default_place()
        _state.place = self.place
        return self

    def __exit__(self, *exc):
        _state.place = self.previous


def _on_gpu(array):
    return _gpu is not None and isinstance(array, _gpu.ndarray)


def as_array(data, dtype=None):
    """An ndarray of ``data`` (numpy unless it already is a GPU array), as ``dtype`` if given."""
    if _on_gpu(data):
        return data if dtype is None else data.astype(dtype, copy=False)
    return np.asarray(data, dtype=dtype)


def ensure_array(value, xp):
    """Kernels on 0-d inputs may return numpy scalars; the tape always holds arrays."""
    return value if type(value) is _NDARRAY or xp is not np else np.asarray(value)


def to_numpy(array):
    if type(array) is _NDARRAY:
        return array
    if _on_gpu(array):
        return _gpu.module.asnumpy(array)
    return np.asarray(array)


def scatter_add(xp, target, index, values):
    """``target[index] += values`` with repeated indices adding up (numpy's ``add.at``); on a
    GPU, ``cupyx.scatter_add``, which cupy versions without ``ufunc.at`` need."""
    if xp is np:
        np.add.at(target, index, values)
        return
    extras = _gpu.extras
    if extras is None:
        import cupyx  # only reached with cupy arrays

        extras = _gpu.extras = cupyx
    extras.scatter_add(target, index, values)


def promote(*arrays):
    """The arrays in numpy's promotion of their dtypes (None passes), for kernels whose in-place
    arithmetic would otherwise keep the first one's; the same tuple when the dtypes agree."""
    dtype = None
    for array in arrays:
        if array is None:
            continue
        if dtype is None:
            dtype = array.dtype
        elif array.dtype != dtype:
            break
    else:
        return arrays
    common = np.result_type(*(a.dtype for a in arrays if a is not None))
    return tuple(None if a is None else a.astype(common, copy=False) for a in arrays)
