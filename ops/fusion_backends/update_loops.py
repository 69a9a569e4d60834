"""Optimizer updates (SGD, momentum, Adam and AdamW, Adagrad, RMSProp) as one compiled pass
each, bit for bit numpy's passes.

numpy walks a parameter's size once per ufunc: SGD's update is two passes, momentum's four,
Adam's thirteen, RMSProp's up to fifteen. One numba loop per update does the same arithmetic
per element, in the same order and precision (each constant in the parameter's dtype, as numpy
reads a Python float next to an array), with no fused multiply-add (numba compiles without
fast-math flags) and IEEE division and square root (numpy's error model: no check for zero), so
every value is numpy's bit for bit and eager mode may use it. Measured on 2**20 float32
elements: SGD 118 us against numpy's 193, momentum 247 against 356, Adam 466 against 1,390,
Adagrad 221 against 807, RMSProp 216 against 1,018.

The loops set no floating-point flags, so an overflow or a NaN they compute gives the same
value as numpy's but not its ``RuntimeWarning``; where numpy's error state asks to raise (or to
call or log a handler: ``np.seterr``, ``np.errstate``), numpy's passes run instead and raise.

The loops compile in the compile process (``compiled_loop``), in a process that has imported
numba already (a lazy plan's fused kernels moved there). Until one is loaded, in every other
process, and where the arrays are small, strided or not float32/float64, ``run`` returns None
and the kernel runs numpy's passes. So eager mode alone never imports numba for them.
"""

from __future__ import annotations

import re

import numpy as np

from ops.fusion_backends import compiled_loop

# Per update, the parameter size from which the loop wins: smaller ones keep numpy's passes, as
# the loop's call costs ~5-9 us. Measured on float32 (numpy -> loop): SGD 10.7 -> 15.9 us at
# 2**16 elements, 49 -> 40 at 2**18; momentum 23.5 -> 19.8 at 2**16; Adam 13.2 -> 9.2 at 2**12;
# Adagrad 6.8 -> 5.8 and RMSProp 8.8 -> 6.7 at 2**12 (every RMSProp form has its threshold).
MIN_ELEMENTS = {
    "sgd": 1 << 18,
    "momentum": 1 << 16,
    "nesterov": 1 << 16,
    "adam": 1 << 12,
    "adagrad": 1 << 12,
    "rmsprop": 1 << 12,
    "rmsprop_momentum": 1 << 12,
    "rmsprop_centered": 1 << 12,
    "rmsprop_centered_momentum": 1 << 12,
}

# Per update: its array inputs, its constants (a float array of the parameter's dtype) and its
# outputs, the first the new parameter; then the body of its loop over element ``i``. Every body
# reads ``grad[i]`` before it writes the new parameter, so that one may go into the gradient's
# buffer (``reuse_grad``).
UPDATES = {
    "sgd": (
        ("param", "grad"),
        ("rate",),
        ("out",),
        "out[i] = param[i] - rate * grad[i]",
    ),
    "momentum": (
        ("param", "grad", "velocity"),
        ("mu", "rate"),
        ("out", "velocity_out"),
        """\
v = velocity[i] * mu + grad[i]
velocity_out[i] = v
out[i] = param[i] - v * rate""",
    ),
    "nesterov": (
        ("param", "grad", "velocity"),
        ("mu", "rate"),
        ("out", "velocity_out"),
        """\
g = grad[i]
v = velocity[i] * mu + g
velocity_out[i] = v
out[i] = param[i] - (v * mu + g) * rate""",
    ),
    # (AdamW's decay first multiplies the parameter; Adam's decay is 1.0, which is exact)
    "adam": (
        ("param", "grad", "moment1", "moment2"),
        ("decay", "keep1", "beta2", "keep2", "correction", "epsilon", "step_size"),
        ("out", "moment1_out", "moment2_out"),
        """\
g = grad[i]
old = moment1[i]
m = (g - old) * keep1 + old
v = moment2[i] * beta2 + (g * g) * keep2
moment1_out[i] = m
moment2_out[i] = v
out[i] = param[i] * decay - (m / (np.sqrt(v) / correction + epsilon)) * step_size""",
    ),
    "adagrad": (
        ("param", "grad", "moment"),
        ("epsilon", "rate"),
        ("out", "moment_out"),
        """\
g = grad[i]
m = g * g + moment[i]
moment_out[i] = m
out[i] = param[i] - (g / (np.sqrt(m) + epsilon)) * rate""",
    ),
}


