"""Creation ops: ops with no inputs that make arrays (``arange``, ``linspace``, ``logspace``,
``eye``, ``randint``; ``fill_constant`` and the random fills live in ``ops.fill`` and
``ops.random``) and ``full_like``, which takes only its input's shape and place.

None has a gradient. Users call them through PyTorch's factory functions in ``ops.factories``
(``ops.arange(5)``, ``ops.zeros(2, 3)``, ...), which choose dtypes as PyTorch does.
"""

from __future__ import annotations

import math

import numpy as np

from ops.registry import Attr, register
from tape.errors import AttrError, ShapeError


def _number(value):
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


_NUMBER = {"check": _number, "rule": "a number"}


def _count(attrs):
    start, end, step = attrs["start"], attrs["end"], attrs["step"]
    if step == 0 or not all(math.isfinite(v) for v in (start, end, step)):
        raise AttrError(
            None, "arange needs finite bounds and a non-zero step", actual=f"{start}, {end}, {step}"
        )
    return max(0, math.ceil((end - start) / step))


@register(
    "arange",
    attrs={
        "start": Attr("any", 0, **_NUMBER),
        "end": Attr("any", required=True, **_NUMBER),
        "step": Attr("any", 1, **_NUMBER),
        "dtype": Attr("dtype", "int64"),
    },
    infer=lambda attrs: ((_count(attrs),), np.dtype(attrs["dtype"])),
    differentiable=False,
)
def _arange(xp, attrs):
    """Out = start, start + step, ... up to (excluding) end: ceil((end - start) / step) values,
    start + i * step computed in float64 for floating dtypes (torch.arange). No gradient."""
    dtype, start, end, step = np.dtype(attrs["dtype"]), attrs["start"], attrs["end"], attrs["step"]
    if dtype.kind in "iu" and all(isinstance(v, (int, np.integer)) for v in (start, end, step)):
        return xp.arange(start, end, step, dtype=dtype)
    return (xp.arange(_count(attrs), dtype=np.float64) * step + start).astype(dtype)


def _steps_attrs(extra=None):
    attrs = {
        "start": Attr("any", required=True, **_NUMBER),
        "end": Attr("any", required=True, **_NUMBER),
        "steps": Attr("int", required=True, check=lambda n: n >= 0, rule=">= 0"),
        "dtype": Attr("dtype", "float32"),
    }
    attrs.update(extra or {})
    return attrs


def _infer_steps(attrs):
    return (attrs["steps"],), np.dtype(attrs["dtype"])


def _line(xp, attrs):
    """``steps`` evenly spaced float64 values from start to end, both included; the second half
    counted back from end (torch.linspace's way, so end is exact)."""
    start, end, n = float(attrs["start"]), float(attrs["end"]), attrs["steps"]
    step = (end - start) / (n - 1) if n > 1 else 0.0
    i = xp.arange(n, dtype=np.float64)
    if n == 1:
        return xp.full(1, start, dtype=np.float64)  # a single step is start, as in PyTorch
    return xp.where(i < n // 2, start + step * i, end - step * (n - 1 - i))


@register("linspace", attrs=_steps_attrs(), infer=_infer_steps, differentiable=False)
def _linspace(xp, attrs):
    """Out = ``steps`` values evenly spaced from start to end inclusive (torch.linspace; integer
    dtypes truncate). No gradient."""
    return _line(xp, attrs).astype(attrs["dtype"])


@register(
    "logspace",
    attrs=_steps_attrs({"base": Attr("float", 10.0)}),
    infer=_infer_steps,
    differentiable=False,
)
def _logspace(xp, attrs):
    """Out = base ** linspace(start, end, steps) (torch.logspace). No gradient."""
    return (attrs["base"] ** _line(xp, attrs)).astype(attrs["dtype"])


def _infer_eye(attrs):
    n, m = attrs["n"], attrs["m"]
    return (n, n if m is None else m), np.dtype(attrs["dtype"])


_SIZE = {"check": lambda n: n >= 0, "rule": ">= 0"}


@register(
    "eye",
    attrs={
        "n": Attr("int", required=True, **_SIZE),
        "m": Attr("int", None, **_SIZE),
        "dtype": Attr("dtype", "float32"),
    },
    infer=_infer_eye,
    differentiable=False,
)
def _eye(xp, attrs):
    """Out = the n x m (default n x n) matrix with ones on the main diagonal (torch.eye)."""
    return xp.eye(attrs["n"], attrs["m"], dtype=attrs["dtype"])


@register(
    "full_like",
    inputs=("X",),
    attrs={"value": Attr("float", 0.0), "dtype": Attr("dtype", None)},
    infer=lambda attrs, x: (x.shape, np.dtype(attrs["dtype"] or x.dtype)),
    differentiable=False,
    no_need_buffer=("X",),
)
def _full_like(xp, attrs, x):
    """Out = ``value`` in X's shape, as ``dtype`` (X's by default), where X lives. No gradient."""
    return xp.full(x.shape, attrs["value"], dtype=attrs["dtype"] or x.dtype)


def _infer_randint(attrs):
    if attrs["low"] >= attrs["high"]:
        raise AttrError(
            None,
            "randint needs low < high",
            actual=f"low={attrs['low']}, high={attrs['high']}",
        )
    if any(d < 0 for d in attrs["shape"]):
        raise ShapeError(
            None, "attribute 'shape' has a negative dimension", actual=str(attrs["shape"])
        )
    return tuple(attrs["shape"]), np.dtype(attrs["dtype"])


@register(
    "randint",
    attrs={
        "low": Attr("int", 0),
        "high": Attr("int", required=True),
        "shape": Attr("ints", required=True),
        "dtype": Attr(
            "dtype", "int64", check=lambda d: np.dtype(d).kind in "iu", rule="an integer dtype"
        ),
        "seed": Attr("int", 0),
    },
    infer=_infer_randint,
    random=True,
    differentiable=False,
)
def _randint(xp, attrs):
    """Out = integers drawn uniformly from [low, high) (torch.randint). No gradient."""
    from ops.random import _generator

    gen = _generator(xp, attrs["seed"])
    return gen.integers(attrs["low"], attrs["high"], size=attrs["shape"], dtype=attrs["dtype"])
