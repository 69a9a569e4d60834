"""The array module: numpy on the CPU, cupy on NVIDIA GPUs, chosen from the arrays themselves.

Kernels are written once against ``xp`` and serve both places. cupy is optional: when it is not
installed (or no device is present) everything runs on numpy and GPU requests fail clearly.
"""

from __future__ import annotations

import threading

import numpy as np

try:  # cupy is an extra; its absence is the normal case on CPU-only machines
    import cupy as _cupy

    _cupy.cuda.runtime.getDeviceCount()
except Exception:  # ImportError, or cupy present without a usable device
    _cupy = None

_NDARRAY = np.ndarray
_state = threading.local()


def gpu_available() -> bool:
    return _cupy is not None


def array_module(array):
    """numpy for numpy arrays, cupy for cupy arrays."""
    if type(array) is _NDARRAY or _cupy is None:
        return np
    return _cupy if isinstance(array, _cupy.ndarray) else np


def default_place() -> str:
    return getattr(_state, "place", "cpu")


def default_module():
    """The array module for ops with no array inputs (fills, random): the current place's."""
    return module_for(default_place())


def module_for(place: str):
    if place == "cpu":
        return np
    if place == "gpu":
        if _cupy is None:
            raise RuntimeError("place 'gpu' requested but cupy or a CUDA device is not available")
        return _cupy
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


def as_array(data, dtype=None):
    """An ndarray of ``data`` (numpy unless it already is a cupy array), as ``dtype`` if given."""
    if _cupy is not None and isinstance(data, _cupy.ndarray):
        return data if dtype is None else data.astype(dtype, copy=False)
    return np.asarray(data, dtype=dtype)


def ensure_array(value, xp):
    """Kernels on 0-d inputs may return numpy scalars; the tape always holds arrays."""
    return value if type(value) is _NDARRAY or xp is not np else np.asarray(value)


def to_numpy(array):
    if type(array) is _NDARRAY:
        return array
    if _cupy is not None and isinstance(array, _cupy.ndarray):
        return _cupy.asnumpy(array)
    return np.asarray(array)
