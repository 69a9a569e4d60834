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

The loop compiles in the compile process (``compiled_loop``) once the op has run 64 times, as a
fused kernel does (at once where numba is imported already). Until it is loaded, wherever
numba, the compile process or the kernel cache is missing, and where numpy's error state asks
to raise on floating-point errors (the loop sets no flags), ``rows`` returns None and the
caller runs numpy's passes. A program never waits for a compile.
"""

from __future__ import annotations

import numpy as np

from ops import buffers
from ops.fusion_backends import compiled_loop

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


_LOOPS = {}  # dtype -> compiled_loop.Loop


def loop(dtype):
    """The row loop of ``dtype`` (made at its first use), or None where loops cannot be had."""
    return compiled_loop.loop(_LOOPS, dtype, _make)


def _make(dtype):
    argument = compiled_loop.array(np.dtype(dtype), 2)
    return compiled_loop.Loop(source(dtype), [argument] * 4, imports=True)


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
        or compiled_loop.numpy_raises()  # (numpy's passes raise where asked; the loop cannot)
    ):
        return None
    found = loop(x.dtype)
    loops = None if found is None else found.ready()
    if loops is None:
        return None
    shift = x.max(axis=1, keepdims=True)
    prob = buffers.empty(np, x.shape, x.dtype)
    total = np.empty_like(shift)
    loops(x, shift, prob, total)
    return prob, shift, total


__all__ = ["rows", "loop", "source", "MIN_ELEMENTS"]
