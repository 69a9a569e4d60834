"""The generated backends' table: op type -> a numpy expression over its arguments.

``numba_loops`` evaluates these expressions on scalars inside one compiled loop nest and
``cupy_fuse`` on arrays inside ``cupy.fuse``; each provides the names they use (``np``, ``where``,
``maximum``, ``minimum``, ``clip``) with numpy's semantics (NaN propagation, ties). A rule
``render(a, attrs, k)`` gets its arguments as expressions already in the step's compute dtype and
``k(value)`` rendering a constant in that dtype; every rule follows its kernel's operation order,
so the *exact* rules (IEEE arithmetic, comparisons, selects, sqrt) give bit-identical results;
the others call libm functions (exp, tanh, ...), whose last bit may differ from numpy's SIMD loops.
An op without a rule (erf, exact gelu, integer division, bitwise ops, rounding, ...) makes the
whole group use ``blocked`` (CPU) or ``reference`` (GPU).
"""

from __future__ import annotations

import collections
import math

import numpy as np

# cast: "out" casts float arguments to the step's dtype (the kernels' promotion), "common" to
# their common dtype (comparisons), "none" leaves them. floats: the rule needs float arguments.
Rule = collections.namedtuple("Rule", "render exact cast floats", defaults=(True, "out", True))

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946
_TANH_C, _TANH_K = math.sqrt(2.0 / math.pi), 0.044715


def _binary(symbol):
    return Rule(lambda a, attrs, k: f"({a[0]} {symbol} {a[1]})")


def _call(name, exact=False):
    return Rule(lambda a, attrs, k: f"np.{name}({a[0]})", exact=exact)


def _sigmoid(x, k):
    # (exp(-x) overflows to inf below x = -88 in float32: 1 / inf = 0, as the kernel gives)
    return f"({k(1.0)} / ({k(1.0)} + np.exp(-{x})))"


def _softplus(z, k):
    return f"(maximum({z}, {k(0.0)}) + np.log1p(np.exp(-np.abs({z}))))"


def _scaled(x, factor, k):
    return f"({x} * {k(factor)})" if factor != 1.0 else x


def _scale(a, attrs, k):
    x, factor, bias = a[0], k(attrs["scale"]), attrs["bias"]
    if attrs["bias_after_scale"]:
        return f"({x} * {factor} + {k(bias)})" if bias else f"({x} * {factor})"
    return f"(({x} + {k(bias)}) * {factor})" if bias else f"({x} * {factor})"


def _clip(x, low, high, k):
    """numpy's clip (NaN stays NaN; -0 stays -0 at a bound 0): ``clip_low``/``clip_high``
    where one bound is None."""
    if low is None:
        return f"clip_high({x}, {k(high)})"
    if high is None:
        return f"clip_low({x}, {k(low)})"
    return f"clip_high(clip_low({x}, {k(low)}), {k(high)})"


def _clip_grad(a, attrs, k):
    x, g, low, high = a[0], a[1], attrs["min"], attrs["max"]
    if low is None and high is None:
        return g
    inside = g
    if high is not None:
        inside = f"where({x} <= {k(high)}, {inside}, {k(0)})"
    if low is not None:
        inside = f"where({x} >= {k(low)}, {inside}, {k(0)})"
    return inside


def _masked(cond, g, k):
    """``g * cond`` of a bool mask: g where true, g * 0 (keeping -0 and NaN) where false."""
    return f"where({cond}, {g}, {g} * {k(0.0)})"


def _silu_grad(a, attrs, k):
    x, g = a
    bx = _scaled(x, attrs.get("beta", 1.0), k)
    s = _sigmoid(bx, k)
    return f"({g} * ({s} * ({k(1.0)} + {bx} * ({k(1.0)} - {s}))))"


def _sum(a, attrs, k):
    out = a[0]
    for x in a[1:]:
        out = f"({out} + {x})"
    return out


def _lerp(a, attrs, k):
    x, end, w = a
    diff = f"({end} - {x})"
    near = f"(np.abs({w}) < {k(0.5)})"
    return f"where({near}, {x} + {w} * {diff}, {end} - {diff} * ({k(1.0)} - {w}))"


def _huber(a, attrs, k):
    delta = attrs["delta"]
    d = f"({a[0]} - {a[1]})"
    quadratic = f"({d} * {d} * {k(0.5)})"
    linear = f"((np.abs({d}) - {k(0.5 * delta)}) * {k(delta)})"
    return f"where(np.abs({d}) < {k(delta)}, {quadratic}, {linear})"


