"""The fused LSTM step's gradient as one compiled loop, for non-exact lazy plans.

numpy's ``lstm_cell_grad`` is ~20 passes over small arrays (the gates' derivatives, tanh of the
state, the products with the incoming gradients); at a language model's batch 16 and hidden 128
each pass is mostly its call. One loop walks a row's gates and state once, with ``vecmath``'s
tanh (which LLVM vectorises): on (16, 512) float32 gates 20 -> 6 us alone, and in the
benchmarks' lazy plans (profiled, alternated in one process) 45 -> 27 us an op in ``lstm_lm``'s
and 28 -> 16 in ``lstm``'s. Whole steps, alternated with and without it in one process (paired
medians of 20 rounds): ``lstm`` 0.91x and 0.93x, ``lstm_lm`` 0.96x and 1.00x.

The float operations are numpy's kernel's, in the same order, so the values differ from
numpy's only where ``vecmath``'s tanh rounds otherwise (within 1 ulp of the correctly rounded
value). So only a kernel that may differ from eager mode by rounding uses it:
``lstm_cell_grad`` with ``fast_exp``, which ``tape.passes.fast_kernels`` sets in lazy plans
unless ``exact``.

The forward step had a loop too (23 -> 12 us alone), but in the plans it was no faster than
numpy's passes: 24 us a call inside ``lstm``'s plan, plus its checks, against numpy's 31, and
``lstm`` steps took 0.96x with both loops against 0.91x with this one alone. So the forward
keeps numpy's passes.

float32 only: ``vecmath``'s float64 tanh is the C library's, one element at a time. Where the
loop does not apply (another dtype, other than 2-D, a read-only array, an absent output
gradient, numpy told to raise on floating-point errors) or is not compiled yet, ``backward``
returns None and the kernel runs numpy's passes. The loop compiles in the compile process once
the op has run 64 times, as fused kernels do (``compiled_loop``); a program never waits for a
compile.
"""

from __future__ import annotations

import numpy as np

from ops.fusion_backends import compiled_loop

BACKWARD = """\
def fused(gates, c, cout, g_hout, g_cout, gz, gc):
    hidden = c.shape[1]
    one = np.float32(1.0)
    for r in range(c.shape[0]):
        z = gates[r]
        d = gz[r]
        state = c[r]
        new = cout[r]
        gh = g_hout[r]
        gn = g_cout[r]
        gs = gc[r]
        for j in range(hidden):
            t = np.tanh(new[j])
            o = z[3 * hidden + j]
            d[3 * hidden + j] = (((one - o) * o) * gh[j]) * t
            gs[j] = (((one - t * t) * o) * gh[j]) + gn[j]
        for j in range(hidden):
            i = z[j]
            g = z[2 * hidden + j]
            s = gs[j]
            d[j] = (((one - i) * i) * g) * s
            d[2 * hidden + j] = ((one - g * g) * i) * s
        for j in range(hidden):
            f = z[hidden + j]
            s = gs[j]
            d[hidden + j] = (((one - f) * f) * state[j]) * s
            gs[j] = s * f
    return 0
"""

_FLOAT32 = np.dtype(np.float32)
ARGUMENTS = [compiled_loop.array(_FLOAT32, 2)] * 7  # (the loop's arrays, as numba types)
_LOOPS = {}  # "backward" -> compiled_loop.Loop


def loop():
    """The gradient's loop, made at its first use; None where loops cannot be had."""
    return compiled_loop.loop(_LOOPS, "backward", _make)


def _make(key):
    return compiled_loop.Loop(BACKWARD, ARGUMENTS, imports=True)


def backward(gates, c, cout, g_hout, g_cout):
    """``(Z@GRAD, C@GRAD, Bias@GRAD)`` of ``lstm_cell_grad``, or None where the loop does not
    apply (an absent output gradient among them) or is not compiled yet."""
    if g_hout is None or g_cout is None:
        return None
    # (a small batch's gates and states come F-ordered from ``x @ W.T``: ``ops.matmul.product``)
    gates, c, cout, g_hout, g_cout = map(_c_ordered, (gates, c, cout, g_hout, g_cout))
    if not _plain(gates, (c, cout, g_hout, g_cout)):
        return None
    if compiled_loop.numpy_raises():  # (numpy's passes raise where asked)
        return None
    found = loop()
    loops = None if found is None else found.ready()
    if loops is None:
        return None
    gz, gc = np.empty_like(gates), np.empty_like(c)
    loops(gates, c, cout, g_hout, g_cout, gz, gc)
    return gz, gc, gz.sum(axis=0)


def _c_ordered(array):
    """``array``, copied to C order where it is a 2-D float32 numpy array in another layout
    (another array is left for ``_plain`` to refuse, uncopied)."""
    if (
        array.__class__ is np.ndarray
        and array.ndim == 2
        and array.dtype == _FLOAT32
        and not array.flags.c_contiguous
    ):
        return np.ascontiguousarray(array)
    return array


def _plain(gates, states):
    """Whether ``gates`` is (rows, 4H) and each of ``states`` (rows, H), all writeable
    C-contiguous float32 numpy arrays: the arrays the loop was compiled for (another type
    would compile in the program)."""
    if gates.__class__ is not np.ndarray or gates.ndim != 2 or gates.shape[1] % 4:
        return False
    state = (gates.shape[0], gates.shape[1] // 4)
    for array, want in ((gates, gates.shape), *((a, state) for a in states)):
        if array.__class__ is not np.ndarray or array.dtype != _FLOAT32 or array.shape != want:
            return False
        flags = array.flags  # (made at each access: once)
        if not (flags.c_contiguous and flags.writeable):
            return False
    return True


__all__ = ["backward", "loop", "BACKWARD", "ARGUMENTS"]
