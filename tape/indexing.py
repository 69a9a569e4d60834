"""Indexing a Variable with numpy's semantics: ``x[index]`` and ``x[index] = value`` as ops.

Basic indices (ints, slices with steps, ``None``, ``...``) become 'slice' (+ 'unsqueeze'), a
view in numpy, whose gradient writes ``gout`` back into zeros. One integer array alone becomes
'gather'; a boolean mask of X's shape 'masked_select'; any other mix of integer arrays (lists,
numpy arrays, integer Variables), boolean masks, ints, slices and ``None`` becomes one 'index'
op, with numpy's rules for where the indexed axes go. A boolean mask selects its True positions,
so the result's shape depends on the mask's values: the mask is computed when the op is recorded
(in lazy mode that runs the ops it depends on) and enters as its integer positions.

``x[index] = value`` records 'index_put', an out-of-place update, and rebinds the handle ``x``
to its result: ``x`` (and every Python name for that Variable) shows the new values, while ops
recorded earlier keep reading the old ones, so gradients flow to both the old ``x`` and
``value`` (as PyTorch's in-place ``x[index] = value``). As in PyTorch, a leaf that requires a
gradient (a parameter) cannot be assigned into.
"""

from __future__ import annotations

import numpy as np

from ops.advanced_indexing import ARRAY, ELLIPSIS, INT, NEWAXIS, SLICE
from ops.registry import REGISTRY
from ops.xp import array_module
from tape.errors import FluidError, GraphError, IndexingError, user_location
from tape.tape import apply, apply_inferred
from tape.variable import Variable

# Stand-ins for an open slice end, past any real dimension in either direction.
_BIG = 2**62


def _error(headline, **details):
    return IndexingError(None, headline, location=user_location(), **details)


def getitem(var, index):
    """``var[index]`` as ops."""
    index = index if isinstance(index, tuple) else (index,)
    key = _basic_key(var, index)
    if key is not None:
        known = _BASIC.get(key)
        if known is not None:  # (the ops, checked attributes and shapes of this index here)
            out = var
            for defn, attrs, shape in known:
                out = apply_inferred(defn, (out,), attrs, (shape, out.dtype))
            return out
    items = _classify(var, index)
    if not any(kind in ("array", "mask") for kind, _ in items):
        known = _basic(var, _expand_ellipsis([item for _, item in items], len(var.shape)))
        out, steps = var, []
        for defn, attrs in known:  # (each a view: its dtype is its input's)
            out = apply(defn, (out,), attrs)
            steps.append((defn, attrs, out.shape))
        if key is not None:
            if len(_BASIC) >= _BASIC_LIMIT:
                _BASIC.clear()
            _BASIC[key] = steps
        return out
    if len(items) == 1:
        kind, item = items[0]
        if kind == "array":
            return REGISTRY["gather"](var, item, axis=0)
        if item.shape == var.shape:
            return REGISTRY["masked_select"](var, item)
    kinds, bounds, indices = _advanced(var, items)
    return REGISTRY["index"](var, indices, kinds=kinds, **bounds)


def setitem(var, index, value):
    """``var[index] = value``: records 'index_put' and rebinds ``var`` to its result."""
    from tape.constants import as_variable

    if var.requires_grad and var.is_leaf or var.persistable:
        raise GraphError(
            None,
            f"variable '{var.name}' is a leaf that requires a gradient (or a persistable "
            "parameter) and cannot be assigned into",
            hint="assign into a copy (y = x * 1; y[i] = v), or build a new variable with "
            "ops.index_put or ops.where",
            location=user_location(),
        )
    items = _classify(var, index if isinstance(index, tuple) else (index,))
    value = as_variable(value, var, "index_put", "Values")
    if value.dtype != var.dtype:  # numpy's assignment: the value takes x's dtype
        value = REGISTRY["cast"](value, out_dtype=var.dtype.name)
    kinds, bounds, indices = _advanced(var, items)
    out = REGISTRY["index_put"](var, indices, value, kinds=kinds, accumulate=False, **bounds)
    _rebind(var, out)