def _hardswish_grad(a, attrs, k):
    x, g = a
    slope = f"where({x} < {k(3.0)}, {x} * {k(1.0 / 3.0)} + {k(0.5)}, {k(1.0)})"
    return f"where({x} <= {k(-3.0)}, {k(0.0)}, {g} * {slope})"


def _expm1_min(x, k):
    return f"np.expm1(minimum({x}, {k(0.0)}))"


def _gelu_tanh(x, k):
    return f"np.tanh({x} * ({x} * {x} * {k(_TANH_C * _TANH_K)} + {k(_TANH_C)}))"


def _gelu(a, attrs, k):
    x = a[0]
    return f"({x} * (({_gelu_tanh(x, k)} + {k(1.0)}) * {k(0.5)}))"


def _gelu_grad(a, attrs, k):
    x, g = a
    t, sq = _gelu_tanh(x, k), f"({x} * {x})"
    slope = (
        f"({k(0.5)} * ({k(1.0)} + {t}) + ({k(0.5)} * {x}) * ({k(1.0)} - {t} * {t})"
        f" * ({sq} * {k(3.0 * _TANH_C * _TANH_K)} + {k(_TANH_C)}))"
    )
    return f"({g} * {slope})"


RULES = {
    "elementwise_add": _binary("+"),
    "elementwise_sub": _binary("-"),
    "elementwise_mul": _binary("*"),
    "elementwise_div": _binary("/"),
    "elementwise_max": Rule(lambda a, attrs, k: f"maximum({a[0]}, {a[1]})"),
    "elementwise_min": Rule(lambda a, attrs, k: f"minimum({a[0]}, {a[1]})"),
    "elementwise_pow": Rule(lambda a, attrs, k: f"np.power({a[0]}, {a[1]})", exact=False),
    "sum": Rule(_sum),
    "neg": Rule(lambda a, attrs, k: f"(-{a[0]})"),
    "abs": Rule(lambda a, attrs, k: f"np.abs({a[0]})"),
    "square": Rule(lambda a, attrs, k: f"({a[0]} * {a[0]})"),
    "scale": Rule(_scale),
    "reciprocal": Rule(lambda a, attrs, k: f"({k(1.0)} / {a[0]})"),
    "sqrt": Rule(lambda a, attrs, k: f"np.sqrt({a[0]})"),
    "rsqrt": Rule(lambda a, attrs, k: f"({k(1.0)} / np.sqrt({a[0]}))"),
    "softsign": Rule(lambda a, attrs, k: f"({a[0]} / ({k(1.0)} + np.abs({a[0]})))"),
    "copysign": Rule(lambda a, attrs, k: f"np.copysign({a[0]}, {a[1]})"),
    "cast": Rule(lambda a, attrs, k: a[0], cast="none"),
    "relu": Rule(lambda a, attrs, k: f"maximum({a[0]}, {k(0)})"),
    "relu_grad": Rule(lambda a, attrs, k: f"where({a[0]} <= {k(0)}, {a[1]} * {k(0)}, {a[1]})"),
    "tanh_grad": Rule(lambda a, attrs, k: f"({a[1]} * ({k(1.0)} - {a[0]} * {a[0]}))"),
    "sigmoid_grad": Rule(lambda a, attrs, k: f"({a[1]} * {a[0]} * ({k(1.0)} - {a[0]}))"),
    "leaky_relu": Rule(
        lambda a, attrs, k: f"where({a[0]} > {k(0)}, {a[0]}, {a[0]} * {k(attrs['alpha'])})"
    ),
    "leaky_relu_grad": Rule(
        lambda a, attrs, k: f"where({a[0]} > {k(0)}, {a[1]}, {a[1]} * {k(attrs['alpha'])})"
    ),
    "clip": Rule(lambda a, attrs, k: _clip(a[0], attrs["min"], attrs["max"], k)),
    "clip_grad": Rule(_clip_grad),
    "hardtanh": Rule(lambda a, attrs, k: _clip(a[0], attrs["min_val"], attrs["max_val"], k)),
    "hardtanh_grad": Rule(
        lambda a, attrs, k: _masked(
            f"{a[0]} > {k(attrs['min_val'])}",
            _masked(f"{a[0]} < {k(attrs['max_val'])}", a[1], k),
            k,
        )
    ),
    "relu6": Rule(lambda a, attrs, k: _clip(a[0], 0.0, 6.0, k)),
    "hardsigmoid": Rule(
        lambda a, attrs, k: f"({_clip(f'{a[0]} + {k(3.0)}', 0.0, 6.0, k)} / {k(6.0)})"
    ),
    "hardswish": Rule(
        lambda a, attrs, k: f"({a[0]} * {_clip(f'{a[0]} + {k(3.0)}', 0.0, 6.0, k)} / {k(6.0)})"
    ),
    "hardswish_grad": Rule(_hardswish_grad),
    "lerp": Rule(_lerp),
    "huber_loss": Rule(_huber),
    "isnan": Rule(lambda a, attrs, k: f"np.isnan({a[0]})", cast="none"),
    "isinf": Rule(lambda a, attrs, k: f"np.isinf({a[0]})", cast="none"),
    "isfinite": Rule(lambda a, attrs, k: f"np.isfinite({a[0]})", cast="none"),
    # libm functions: within a few ulp of numpy's, not bit for bit.
    "exp": _call("exp"),
    "exp2": _call("exp2"),
    "expm1": _call("expm1"),
    "log": _call("log"),
    "log2": _call("log2"),
    "log10": _call("log10"),
    "log1p": _call("log1p"),
    "sin": _call("sin"),
    "cos": _call("cos"),
    "tan": _call("tan"),
    "tanh": _call("tanh"),
    "sinh": _call("sinh"),
    "cosh": _call("cosh"),
    "asin": _call("arcsin"),
    "acos": _call("arccos"),
    "atan": _call("arctan"),
    "asinh": _call("arcsinh"),
    "acosh": _call("arccosh"),
    "atanh": _call("arctanh"),
    "atan2": Rule(lambda a, attrs, k: f"np.arctan2({a[0]}, {a[1]})", exact=False),
    "sigmoid": Rule(lambda a, attrs, k: _sigmoid(a[0], k), exact=False),
    "silu": Rule(lambda a, attrs, k: f"({a[0]} * {_sigmoid(a[0], k)})", exact=False),
    "quick_gelu": Rule(
        lambda a, attrs, k: f"({a[0]} * {_sigmoid(f'({a[0]} * {k(1.702)})', k)})", exact=False
    ),
    "silu_grad": Rule(_silu_grad, exact=False),
    "logsigmoid": Rule(
        lambda a, attrs, k: f"(minimum({a[0]}, {k(0.0)}) - np.log1p(np.exp(-np.abs({a[0]}))))",
        exact=False,
    ),
    "elu": Rule(
        lambda a, attrs, k: (
            f"where({a[0]} > {k(0)}, {a[0]}, {k(attrs['alpha'])} * {_expm1_min(a[0], k)})"
        ),
        exact=False,
    ),
    "elu_grad": Rule(
        lambda a, attrs, k: (
            f"where({a[0]} > {k(0)}, {a[1]}, "
            f"{a[1]} * ({k(attrs['alpha'])} * np.exp(minimum({a[0]}, {k(0.0)}))))"
        ),
        exact=False,
    ),
    "selu": Rule(
        lambda a, attrs, k: (
            f"({k(_SELU_SCALE)} * where({a[0]} > {k(0)}, {a[0]}, "
            f"{k(_SELU_ALPHA)} * {_expm1_min(a[0], k)}))"
        ),
        exact=False,
    ),
    "mish": Rule(lambda a, attrs, k: f"({a[0]} * np.tanh({_softplus(a[0], k)}))", exact=False),
    "gelu": Rule(_gelu, exact=False),
    "gelu_grad": Rule(_gelu_grad, exact=False),
}


def _comparison(symbol):
    return Rule(lambda a, attrs, k: f"({a[0]} {symbol} {a[1]})", cast="common")


for _name, _symbol in (
    ("equal", "=="),
    ("not_equal", "!="),
    ("less_than", "<"),
    ("less_equal", "<="),
    ("greater_than", ">"),
    ("greater_equal", ">="),
):
    RULES[_name] = _comparison(_symbol)

# Attribute values a rule cannot express: the group falls back.
_UNSUPPORTED = {"gelu": {"approximate": False}, "gelu_grad": {"approximate": False}}


def rule_for(step):
    """The step's rule, or None when the table cannot express it with these attributes."""
    rule = RULES.get(step.op)
    if rule is None:
        return None
    attrs = dict(step.attrs)
    for name, value in _UNSUPPORTED.get(step.op, {}).items():
        if attrs.get(name) == value:
            return None
    return rule


class Constant:
    """``k(value)``: renders a constant in a step's compute dtype, as a backend spells it."""

    def __init__(self, dtype, spell):
        self.dtype, self._spell = np.dtype(dtype), spell

    def __call__(self, value):
        return self._spell(float(value), self.dtype)


__all__ = ["RULES", "Rule", "rule_for", "Constant"]
