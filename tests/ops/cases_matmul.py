"""Cases for matmul (transpose flags, broadcast batches, 1-D operands, size-0 dims), outer and
the ``mul`` forms cases_core.py leaves out; every case checks double gradients."""

import numpy as np

from tape.testing import OpCase


def _matmul(x, y, transpose_x=False, transpose_y=False):
    if transpose_x and x.ndim >= 2:
        x = np.swapaxes(x, -1, -2)
    if transpose_y and y.ndim >= 2:
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x, y)


def _mul(x, y, x_num_col_dims=1, y_num_col_dims=1):
    rows, cols = x.shape[:x_num_col_dims], y.shape[y_num_col_dims:]
    inner = int(np.prod(x.shape[x_num_col_dims:]))
    out = x.reshape(int(np.prod(rows)), inner) @ y.reshape(inner, int(np.prod(cols)))
    return out.reshape(rows + cols)


def _case(x, y, name, **attrs):
    return OpCase("matmul", {"X": x, "Y": y}, attrs, reference=_matmul, double_grad=True, name=name)


TRANSPOSES = [
    _case((3, 4), (4, 5), ""),
    _case((4, 3), (4, 5), "tx", transpose_x=True),
    _case((3, 4), (5, 4), "ty", transpose_y=True),
    _case((4, 3), (5, 4), "tx_ty", transpose_x=True, transpose_y=True),
]

BATCHED = [
    _case((2, 3, 4), (2, 4, 2), "batched"),
    _case((2, 1, 3, 2), (3, 2, 2), "broadcast_batch"),
    _case((3, 2), (2, 2, 4), "broadcast_2d_x"),
    _case((2, 2, 3), (2, 1, 2, 3), "broadcast_ty", transpose_y=True),
    _case((1, 3, 2), (2, 2, 3), "broadcast_tx_ty", transpose_x=True, transpose_y=True),
]

VECTORS = [
    _case((4,), (4,), "dot"),
    _case((4,), (4, 3), "vec_x"),
    _case((3, 4), (4,), "vec_y"),
    _case((4,), (2, 4, 3), "vec_x_batched"),
    _case((2, 3, 4), (4,), "vec_y_batched"),
    _case((4,), (3, 4), "vec_x_ty", transpose_y=True),
    _case((4, 3), (4,), "vec_y_tx", transpose_x=True),
    _case((4,), (4,), "dot_flags_ignored", transpose_x=True, transpose_y=True),
]

EMPTY = [
    _case((0, 3), (3, 2), "size0_rows"),
    _case((2, 0), (0, 3), "size0_inner"),
    _case((0, 2, 3), (3, 4), "size0_batch"),
    _case((0,), (0,), "size0_dot"),
]

MUL = [
    OpCase(
        "mul",
        {"X": (2, 3, 5), "Y": (3, 5, 2)},
        {"x_num_col_dims": 1, "y_num_col_dims": 2},
        reference=_mul,
        double_grad=True,
        name="flatten_both",
    ),
    OpCase(
        "mul",
        {"X": (2, 3, 2, 2), "Y": (2, 2, 3)},
        {"x_num_col_dims": 2, "y_num_col_dims": 2},
        reference=_mul,
        double_grad=True,
        name="4d_x",
    ),
    OpCase("mul", {"X": (2, 0), "Y": (0, 3)}, reference=_mul, double_grad=True, name="size0_inner"),
]


def _outer_case(m, n, name):
    return OpCase("outer", {"X": (m,), "Y": (n,)}, reference=np.outer, double_grad=True, name=name)


OUTER = [
    _outer_case(3, 4, ""),
    _outer_case(1, 5, "size1_x"),
    _outer_case(4, 1, "size1_y"),
    _outer_case(0, 3, "size0_x"),
    _outer_case(3, 0, "size0_y"),
]

CASES = TRANSPOSES + BATCHED + VECTORS + EMPTY + MUL + OUTER
