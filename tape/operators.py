"""Python operators on Variable (``+ - * / @ ** neg``, comparisons, indexing, reductions), as ops.

Each operator records one registered op; this module only maps Python syntax to op types.
"""

from __future__ import annotations

from ops.registry import REGISTRY
from tape.constants import as_variable
from tape.errors import InputError
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
    """``x[index] = value``: an out-of-place 'index_put' that rebinds ``x`` (tape.indexing)."""
    from tape.indexing import setitem

    setitem(self, index, value)


def _tensor_methods():
    """The movement, indexing and creation methods with PyTorch's signatures (x.flip(0), ...)."""
    from ops.tensor_methods import METHODS

    return METHODS


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
        "__getitem__": _getitem,
        "__setitem__": _setitem,
        "sum": _sum,
        "mean": _mean,
        "max": _max,
        "min": _min,
        "reshape": _reshape,
        "transpose": _transpose,
        "astype": _astype,
        # Movement and indexing methods, with PyTorch's signatures (ops.tensor_methods).
        **_tensor_methods(),
    }
    for name, fn in table.items():
        setattr(Variable, name, fn)
    Variable.__hash__ = object.__hash__
    Variable.T = property(lambda self: _transpose(self), doc="The transpose (axes reversed).")
    Variable.__pos__ = lambda self: self
