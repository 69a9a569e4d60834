"""Turning Python scalars and arrays given to ops into constant Variables.

A Python scalar takes its dtype from the Variables beside it, by numpy 2's weak-scalar rule
(NEP 50): ``x * 2.0`` stays float32 for a float32 ``x``, ``int32_x + 2.5`` is float64, and a
scalar the dtype cannot hold (``int32_x + 10**12``) is a ScalarOverflowError naming the op, as
numpy raises OverflowError. Among an op's inputs the scalar is typed after a float Variable if
there is one, else a non-bool one: ``where(bool_condition, 2.0, float32_x)`` stays float32.
numpy scalars (``np.float64(2)``) keep their dtype, as in numpy 2. Arrays keep their own dtype.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from ops.xp import array_module, as_array, default_module
from tape.errors import InputError, ScalarOverflowError, user_location
from tape.variable import Variable

_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)
_cache: dict = {}


def constant(scalar, like=None):
    """A 0-d constant Variable for ``scalar``, typed after the Variable ``like`` (weakly)."""
    if like is not None and like.dtype is not None:
        value = like._value
        # Where ``like`` lives; a lazy Variable has no value yet: the current place's module
        # (record lazy GPU programs inside ``tape.device("gpu")``).
        if value.__class__ is np.ndarray:
            xp = np
        else:
            xp = array_module(value) if value is not None else default_module()
        like_dtype = like.dtype
    else:
        xp, like_dtype = np, None
    # -0.0 == 0.0 (and hashes alike): the sign bit keeps the two constants apart. The key holds
    # what the dtype is resolved from, so a repeated scalar (``x * 0.5`` in a loop) skips numpy's
    # promotion.
    sign = math.copysign(1.0, scalar) if isinstance(scalar, (float, np.floating)) else None
    key = (scalar.__class__, scalar, sign, like_dtype, xp)
    var = _cache.get(key)
    if var is None:
        if like_dtype is None:
            dtype = np.asarray(scalar).dtype
        elif type(scalar) in (bool, int, float):
            dtype = np.result_type(like_dtype, scalar)
        else:
            dtype = np.result_type(like_dtype, np.asarray(scalar).dtype)
        if len(_cache) > 512:
            _cache.clear()
        var = _cache[key] = _constant(xp.asarray(scalar, dtype=dtype))
    return var


_CONSTANTS = weakref.WeakSet()


def _constant(array):
    var = Variable(array)
    _CONSTANTS.add(var)
    return var


def is_constant(var):
    """Whether ``var`` is a constant made from a scalar or array given to an op."""
    return var in _CONSTANTS


def _overflow(scalar, like, op, slot):
    dtype = "its default dtype" if like is None or like.dtype is None else str(like.dtype)
    bounds = ""
    if like is not None and like.dtype is not None and like.dtype.kind in "iu":
        info = np.iinfo(like.dtype)
        bounds = f" [{info.min}, {info.max}]"
    return ScalarOverflowError(
        op,
        f"the Python scalar for input '{slot}' does not fit the dtype it takes ({dtype})",
        expected=f"a value in {dtype}'s range{bounds}",
        actual=repr(scalar),
        hint="cast the Variable to a wider dtype first, e.g. x.astype('int64')",
        location=user_location(),
    )


def as_variable(value, like=None, op=None, slot=None):
    """``value`` as a Variable: Variables pass through, scalars and arrays become constants."""
    if isinstance(value, Variable):
        return value
    if isinstance(value, _SCALARS):
        try:
            return constant(value, like)
        except OverflowError:
            raise _overflow(value, like, op, slot) from None
    if (
        hasattr(value, "__array_interface__")
        or hasattr(value, "__cuda_array_interface__")
        or isinstance(value, (list, tuple))
    ):
        return _constant(as_array(value))
    raise InputError(
        op, f"input '{slot}' must be a Variable, an array or a number", actual=type(value).__name__
    )


def as_inputs(defn, inputs):
    """Positional user inputs -> one entry per input slot (lists for duplicable slots)."""
    args = _plain_inputs(defn, inputs)
    if args is not None:
        return args
    slots = defn.input_slots
    like = _scalar_like(inputs)
    args = []
    for i, slot in enumerate(slots):
        value = inputs[i] if i < len(inputs) else None
        if value is None:
            if slot not in defn.optional_inputs:
                raise InputError(
                    defn.type, f"missing input '{slot}'", hint=f"inputs are {', '.join(slots)}"
                )
            args.append(None)
        elif slot in defn.duplicable_inputs:
            if isinstance(value, Variable) or not isinstance(value, (list, tuple)):
                raise InputError(
                    defn.type,
                    f"input '{slot}' takes a list of Variables",
                    actual=type(value).__name__,
                )
            args.append([as_variable(v, like, defn.type, slot) for v in value])
        else:
            args.append(as_variable(value, like, defn.type, slot))
    return tuple(args)


def _plain_inputs(defn, inputs):
    """``as_inputs`` where every input is a Variable (a list or tuple of them for a duplicable
    slot) and every slot given: no constant to type, so no scan for the Variable to type it
    after (a third of a lazy concat's recording); else None."""
    slots = defn.input_slots
    if len(inputs) != len(slots):
        return None
    duplicable, args = defn.duplicable_inputs, []
    for value, slot in zip(inputs, slots):
        if value.__class__ is Variable:
            if slot in duplicable:
                return None
            args.append(value)
        elif slot in duplicable and (value.__class__ is list or value.__class__ is tuple):
            for var in value:
                if var.__class__ is not Variable:
                    return None
            args.append(list(value))
        else:
            return None
    return tuple(args)


def _scalar_like(inputs):
    """The Variable scalar inputs are typed after: the first float one, else the first that is
    not bool (a condition or mask), else the first."""
    first = fallback = None
    for value in _iter_flat(inputs):
        if isinstance(value, Variable) and value.dtype is not None:
            if value.dtype.kind in "fc":
                return value
            if fallback is None and value.dtype.kind != "b":
                fallback = value
            if first is None:
                first = value
    return first if fallback is None else fallback


def _iter_flat(inputs):
    for value in inputs:
        if isinstance(value, (list, tuple)):
            yield from value
        else:
            yield value
