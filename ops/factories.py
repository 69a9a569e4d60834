"""Creating Variables, PyTorch's way, in one place: ``ops.zeros``, ``ops.ones``, ``ops.empty``,
``ops.full``, ``ops.zeros_like``, ``ops.ones_like``, ``ops.empty_like``, ``ops.full_like``,
``ops.arange``, ``ops.linspace``, ``ops.logspace``, ``ops.eye``, ``ops.rand``, ``ops.randn`` and
``ops.randint``.

Each records one op with no inputs (``fill_constant``, ``arange``, ``linspace``, ``logspace``,
``eye``, ``uniform_random``, ``gaussian_random``, ``randint``; the ``*_like`` forms record
``full_like`` on their input), so lazy mode records them like any other op. They allocate where
``tape.device`` says (the ``*_like`` forms beside their input). dtypes default as in PyTorch:
float32 for floating values, int64 for ``arange`` over integers and for ``randint``, and
``full`` follows its fill value (bool, int64 or float32). ``requires_grad=True`` makes the
result a leaf that collects gradients. ``empty`` is ``zeros``: fluidtape never hands out
uninitialized memory. Random functions draw from the generator ``tape.seed(n)`` seeds.

>>> import tape, ops
>>> ops.arange(5).numpy()
array([0, 1, 2, 3, 4])
>>> ops.linspace(0, 1, 5).numpy()
array([0.  , 0.25, 0.5 , 0.75, 1.  ], dtype=float32)
>>> x = ops.zeros(2, 3, requires_grad=True)
>>> (x.shape, x.dtype.name, x.requires_grad)
((2, 3), 'float32', True)
"""

from __future__ import annotations

import numpy as np

from ops.registry import REGISTRY, canonical_dtype
from tape.constants import as_variable
from tape.errors import AttrError, InputError, user_location


def _size(op, size):
    """``f(2, 3)`` and ``f((2, 3))`` both give (2, 3)."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in size):
        raise AttrError(
            op,
            "the size must be ints",
            actual=repr(size),
            location=user_location(),
            type_error=True,
        )
    return tuple(int(d) for d in size)


def _dtype(op, dtype, default):
    try:
        return canonical_dtype(default if dtype is None else dtype)
    except TypeError as err:
        raise AttrError(
            op,
            "dtype is not a numeric dtype",
            actual=f"{dtype!r} ({err})",
            location=user_location(),
        ) from None


def _finish(op, var, requires_grad):
    """The created Variable, made a leaf that collects gradients when asked for."""
    if requires_grad:
        if var.dtype.kind not in "fc":
            raise InputError(
                op,
                "only floating-point Variables can require gradients",
                actual=str(var.dtype),
                location=user_location(),
            )
        var.requires_grad, var._leaf = True, True
    return var


def _fill(op, shape, value, dtype, requires_grad):
    out = REGISTRY["fill_constant"](shape=shape, value=float(value), dtype=dtype)
    return _finish(op, out, requires_grad)


def zeros(*size, dtype=None, requires_grad=False):
    """A Variable of zeros of shape ``size`` (float32 unless ``dtype``), as 'fill_constant'."""
    return _fill("zeros", _size("zeros", size), 0, _dtype("zeros", dtype, "float32"), requires_grad)


def ones(*size, dtype=None, requires_grad=False):
    """A Variable of ones of shape ``size`` (float32 unless ``dtype``), as 'fill_constant'."""
    return _fill("ones", _size("ones", size), 1, _dtype("ones", dtype, "float32"), requires_grad)


def empty(*size, dtype=None, requires_grad=False):
    """``zeros`` (fluidtape never exposes uninitialized memory)."""
    return _fill("empty", _size("empty", size), 0, _dtype("empty", dtype, "float32"), requires_grad)


def _value_dtype(value):
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    return "int64" if isinstance(value, (int, np.integer)) else "float32"


def full(size, fill_value, dtype=None, requires_grad=False):
    """A Variable of shape ``size`` filled with ``fill_value``; the dtype follows the value
    (bool, int64, float32) unless given, as 'fill_constant'.

    >>> import ops
    >>> ops.full((2,), 7).numpy()
    array([7, 7])
    """
    dtype = _dtype("full", dtype, _value_dtype(fill_value))
    return _fill("full", _size("full", (size,)), fill_value, dtype, requires_grad)


def full_like(x, fill_value, dtype=None, requires_grad=False):
    """``fill_value`` in X's shape and place, as X's dtype unless ``dtype``, as 'full_like'."""
    x = as_variable(x)
    dtype = None if dtype is None else _dtype("full_like", dtype, None)
    out = REGISTRY["full_like"](x, value=float(fill_value), dtype=dtype)
    return _finish("full_like", out, requires_grad)


def zeros_like(x, dtype=None, requires_grad=False):
    """Zeros in X's shape, place and dtype (unless ``dtype``), as 'full_like'."""
    return full_like(x, 0, dtype, requires_grad)


