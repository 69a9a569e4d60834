"""Indexing a Variable: basic indexing becomes 'slice' (+ 'unsqueeze'), integer arrays 'gather'.

Basic indexing (ints, slices with steps, ``None``, ``...``) is a view in numpy, so its gradient
writes ``gout`` back into zeros; integer-array indexing may repeat rows, so its gradient
scatter-adds.
"""

from __future__ import annotations

import numpy as np

from ops.registry import REGISTRY
from tape.errors import IndexingError, user_location
from tape.variable import Variable

# Stand-ins for an open slice end, past any real dimension in either direction.
_BIG = 2**62


def getitem(var, index):
    """``var[index]`` as ops."""
    if isinstance(index, Variable) or _is_int_array(index):
        return REGISTRY["gather"](var, _index_variable(index), axis=0)
    items = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, Variable) or _is_int_array(i) for i in items):
        raise IndexingError(
            None,
            f"indexing variable '{var.name}' with {index!r} mixes integer arrays with "
            "other indices",
            hint="index with one integer array at a time, or use ops.gather "
            "with its axis attribute",
            location=user_location(),
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
    if array.size == 0 and isinstance(index, list):
        array = array.astype(np.int64)  # numpy reads [] as float64; as an index it selects none
    if array.dtype.kind == "b":
        raise IndexingError(
            None,
            "boolean mask indexing is not supported",
            hint="use ops.where",
            location=user_location(),
        )
    if array.dtype.kind not in "iu":
        raise IndexingError(
            None,
            "index arrays must hold integers",
            expected="an integer dtype",
            actual=str(array.dtype),
            location=user_location(),
        )
    return Variable(array.astype(np.int64, copy=False))


def _expand_ellipsis(items, ndim):
    count = sum(1 for i in items if i is Ellipsis)
    if count > 1:
        raise IndexingError(
            None, "an index can only have a single ellipsis ('...')", location=user_location()
        )
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if used > ndim:
        raise IndexingError(
            None,
            "too many indices",
            expected=f"at most {ndim} (the variable's dimensions)",
            actual=str(used),
            location=user_location(),
        )
    if count == 0:
        return list(items) + [slice(None)] * (ndim - used)
    at = next(k for k, i in enumerate(items) if i is Ellipsis)
    return list(items[:at]) + [slice(None)] * (ndim - used) + list(items[at + 1 :])


def _basic(var, items):
    axes, starts, ends, strides, decrease = [], [], [], [], []
    axis = 0
    for item in items:
        if item is None:
            continue
        if isinstance(item, slice):
            step = 1 if item.step is None else int(item.step)
            if step == 0:
                raise IndexingError(None, "slice step cannot be zero", location=user_location())
            start = item.start if item.start is not None else (0 if step > 0 else -1)
            stop = item.stop if item.stop is not None else (_BIG if step > 0 else -_BIG)
            if (start, stop, step) != (0, _BIG, 1):
                axes.append(axis), starts.append(int(start)), ends.append(int(stop))
                strides.append(step)
        elif isinstance(item, (bool, np.bool_)):
            raise IndexingError(
                None,
                "boolean indices are not supported",
                hint="use ops.where",
                location=user_location(),
            )
        elif isinstance(item, (int, np.integer)):
            dim = var.shape[axis]
            if not -dim <= item < dim:
                raise IndexingError(
                    None,
                    f"index {int(item)} is out of bounds for axis {axis} "
                    f"of variable '{var.name}' with shape {var.shape}",
                    expected=f"an int with -{dim} <= index < {dim}",
                    actual=str(int(item)),
                    location=user_location(),
                )
            start = int(item) % dim
            axes.append(axis), starts.append(start), ends.append(start + 1), strides.append(1)
            decrease.append(axis)
        else:
            raise IndexingError(
                None,
                f"unsupported index {item!r} ({type(item).__name__})",
                hint="use ints, slices, None, ... or one integer array",
                location=user_location(),
            )
        axis += 1
    out = var
    if axes:
        out = REGISTRY["slice"](
            var, axes=axes, starts=starts, ends=ends, strides=strides, decrease_axis=decrease
        )
    if any(item is None for item in items):
        # Positions of None in the result: count the dimensions kept before each None.
        kept, positions = 0, []
        for item in items:
            if item is None:
                positions.append(kept + len(positions))
            elif not isinstance(item, (int, np.integer)):
                kept += 1
        out = REGISTRY["unsqueeze"](out, axes=positions)
    return out
