"""Variable: a handle with a compile-time description (name, shape, dtype) and a run-time buffer.

Python's reference counting is the shared pointer of the seed: a buffer lives exactly as long as
some Variable (or recorded op) holds it. Operators (``+``, ``@``, indexing, ...) are attached in
``tape.operators``; this module only knows the handle itself.
"""

from __future__ import annotations

import itertools
import weakref

import numpy as np

from ops.xp import as_array, to_numpy
from tape.errors import GraphError, InputError, ShapeError

_serial = itertools.count()


class Variable:
    """A named, typed handle to an array that ops read and write.

    Args:
        data: array-like initial value, or None for an empty handle that an op will fill.
        requires_grad: whether backward computes this variable's gradient.
        name: a readable name (generated when omitted).
        dtype: converts ``data`` to this dtype.

    >>> import numpy as np, tape
    >>> x = tape.Variable(np.ones((2, 3), np.float32), requires_grad=True, name="x")
    >>> (x.shape, x.dtype.name, x.requires_grad)
    ((2, 3), 'float32', True)
    """

    __slots__ = (
        "_value",
        "shape",
        "dtype",
        "_name",
        "requires_grad",
        "_grad",
        "_leaf",
        "_released",
        "persistable",
        "_pending",
        "__weakref__",
    )
    # numpy defers to our reflected operators (array + var -> var.__radd__) instead of looping.
    __array_ufunc__ = None
    __array_priority__ = 1000

    def __init__(self, data=None, requires_grad=False, name=None, dtype=None):
        if isinstance(data, Variable):
            data = data.value()
        if data is None:
            value, shape, dt = None, None, (np.dtype(dtype) if dtype is not None else None)
        else:
            value = as_array(data, dtype)
            shape, dt = value.shape, value.dtype
        if requires_grad and dt is not None and dt.kind not in "fc":
            raise InputError(
                None,
                f"variable {name or ''!s} cannot require a gradient",
                expected="a floating-point dtype",
                actual=str(dt),
            )
        self._value, self.shape, self.dtype, self._name = value, shape, dt, name
        self.requires_grad, self._grad, self._leaf = bool(requires_grad), None, True
        self._released, self.persistable, self._pending = False, False, None

    @classmethod
    def _make(cls, value, shape, dtype, requires_grad):
        """Fast constructor for op outputs (no conversion, no checks)."""
        var = cls.__new__(cls)
        var._value, var.shape, var.dtype, var._name = value, shape, dtype, None
        var.requires_grad, var._grad, var._leaf = requires_grad, None, not requires_grad
        var._released, var.persistable, var._pending = False, False, None
        return var

    @property
    def name(self):
        if self._name is None:
            self._name = f"var_{next(_serial)}"
        return self._name

    @name.setter
    def name(self, value):
        self._name = value

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def is_leaf(self):
        """True for user-created variables and parameters; False for outputs of recorded ops."""
        return self._leaf

    def value(self):
        """The array (numpy or cupy); in lazy mode, runs what is needed to compute it."""
        if self._pending is not None:
            tape = owner(self)
            if tape is not None:
                tape.realize([self])
        if self._value is None:
            raise GraphError(
                None,
                f"variable '{self.name}' has no value",
                hint="it is an empty handle that no op has written yet",
            )
        return self._value

    def numpy(self):
        """The value as a numpy array (copied to the host for GPU variables)."""
        return to_numpy(self.value())

    def item(self):
        return self.numpy().item()

    def set_value(self, data):
        """Replaces the buffer, keeping shape and dtype (e.g. to feed new data each step)."""
        value = as_array(data, self.dtype)
        if self.shape is not None and value.shape != self.shape:
            raise ShapeError(
                None,
                f"set_value on variable '{self.name}' changes its shape",
                expected=str(self.shape),
                actual=str(value.shape),
            )
        self._value, self.shape, self.dtype = value, value.shape, value.dtype

    def grad(self):
        """The accumulated gradient as a Variable, or None if backward has not reached it."""
        return self._grad

    def clear_grad(self):
        """Drops the accumulated gradient (optimizer updates do this for you)."""
        self._grad = None

    def detach(self):
        """A new leaf sharing this value, cut from the tape."""
        return Variable(self.value())

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d variable")
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __bool__(self):
        if self.size != 1:
            raise ValueError(
                f"the truth value of variable '{self.name}' with shape {self.shape} is ambiguous"
            )
        return bool(self.numpy())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    __hash__ = object.__hash__

    def __repr__(self):
        parts = [
            f"name={self.name!r}",
            f"shape={self.shape}",
            f"dtype={self.dtype.name if self.dtype is not None else None}",
        ]
        if self.requires_grad:
            parts.append("requires_grad=True")
        if self._value is None:
            parts.append("value=<pending>" if self._pending is not None else "value=<empty>")
        else:
            body = np.array2string(
                to_numpy(self._value), threshold=20, separator=", ", prefix=" " * 15
            )
            parts.append(f"value={body}")
        return f"Variable({', '.join(parts)})"


def owner(var):
    """The lazy tape that computes ``var``, or None: the tape it is pending on, or the tape whose
    run freed its value (recomputed on request). The latter is held weakly: a freed variable is
    reachable only through its tape's ops, and a strong reference back would make every run's
    tape a reference cycle, garbage only the collector finds (full collections cost lazy mode
    about a quarter of its time on small ops)."""
    tape = var._pending
    return tape() if tape.__class__ is weakref.ref else tape