def ones_like(x, dtype=None, requires_grad=False):
    """Ones in X's shape, place and dtype (unless ``dtype``), as 'full_like'."""
    return full_like(x, 1, dtype, requires_grad)


def empty_like(x, dtype=None, requires_grad=False):
    """``zeros_like`` (fluidtape never exposes uninitialized memory)."""
    return full_like(x, 0, dtype, requires_grad)


def arange(start, end=None, step=1, dtype=None, requires_grad=False):
    """start, start + step, ... below ``end`` (``arange(n)`` is 0..n-1), as op 'arange': int64
    when start, end and step are all ints, else float32, unless ``dtype``.

    >>> import ops
    >>> ops.arange(1, 2.5, 0.5).numpy()
    array([1. , 1.5, 2. ], dtype=float32)
    """
    if end is None:
        start, end = 0, start
    ints = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
    dtype = _dtype("arange", dtype, "int64" if ints else "float32")
    out = REGISTRY["arange"](start=start, end=end, step=step, dtype=dtype)
    return _finish("arange", out, requires_grad)


def linspace(start, end, steps, dtype=None, requires_grad=False):
    """``steps`` values evenly spaced from ``start`` to ``end`` inclusive (float32 unless
    ``dtype``), as op 'linspace'."""
    dtype = _dtype("linspace", dtype, "float32")
    out = REGISTRY["linspace"](start=start, end=end, steps=steps, dtype=dtype)
    return _finish("linspace", out, requires_grad)


def logspace(start, end, steps, base=10.0, dtype=None, requires_grad=False):
    """``base ** linspace(start, end, steps)`` (float32 unless ``dtype``), as op 'logspace'."""
    dtype = _dtype("logspace", dtype, "float32")
    out = REGISTRY["logspace"](start=start, end=end, steps=steps, base=base, dtype=dtype)
    return _finish("logspace", out, requires_grad)


def eye(n, m=None, dtype=None, requires_grad=False):
    """The n x m (default n x n) identity matrix (float32 unless ``dtype``), as op 'eye'."""
    out = REGISTRY["eye"](n=n, m=m, dtype=_dtype("eye", dtype, "float32"))
    return _finish("eye", out, requires_grad)


def rand(*size, dtype=None, requires_grad=False):
    """Samples uniform in [0, 1) of shape ``size`` (float32 unless ``dtype``), drawn from the
    generator ``tape.seed`` seeds, as op 'uniform_random'."""
    dtype = _dtype("rand", dtype, "float32")
    out = REGISTRY["uniform_random"](shape=_size("rand", size), min=0.0, max=1.0, dtype=dtype)
    return _finish("rand", out, requires_grad)


def randn(*size, dtype=None, requires_grad=False):
    """Standard normal samples of shape ``size`` (float32 unless ``dtype``), as op
    'gaussian_random'."""
    dtype = _dtype("randn", dtype, "float32")
    out = REGISTRY["gaussian_random"](shape=_size("randn", size), dtype=dtype)
    return _finish("randn", out, requires_grad)


def randint(*bounds, size, dtype=None):
    """Integers uniform in [low, high) of shape ``size``: ``randint(high, size=...)`` or
    ``randint(low, high, size=...)`` (int64 unless ``dtype``), as op 'randint'.

    >>> import ops
    >>> ops.randint(3, 4, size=(2,)).numpy()
    array([3, 3])
    """
    if len(bounds) not in (1, 2):
        raise InputError(
            "randint", "give high, or low and high", actual=repr(bounds), location=user_location()
        )
    low, high = (0, bounds[0]) if len(bounds) == 1 else bounds
    dtype = _dtype("randint", dtype, "int64")
    return REGISTRY["randint"](low=low, high=high, shape=_size("randint", (size,)), dtype=dtype)


__all__ = [
    "zeros",
    "ones",
    "empty",
    "full",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "arange",
    "linspace",
    "logspace",
    "eye",
    "rand",
    "randn",
    "randint",
]