def _rmsprop(momentum, centered):
    """RMSProp's form with a momentum buffer and/or centered (a mean gradient): its entry of
    ``UPDATES``."""
    inputs = ("param", "grad", "mean_square") + ("moment",) * momentum + ("mean_grad",) * centered
    constants = ("decay", "keep", "epsilon", "rate") + ("momentum",) * momentum
    outputs = ("out", "mean_square_out") + ("moment_out",) * momentum
    outputs += ("mean_grad_out",) * centered
    lines = ["g = grad[i]", "s = mean_square[i] * decay + (g * g) * keep", "mean_square_out[i] = s"]
    root = "np.sqrt(s)"
    if centered:
        lines += ["old = mean_grad[i]", "a = old + (g - old) * keep", "mean_grad_out[i] = a"]
        root = "np.sqrt(s - a * a)"
    step = f"g / ({root} + epsilon)"
    if momentum:
        lines += [f"b = moment[i] * momentum + {step}", "moment_out[i] = b"]
        lines.append("out[i] = param[i] - b * rate")
    else:
        lines.append(f"out[i] = param[i] - ({step}) * rate")
    return inputs, constants, outputs, "\n".join(lines)


UPDATES.update(
    ("rmsprop" + "_centered" * centered + "_momentum" * momentum, _rmsprop(momentum, centered))
    for momentum in (False, True)
    for centered in (False, True)
)


def source(kind, in_place):
    """The loop of update ``kind``: its new parameter into an ``out`` array of its own, or into
    the gradient (``in_place``). Two loops, as LLVM vectorises the first only where ``out`` and
    ``grad`` do not overlap: written into ``grad``, SGD's ran its scalar fallback (273 us on
    1024x1024 float32 against 106)."""
    inputs, constants, outputs, body = UPDATES[kind]
    if in_place:
        outputs = outputs[1:]
        body = re.sub(r"^out\[i\] =", "grad[i] =", body, flags=re.M)
    lines = [f"def fused({', '.join((*inputs, 'constants', *outputs))}):"]
    lines += [f"    {name} = constants[{k}]" for k, name in enumerate(constants)]
    lines.append(f"    for i in range({inputs[0]}.shape[0]):")
    lines += [f"        {line}" for line in body.splitlines()]
    lines.append("    return 0")
    return "\n".join(lines) + "\n"


_LOOPS = {}  # (kind, dtype, in place) -> compiled_loop.Loop


def loop(kind, dtype, in_place):
    """The loop of update ``kind`` for ``dtype`` (see ``source``), made at its first use; None
    where loops cannot be had."""
    return compiled_loop.loop(_LOOPS, (kind, np.dtype(dtype).str, in_place), _make)


def _make(key):
    kind, dtype, in_place = key
    inputs, _, outputs, _ = UPDATES[kind]
    count = len(inputs) + 1 + len(outputs) - in_place
    vector = compiled_loop.array(np.dtype(dtype), 1)
    return compiled_loop.Loop(source(kind, in_place), [vector] * count, imports=False)


def run(kind, inputs, constants, in_place, outputs):
    """Update ``kind`` over ``inputs`` (the parameter first, then the gradient and the state
    ``UPDATES`` names), ``constants`` Python floats, into the arrays ``outputs()`` makes (the
    new parameter first: the gradient itself where ``in_place``), made only once the loop is
    sure to run; returns them. None where the loop does not apply or is not compiled yet:
    nothing is made or written then."""
    param = inputs[0]
    if param.size < MIN_ELEMENTS[kind] or not _plain(param, inputs):  # (the size first: cheap)
        return None
    if compiled_loop.numpy_raises():  # (numpy's passes raise where asked)
        return None
    found = loop(kind, param.dtype, in_place)
    loops = None if found is None else found.ready()
    if loops is None:
        return None
    made = outputs()
    if (made[0] is inputs[1]) is not in_place or not _plain(param, made):
        return None
    loops(
        *[a.reshape(-1) for a in inputs],
        np.array(constants, param.dtype),
        *[a.reshape(-1) for a in (made[1:] if in_place else made)],
    )
    return made


def _plain(param, arrays):
    """Whether every one of ``arrays`` is a writeable C-contiguous numpy array of ``param``'s
    shape and its float32 or float64 dtype: the arrays the loops were compiled for (another
    type would compile in the program)."""
    dtype, shape = param.dtype, param.shape
    if dtype.kind != "f" or dtype.itemsize not in (4, 8):
        return False
    for array in arrays:
        if (
            array.__class__ is not np.ndarray
            or array.dtype != dtype
            or array.shape != shape
            or not array.flags.c_contiguous
            or not array.flags.writeable
        ):
            return False
    return True


__all__ = ["run", "loop", "source", "UPDATES", "MIN_ELEMENTS"]
