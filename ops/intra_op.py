"""Intra-op threads: a kernel over a very large array split into row chunks run on several threads.

numpy runs each ufunc on one thread; PyTorch splits a large elementwise op over its intra-op
threads. Measured here (2 cores, 4M float32): tanh 0.78 -> 0.45 ms on two threads, exp 1.44 ->
0.80, a product 0.51 -> 0.32 (numpy releases the GIL inside its loops). Handing a chunk to
another thread costs ~50 us, so only arrays of ``MIN_ELEMENTS`` or more are split (at 1M
elements tanh gained 14% and a negation lost 20%).

Results are bit for bit those of one call: every element is computed by the same loop on the
same operands, and chunks start on multiples of ``ALIGN`` elements, so numpy's vector loops
meet the same lanes and the same tail as in one call; and each chunk runs under the caller's
numpy error state, so an overflow raises or warns as in one call. Threads: as many as the
process's BLAS threads (``tape.set_num_threads``); none while the calling thread is inside
``ops.blas.single_threaded`` (a lazy plan on its own thread pool) or is not the main thread
(whose other threads would share the cores).
"""

from __future__ import annotations

import contextvars
import math
import threading

import numpy as np

from ops import thread_pools

MIN_ELEMENTS = 1 << 21
ALIGN = 64
BLOCK_BYTES = 1 << 18  # a block of each operand a multi-pass kernel walks (L2: 1-2 MiB a core)


def fan_out(out):
    """How many threads a kernel writing ``out`` runs on (1: not split)."""
    if (
        out.__class__ is not np.ndarray
        or out.size < MIN_ELEMENTS
        or out.ndim == 0
        or out.shape[0] < 2
        or not out.flags.c_contiguous
        or threading.current_thread() is not threading.main_thread()
    ):
        return 1
    from ops import blas

    if blas.single_threaded_open():
        return 1
    count = blas.get_num_threads() or 1
    return max(1, min(count, out.shape[0]))


def run(fn, out, *arrays, passes=1):
    """``fn(out_part, *parts)`` over row chunks of ``out``; returns ``out``. An array in
    ``arrays`` with ``out``'s rows is cut like it; anything else (a broadcast row, a scalar) is
    passed whole to every chunk.

    ``passes``: how many times ``fn`` walks its operands (a kernel of several ufuncs). With more
    than one, each thread's chunk is walked in blocks of about ``BLOCK_BYTES`` per operand, so
    the later ufuncs read what the earlier ones wrote from the core's cache instead of memory:
    unblocked, two threads of a 5-ufunc sigmoid on 4M float32 ran no faster than one (both
    waited on memory); blocked, 4.3 -> 2.7 ms."""
    count = fan_out(out)
    rows = out.shape[0] if out.ndim else 1
    if passes > 1 and out.nbytes > BLOCK_BYTES and out.ndim and rows > 1:
        fn = _blocked(fn, out, arrays)
    if count < 2:
        fn(out, *arrays)
        return out
    bounds = _bounds(out, count)
    if len(bounds) < 2:
        fn(out, *arrays)
        return out

    def chunk(lo, hi):
        parts = [
            a[lo:hi] if getattr(a, "ndim", 0) == out.ndim and a.shape[0] == rows else a
            for a in arrays
        ]
        fn(out[lo:hi], *parts)

    pool = thread_pools.pool("intra-op", len(bounds) - 1)
    # Each chunk runs in a copy of the caller's context: numpy keeps its error state
    # (np.errstate, np.seterr) there, so a chunk raises or warns where one call would.
    futures = [pool.submit(contextvars.copy_context().run, chunk, lo, hi) for lo, hi in bounds[1:]]
    try:
        chunk(*bounds[0])
    finally:
        errors = [f.exception() for f in futures]  # (waits for every chunk)
    for error in errors:
        if error is not None:
            raise error
    return out


def _blocked(fn, out, arrays):
    """``fn`` walking its row range in blocks of about ``BLOCK_BYTES`` of ``out`` that start on
    multiples of ``ALIGN`` elements (bit for bit one call, as chunks are)."""
    rows = out.shape[0]
    row = out.size // rows
    unit = ALIGN // math.gcd(row, ALIGN)
    step = max(unit, BLOCK_BYTES // max(1, row * out.itemsize) // unit * unit)
    cut = [getattr(a, "ndim", 0) == out.ndim and a.shape[0] == rows for a in arrays]

    def walk(part, *parts):
        for lo in range(0, part.shape[0], step):
            hi = lo + step
            fn(part[lo:hi], *[p[lo:hi] if c else p for p, c in zip(parts, cut)])

    return walk


def ufunc(function, out, *args):
    """``function(*args, out=out)`` (a numpy ufunc) run as ``run`` cuts it; returns ``out``."""
    return run(lambda part, *parts: function(*parts, out=part), out, *args)


def _bounds(out, count):
    """Row ranges of about equal size whose starts fall on multiples of ALIGN elements."""
    rows = out.shape[0]
    row = out.size // rows
    unit = ALIGN // math.gcd(row, ALIGN)
    step = -(-rows // count)
    step = -(-step // unit) * unit
    return [(lo, min(lo + step, rows)) for lo in range(0, rows, step)]


__all__ = ["run", "ufunc", "fan_out", "MIN_ELEMENTS", "ALIGN"]
