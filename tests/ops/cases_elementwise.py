"""Cases for the binary elementwise ops (ops/elementwise.py) and the comparisons (ops/compare.py).

Each arithmetic op runs on equal shapes, numpy broadcasting of either or both sides, Paddle's
``axis`` placement, size-0 and size-1 axes and 0-d inputs. Divisors stay away from zero, bases
of pow are positive, and max/min inputs have no ties (the tie rule has its own test in
test_broadcasting.py, since finite differences are undefined there).
"""

import numpy as np

from tape.testing import OpCase
from tests.ops.cases_unary import away_from, positive


def paddle_aligned(x, y, axis):
    """Y reshaped so numpy broadcasting places its dimensions at X's ``axis`` (Paddle's rule)."""
    if axis == -1 or y.ndim >= x.ndim:
        return y
    return y.reshape(y.shape + (1,) * (x.ndim - axis - y.ndim))


_NUMPY_FUNCTIONS = {
    "elementwise_add": np.add,
    "elementwise_sub": np.subtract,
    "elementwise_mul": np.multiply,
    "elementwise_div": np.divide,
    "elementwise_pow": np.power,
    "elementwise_max": np.maximum,
    "elementwise_min": np.minimum,
    "less_than": np.less,
    "less_equal": np.less_equal,
    "greater_than": np.greater,
    "greater_equal": np.greater_equal,
    "equal": np.equal,
    "not_equal": np.not_equal,
}


def reference_of(op):
    fn = _NUMPY_FUNCTIONS[op]
    return lambda x, y, axis=-1: fn(x, paddle_aligned(x, y, axis))


def _y_maker(op, shape):
    if op == "elementwise_div":
        return away_from(shape, 0.0, gap=0.5)
    return shape


def _x_maker(op, shape):
    return positive(shape) if op == "elementwise_pow" else shape


# (name, X shape, Y shape, attrs, double_grad)
_LAYOUTS = [
    ("same", (3, 4), (3, 4), {}, True),
    ("broadcast_y", (2, 3, 4), (4,), {}, False),
    ("broadcast_x", (3, 1), (2, 3, 4), {}, False),
    ("broadcast_both", (3, 1), (1, 4), {}, True),
    ("paddle_axis", (2, 3, 4), (3,), {"axis": 1}, True),
    ("paddle_axis_0", (3, 4), (3,), {"axis": 0}, False),
    ("size0", (0, 3), (3,), {}, False),
    ("size1_axes", (1, 3), (2, 1), {}, False),
    ("scalar_y", (2, 3), (), {}, True),
    ("scalar_x", (), (4,), {}, False),
    ("scalars", (), (), {}, False),
]

_ARITHMETIC = [
    "elementwise_add",
    "elementwise_sub",
    "elementwise_mul",
    "elementwise_div",
    "elementwise_pow",
    "elementwise_max",
    "elementwise_min",
]


def _arithmetic_cases():
    cases = []
    for op in _ARITHMETIC:
        for name, x_shape, y_shape, attrs, double in _LAYOUTS:
            cases.append(
                OpCase(
                    op,
                    {"X": _x_maker(op, x_shape), "Y": _y_maker(op, y_shape)},
                    attrs,
                    reference=reference_of(op),
                    double_grad=double,
                    name=name,
                )
            )
    return cases


def _integers(shape, low=-2, high=3):
    """Small integer values (as floats for float dtypes), so that equal elements occur."""
    return lambda rng, dtype: rng.integers(low, high, shape).astype(dtype)


def _comparison_cases():
    cases = []
    for op in ["less_than", "less_equal", "greater_than", "greater_equal", "equal", "not_equal"]:
        reference = reference_of(op)
        cases += [
            OpCase(
                op,
                {"X": _integers((3, 4)), "Y": _integers((3, 4))},
                reference=reference,
                grad=False,
            ),
            OpCase(
                op,
                {"X": _integers((3, 1)), "Y": _integers((1, 4))},
                reference=reference,
                grad=False,
                name="broadcast_both",
            ),
            OpCase(
                op,
                {"X": _integers((2, 3, 4)), "Y": _integers((3,))},
                {"axis": 1},
                reference=reference,
                grad=False,
                name="paddle_axis",
            ),
            OpCase(
                op,
                {"X": _integers((0, 2)), "Y": _integers(())},
                reference=reference,
                grad=False,
                name="size0_scalar",
            ),
            OpCase(
                op,
                {"X": np.array([[1, 5, -3]], np.int64), "Y": _integers((2, 1))},
                reference=reference,
                grad=False,
                name="int_vs_float",
            ),
        ]
    return cases


CASES = (
    _arithmetic_cases()
    + [
        OpCase(
            "elementwise_pow",
            {"X": positive((2, 3)), "Y": np.array(2.0)},
            reference=reference_of("elementwise_pow"),
            double_grad=True,
            name="square",
        ),
        OpCase(
            "elementwise_pow",
            {"X": away_from((2, 3), 0.0, gap=0.5), "Y": np.array([2.0, 3.0, -1.0])},
            reference=reference_of("elementwise_pow"),
            grad_inputs=("X",),
            double_grad=True,
            name="integral_exponent_negative_base",
        ),
        OpCase(
            "elementwise_pow",
            {"X": np.array([0.0, 0.5, 2.0]), "Y": positive((2, 3), 1.5, 2.5)},
            reference=reference_of("elementwise_pow"),
            grad_inputs=("Y",),
            double_grad=True,
            name="zero_base",
        ),
        OpCase(
            "elementwise_add",
            {"X": np.array([[1, 2]], np.int32), "Y": np.array([3], np.int64)},
            reference=reference_of("elementwise_add"),
            grad=False,
            name="int",
        ),
        OpCase(
            "elementwise_div",
            {"X": np.array([7, -7], np.int64), "Y": np.array([2, 2])},
            reference=reference_of("elementwise_div"),
            grad=False,
            name="int_true_division",
        ),
    ]
    + _comparison_cases()
)
