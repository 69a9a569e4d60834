"""Indexing a Variable: basic indexing becomes 'slice' (+ 'unsqueeze'), integer arrays 'gather'.

Basic indexing (ints, slices with steps, ``None``, ``...``) is a view in numpy, so its gradient
writes ``gout`` back into zeros; integer-array indexing may repeat rows, so its gradient
scatter-adds.
"""

from __future__ import annotations

import numpy as np

from ops.registry import REGISTRY
from tape.errors import InputError, user_location
from tape.variable import Variable

# Stand-ins for an open slice end, past any real dimension in either direction.
_BIG = 2**62


def getitem(var, index):
    """``var[index]`` as ops."""
    if isinstance(index, Variable) or _is_int_array(index):
        return REGISTRY["gather"](var, _index_variable(index), axis=0)
    items = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, Variable) or _is_int_array(i) for i in items):
        raise IndexError(
            f"indexing variable '{var.name}' with {index!r} mixes integer arrays with other "
            f"indices (recorded at {user_location()}); use ops.gather for one axis at a time"
        )
    return _basic(var, _expand_ellipsis(items, len(var.shape)))


def _is_int_array(index):
    if isinstance(index, list):
        return True
    return isinstance(index, np.ndarray) and index.dtype.kind in "iub"


def _index_variable(index):
    if isinstance(index, Variable):
        return index
    array = np.asarray(index)
    if array.dtype.kind == "b":
        raise IndexError("boolean mask indexing is not supported; use ops.where")
    if array.dtype.kind not in "iu":
        raise IndexError(f"index arrays must hold integers, not {array.dtype}")
    return Variable(array.astype(np.int64, copy=False))


def _expand_ellipsis(items, ndim):
    count = sum(1 for i in items if i is Ellipsis)
    if count > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if used > ndim:
        raise IndexError(f"too many indices: {used} for a variable with {ndim} dimensions")
    if count == 0:
        return list(items) + [slice(None)] * (ndim - used)
    at = next(k for k, i in enumerate(items) if i is Ellipsis)
    return list(items[:at]) + [slice(None)] * (ndim - used) + list(items[at + 1:])


def _basic(var, items):
    axes, starts, ends, strides, decrease, new_axes = [], [], [], [], [], []
    axis = 0
    for position, item in enumerate(items):
        if item is None:
            new_axes.append(position)
            continue
        if isinstance(item, slice):
            step = 1 if item.step is None else int(item.step)
            if step == 0:
                raise IndexError("slice step cannot be zero")
            start = item.start if item.start is not None else (0 if step > 0 else -1)
            stop = item.stop if item.stop is not None else (_BIG if step > 0 else -_BIG)
            if (start, stop, step) != (0, _BIG, 1):
                axes.append(axis), starts.append(int(start)), ends.append(int(stop))
                strides.append(step)
        elif isinstance(item, (int, np.integer)):
            dim = var.shape[axis]
            if not -dim <= item < dim:
                raise InputError("slice", f"index {item} is out of bounds for axis {axis}",
                                 expected=f"-{dim} <= index < {dim}", actual=str(item),
                                 location=user_location())
            start = int(item) % dim
            axes.append(axis), starts.append(start), ends.append(start + 1), strides.append(1)
            decrease.append(axis)
        else:
            raise IndexError(f"unsupported index {item!r} ({type(item).__name__})")
        axis += 1
    out = var
    if axes:
        out = REGISTRY["slice"](var, axes=axes, starts=starts, ends=ends, strides=strides,
                                decrease_axis=decrease)
    if new_axes:
        # Positions of None in the result: count the dimensions kept before each None.
        kept, positions = 0, []
        for position, item in enumerate(items):
            if item is None:
                positions.append(kept + len(positions))
            elif not isinstance(item, (int, np.integer)):
                kept += 1
        out = REGISTRY["unsqueeze"](out, axes=positions)
    return out
