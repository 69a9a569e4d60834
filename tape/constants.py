"""Turning Python scalars and arrays given to ops into constant Variables.

A Python scalar takes its dtype from the Variables beside it, by numpy 2's weak-scalar rule
(NEP 50): ``x * 2.0`` stays float32 for a float32 ``x``. Arrays keep their own dtype.
"""

from __future__ import annotations

import numpy as np

from ops.xp import array_module, as_array
from tape.errors import InputError
from tape.variable import Variable

_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)
_cache: dict = {}


def constant(scalar, like=None):
    """A 0-d constant Variable for ``scalar``, typed after the Variable ``like`` (weakly)."""
    xp = np
    if like is not None and like.dtype is not None:
        dtype = (
            np.result_type(like.dtype, scalar)
            if type(scalar) in (bool, int, float)
            else np.result_type(like.dtype, np.asarray(scalar).dtype)
        )
        if like._value is not None:
            xp = array_module(like._value)
    else:
        dtype = np.asarray(scalar).dtype
    key = (type(scalar), scalar, dtype, xp)
    var = _cache.get(key)
    if var is None:
        if len(_cache) > 512:
            _cache.clear()
        var = _cache[key] = Variable(xp.asarray(scalar, dtype=dtype))
    return var


def as_variable(value, like=None, op=None, slot=None):
    """``value`` as a Variable: Variables pass through, scalars and arrays become constants."""
    if isinstance(value, Variable):
        return value
    if isinstance(value, _SCALARS):
        return constant(value, like)
    if (
        hasattr(value, "__array_interface__")
        or hasattr(value, "__cuda_array_interface__")
        or isinstance(value, (list, tuple))
    ):
        return Variable(as_array(value))
    raise InputError(
        op, f"input '{slot}' must be a Variable, an array or a number", actual=type(value).__name__
    )


def as_inputs(defn, inputs):
    """Positional user inputs -> one entry per input slot (lists for duplicable slots)."""
    slots = defn.input_slots
    like = next((v for v in _iter_flat(inputs) if isinstance(v, Variable)), None)
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


def _iter_flat(inputs):
    for value in inputs:
        if isinstance(value, (list, tuple)):
            yield from value
        else:
            yield value