def _classify(var, items):
    """Each index item as (kind, item): 'basic' (int, slice, None, ...) or 'array'/'mask' (an
    integer or boolean Variable)."""
    out = []
    for item in items:
        if item is None or item is Ellipsis or isinstance(item, slice):
            out.append(("basic", item))
        elif isinstance(item, (bool, np.bool_)):
            raise _error(
                "boolean indices are not supported",
                hint="index with a boolean array (x[mask]) or use ops.where",
            )
        elif isinstance(item, (int, np.integer)):
            out.append(("basic", int(item)))
        elif isinstance(item, Variable) or isinstance(item, (list, np.ndarray)):
            array = _index_variable(var, item)
            out.append(("mask" if array.dtype.kind == "b" else "array", array))
        else:
            raise _error(
                f"unsupported index {item!r} ({type(item).__name__})",
                hint="use ints, slices, None, ..., integer arrays or boolean masks",
            )
    return out


def _index_variable(var, index):
    if isinstance(index, Variable):
        if index.dtype.kind not in "iub":
            from tape.errors import DTypeError

            raise DTypeError(
                None,
                "input Index must hold integers (or booleans, as a mask)",
                actual=str(index.dtype),
                location=user_location(),
            )
        return index
    array = np.asarray(index)
    if array.size == 0 and isinstance(index, list):
        array = array.astype(np.int64)  # numpy reads [] as float64; as an index it selects none
    if array.dtype.kind not in "iub":
        raise _error(
            "index arrays must hold integers",
            expected="an integer dtype (or bool, as a mask)",
            actual=str(array.dtype),
        )
    if array.dtype.kind != "b":
        array = array.astype(np.int64, copy=False)
    if var._value is not None and array_module(var._value) is not np:
        array = array_module(var._value).asarray(array)  # beside X on its device
    return Variable(array)


def _consumed(kind, item):
    if kind == "mask":
        return len(item.shape)
    return 0 if item is None or item is Ellipsis else 1


def _advanced(var, items):
    """(kinds, slice bounds, index Variables) of the 'index' op for a mixed index."""
    if sum(1 for _, item in items if item is Ellipsis) > 1:
        raise _error("an index can only have a single ellipsis ('...')")
    used = sum(_consumed(kind, item) for kind, item in items)
    if used > len(var.shape):
        raise _error(
            "too many indices",
            expected=f"at most {len(var.shape)} (the variable's dimensions)",
            actual=str(used),
        )
    kinds, starts, ends, strides, indices, axis = [], [], [], [], [], 0
    for kind, item in items:
        if item is Ellipsis:  # kept as an item: numpy's placement counts it even when empty
            kinds.append(ELLIPSIS), starts.append(0), ends.append(0), strides.append(1)
            axis += len(var.shape) - used
            continue
        arrays = _mask_positions(var, item, axis) if kind == "mask" else [item]
        for array in arrays if kind != "basic" else ():
            kinds.append(ARRAY), starts.append(0), ends.append(0), strides.append(1)
            indices.append(array)
        if kind == "basic":
            code, bounds = _basic_item(item)
            kinds.append(code), starts.append(bounds[0]), ends.append(bounds[1])
            strides.append(bounds[2])
        axis += _consumed(kind, item)
    return kinds, {"starts": starts, "ends": ends, "strides": strides}, indices


def _basic_item(item):
    """(kind code, (start, end, stride)) of an int, slice or None."""
    if item is None:
        return NEWAXIS, (0, 0, 1)
    if isinstance(item, int):
        return INT, (item, 0, 1)
    step = 1 if item.step is None else int(item.step)
    if step == 0:
        raise _error("slice step cannot be zero")
    start = item.start if item.start is not None else (0 if step > 0 else -1)
    stop = item.stop if item.stop is not None else (_BIG if step > 0 else -_BIG)
    return SLICE, (int(start), int(stop), step)


def _mask_positions(var, mask, axis):
    """The integer positions of a boolean mask over axes axis.. of ``var`` (realizing it)."""
    covered = var.shape[axis : axis + len(mask.shape)]
    if not mask.shape or mask.shape != covered:
        raise _error(
            "a boolean index must match the axes it covers",
            expected=f"a mask of shape {covered} (axes {axis}.. of shape {var.shape})",
            actual=f"mask.shape={mask.shape}",
        )
    value = mask.value()
    return [Variable(p) for p in array_module(value).nonzero(value)]


