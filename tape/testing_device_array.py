"""The array type of the emulated GPU (tape.testing_device): a numpy buffer behind cupy's rules.

``DeviceArray`` refuses implicit conversion to numpy (``__array__`` raises, as cupy's arrays do)
and numpy's functions and ufuncs (stricter than cupy, which dispatches some: kernels must use
``xp``); its operators and methods run on the buffer and return device arrays (0-d ones for
scalars, as cupy); a host numpy array mixed into an operation raises TypeError; scalar reads
(``float(a)``, ``a.item()``) and ``.get()``/``.tolist()`` are counted by its device.
"""

from __future__ import annotations

import operator

import numpy as np

_IMPLICIT = (
    "Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a "
    "NumPy array explicitly."
)
_HOST_SCALARS = (bool, int, float, complex, np.generic)


def _operand(value, device):
    """A device array's buffer for numpy; host scalars pass; host arrays and lists raise."""
    if isinstance(value, DeviceArray):
        if value._device is not device:
            raise TypeError("arrays of two different devices in one operation")
        return value._buffer
    if isinstance(value, np.ndarray):
        raise TypeError(
            "a host numpy.ndarray was mixed into a device operation: transfer it with "
            "xp.asarray first (cupy refuses numpy arrays here too)"
        )
    return value


def _unwrap(value, device):
    """Arguments of module functions: device arrays (also inside lists and tuples) to buffers."""
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v, device) for v in value)
    return _operand(value, device)


def _wrap(value, device):
    """numpy results back to device arrays (scalars become 0-d arrays, as cupy returns)."""
    if isinstance(value, np.ndarray):
        return DeviceArray(value, device)
    if isinstance(value, np.generic):
        return DeviceArray(np.asarray(value), device)
    if isinstance(value, tuple):
        return tuple(_wrap(v, device) for v in value)
    if isinstance(value, list):
        return [_wrap(v, device) for v in value]
    return value


def _call(device, fn, args, kwargs):
    out = kwargs.get("out")
    result = fn(*_unwrap(args, device), **{k: _unwrap(v, device) for k, v in kwargs.items()})
    if isinstance(out, DeviceArray) and result is out._buffer:
        return out  # the very array the caller passed as out=, as cupy returns it
    return _wrap(result, device)


class _Flags:
    """cupy's ndarray.flags: only the contiguity and ownership flags (no 'writeable')."""

    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, buffer):
        flags = buffer.flags
        self.c_contiguous, self.f_contiguous = flags.c_contiguous, flags.f_contiguous
        self.owndata = flags.owndata


# Methods and properties cupy.ndarray has; each runs on the buffer and returns device arrays.
_METHODS = frozenset(
    "all any argmax argmin argpartition argsort astype choose clip compress conj conjugate copy "
    "cumprod cumsum diagonal dot fill flatten max mean min nonzero partition prod put ravel "
    "repeat reshape round searchsorted sort squeeze std sum swapaxes take trace transpose var "
    "view".split()
)
_PROPERTIES = frozenset("dtype shape ndim size itemsize nbytes strides".split())


