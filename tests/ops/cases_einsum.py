"""Cases for einsum, against torch.einsum: products, traces and diagonals, sums within one
operand, '...' broadcasting, extent-1 broadcasting, implicit outputs, several operands, and the
repeated output labels its gradients use (placed on a diagonal of zeros); and for kron and cross
(ops/contraction.py), against torch.kron and torch.linalg.cross."""

import numpy as np
import torch

from tape.testing import OpCase


def _torch_einsum(xs, equation):
    # np.array copies to contiguous memory (np.ascontiguousarray would make a 0-d array 1-d)
    return torch.einsum(equation, *[torch.from_numpy(np.array(x)) for x in xs]).numpy()


def _diagonal_embed(xs, equation):
    """'ij->iij'-style references: the unique-label result placed on the diagonal."""
    (x,) = xs
    out = np.zeros((x.shape[0],) * 2 + x.shape[1:], x.dtype)
    out[np.arange(x.shape[0]), np.arange(x.shape[0])] = x
    return out


_EQUATIONS = [
    ("matmul", "ij,jk->ik", [(2, 3), (3, 4)]),
    ("batched", "bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]),
    ("trace", "ii->", [(3, 3)]),
    ("diagonal", "ii->i", [(3, 3)]),
    ("trace_batched", "...ii->...", [(2, 3, 3)]),
    ("sum_all", "ij->", [(2, 3)]),
    ("sum_within_one", "ijk,j->ij", [(2, 3, 4), (3,)]),
    ("transpose", "ijk->kij", [(2, 3, 4)]),
    ("outer_three", "i,j,k->ijk", [(2,), (3,), (2,)]),
    ("chain", "ab,bc,cd->ad", [(2, 3), (3, 4), (4, 2)]),
    ("implicit", "Ba,aB", [(2, 3), (3, 2)]),
    ("implicit_sorted", "ba,ca", [(2, 3), (4, 3)]),
    ("ellipsis_broadcast", "...ij,...jk", [(1, 2, 3), (4, 3, 2)]),
    ("ellipsis_summed", "...ij->ij", [(2, 3, 4)]),
    ("extent1_broadcast", "ij,ij,ij->", [(2, 3), (1, 3), (2, 1)]),
    ("diagonal_and_sum", "iij,k->jk", [(2, 2, 3), (2,)]),
    ("bilinear", "bn,anm,bm->ba", [(2, 3), (2, 3, 4), (2, 4)]),
    ("scalar", ",ij->ij", [(), (2, 3)]),
    ("size0", "ij,jk->ik", [(2, 0), (0, 3)]),
]

CASES = [
    OpCase(
        "einsum",
        {"X": shapes},
        {"equation": equation},
        reference=_torch_einsum,
        double_grad=True,
        name=name,
    )
    for name, equation, shapes in _EQUATIONS
] + [
    OpCase(
        "einsum",
        {"X": [(3, 2)]},
        {"equation": "ij->iij"},
        reference=_diagonal_embed,
        double_grad=True,
        name="repeated_output_label",
    ),
    OpCase(
        "einsum",
        {"X": [lambda rng, dtype: np.arange(6).reshape(2, 3), lambda rng, d: np.ones(3, int)]},
        {"equation": "ij,j->i"},
        reference=lambda xs, equation: np.einsum(equation, *xs),
        grad=False,
        name="int",
    ),
]


def _torch_kron(x, y):
    return torch.kron(torch.from_numpy(np.array(x)), torch.from_numpy(np.array(y))).numpy()


def _torch_cross(x, y, axis=-1):
    """torch.linalg.cross on both inputs padded with leading 1s to one rank (it wants equal
    ranks; the axis counts in the broadcast shape either way)."""
    ndim = max(x.ndim, y.ndim)
    x, y = (torch.from_numpy(np.array(a).reshape((1,) * (ndim - a.ndim) + a.shape)) for a in (x, y))
    return torch.linalg.cross(x, y, dim=axis).numpy()


def _ints(shape, seed):
    return lambda rng, dtype: np.random.default_rng(seed).integers(-4, 5, shape)


_KRONS = [
    ("", (2, 3), (4,)),
    ("matrices", (2, 3), (3, 2)),
    ("scalar", (), (3,)),
    ("scalars", (), ()),
    ("ranks_differ", (2,), (3, 2, 1)),
    ("size1", (1, 2, 1), (3, 1, 2)),
    ("size0", (2, 0), (3, 2)),
]

_CROSSES = [
    ("", (4, 3), (4, 3), {}),
    ("axis0", (3, 4, 1), (3, 1, 5), {"axis": 0}),
    ("broadcast_rank", (2, 4, 3), (3,), {}),
    ("negative_axis", (2, 3, 2), (1, 3, 1), {"axis": -2}),
    ("size1", (1, 3), (1, 3), {}),
    ("size0", (0, 3), (1, 3), {}),
]

CASES += (
    [
        OpCase("kron", {"X": xs, "Y": ys}, reference=_torch_kron, double_grad=True, name=name)
        for name, xs, ys in _KRONS
    ]
    + [
        OpCase(
            "kron",
            {"X": _ints((2, 2), 1), "Y": _ints((2, 3), 2)},
            reference=_torch_kron,
            grad=False,
            name="int",
        ),
        OpCase(
            "kron",
            {"X": _ints((2, 2), 1), "Y": (3,)},
            reference=_torch_kron,
            name="int_and_float",
        ),
    ]
    + [
        OpCase(
            "cross",
            {"X": xs, "Y": ys},
            attrs,
            reference=_torch_cross,
            double_grad=True,
            name=name,
        )
        for name, xs, ys, attrs in _CROSSES
    ]
    + [
        OpCase(
            "cross",
            {"X": _ints((2, 3), 3), "Y": _ints((2, 3), 4)},
            reference=_torch_cross,
            grad=False,
            name="int",
        )
    ]
)
