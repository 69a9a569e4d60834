"""Softmax along the rows of a 2-D array as one compiled loop per row, for non-exact lazy plans.

numpy's softmax of a language model's logits is five passes over the array: the row max, the
subtraction, exp, the row sum and the division. On the ``lstm_lm`` benchmark's 320x2000 float32
logits they take 47, 106, 212, 92 and 97 us, and walking them in cache-sized blocks of rows
gains nothing (the ufuncs, not memory, set the pace). Here numpy's row max (already a
vector loop) is followed by one numba loop per row: ``vecmath``'s exp, a row sum in vector
lanes, and the division while the row is in the L1 cache: the whole op 231 us against 559 on
those logits (~310 in the step's plan), 3-5% of a lazy ``lstm_lm`` step.

The values differ from numpy's by rounding: ``vecmath.exp`` is within 1 ulp of the correctly
rounded value where numpy's float32 exp is within 2, and the lanes add in another order than
numpy's pairwise sum. So only a kernel that may differ from eager mode by rounding uses this:
``softmax_with_cross_entropy`` with ``fast_exp`` (which ``tape.passes.fast_kernels`` sets in
lazy plans unless ``exact``). Special values behave as numpy's kernel's: a row holding NaN, or
+inf, or only -inf gives NaN; a row whose largest value is finite gives exp(-inf) = 0.

The loop compiles in ``fusion_backends.compile_process``, as fused kernels do, and is loaded
from the kernel cache once compiled (milliseconds); until then, and wherever numba, the
compile process or the kernel cache is missing, ``rows`` returns None and the caller runs
numpy's passes. A program therefore never waits for a compile, and the first steps of a
process run numpy's kernel. ``ops.fused.unsettled`` counts a row kernel that may still move, so
a benchmark's warm-up waits for it as for fused kernels.
"""

from __future__ import annotations

import time

import numpy as np

from ops.fusion_backends import compile_process, kernel_cache, numba_loops

# Smaller arrays keep numpy's passes: the gain is per element, and below this many elements a
# numba call's fixed cost (~2 us) and the Python around it are most of it.
MIN_ELEMENTS = 1 << 15

_SOURCE = """\
def fused(x, shift, prob, total):
    for i in range(x.shape[0]):
        top = shift[i, 0]
        acc = np.{dtype}(0.0)
        for j in range(x.shape[1]):
            e = np.exp(x[i, j] - top)
            prob[i, j] = e
            acc = radd(acc, e)
        total[i, 0] = acc
        for j in range(x.shape[1]):
            prob[i, j] = prob[i, j] / acc
    return 0
"""


def source(dtype):
    """The generated module source of the row kernel for ``dtype`` (float32 or float64)."""
    return _SOURCE.format(dtype=np.dtype(dtype).name)


class _Kernel:
    """The row kernel of one dtype: asked of the compile process at its first use, then loaded
    once its machine code is on disk. ``spent``/``last`` are what ``ops.fused.unsettled`` reads
    (``spent`` None: it will not move any more)."""

    __slots__ = ("source", "dtype", "loops", "key", "spent", "last", "__weakref__")

    def __init__(self, dtype):
        self.source, self.dtype = source(dtype), np.dtype(dtype)
        self.loops, self.key, self.spent, self.last = None, None, 0.0, 0.0

    def ready(self):
        """The compiled loops, or None while they are not (yet) there."""
        if self.loops is not None or self.spent is None:
            return self.loops
        self.last = time.perf_counter()
        if kernel_cache.compiled_before(self.source, True):
            return self._load()
        if self.key is None:
            self._submit()
        elif compile_process.state(self.key) == compile_process.READY:
            return self._load()
        elif compile_process.state(self.key) != compile_process.PENDING:
            self.spent = None  # (the compile failed: numpy for good)
        return None

    def _submit(self):
        self.key = kernel_cache.key(self.source, True)
        array = [self.dtype.str, 2, "C", False]  # (as numba types the arrays ``rows`` passes)
        request = {"source": self.source, "vectorised": True, "parallel": False}
        compile_process.submit(self.key, dict(request, arguments=[array] * 4))

    def _load(self):
        self.spent = None
        try:
            fused, cached = kernel_cache.function(
                self.source, True, numba_loops.kernel_globals(True)
            )
            if cached:
                self.loops = numba_loops._jit(fused, parallel=False, cache=True)
        except ImportError:  # (numba installed but broken: numpy's passes stay)
            self.loops = None
        return self.loops


_KERNELS = {}


def usable():
    """Whether row kernels can be had at all: numba installed, a compile process and a kernel
    cache to hand the machine code over, and fused kernels allowed on numba."""
    from ops import fused

    return (
        fused.current_backend() in ("auto", "numba")
        and numba_loops.available()
        and compile_process.enabled()
    )


def rows(x):
    """``(prob, shift, total)``: the softmax of ``x`` along its last axis, its row max and its
    row sums of exp (``shift`` and ``total`` with a size-1 last axis), or None where the row
    kernel does not apply or is not compiled yet (see the module docstring)."""
    if (
        x.__class__ is not np.ndarray
        or x.ndim != 2
        or x.dtype.kind != "f"
        or x.dtype.itemsize not in (4, 8)
        or x.size < MIN_ELEMENTS
        or not x.flags.c_contiguous
        or not x.flags.writeable  # (the loop is compiled for writeable arrays only)
    ):
        return None
    kernel = _KERNELS.get(x.dtype)
    if kernel is None:
        if not usable():
            return None
        from ops import fused

        kernel = _KERNELS[x.dtype] = _Kernel(x.dtype)
        fused._ADAPTIVE.add(kernel)
    loops = kernel.ready()
    if loops is None:
        return None
    from ops import buffers

    shift = x.max(axis=1, keepdims=True)
    prob = buffers.empty(np, x.shape, x.dtype)
    total = np.empty_like(shift)
    loops(x, shift, prob, total)
    return prob, shift, total


__all__ = ["rows", "source", "usable", "MIN_ELEMENTS"]
