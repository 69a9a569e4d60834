"""Backends of ``fused_elementwise``: each turns an ``Expression`` into a callable.

Every backend module has ``compile(expression, xp) -> callable(*inputs) -> list of arrays``
(full outputs, then reductions). ``reference`` runs each step's registered kernel on whole arrays
(the oracle and the fallback); ``blocked`` runs the same kernels on cache-sized blocks (numpy, the
CPU default); ``numba_loops`` generates one compiled loop nest (optional extra ``fuse``);
``cupy_fuse`` generates one GPU kernel. This module holds what they share: the error a failing step
becomes, the step kernels, and the reductions.
"""

from __future__ import annotations

import math

import numpy as np

from tape.errors import ExecutionError, FluidError


def step_error(step, err):
    """The exception a user sees when ``step`` failed with ``err``: the op they wrote, its name
    and the line that recorded it (the library's own errors keep their type, as unfused)."""
    op_type, name, location = step.origin
    if isinstance(err, FluidError):
        return err.with_context(name=name, location=location, op=op_type)
    return ExecutionError(
        op_type, f"kernel failed: {type(err).__name__}: {err}", name=name, location=location
    )


def step_kernels(expression, xp):
    """(kernel, attrs) per step: the kernel the engine would run with ``xp`` (its 'gpu' kernel
    off the CPU, as ``tape.passes.plan.kernel_for``), and the attributes as a dict."""
    from ops.registry import REGISTRY

    found = []
    for step in expression.steps:
        defn = REGISTRY[step.op]
        kernel = defn.kernel if xp is np else defn.kernels.get("gpu", defn.kernels["any"])
        found.append((kernel, dict(step.attrs)))
    return found


def as_array(value, xp):
    """Kernels on 0-d inputs may return numpy scalars; the engine always holds arrays."""
    return value if xp is not np or type(value) is np.ndarray else np.asarray(value)


def reduce(xp, value, reduction, shape, dtype):
    """``reduction`` of a step's value, as the unfused ``reduce_sum``/``reduce_mean`` and
    ``sum_to_shape`` kernels compute it on the value broadcast to ``shape``."""
    full = value if tuple(value.shape) == tuple(shape) else xp.broadcast_to(value, shape)
    axes = tuple(reduction.axes)
    if reduction.mean:
        out = full.mean(axis=axes, keepdims=reduction.keepdims)
    else:
        out = full.sum(axis=axes, keepdims=reduction.keepdims)
    out = as_array(out, xp).reshape(reduction.shape)
    return out if out.dtype == dtype else out.astype(dtype)


def distinct(outs, steps):
    """The full outputs with a copy wherever a step is listed twice (each output Variable owns
    its buffer)."""
    seen = set()
    for i, j in enumerate(steps):
        if j in seen:
            outs[i] = outs[i].copy()
        seen.add(j)
    return outs


def reduced_count(reduction, shape):
    """How many elements each reduced element sums."""
    return math.prod(shape[a] for a in reduction.axes)


def with_located_errors(fast, reference):
    """``fast`` whose failures are re-run through ``reference``, which raises the error of the
    first failing step exactly as unfused execution would; if the reference succeeds (a transient
    failure), the original exception propagates."""

    def run(*inputs):
        try:
            return fast(*inputs)
        except Exception as err:
            reference(*inputs)
            raise err

    run.backend = getattr(fast, "backend", None)
    return run


__all__ = [
    "step_error",
    "step_kernels",
    "reduce",
    "reduced_count",
    "distinct",
    "with_located_errors",
]
