"""Python operators on Variable (``+ - * / // % @ ** neg``, comparisons, ``& | ^ ~ << >>``,
indexing, reductions), as ops.

``%`` and ``//`` are Python's (and PyTorch's) 'remainder' and 'floor_divide': the remainder has
the divisor's sign. ``& | ^ ~`` are bitwise on integers and logical on bools ('bitwise_*'), as
in PyTorch; ``<< >>`` shift integers.

Each operator records one registered op; this module only maps Python syntax to op types.
"""

from __future__ import annotations

from ops.registry import REGISTRY
from tape import tape as _engine
from tape.constants import as_variable
from tape.errors import InputError
from tape.indexing import getitem, setitem
from tape.tape import get_global_tape, state
from tape.variable import Variable


def _binary(op_type, reflected=False):
    def method(self, other):
        if other.__class__ is not Variable:
            try:
                other = as_variable(other, self, op_type, "Y")
            except InputError:
                return NotImplemented
        defn = REGISTRY[op_type]
        args = (other, self) if reflected else (self, other)
        # (``apply`` inlined: a frame fewer per op; this method's caller may be the user's line;
        # ``record`` through its module, which ``tape.track_memory`` patches)
        tape = state.tape
        if tape is None:
            tape = get_global_tape()
        return _engine.record(tape, defn, args, defn.defaults, None, False, 3)

    method.__name__ = op_type
    method.__doc__ = f"Records '{op_type}'."
    return method


def _unary(op_type):
    def method(self):
        defn = REGISTRY[op_type]
        tape = state.tape
        if tape is None:
            tape = get_global_tape()
        return _engine.record(tape, defn, (self,), defn.defaults, None, False, 3)

    method.__name__ = op_type
    return method


def _sum(self, axis=None, keepdims=False):
    """Sum over ``axis`` (all axes when None), as op 'reduce_sum'."""
    if axis is None and not keepdims:  # (the defaults: no attributes to check)
        return REGISTRY["reduce_sum"](self)
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


def _astype(self, dtype):
    return REGISTRY["cast"](self, out_dtype=dtype)


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
        "__getitem__": getitem,  # (tape.indexing's own: a frame fewer per index)
        "__setitem__": setitem,  # (an out-of-place 'index_put' that rebinds the Variable)
        "sum": _sum,
        "mean": _mean,
        "max": _max,
        "min": _min,
        "reshape": _reshape,
        "transpose": _transpose,
        "astype": _astype,
        # Reductions, scans and order statistics, as PyTorch's Tensor methods (dim, keepdim).
        "prod": _prod,
        "var": _spread("var"),
        "std": _spread("std"),
        "argmax": _arg_reduction("argmax"),
        "argmin": _arg_reduction("argmin"),
        "any": _truth("any"),
        "all": _truth("all"),
        "cumsum": _scan("cumsum"),
        "cumprod": _scan("cumprod"),
        "logcumsumexp": _scan("logcumsumexp"),
        "cummax": _scan("cummax"),
        "cummin": _scan("cummin"),
        "sort": _sort,
        "argsort": _argsort,
        "topk": _topk,
        "kthvalue": _kthvalue,
        "median": _median,
        "norm": _norm,
        "isclose": _isclose,
        "allclose": _allclose,
        # Movement and indexing methods, with PyTorch's signatures (ops.tensor_methods).
        **_tensor_methods(),
    }
    for name, fn in table.items():
        setattr(Variable, name, fn)
    Variable.__hash__ = object.__hash__
    Variable.T = property(lambda self: _transpose(self), doc="The transpose (axes reversed).")
    Variable.__pos__ = lambda self: self


# ---- reductions, scans and order statistics (PyTorch's Tensor methods) --------------------------


def _prod(self, dim=None, keepdim=False):
    """Product over ``dim`` (all elements when None), as op 'prod'."""
    return REGISTRY["prod"](self, axis=dim, keepdim=keepdim)


def _spread(op_type):
    def method(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        if unbiased is not None and correction is not None:
            raise TypeError(f"{op_type}(): give either 'unbiased' or 'correction', not both")
        if correction is None:
            correction = 1 if unbiased is None or unbiased else 0
        return REGISTRY[op_type](self, axis=dim, correction=correction, keepdim=keepdim)

    method.__name__ = op_type
    method.__doc__ = f"""'{op_type}' over ``dim`` (all when None), dividing by N - correction
    (``unbiased=False`` means correction 0), as PyTorch."""
    return method


def _arg_reduction(op_type):
    def method(self, dim=None, keepdim=False):
        return REGISTRY[op_type](self, axis=dim, keepdim=keepdim)

    method.__name__ = op_type
    method.__doc__ = f"Index of the {op_type[3:]} along ``dim`` (flat when None), as '{op_type}'."
    return method


def _truth(op_type):
    def method(self, dim=None, keepdim=False):
        return REGISTRY[op_type](self, axis=dim, keepdim=keepdim)

    method.__name__ = op_type
    method.__doc__ = f"Whether {op_type} elements over ``dim`` are nonzero, as op '{op_type}'."
    return method


def _scan(op_type):
    def method(self, dim):
        return REGISTRY[op_type](self, axis=dim)

    method.__name__ = op_type
    method.__doc__ = f"'{op_type}' along ``dim``."
    return method


def _sort(self, dim=-1, descending=False, stable=False):
    """(values, indices) sorted along ``dim``, as op 'sort'."""
    return REGISTRY["sort"](self, axis=dim, descending=descending, stable=stable)


def _argsort(self, dim=-1, descending=False, stable=False):
    return REGISTRY["argsort"](self, axis=dim, descending=descending, stable=stable)


def _topk(self, k, dim=-1, largest=True, sorted=True):  # noqa: A002  (PyTorch's name)
    """(values, indices) of the k largest (or smallest) along ``dim``, as op 'topk'."""
    return REGISTRY["topk"](self, k=k, axis=dim, largest=largest, sorted=sorted)


def _kthvalue(self, k, dim=-1, keepdim=False):
    return REGISTRY["kthvalue"](self, k=k, axis=dim, keepdim=keepdim)


def _median(self, dim=None, keepdim=False):
    """The lower median: of all elements (values only) when ``dim`` is None, else (values,
    indices) along ``dim``, as ``torch.median``."""
    result = REGISTRY["median"](self, axis=dim, keepdim=keepdim)
    return result.values if dim is None else result


def _norm(self, p="fro", dim=None, keepdim=False):
    """The p-norm over ``dim`` (all elements when None), as op 'norm'."""
    return REGISTRY["norm"](self, p=p, axis=dim, keepdim=keepdim)


def _isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    return REGISTRY["isclose"](self, other, rtol=rtol, atol=atol, equal_nan=equal_nan)


def _allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether every element is close to ``other``: a Python bool, as ``torch.allclose``."""
    return bool(REGISTRY["allclose"](self, other, rtol=rtol, atol=atol, equal_nan=equal_nan))
