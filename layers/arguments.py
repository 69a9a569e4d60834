"""What the built-in layers accept: checked constructor sizes and converted call inputs.

``Function`` applies both to the layers of this package (user subclasses that define their own
``forward`` keep full control of their arguments):

- a constructor that raises turns a raw ``ValueError``/``TypeError`` into the library's
  ``AttrError``, and every error into one naming the layer and the user's line
  (``Linear: argument 'in_dim' is out of range``); ``size`` checks the size arguments;
- a call converts numpy arrays, (nested) lists and numbers given for the layer's data inputs
  (``x``, ``input``, ``target``, ...) into constant Variables, and refuses None, strings and
  other objects with an ``InputError`` naming the layer and the argument.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

from tape.errors import AttrError, FluidError, InputError, brief, user_location
from tape.variable import Variable, own_array

# Parameter names of the built-in layers' forward methods that take data (never None).
DATA_INPUTS = frozenset(
    {"x", "x1", "x2", "ids", "input", "target", "indices", "src", "query", "key", "value"}
)


def size(value, name, minimum=1):
    """``value`` as an int >= ``minimum`` (a size argument called ``name``); AttrError
    otherwise (bools and floats are refused, as PyTorch's layers refuse them).

    >>> size(3, "in_dim")
    3
    >>> size(-1, "in_dim")
    Traceback (most recent call last):
    ...
    tape.errors.AttrError: argument 'in_dim' is out of range
      expected: in_dim >= 1
      actual:   -1
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise AttrError(
            None,
            f"argument '{name}' must be an int",
            expected=f"an int >= {minimum}",
            actual=f"{brief(value)} ({type(value).__name__})",
            type_error=True,
        )
    if value < minimum:
        raise AttrError(
            None,
            f"argument '{name}' is out of range",
            expected=f"{name} >= {minimum}",
            actual=repr(int(value)),
        )
    return int(value)


def sizes(values, name, minimum=1):
    """A tuple of sizes from an int or a sequence of ints (e.g. LayerNorm's shape)."""
    if isinstance(values, (int, np.integer)) and not isinstance(values, (bool, np.bool_)):
        return (size(values, name, minimum),)
    try:
        items = tuple(values)
    except TypeError:
        items = (values,)
    return tuple(size(v, name, minimum) for v in items)


def checked_constructor(init):
    """``init`` (a built-in layer's ``__init__``) raising only library errors that name the
    layer and the user's line."""

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        try:
            init(self, *args, **kwargs)
        except FluidError as err:
            raise _in_layer(err, type(self)) from None
        except (ValueError, TypeError) as err:
            raise _in_layer(AttrError(None, str(err)), type(self)) from err

    return __init__


def _in_layer(err, cls):
    if err.op is None and not getattr(err, "layer_named", False):
        err.headline = f"{cls.__name__}: {err.headline}"
        err.layer_named = True  # (nested layers name the innermost one)
    return err.with_context(location=user_location())


def data_inputs(forward):
    """(position, name) of ``forward``'s data parameters (positions counted without self)."""
    params = list(inspect.signature(forward).parameters.values())[1:]
    return tuple(
        (index, p.name)
        for index, p in enumerate(params)
        if p.name in DATA_INPUTS
        and p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    )


def convert(layer, spec, args, kwargs):
    """``args``/``kwargs`` with each data input a Variable (see the module docstring)."""
    converted = None
    for index, name in spec:
        if index < len(args):
            value = args[index]
            if value.__class__ is not Variable:
                converted = converted or list(args)
                converted[index] = as_input(layer, name, value)
        elif name in kwargs:
            value = kwargs[name]
            if value.__class__ is not Variable:
                kwargs = {**kwargs, name: as_input(layer, name, value)}
    return (args if converted is None else tuple(converted)), kwargs


def as_input(layer, name, value):
    """``value`` given for ``layer``'s data input ``name`` as a Variable."""
    if isinstance(value, Variable):
        return value
    if value.__class__ is np.ndarray and value.dtype.kind in "biufc":
        # (a numpy array, as a per-example model passes a word id: what own_array does, short)
        array = value.copy(order="K")
        return Variable._make(array, array.shape, array.dtype, False)
    what = f"{type(layer).__name__}: argument '{name}'"
    if value is None or isinstance(value, (str, bytes)) or not _array_like(value):
        raise InputError(
            None,
            f"{what} must be a Variable, an array or a (nested) list of numbers",
            actual=f"{brief(value)} ({type(value).__name__})",
            location=user_location(),
        )
    try:
        array = own_array(value, None, what)
    except FluidError as err:
        raise err.with_context(location=user_location()) from None
    return Variable._make(array, array.shape, array.dtype, False)


def _array_like(value):
    return (
        isinstance(value, (list, tuple, int, float, complex, np.generic))
        or hasattr(value, "__array_interface__")
        or hasattr(value, "__cuda_array_interface__")
    )


__all__ = ["size", "sizes", "checked_constructor", "data_inputs", "convert", "as_input"]