def _rebind(var, out):
    """Makes the handle ``var`` the result ``out`` and ``out`` the old ``var``, everywhere the
    global tape refers to either, so earlier ops keep reading the old value."""
    from tape.tape import state

    for slot in _SWAPPED:
        old, new = getattr(var, slot), getattr(out, slot)
        setattr(var, slot, new)
        setattr(out, slot, old)
    tape = state.tape
    if tape is None:
        return
    swap = {id(var): out, id(out): var}
    for op in tape._ops:
        if op is not None:
            op.args = tuple(_swapped(entry, swap) for entry in op.args)
            op.results = tuple(_swapped(entry, swap) for entry in op.results)
    tape._structure = None  # it numbers variables by the ops that hold them


_SWAPPED = tuple(
    s for s in Variable.__slots__ if s not in ("_name", "persistable", "_origin", "__weakref__")
)


def _swapped(entry, swap):
    if entry.__class__ is list:
        return [swap.get(id(v), v) for v in entry]
    return swap.get(id(entry), entry) if entry is not None else None


def _expand_ellipsis(items, ndim):
    count = sum(1 for i in items if i is Ellipsis)
    if count > 1:
        raise _error("an index can only have a single ellipsis ('...')")
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if used > ndim:
        raise _error(
            "too many indices",
            expected=f"at most {ndim} (the variable's dimensions)",
            actual=str(used),
        )
    if count == 0:
        return list(items) + [slice(None)] * (ndim - used)
    at = next(k for k, i in enumerate(items) if i is Ellipsis)
    return list(items[:at]) + [slice(None)] * (ndim - used) + list(items[at + 1 :])


# Basic indices met before, per (shape, index): the ops they record, their attributes checked
# and their outputs' shapes (a model slices the same gates out of the same shapes at every step:
# ~5 us of an index's 12 went to working out and checking the same attributes again, and ~0.6
# us of the rest to inferring the same shape). Every step is a view: its dtype is its input's.
_BASIC, _BASIC_LIMIT = {}, 4096
_PLAIN = (int, type(None))


def _basic_key(var, index):
    """A hashable key of a basic index of ints, slices of ints, None and ``...`` on ``var``'s
    shape; None for any other index (those take the general path)."""
    key = [var.shape]
    for item in index:
        kind = item.__class__
        if kind is slice:
            start, stop, step = item.start, item.stop, item.step
            if not (
                start.__class__ in _PLAIN and stop.__class__ in _PLAIN and step.__class__ in _PLAIN
            ):
                return None
            key.append((start, stop, step))
        elif kind is int or item is None or item is Ellipsis:
            key.append(item)
        else:
            return None
    return tuple(key)


def _basic(var, items):
    """Ints, slices and None (ellipsis expanded) as one 'slice' and, for None, 'unsqueeze':
    the (op, checked attributes) to record, in order."""
    axes, starts, ends, strides, decrease = [], [], [], [], []
    axis = 0
    for item in items:
        if item is None:
            continue
        if isinstance(item, slice):
            _, (start, stop, step) = _basic_item(item)
            if (start, stop, step) != (0, _BIG, 1):
                axes.append(axis), starts.append(start), ends.append(stop), strides.append(step)
        else:
            dim = var.shape[axis]
            if not -dim <= item < dim:
                raise _error(
                    f"index {item} is out of bounds for axis {axis} "
                    f"of variable '{var.name}' with shape {var.shape}",
                    expected=f"an int with -{dim} <= index < {dim}",
                    actual=str(item),
                )
            start = item % dim
            axes.append(axis), starts.append(start), ends.append(start + 1), strides.append(1)
            decrease.append(axis)
        axis += 1
    steps = []
    if axes:
        defn = REGISTRY["slice"]
        attrs = {
            "axes": tuple(axes),
            "starts": tuple(starts),
            "ends": tuple(ends),
            "strides": tuple(strides),
            "decrease_axis": tuple(decrease),
        }
        steps.append((defn, _checked(defn, attrs)))
    if any(item is None for item in items):
        # Positions of None in the result: count the dimensions kept before each None.
        kept, positions = 0, []
        for item in items:
            if item is None:
                positions.append(kept + len(positions))
            elif not isinstance(item, int):
                kept += 1
        defn = REGISTRY["unsqueeze"]
        steps.append((defn, _checked(defn, {"axes": positions})))
    return tuple(steps)


def _checked(defn, attrs):
    """``defn``'s attributes checked, an error naming the op and the user's line."""
    try:
        return defn.check_attrs(attrs)
    except FluidError as err:
        raise err.with_context(op=defn.type, location=user_location()) from None
