"""Reused buffers for large kernel outputs and temporaries on the CPU.

A fresh large numpy array pays for its memory again: glibc returns freed large blocks to the
system and the next array of that size takes a page fault per 4 KiB page as it is first written.
Measured on the ``cnn`` workload (batch 64, ~50 MB of activations, columns and gradients made
and dropped per step), one implementation per process: page faults were half of a training
step, for numpy as for fluidtape (eager fluidtape 19-21 ms a step before this pool, 11-12 ms
with it; numpy 17-22). cupy's memory pool spares the GPU this; this module does the same for the
kernels that make the largest arrays (convolutions, pooling, binary arithmetic, negation, relu,
tanh, sigmoid and their gradients, softmax cross-entropy, optimizer updates, fused kernels,
large concatenations):
``empty`` hands out an array of at least ``MIN_BYTES`` that no one uses any more, of the same
shape and dtype, before it allocates a new one.

An array is free when nothing but the pool references it: every view of an array holds a
reference to it (numpy points each view at the array owning the memory), and so does every
consumer of its buffer (memoryviews, DLPack capsules, torch.from_numpy), so a reference count at
the pool's own level means no Variable, no user and no view can read or write it. The pool holds
at most ``LIMIT_BYTES`` (arrays in use included): beyond that it first drops its free arrays and
then allocates outside the pool. ``release()`` drops the free arrays now; ``set_limit(0)``
turns the pool off. Arrays under ``MIN_BYTES`` (numpy's per-call cost dominates there, and
glibc reuses small blocks anyway) and other array modules (cupy has its own pool) are never
pooled.

>>> import numpy as np
>>> a = empty(np, (512, 256), np.float32)
>>> address = a.ctypes.data
>>> del a  # (no reference left: free for the next array of this shape and dtype)
>>> empty(np, (512, 256), np.float32).ctypes.data == address
True
"""

from __future__ import annotations

import math
import os
import sys
import threading

import numpy as np

from ops.xp import array_module

MIN_BYTES = 1 << 18  # 256 KiB: 64 pages
LIMIT_BYTES = 1 << 30
# Free arrays of one shape and dtype kept when one is taken: more go back to the allocator, so
# that arrays a step no longer uses (activations read by the backward already) do not hold
# memory the rest of the step could use. A step that frees and makes arrays of one shape in
# turn keeps reusing them. Six, not two: the eager ``chain`` step's backward frees its forward's
# 16 MiB arrays at once, and with two kept its next forward made and faulted in four again
# (~5 ms of its ~30); bench_memory's peaks measured the same with 2, 3, 4 and 6.
KEEP_FREE = 6

_pool = {}  # (shape, dtype) -> [arrays]
_lock = threading.Lock()
_held = [0]  # bytes of every pooled array
_over = [0]  # allocations that found the pool full
# While the pool is full, one allocation in SWEEP_EVERY looks for free arrays to drop.
SWEEP_EVERY = 16


def _new_lock():
    """A forked child gets a lock of its own (another thread of the parent may have held it)."""
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock)


def _free_indices(arrays, free, count=sys.getrefcount):
    """The indices of the arrays in ``arrays`` nothing else references (``free``: the reference
    count such an array shows here)."""
    return [i for i in range(len(arrays)) if count(arrays[i]) == free]


def _calibrate():
    """The reference count ``_free_indices`` sees for an array only its list holds (measured, not
    assumed: the interpreter's own references differ between Python versions)."""
    probe = [np.empty(0)]
    for free in range(1, 8):
        if _free_indices(probe, free):
            return free
    raise RuntimeError("ops.buffers: could not calibrate reference counts")


_FREE = _calibrate()


def empty(xp, shape, dtype):
    """An uninitialised array of ``shape`` and ``dtype`` from module ``xp``: a reused one where
    the pool has a free one (large numpy arrays only), else a new one."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if xp is not np or nbytes < MIN_BYTES or not LIMIT_BYTES:
        return xp.empty(shape, dtype)
    key = (tuple(shape), dtype)
    with _lock:
        arrays = _pool.get(key)
        if arrays is not None:
            free = _free_indices(arrays, _FREE)
            if free:
                # The free array handed out last (the list runs in hand-out order) is likely the
                # one freed last, as the allocator would reuse it: still in the cache.
                array = arrays.pop(free[-1])
                for i in reversed(free[: -1 - KEEP_FREE]):
                    _held[0] -= nbytes
                    del arrays[i]
                arrays.append(array)
                return array
        if _held[0] + nbytes > LIMIT_BYTES:
            _over[0] += 1
            if _over[0] % SWEEP_EVERY == 1:  # (a sweep walks every pooled array: not each time)
                _drop_free()
            if _held[0] + nbytes > LIMIT_BYTES:
                return np.empty(shape, dtype)
        array = np.empty(shape, dtype)
        _pool.setdefault(key, []).append(array)
        _held[0] += nbytes
        return array


def zeros(xp, shape, dtype):
    """``empty``, filled with zeros."""
    array = empty(xp, shape, dtype)
    array.fill(0)
    return array


def like(x):
    """``empty`` of ``x``'s shape and dtype (``x`` a numpy or cupy array)."""
    return empty(np if x.__class__ is np.ndarray else array_module(x), x.shape, x.dtype)


def binary_out(x, y):
    """A pooled output for a ufunc of numpy arrays ``x`` and ``y`` whose result has ``x``'s
    shape and dtype (``y`` broadcasts into ``x``, same float dtype), else None: numpy then
    allocates the result itself."""
    if (
        x.__class__ is not np.ndarray
        or x.nbytes < MIN_BYTES
        or x.dtype.kind != "f"
        or getattr(y, "dtype", None) != x.dtype
        or y.ndim > x.ndim
    ):
        return None
    lead = x.ndim - y.ndim
    if any(b != 1 and b != a for a, b in zip(x.shape[lead:], y.shape)):
        return None
    return empty(np, x.shape, x.dtype)


def _drop_free():
    """Forgets every free array (the lock held)."""
    for key, arrays in list(_pool.items()):
        kept = []
        for _ in range(len(arrays)):
            array = arrays.pop()
            if sys.getrefcount(array) > 2:  # (``array`` and the argument: else someone's)
                kept.append(array)
            else:
                _held[0] -= array.nbytes
        if kept:
            arrays.extend(kept)
        else:
            del _pool[key]


def release():
    """Drops the pool's free arrays (their memory goes back to the allocator)."""
    with _lock:
        _drop_free()


def set_limit(nbytes):
    """Sets the most bytes the pool holds (0: no pooling from now on); returns the old limit."""
    global LIMIT_BYTES
    with _lock:
        old, LIMIT_BYTES = LIMIT_BYTES, int(nbytes)
        _drop_free()
    return old


def held_bytes():
    """Bytes of the arrays the pool holds, free or in use."""
    return _held[0]


__all__ = ["empty", "zeros", "like", "binary_out", "release", "set_limit", "held_bytes"]
