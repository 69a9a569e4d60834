"""Variable: a handle with a compile-time description (name, shape, dtype) and a run-time buffer.

Python's reference counting is the shared pointer of the seed: a buffer lives exactly as long as
some Variable (or recorded op) holds it. Operators (``+``, ``@``, indexing, ...) are attached in
``tape.operators``; this module only knows the handle itself.
"""

from __future__ import annotations

import itertools
import weakref

import numpy as np

from ops.xp import array_module, to_numpy
from tape.errors import DTypeError, FluidError, GraphError, InputError, ShapeError, user_location
from tape.tensor_style import TensorStyle

_serial = itertools.count()


class Variable(TensorStyle):
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
        "_origin",  # set only on outputs of a tape reset_global_tape() ended (tape.stale)
        "_piece",  # a traced call's result: (its packed output, its layout's number, index)
        "__weakref__",
    )
    # numpy defers to our reflected operators (array + var -> var.__radd__) instead of looping.
    __array_ufunc__ = None
    __array_priority__ = 1000

    def __init__(self, data=None, requires_grad=False, name=None, dtype=None):
        if isinstance(data, Variable):
            data = data._array()
        if data is None:
            value, shape, dt = None, None, (np.dtype(dtype) if dtype is not None else None)
        else:
            try:
                value = own_array(data, dtype, "Variable")
            except FluidError as err:
                raise err.with_context(location=user_location()) from None
            shape, dt = value.shape, value.dtype
        if requires_grad and dt is not None and dt.kind not in "fc":
            raise InputError(
                None,
                f"variable {name or ''!s} cannot require a gradient".replace("  ", " "),
                expected="a floating-point dtype",
                actual=str(dt),
                hint="pass float data, or dtype=np.float32",
                location=user_location(),
            )
        self._value = value
        self.shape = shape
        self.dtype = dt
        self._name = name
        self.requires_grad = bool(requires_grad)
        self._grad = None
        self._leaf = True
        self._released = False
        self.persistable = False
        self._pending = None
        self._piece = None

    @classmethod
    def _make(cls, value, shape, dtype, requires_grad, pending=None, piece=None):
        """Fast constructor for op outputs (no conversion, no checks); ``pending``: the lazy
        tape computing its value, ``piece``: its place in a call region (``tape.call_region``)."""
        # One store per statement: tuple assignments build and unpack a tuple each (~40% of
        # this constructor, which runs for every op output).
        var = cls.__new__(cls)
        var._value = value
        var.shape = shape
        var.dtype = dtype
        var._name = None
        var.requires_grad = requires_grad
        var._grad = None
        var._leaf = not requires_grad
        var._released = False
        var.persistable = False
        var._pending = pending
        var._piece = piece
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
        """The array (numpy or cupy); in lazy mode, runs what is needed to compute it.

        A numpy value is a read-only view: the buffer may be saved for backward, and fluidtape
        never changes a buffer in place (``set_value`` gives the Variable a new one)."""
        return read_only(self._array())

    def numpy(self):
        """The value as a numpy array (read-only; a copy on the host for GPU variables)."""
        return read_only(to_numpy(self._array()))

    def _array(self):
        """The buffer itself, for the library (runs pending lazy work first)."""
        if self._pending is not None:
            pending = self._pending
            if pending.__class__ is Failed:
                raise pending.error()
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

    def item(self):
        return self.numpy().item()

    def set_value(self, data):
        """Gives the Variable a copy of ``data`` as its new buffer, keeping shape and dtype (e.g.
        to feed new data each step).

        Pending lazy ops that read the old value run first (as they would have in eager mode);
        backward over an op recorded before the change that saved this Variable raises a
        ``MutationError`` instead of using the new value (``tape.guard``)."""
        from tape import guard

        try:
            value = own_array(data, self.dtype, "set_value")
        except FluidError as err:
            raise err.with_context(location=user_location()) from None
        if self.shape is not None and value.shape != self.shape:
            raise ShapeError(
                None,
                f"set_value on variable '{self.name}' changes its shape",
                expected=str(self.shape),
                actual=str(value.shape),
            )
        readers = guard.pending_readers(self)
        for var in readers:
            var._array()
        self._value, self.shape, self.dtype = value, value.shape, value.dtype
        self._pending = None
        guard.note_writes((self,), "set_value")

    def clear_grad(self):
        """Drops the accumulated gradient (optimizer updates do this for you)."""
        self._grad = None

    def detach(self):
        """A new leaf sharing this value, cut from the tape (buffers never change in place, so
        sharing is safe)."""
        value = self._array()
        return Variable._make(value, value.shape, value.dtype, False)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """The buffer as a DLPack capsule, without a copy: read-only to DLPack 1.0 consumers,
        and checked for writes by the other library before backward (``tape.dlpack``)."""
        from tape.dlpack import export

        return export(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self):
        from tape.dlpack import device

        return device(self)

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


