"""DLPack exchange: a Variable's buffer leaves without a copy (``Variable.__dlpack__``) and
another library's array becomes a Variable without a copy (``from_dlpack``).

What the libraries installed here do with a read-only buffer (numpy 2.4, torch 2.13): numpy
exports a read-only array only through versioned DLPack (1.0, which carries a read-only flag)
and refuses legacy (0.x) requests; numpy's ``from_dlpack`` honours the flag (the array it makes
is read-only, and cannot be made writable); torch asks for DLPack 1.0 but ignores the flag and
hands out a writable tensor on the same memory. So a Variable exports its buffer read-only to
consumers that speak DLPack 1.0 (numpy then cannot write it) and as it is to legacy ones, which
cannot be told; and since a consumer may write anyway (torch), every shared buffer -- exported,
or imported by ``from_dlpack`` -- is listed in ``tape.guard.SHARED``: the guard checksums it when
an op that reads it is recorded and before backward, and a buffer saved for backward and then
written through the other library raises ``MutationError`` like any mutation after recording.

A shared buffer stays shared until the Variable gets a new one: ``set_value`` and optimizer
updates give it a new buffer (fluidtape never writes in place), which the other library does
not see. The checksum is CRC-32, about 2 ms per 8 MB here, paid per recorded op that reads a
shared buffer and once per backward; Variables that were never shared cost nothing.

>>> import numpy as np, tape
>>> x = tape.Variable(np.arange(3.0, dtype=np.float32))
>>> view = np.from_dlpack(x)  # numpy sees the same memory, read-only
>>> (view.flags.writeable, np.shares_memory(view, x.value()))
(False, True)
>>> y = tape.from_dlpack(np.ones(2, np.float32))
>>> y.numpy()
array([1., 1.], dtype=float32)
"""

from __future__ import annotations

import os
import sys

import numpy as np

from ops.xp import gpu_available
from tape import guard
from tape.errors import DTypeError, InputError, user_location
from tape.variable import Variable, read_only

_CPU, _CUDA, _CUDA_HOST, _CUDA_MANAGED = 1, 2, 3, 13  # DLPack device types


def export(var, stream=None, max_version=None, dl_device=None, copy=None):
    """The capsule ``var.__dlpack__(...)`` returns: its buffer, read-only where the consumer can
    be told (DLPack >= 1.0), listed as shared unless the consumer asked for a copy."""
    array = var._array()
    versioned = max_version is not None and tuple(max_version) >= (1, 0)
    if versioned:
        array = read_only(array)
    kwargs = {"stream": stream, "dl_device": dl_device, "copy": copy}
    kwargs = {key: value for key, value in kwargs.items() if value is not None}
    if max_version is not None:
        kwargs["max_version"] = max_version
    try:
        capsule = array.__dlpack__(**kwargs)
    except BufferError as err:
        raise BufferError(
            f"variable '{var.name}' cannot be exported through DLPack: {err}"
            " (a consumer that speaks DLPack 1.0, e.g. numpy >= 2.1 or torch >= 2.5, can take"
            " read-only buffers; or export a copy: copy=True)"
        ) from None
    if copy is not True:
        guard.share(var, _caller())
    return capsule


_CONSUMERS = frozenset({"torch", "numpy", "cupy", "cupyx", "jax", "jaxlib"})


def _caller():
    """The user's line that asked for the export: the first frame outside fluidtape and the
    consuming library (``torch.from_dlpack`` is Python code calling ``__dlpack__``)."""
    frame = sys._getframe(2)
    while frame is not None:
        package = str(frame.f_globals.get("__name__", "")).partition(".")[0]
        if package not in _CONSUMERS and package not in ("tape", "ops", "layers", "optim"):
            return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def device(var):
    """``var.__dlpack_device__()``: (DLPack device type, device id) of its buffer."""
    return var._array().__dlpack_device__()


def from_dlpack(obj, requires_grad=False, name=None):
    """A leaf Variable on the memory of ``obj`` (a numpy, torch, cupy or JAX array, or anything
    with ``__dlpack__``), without a copy; the buffer is listed as shared (see the module).

    Args:
        obj: the array to wrap; CPU memory becomes a numpy buffer, CUDA memory a cupy one.
        requires_grad: whether backward computes the Variable's gradient (float dtypes only).
        name: the Variable's name.

    >>> import numpy as np, tape
    >>> data = np.zeros(3, np.float32)
    >>> x = tape.from_dlpack(data)
    >>> data[0] = 5.0  # the same memory
    >>> x.numpy()
    array([5., 0., 0.], dtype=float32)
    """
    if isinstance(obj, Variable):  # fluidtape never writes a buffer: sharing it is safe
        value = obj._array()
        return _leaf(value, requires_grad, name)
    if not hasattr(obj, "__dlpack__") or not hasattr(obj, "__dlpack_device__"):
        raise InputError(
            "from_dlpack",
            "the object does not support DLPack",
            expected="an object with __dlpack__ and __dlpack_device__",
            actual=type(obj).__name__,
            location=user_location(),
        )
    value = _import(obj)
    var = _leaf(value, requires_grad, name)
    guard.share(var, _caller())
    return var


def _import(obj):
    kind, _ = obj.__dlpack_device__()
    try:
        if kind in (_CPU, _CUDA_HOST):
            value = np.from_dlpack(obj)
        elif kind in (_CUDA, _CUDA_MANAGED) and gpu_available():
            import cupy

            value = cupy.from_dlpack(obj)
        else:
            raise InputError(
                "from_dlpack",
                "the array lives on a device fluidtape cannot use",
                expected="CPU memory, or CUDA memory with cupy installed",
                actual=f"DLPack device type {kind}",
                location=user_location(),
            )
    except (BufferError, TypeError, RuntimeError) as err:
        raise DTypeError(
            "from_dlpack",
            "the array cannot be imported through DLPack",
            actual=f"{type(obj).__name__}: {err}",
            hint="a tensor that requires grad needs .detach(); bfloat16 has no numpy dtype",
            location=user_location(),
        ) from None
    if value.dtype.kind not in "biufc":
        raise DTypeError("from_dlpack", "the array is not numeric", actual=str(value.dtype))
    return value


def _leaf(value, requires_grad, name):
    if requires_grad and value.dtype.kind not in "fc":
        raise InputError(
            "from_dlpack",
            "a Variable that requires a gradient needs a floating-point dtype",
            actual=str(value.dtype),
            location=user_location(),
        )
    var = Variable._make(value, value.shape, value.dtype, bool(requires_grad))
    var._leaf, var.name = True, name
    return var


__all__ = ["from_dlpack", "export", "device"]
