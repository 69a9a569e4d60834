"""Python operators on Variable (``+ - * / // % @ ** neg``, comparisons, ``& | ^ ~ << >>``,
indexing, reductions), as ops.

``%`` and ``//`` are Python's (and PyTorch's) 'remainder' and 'floor_divide': the remainder has
the divisor's sign. ``& | ^ ~`` are bitwise on integers and logical on bools ('bitwise_*'), as
in PyTorch; ``<< >>`` shift integers.

Each operator records one registered op; this module only maps Python syntax to op types.
"""

from __future__ import annotations

from ops.registry import REGISTRY
from tape.constants import as_variable
from tape.errors import InputError, user_location
from tape.tape import apply
from tape.variable import Variable


def _binary(op_type, reflected=False):
    def method(self, other):
        if other.__class__ is not Variable:
            try:
                other = as_variable(other, self, op_type, "Y")
            except InputError:
                return NotImplemented
        defn = REGISTRY[op_type]
        return apply(defn, (other, self) if reflected else (self, other), defn.defaults)

    method.__name__ = op_type
    method.__doc__ = f"Records '{op_type}'."
    return method


def _unary(op_type):
    def method(self):
        defn = REGISTRY[op_type]
        return apply(defn, (self,), defn.defaults)

    method.__name__ = op_type
    return method


def _sum(self, axis=None, keepdims=False):
    """Sum over ``axis`` (all axes when None), as op 'reduce_sum'."""
    return REGISTRY["reduce_sum"](self, axis=axis, keepdim=keepdims)


def _mean(self, axis=None, keepdims=False):
    """Mean over ``axis``; the mean of all elements is the seed's 'mean' op."""
    if axis is None and not keepdims:
        return REGISTRY["mean"](self)
    return REGISTRY["reduce_mean"](self, axis=axis, keepdim=keepdims)


def _max(self, axis=None, keepdims=False):
    return REGISTRY["reduce_max"](self, axis=axis, keepdim=keepdims)


def _min(self, axis=None, keepdims=False):
    return REGISTRY["reduce_min"](self, axis=axis, keepdim=keepdims)


def _reshape(self, *shape):
    """Reshape (one -1 is inferred), as op 'reshape'."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return REGISTRY["reshape"](self, shape=shape)


def _transpose(self, *axes):
    """Permute axes (reverse them when none are given), as op 'transpose'."""
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = axes[0]
    if not axes:
        axes = tuple(range(len(self.shape) - 1, -1, -1))
    return REGISTRY["transpose"](self, perm=axes)


def _getitem(self, index):
    from tape.indexing import getitem

    return getitem(self, index)


def _astype(self, dtype):
    return REGISTRY["cast"](self, out_dtype=dtype)


def _setitem(self, index, value):
    raise TypeError(
        f"variable '{self.name}' does not support item assignment (recorded at "
        f"{user_location()}); build a new variable with ops.where or ops.concat"
    )


def install():
    """Attaches the operators to Variable (called once the op table is loaded)."""
    table = {
        "__add__": _binary("elementwise_add"),
        "__radd__": _binary("elementwise_add", reflected=True),
        "__sub__": _binary("elementwise_sub"),
        "__rsub__": _binary("elementwise_sub", reflected=True),
        "__mul__": _binary("elementwise_mul"),
        "__rmul__": _binary("elementwise_mul", reflected=True),
        "__truediv__": _binary("elementwise_div"),
        "__rtruediv__": _binary("elementwise_div", reflected=True),
        "__pow__": _binary("elementwise_pow"),
        "__rpow__": _binary("elementwise_pow", reflected=True),
        "__floordiv__": _binary("floor_divide"),
        "__rfloordiv__": _binary("floor_divide", reflected=True),
        "__mod__": _binary("remainder"),
        "__rmod__": _binary("remainder", reflected=True),
        "__and__": _binary("bitwise_and"),
        "__rand__": _binary("bitwise_and", reflected=True),
        "__or__": _binary("bitwise_or"),
        "__ror__": _binary("bitwise_or", reflected=True),
        "__xor__": _binary("bitwise_xor"),
        "__rxor__": _binary("bitwise_xor", reflected=True),
        "__lshift__": _binary("bitwise_left_shift"),
        "__rlshift__": _binary("bitwise_left_shift", reflected=True),
        "__rshift__": _binary("bitwise_right_shift"),
        "__rrshift__": _binary("bitwise_right_shift", reflected=True),
        "__matmul__": _binary("matmul"),
        "__rmatmul__": _binary("matmul", reflected=True),
        "__lt__": _binary("less_than"),
        "__le__": _binary("less_equal"),
        "__gt__": _binary("greater_than"),
        "__ge__": _binary("greater_equal"),
        "__eq__": _binary("equal"),
        "__ne__": _binary("not_equal"),
        "__neg__": _unary("neg"),
        "__abs__": _unary("abs"),
        "__invert__": _unary("bitwise_not"),
        "__getitem__": _getitem,
        "__setitem__": _setitem,
        "sum": _sum,
        "mean": _mean,
        "max": _max,
        "min": _min,
        "reshape": _reshape,
        "transpose": _transpose,
        "astype": _astype,
    }
    for name, fn in table.items():
        setattr(Variable, name, fn)
    Variable.__hash__ = object.__hash__
    Variable.T = property(lambda self: _transpose(self), doc="The transpose (axes reversed).")
    Variable.__pos__ = lambda self: self
