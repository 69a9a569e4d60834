"""SGD's update ``Param - LearningRate * Grad`` as one compiled pass, bit for bit numpy's two.

numpy computes the update in two passes over the parameter's size (the scaled gradient, then
the difference). One numba loop does both per element, with the same two roundings (no fused
multiply-add: numba compiles without fast-math flags), so the result is numpy's bit for bit,
and eager mode may use it. On a 1024x1024 float32 parameter: 106 us against numpy's 151 (127
written into the gradient's buffer).

The loop compiles in the compile process (``compiled_loop``), in a process that has imported
numba already (a lazy plan's fused kernels moved there). Until it is loaded, in every other
process, and where the arrays are small, strided or not float32/float64, ``step`` returns None
and the ``sgd`` kernel runs numpy's passes. So eager mode alone never imports numba for it.
"""

from __future__ import annotations

import numpy as np

from ops.fusion_backends import compiled_loop

# Smaller parameters keep numpy's passes (a numba call's fixed cost is most of the gain there).
MIN_ELEMENTS = 1 << 16

# Into another buffer, and into the gradient's own (``reuse_grad``). Two loops, as LLVM
# vectorises the first only where ``out`` and ``grad`` do not overlap: written into ``grad`` it
# ran its scalar fallback, 273 us on 1024x1024 against 106.
SOURCES = {
    False: """\
def fused(param, grad, rate, out):
    lr = rate[0]
    for i in range(param.shape[0]):
        out[i] = param[i] - lr * grad[i]
    return 0
""",
    True: """\
def fused(param, grad, rate):
    lr = rate[0]
    for i in range(param.shape[0]):
        grad[i] = param[i] - lr * grad[i]
    return 0
""",
}

_LOOPS = {}  # (dtype, in place) -> compiled_loop.Loop


def loop(dtype, in_place):
    """The update loop of ``dtype`` into ``grad`` (``in_place``) or another buffer, made at its
    first use; None where loops cannot be had."""
    return compiled_loop.loop(_LOOPS, (dtype, in_place), _make)


def _make(key):
    dtype, in_place = key
    vector = compiled_loop.array(np.dtype(dtype), 1)
    return compiled_loop.Loop(SOURCES[in_place], [vector] * (3 if in_place else 4), imports=False)


def step(param, grad, rate, out):
    """``out = param - rate * grad`` in one pass (``rate`` a Python float), returning ``out``;
    or None where the loop does not apply or is not compiled yet (nothing written then).
    ``out`` may be ``grad`` itself."""
    dtype = param.dtype
    if (
        param.size < MIN_ELEMENTS  # (first: most parameters are small)
        or param.__class__ is not np.ndarray
        or grad.__class__ is not np.ndarray
        or out.__class__ is not np.ndarray
        or dtype.kind != "f"
        or dtype.itemsize not in (4, 8)
        or grad.dtype != dtype
        or out.dtype != dtype
        or grad.shape != param.shape
        or out.shape != param.shape
        or not (param.flags.c_contiguous and grad.flags.c_contiguous and out.flags.c_contiguous)
        or not (param.flags.writeable and grad.flags.writeable and out.flags.writeable)
    ):
        return None
    in_place = out is grad
    found = loop(dtype, in_place)
    loops = None if found is None else found.ready()
    if loops is None:
        return None
    rate = np.array([rate], dtype)
    if in_place:
        loops(param.reshape(-1), grad.reshape(-1), rate)
    else:
        loops(param.reshape(-1), grad.reshape(-1), rate, out.reshape(-1))
    return out


__all__ = ["step", "loop", "SOURCES", "MIN_ELEMENTS"]
