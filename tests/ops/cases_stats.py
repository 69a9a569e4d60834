"""Cases for the statistics (ops/stats.py: prod, var, std, var_mean, std_mean) and the p-norms
(ops/pnorm.py: norm), with PyTorch as the reference where the semantics are its own."""

import warnings

import numpy as np
import torch

from tape.testing import OpCase


def torch_reference(fn):
    """A reference running ``fn(tensor, **attrs)`` in PyTorch on the numpy inputs."""

    def reference(*arrays, **attrs):
        with warnings.catch_warnings():  # e.g. var's "degrees of freedom is <= 0"
            warnings.simplefilter("ignore")
            out = fn(*[torch.from_numpy(np.array(a)) for a in arrays], **attrs)
        if isinstance(out, tuple):
            return tuple(o.numpy() for o in out)
        return out.numpy()

    return reference


def _dims(axis):
    return None if axis is None else tuple(np.atleast_1d(axis).tolist())


def _with_zeros(shape, *positions):
    """Standard-normal values with exact zeros at the given flat positions."""

    def make(rng, dtype):
        x = rng.standard_normal(shape)
        x.reshape(-1)[list(positions)] = 0.0
        return x.astype(dtype)

    return make


# ---- prod -------------------------------------------------------------------------------------


def _prod(x, axis=None, keepdim=False):
    return np.prod(x, axis=_dims(axis), keepdims=keepdim)


PROD = [
    OpCase("prod", {"X": (3, 4)}, {"axis": 1}, reference=_prod, double_grad=True),
    OpCase(
        "prod",
        {"X": (2, 3, 4)},
        {"axis": [0, 2], "keepdim": True},
        reference=_prod,
        double_grad=True,
        name="keepdim",
    ),
    OpCase(
        "prod",
        {"X": (2, 3, 2)},
        {"axis": [-1, -3]},
        reference=_prod,
        double_grad=True,
        name="negative_axes",
    ),
    OpCase("prod", {"X": (2, 3)}, {}, reference=_prod, double_grad=True, name="all"),
    OpCase("prod", {"X": (3, 4)}, {"axis": 0}, reference=_prod, double_grad=True, name="axis0"),
    OpCase(
        "prod", {"X": ()}, {"axis": -1}, reference=lambda x, **a: x, double_grad=True, name="0d"
    ),
    OpCase("prod", {"X": (0, 3)}, {"axis": 1}, reference=_prod, double_grad=True, name="size0"),
    OpCase(
        "prod", {"X": (0, 3)}, {"axis": 0}, reference=_prod, double_grad=True, name="over_size0"
    ),
    # One zero per slice: its gradient is the product of the rest; two: all zero. The product
    # is a polynomial, so finite differences are exact there too (second order included).
    OpCase(
        "prod",
        {"X": _with_zeros((3, 4), 1, 5, 6, 8, 11)},
        {"axis": 1},
        reference=_prod,
        double_grad=True,
        name="zeros",
    ),
    OpCase(
        "prod",
        {"X": _with_zeros((2, 3), 0, 4)},
        {},
        reference=_prod,
        double_grad=True,
        name="zeros_all",
    ),
    OpCase(
        "prod",
        {"X": np.array([[1, -2, 3], [4, 5, 0]], np.int32)},
        {"axis": 1},
        reference=lambda x, axis: np.prod(x, axis=axis, dtype=np.int64),
        grad=False,
        name="int32",
    ),
]

# ---- var, std, var_mean, std_mean -------------------------------------------------------------


def _moment(fn):
    def call(t, axis=None, correction=1.0, keepdim=False):
        return fn(t, dim=_dims(axis), correction=correction, keepdim=keepdim)

    return torch_reference(call)


def _moment_cases(op, fn):
    ref = _moment(fn)
    return [
        OpCase(op, {"X": (3, 4)}, {"axis": 1}, reference=ref, double_grad=True),
        OpCase(op, {"X": (3, 4)}, {}, reference=ref, double_grad=True, name="all"),
        OpCase(
            op,
            {"X": (2, 3, 4)},
            {"axis": [0, -1], "keepdim": True},
            reference=ref,
            double_grad=True,
            name="keepdim",
        ),
        OpCase(
            op,
            {"X": (4, 3)},
            {"axis": 0, "correction": 0},
            reference=ref,
            double_grad=True,
            name="biased",
        ),
        OpCase(
            op,
            {"X": (2, 5)},
            {"axis": -1, "correction": 2.5},
            reference=ref,
            double_grad=True,
            name="correction",
        ),
        OpCase(
            op,
            {"X": (3, 1)},
            {"axis": 1, "correction": 0},
            reference=ref,
            grad=op.startswith("var"),  # std of one element is 0: PyTorch's gradient is 0
            double_grad=op.startswith("var"),
            name="size1",
        ),
        OpCase(op, {"X": (0, 3)}, {"axis": 1}, reference=ref, double_grad=True, name="size0"),
    ]


MOMENTS = (
    _moment_cases("var", torch.var)
    + _moment_cases("std", torch.std)
    + _moment_cases("var_mean", torch.var_mean)
    + _moment_cases("std_mean", torch.std_mean)
)

# ---- norm -------------------------------------------------------------------------------------


def _vector_norm(t, p="fro", axis=None, keepdim=False):
    if p == "fro":
        return torch.norm(t, p="fro", dim=_dims(axis), keepdim=keepdim)
    return torch.linalg.vector_norm(t, ord=p, dim=_dims(axis), keepdim=keepdim)


_NORM = torch_reference(_vector_norm)


def _norm_case(p, shape=(3, 4), axis=1, name=None, **extra):
    attrs = {"axis": axis} if p is None else {"p": p, "axis": axis}
    return OpCase(
        "norm",
        {"X": shape},
        attrs,
        reference=_NORM,
        double_grad=True,
        name=name or f"p{p}",
        **extra,
    )


NORM = [
    _norm_case(None, name="fro"),
    _norm_case("fro", (2, 3, 4), [0, 2], name="fro_axes"),
    _norm_case(2, (2, 3), None, name="p2_all"),
    _norm_case(1),
    _norm_case(3),
    _norm_case(1.5, (2, 3, 2), [-1, 0]),
    _norm_case(0.5),
    _norm_case(-1),
    _norm_case(float("inf")),
    _norm_case(float("-inf"), axis=0),
    _norm_case(0),
    _norm_case(2, (0, 3), 1, name="size0"),
    _norm_case(2, (), 0, name="0d"),
    OpCase(
        "norm",
        {"X": (2, 3, 2)},
        {"p": 2, "axis": 1, "keepdim": True},
        reference=_NORM,
        double_grad=True,
        name="keepdim",
    ),
    # A zero vector: PyTorch's gradient there is 0 for p = 2 (and for p < 1 at zero entries).
    OpCase(
        "norm",
        {"X": np.array([[0.0, 0.0, 0.0], [1.0, -2.0, 0.5]])},
        {"p": 2, "axis": 1},
        reference=_NORM,
        grad=False,
        name="zero_row",
    ),
]

CASES = PROD + MOMENTS + NORM
