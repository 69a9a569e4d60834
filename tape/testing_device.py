"""A strict emulated GPU: a cupy-like array module over numpy, so GPU paths run without a GPU.

No machine here has a CUDA device, so without it the cupy path of every kernel would be written but
never run. ``EmulatedDevice`` is an array module in cupy's image whose arrays (``DeviceArray``)
are a distinct type wrapping a numpy buffer, and which is at least as strict as cupy:

- ``np.asarray(device_array)`` raises TypeError (as cupy does); so does handing a device array
  to any numpy function or ufunc (cupy would dispatch some of them: a kernel must use ``xp``);
- mixing a host numpy array into a device operation raises TypeError (as cupy does);
- transfers are explicit and counted: ``asarray``/``array`` of host arrays (to the device),
  ``asnumpy``/``.get()``/``.tolist()`` (to the host), and scalar reads (``float(a)``,
  ``a.item()``, ``bool(a)``), which synchronise a real device;
- reductions and indexing return 0-d device arrays, never numpy scalars (as cupy).

Install it as the 'gpu' module with ``installed(device)`` (``ops.xp.install_gpu_module``
underneath); ``check_on_device`` runs an op case (``tape.testing.OpCase``) on it and compares
with the CPU, as the registry sweep does for every case.

>>> import numpy as np, ops, tape
>>> device = EmulatedDevice()
>>> with installed(device):
...     x = tape.Variable(device.asarray(np.array([0.0, 1.0])))
...     y = ops.exp(x)
...     type(y.value()).__name__, device.asnumpy(y.value()).round(3).tolist()
('DeviceArray', [1.0, 2.718])
>>> np.asarray(y.value())
Traceback (most recent call last):
TypeError: Implicit conversion to a NumPy array is not allowed. Please use `.get()` ...
>>> device.counts
{'to_device': 1, 'to_host': 1, 'scalar_reads': 0}
"""

from __future__ import annotations

import contextlib
import types

import numpy as np

import tape
from ops.registry import REGISTRY
from tape.testing import (
    _DEFAULT_TOL,
    _as_list,
    _cotangents,
    _differentiable_leaves,
    _float_slots,
    _ordered,
    _variables,
)
from tape.testing_device_array import _HOST_SCALARS, DeviceArray, _call, _operand, _unwrap


class _Ufunc:
    """A numpy ufunc on device arrays, with the methods cupy 13 has (at, reduce, ...)."""

    def __init__(self, ufunc, device):
        self._ufunc, self._device = ufunc, device
        self.__name__ = ufunc.__name__
        self.nin, self.nout = ufunc.nin, ufunc.nout

    def __call__(self, *args, **kwargs):
        return _call(self._device, self._ufunc, args, kwargs)

    def __getattr__(self, name):
        if name not in ("at", "reduce", "accumulate", "reduceat", "outer"):
            raise AttributeError(name)
        method = getattr(self._ufunc, name)
        return lambda *args, **kwargs: _call(self._device, method, args, kwargs)


class _Namespace:
    """A numpy submodule (linalg, fft) whose functions take and return device arrays."""

    def __init__(self, module, device):
        self._module, self._device = module, device

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if isinstance(value, types.ModuleType):
            return _Namespace(value, self._device)
        if callable(value) and not isinstance(value, type):
            return lambda *args, **kwargs: _call(self._device, value, args, kwargs)
        return value


class _Random:
    """cupy.random: ``default_rng(seed)`` gives a generator drawing device arrays.

    It draws numpy's stream for the seed, so a seeded emulated run equals a seeded CPU run."""

    def __init__(self, device):
        self._device = device

    def default_rng(self, seed=None):
        return _Namespace(np.random.default_rng(seed), self._device)

    def __getattr__(self, name):
        return getattr(_Namespace(np.random, self._device), name)


class EmulatedDevice:
    """A cupy-like array module over numpy (see the module docstring)."""

    def __init__(self):
        self.ndarray = DeviceArray
        self.counts = {"to_device": 0, "to_host": 0, "scalar_reads": 0}
        self.random = _Random(self)
        self.linalg = _Namespace(np.linalg, self)
        self.fft = _Namespace(np.fft, self)
        self.lib = _Namespace(np.lib, self)  # lib.stride_tricks.as_strided, as in cupy

    def reset_counts(self):
        for key in self.counts:
            self.counts[key] = 0

    def asarray(self, data, dtype=None, order=None):
        """``data`` on the device: device arrays stay (cast if asked); host data is copied
        there (a counted transfer)."""
        if isinstance(data, DeviceArray):
            return data if dtype is None else data.astype(dtype, copy=False)
        self._count_upload(data)
        return DeviceArray(np.array(data, dtype=dtype, order=order or "K"), self)

    def array(self, data, dtype=None, copy=True, order="K", ndmin=0):
        if isinstance(data, DeviceArray):
            buffer = np.array(data._buffer, dtype=dtype, copy=copy, order=order, ndmin=ndmin)
            return DeviceArray(buffer, self)
        self._count_upload(data)
        return DeviceArray(np.array(data, dtype=dtype, order=order, ndmin=ndmin), self)

    def _count_upload(self, data):
        """Host arrays and lists count as transfers; a Python or numpy scalar does not (constants
        like the 2 of ``x * 2`` become 0-d device arrays, as with cupy)."""
        if not isinstance(data, _HOST_SCALARS):
            self.counts["to_device"] += 1

    def asnumpy(self, array):
        """A host copy of a device array (a counted transfer)."""
        if not isinstance(array, DeviceArray):
            return np.asarray(array)
        self.counts["to_host"] += 1
        return array._buffer.copy()

    def get_array_module(self, *arrays):
        return self if any(isinstance(a, DeviceArray) for a in arrays) else np

    def scatter_add(self, target, index, values):
        """cupyx.scatter_add: ``target[index] += values``, repeated indices adding up."""
        np.add.at(target._buffer, _unwrap(index, self), _operand(values, self))

    def __getattr__(self, name):
        value = getattr(np, name)
        if isinstance(value, np.ufunc):
            return _Ufunc(value, self)
        if isinstance(value, types.ModuleType):
            raise AttributeError(f"the emulated device has no submodule {name!r}")
        if callable(value) and not isinstance(value, type):
            return lambda *args, **kwargs: _call(self, value, args, kwargs)
        return value  # dtypes, scalar types and constants (float32, pi, newaxis, ...)