_NDARRAY = np.ndarray


def read_only(array):
    """A read-only view of a numpy ``array`` (itself if it already is one); cupy arrays as
    they are (they have no such flag)."""
    if array.__class__ is _NDARRAY and array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array


def own_array(data, dtype=None, what="Variable"):
    """A copy of ``data`` as a numeric array the Variable owns (numpy, or cupy for cupy data):
    the caller may reuse ``data`` afterwards. Refuses what has no numeric meaning (objects,
    strings, generators, ragged lists) with an InputError naming ``what``."""
    if data.__class__ is _NDARRAY and dtype is None and data.dtype.kind in "biufc":
        return data.copy(order="K")  # (the common case, a numeric numpy array: no other checks)
    if dtype is not None:
        try:
            dtype = np.dtype(dtype)
        except TypeError as err:
            raise DTypeError(None, f"{what}: invalid dtype", actual=f"{dtype!r}: {err}") from None
    if hasattr(data, "__next__") or (hasattr(data, "__iter__") and not hasattr(data, "__len__")):
        raise InputError(
            None,
            f"{what}: data must be an array, a number or a (nested) list of numbers",
            actual=type(data).__name__,
            hint="materialise an iterator first, e.g. list(...) or np.fromiter(...)",
        )
    xp = array_module(data)
    try:
        value = xp.array(data, dtype=dtype, copy=True)
    except (TypeError, ValueError, OverflowError) as err:
        raise InputError(
            None,
            f"{what}: data cannot be turned into a numeric array",
            expected=f"numbers{f' representable as {dtype}' if dtype is not None else ''}",
            actual=f"{type(data).__name__}: {err}",
        ) from None
    if value.dtype.kind not in "biufc":
        raise InputError(
            None,
            f"{what}: data must be numeric",
            expected="bool, integer, float or complex values",
            actual=f"dtype {value.dtype} ({type(data).__name__})",
        )
    return value


class Failed:
    """The ``_pending`` mark of a Variable a failed lazy run was to compute: reading it raises
    that failure again (its ops were dropped; nothing will compute it)."""

    __slots__ = ("cause",)

    def __init__(self, cause):
        # Only the failure's text: the exception itself would keep its traceback's frames, and
        # with them every Variable of the failed run, alive as long as the mark.
        text = str(cause)
        self.cause = f"{type(cause).__name__}: {text.splitlines()[0] if text else ''}"

    def error(self):
        return GraphError(
            None,
            "the lazy run that was to compute this value failed, and its ops were dropped",
            actual=self.cause,
            hint="record the computation again (the parameters kept their values)",
        )


def owner(var):
    """The lazy tape that computes ``var``, or None: the tape it is pending on, or the tape whose
    run freed its value (recomputed on request). The latter is held weakly: a freed variable is
    reachable only through its tape's ops, and a strong reference back would make every run's
    tape a reference cycle, garbage only the collector finds (full collections cost lazy mode
    about a quarter of its time on small ops)."""
    tape = var._pending
    if tape.__class__ is weakref.ref:
        return tape()
    return None if tape.__class__ is Failed else tape