class DeviceArray:
    """An array 'in device memory': a numpy buffer only ``EmulatedDevice`` functions may read."""

    __slots__ = ("_buffer", "_device")
    __array_ufunc__ = None  # numpy ufuncs refuse it; binary operators defer to its own
    __hash__ = None

    def __init__(self, buffer, device):
        self._buffer, self._device = buffer, device

    def __array__(self, *args, **kwargs):
        raise TypeError(_IMPLICIT)

    def __array_function__(self, func, types, args, kwargs):
        return NotImplemented  # numpy functions raise TypeError on device arrays

    def __getattr__(self, name):
        if name in _PROPERTIES:
            return getattr(self._buffer, name)
        if name in _METHODS:
            method = getattr(self._buffer, name)
            return lambda *args, **kwargs: _call(self._device, method, args, kwargs)
        raise AttributeError(f"cupy.ndarray has no attribute {name!r} (emulated device)")

    @property
    def T(self):
        return DeviceArray(self._buffer.T, self._device)

    @property
    def mT(self):
        return DeviceArray(self._buffer.swapaxes(-1, -2), self._device)

    @property
    def real(self):
        return DeviceArray(self._buffer.real, self._device)

    @property
    def imag(self):
        return DeviceArray(self._buffer.imag, self._device)

    @property
    def flags(self):
        return _Flags(self._buffer)

    @property
    def base(self):
        base = self._buffer.base
        return None if base is None else DeviceArray(base, self._device)

    def get(self):
        """The array copied to the host (a counted device-to-host transfer)."""
        return self._device.asnumpy(self)

    def tolist(self):
        self._device.counts["to_host"] += 1
        return self._buffer.tolist()

    def item(self, *args):
        self._device.counts["scalar_reads"] += 1
        return self._buffer.item(*args)

    def _scalar(self, convert):
        self._device.counts["scalar_reads"] += 1
        return convert(self._buffer)

    def __bool__(self):
        return self._scalar(bool)

    def __float__(self):
        return self._scalar(float)

    def __int__(self):
        return self._scalar(int)

    def __index__(self):
        return self._scalar(operator.index)

    def __complex__(self):
        return self._scalar(complex)

    def __len__(self):
        return len(self._buffer)

    def __iter__(self):
        return (_wrap(row, self._device) for row in self._buffer)

    def __getitem__(self, key):
        return _wrap(self._buffer[_unwrap(key, self._device)], self._device)

    def __setitem__(self, key, value):
        self._buffer[_unwrap(key, self._device)] = _operand(value, self._device)

    def __repr__(self):
        return f"DeviceArray({np.array2string(self._buffer, separator=', ')})"


def _binary(fn):
    def forward(self, other):
        if not isinstance(other, (DeviceArray, *_HOST_SCALARS)):
            if isinstance(other, np.ndarray):
                _operand(other, self._device)  # raises with the message
            return NotImplemented
        return _wrap(fn(self._buffer, _operand(other, self._device)), self._device)

    def reflected(self, other):
        if not isinstance(other, _HOST_SCALARS):
            _operand(other, self._device)  # a host array on the left raises
            return NotImplemented
        return _wrap(fn(other, self._buffer), self._device)

    def in_place(self, other):
        if not isinstance(other, (DeviceArray, *_HOST_SCALARS)):
            _operand(other, self._device)
            return NotImplemented
        buffer = self._buffer
        self._buffer = _IN_PLACE[fn](buffer, _operand(other, self._device))
        return self

    return forward, reflected, in_place


_IN_PLACE = {
    operator.add: operator.iadd,
    operator.sub: operator.isub,
    operator.mul: operator.imul,
    operator.truediv: operator.itruediv,
    operator.floordiv: operator.ifloordiv,
    operator.mod: operator.imod,
    operator.pow: operator.ipow,
    operator.matmul: operator.imatmul,
    operator.and_: operator.iand,
    operator.or_: operator.ior,
    operator.xor: operator.ixor,
    operator.lshift: operator.ilshift,
    operator.rshift: operator.irshift,
}

for _fn, _name in [
    (operator.add, "add"),
    (operator.sub, "sub"),
    (operator.mul, "mul"),
    (operator.truediv, "truediv"),
    (operator.floordiv, "floordiv"),
    (operator.mod, "mod"),
    (operator.pow, "pow"),
    (operator.matmul, "matmul"),
    (operator.and_, "and"),
    (operator.or_, "or"),
    (operator.xor, "xor"),
    (operator.lshift, "lshift"),
    (operator.rshift, "rshift"),
]:
    _f, _r, _i = _binary(_fn)
    setattr(DeviceArray, f"__{_name}__", _f)
    setattr(DeviceArray, f"__r{_name}__", _r)
    setattr(DeviceArray, f"__i{_name}__", _i)

for _fn, _name in [
    (operator.lt, "lt"),
    (operator.le, "le"),
    (operator.gt, "gt"),
    (operator.ge, "ge"),
    (operator.eq, "eq"),
    (operator.ne, "ne"),
]:
    setattr(DeviceArray, f"__{_name}__", _binary(_fn)[0])

for _fn, _name in [
    (operator.neg, "neg"),
    (operator.pos, "pos"),
    (operator.abs, "abs"),
    (operator.invert, "invert"),
]:
    setattr(DeviceArray, f"__{_name}__", lambda self, fn=_fn: _wrap(fn(self._buffer), self._device))