def check_on_device(case, device, seed=0, lazy=False):
    """The case's outputs, gradients and (with ``double_grad``) gradients of gradients computed
    with ``device`` installed as the 'gpu' array module (eagerly, or by the lazy scheduler) equal
    the CPU's, every result stays on the device, and no kernel or gradient copied data to the
    host (ops with side effects, which write files, may). Uploads are allowed: without a
    download first they can only carry what the kernel built from shapes (index tables).
    """
    dtype = case.dtypes[-1]
    expected = _run_all(case, dtype, seed, lambda a: a, contextlib.nullcontext, lazy)
    moved = {}

    @contextlib.contextmanager
    def watched():
        device.reset_counts()
        yield
        for key, count in device.counts.items():
            moved[key] = moved.get(key, 0) + count

    with installed(device), tape.device("gpu"):  # ops without inputs allocate there too
        got = _run_all(case, dtype, seed, device.asarray, watched, lazy)
        for i, array in enumerate(got):
            assert isinstance(array, device.ndarray), (
                f"{case.id}: result {i} left the device ({type(array).__name__})"
            )
        got = [device.asnumpy(a) for a in got]
    if not REGISTRY[case.op].side_effect:
        assert moved["to_host"] == 0, f"{case.id}: kernels copied data to the host: {moved}"
    assert len(got) == len(expected), f"{case.id}: {len(got)} results, CPU {len(expected)}"
    rtol, atol = case.tol.get(np.dtype(dtype).name, _DEFAULT_TOL[np.dtype(dtype).name])
    for i, (g, e) in enumerate(zip(got, expected)):
        assert (g.dtype, g.shape) == (e.dtype, e.shape), f"{case.id} result {i}: {g.dtype}"
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"{case.id} result {i}")


def _run_all(case, dtype, seed, upload, watched, lazy):
    """Outputs, first and (double_grad) second gradients of the case with inputs and weights put
    by ``upload``; the op and its gradients run (and are realized) inside ``watched()``."""
    with tape.lazy(lazy):
        tape.reset_global_tape()
        return _run_all_on_tape(case, dtype, seed, upload, watched)


def _run_all_on_tape(case, dtype, seed, upload, watched):
    defn = REGISTRY[case.op]
    tape.seed(seed)
    values = [_upload(v, upload) for v in _ordered(case, case.arrays(dtype, seed))]
    grad_slots = _float_slots(case, values) if case.grad else ()
    variables = _variables(values, grad_slots, defn.input_slots)
    with watched():
        outputs = _as_list(defn(*variables, **case.attrs))
        results = [out.value() for out in outputs]
    leaves = _differentiable_leaves(variables, defn.input_slots, grad_slots)
    rng = np.random.default_rng(seed + 1)
    weights = [None if w is None else upload(w) for w in _cotangents(outputs, rng)]
    loss = _upload_weighted(outputs, weights) if leaves else None
    if loss is None:
        return results
    with watched():
        grads = tape.grad(loss, leaves, create_graph=case.double_grad)
        results += [g.value() for g in grads if g is not None]
    if case.double_grad:
        grads = [g for g in grads if g is not None and g.requires_grad]
        second = _upload_weighted(grads, [upload(rng.standard_normal(g.shape)) for g in grads])
        if second is not None:
            with watched():
                seconds = tape.grad(second, leaves)
                results += [g.value() for g in seconds if g is not None]
    return results


def _upload(value, upload):
    if value is None:
        return None
    return [upload(v) for v in value] if isinstance(value, list) else upload(value)


def _upload_weighted(outputs, weights):
    """sum(out * w) over the outputs that need a gradient; None if none does."""
    total = None
    for out, w in zip(outputs, weights):
        if w is None or not out.requires_grad:
            continue
        term = (out * tape.Variable(w.astype(out.dtype))).sum()
        total = term if total is None else total + term
    return total


@contextlib.contextmanager
def installed(device):
    """Installs ``device`` as the 'gpu' array module for the duration of the block."""
    from ops.xp import install_gpu_module

    previous = install_gpu_module(device)
    try:
        yield device
    finally:
        install_gpu_module(*previous)


__all__ = ["DeviceArray", "EmulatedDevice", "check_on_device", "installed"]
