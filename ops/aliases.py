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
