"""Cases for the seed's ops and the engine's own ops (fills, sum, mean, sum_to_shape, sgd)."""

import numpy as np

from tape.testing import OpCase


def _positive(shape):
    return lambda rng, dtype: rng.uniform(0.5, 2.0, shape).astype(dtype)


def _away_from_zero(shape):
    """Values with |x| >= 0.1, so kinks (relu at 0) are farther than the finite-difference step."""

    def make(rng, dtype):
        x = rng.uniform(0.1, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
        return x.astype(dtype)

    return make


def _sgd_reference(param, grad, lr):
    return param - lr.reshape(()) * grad


CASES = [
    OpCase("mul", {"X": (4, 3), "Y": (3, 5)}, reference=lambda x, y, **a: x @ y, double_grad=True),
    OpCase(
        "mul",
        {"X": (2, 3, 4), "Y": (4, 5)},
        {"x_num_col_dims": 2},
        reference=lambda x, y, **a: x @ y,
        double_grad=True,
        name="3d_x",
    ),
    OpCase(
        "mul",
        {"X": (2, 6), "Y": (2, 3, 5)},
        {"y_num_col_dims": 2},
        reference=lambda x, y, **a: x @ y.reshape(6, 5),
        name="3d_y",
    ),
    OpCase("mul", {"X": (0, 3), "Y": (3, 2)}, reference=lambda x, y, **a: x @ y, name="empty"),
    OpCase(
        "elementwise_add",
        {"X": (8, 3), "Y": (3,)},
        {"axis": 1},
        reference=lambda x, y, axis: x + y,
        double_grad=True,
        name="seed_axis",
    ),
    OpCase(
        "elementwise_add",
        {"X": (2, 3, 4, 5), "Y": (3, 4)},
        {"axis": 1},
        reference=lambda x, y, axis: x + y.reshape(1, 3, 4, 1),
        name="paddle_axis",
    ),
    OpCase(
        "elementwise_add",
        {"X": (3, 1), "Y": (1, 4)},
        reference=lambda x, y: x + y,
        double_grad=True,
        name="broadcast_both",
    ),
    OpCase("elementwise_add", {"X": (0, 4), "Y": (4,)}, reference=lambda x, y: x + y, name="size0"),
    OpCase(
        "relu",
        {"X": _away_from_zero((3, 4))},
        reference=lambda x: np.maximum(x, 0),
        double_grad=True,
    ),
    OpCase(
        "relu_grad",
        {
            "Out": lambda rng, dt: np.maximum(_away_from_zero((3, 4))(rng, dt), 0),
            "Out@GRAD": (3, 4),
        },
        reference=lambda out, g: g * (out > 0),
        grad_inputs=("Out@GRAD",),
        double_grad=True,
    ),
    OpCase(
        "fill_constant",
        {},
        {"shape": [2, 3], "value": 1.5, "dtype": "float32"},
        reference=lambda **a: np.full((2, 3), 1.5, np.float32),
        grad=False,
        dtypes=("float32",),
    ),
    OpCase(
        "fill_constant",
        {},
        {"shape": [0, 3], "value": 2, "dtype": "int64"},
        reference=lambda **a: np.full((0, 3), 2, np.int64),
        grad=False,
        dtypes=("float32",),
        name="int_empty",
    ),
    OpCase("fill_zeros_like", {"X": (2, 3)}, reference=np.zeros_like, grad=False),
    OpCase("fill_ones_like", {"X": (2, 3)}, reference=np.ones_like, grad=False),
    OpCase("mean", {"X": (3, 4)}, reference=lambda x: np.mean(x), double_grad=True),
    OpCase("mean", {"X": (1,)}, reference=lambda x: np.mean(x), name="size1"),
    OpCase(
        "sum",
        {"X": [(2, 3), (2, 3), (2, 3)]},
        reference=lambda xs: xs[0] + xs[1] + xs[2],
        double_grad=True,
    ),
    OpCase("sum", {"X": [(4,)]}, reference=lambda xs: xs[0], name="single"),
    OpCase(
        "sum_to_shape",
        {"X": (2, 3, 4)},
        {"shape": [3, 1]},
        reference=lambda x, shape: x.sum(axis=(0, 2), keepdims=True).reshape(3, 1),
        double_grad=True,
    ),
    OpCase(
        "sum_to_shape",
        {"X": (2, 3)},
        {"shape": [2, 3]},
        reference=lambda x, shape: x,
        name="identity",
    ),
    OpCase(
        "sgd",
        {"Param": (3, 2), "Grad": (3, 2), "LearningRate": lambda rng, dt: np.asarray([0.1], dt)},
        reference=_sgd_reference,
        grad=False,
    ),
]
