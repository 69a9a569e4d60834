"""Short names for ops whose registered type follows Paddle (``ops.add`` is ``elementwise_add``).

Aliases are the same OpDef objects, not wrappers: there is still one source of truth per op.
"""

from ops.registry import REGISTRY

add = REGISTRY["elementwise_add"]
subtract = sub = REGISTRY["elementwise_sub"]
multiply = REGISTRY["elementwise_mul"]
divide = div = REGISTRY["elementwise_div"]
pow = REGISTRY["elementwise_pow"]  # noqa: A001
maximum = REGISTRY["elementwise_max"]
minimum = REGISTRY["elementwise_min"]

__all__ = ["add", "subtract", "sub", "multiply", "divide", "div", "pow", "maximum", "minimum"]

# Elementwise math and activations: PyTorch's and numpy's other names for the same ops.
mod = REGISTRY["remainder"]
fix = REGISTRY["trunc"]
arcsin, arccos, arctan = REGISTRY["asin"], REGISTRY["acos"], REGISTRY["atan"]
arctan2 = REGISTRY["atan2"]
arcsinh, arccosh, arctanh = REGISTRY["asinh"], REGISTRY["acosh"], REGISTRY["atanh"]
left_shift = REGISTRY["bitwise_left_shift"]
right_shift = REGISTRY["bitwise_right_shift"]
invert = REGISTRY["bitwise_not"]
swish = REGISTRY["silu"]

__all__ += [
    "mod",
    "fix",
    "arcsin",
    "arccos",
    "arctan",
    "arctan2",
    "arcsinh",
    "arccosh",
    "arctanh",
    "left_shift",
    "right_shift",
    "invert",
    "swish",
]

# Linear algebra: torch.linalg.inv is the inverse op (torch.inverse's name).
inv = REGISTRY["inverse"]

__all__ += ["inv"]
