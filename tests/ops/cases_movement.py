"""Cases for the movement ops: flip, roll, tile, repeat_interleave, pad (each mode, negative
pads), tril/triu and diagonal, with their gradient ops; references are numpy, or PyTorch where
the semantics are PyTorch's (pad)."""

import numpy as np
import torch
import torch.nn.functional as F

from tape.testing import OpCase


def _ints(shape):
    return lambda rng, dtype: np.arange(int(np.prod(shape))).reshape(shape)


def _pad_ref(x, pad, mode="constant", value=0.0):
    t = torch.from_numpy(np.array(x))  # contiguous, and still 0-d for 0-d
    if mode == "constant":
        return F.pad(t, tuple(pad), mode=mode, value=value).numpy()
    # torch's non-constant modes want a batch axis in front of the padded ones
    batched = t.reshape((1,) * (len(pad) // 2 + 2 - t.ndim) + t.shape) if t.ndim < 3 else t
    out = F.pad(batched, tuple(pad), mode=mode).numpy()
    return out.reshape(out.shape[out.ndim - x.ndim :])


def _adjoint(forward):
    """The reference of a gradient op: the transpose of ``forward`` (linear in X) applied to
    Out@GRAD, computed by numpy from the Jacobian's columns."""

    def reference(x, gout, **attrs):
        basis = np.eye(x.size).reshape((x.size,) + x.shape)
        columns = np.stack([forward(e, **attrs).reshape(-1) for e in basis], axis=1)
        return (columns.T @ gout.reshape(-1)).reshape(x.shape).astype(gout.dtype)

    return reference


def _interleave_ref(x, repeats, axis=None):
    return np.repeat(x, repeats, axis=axis)  # an int or one count per element


def _diagonal_ref(x, offset=0, axis1=0, axis2=1):
    return np.diagonal(x, offset, axis1, axis2)


FLIP_ROLL = [
    OpCase("flip", {"X": (2, 3, 4)}, {"axis": [0, -1]}, reference=np.flip, double_grad=True),
    OpCase(
        "flip",
        {"X": ()},
        {"axis": []},
        reference=lambda x, axis: x,
        double_grad=True,
        name="0d",
    ),
    OpCase(
        "flip",
        {"X": _ints((2, 0, 3))},
        {"axis": [1, 2]},
        reference=np.flip,
        grad=False,
        name="int_size0",
    ),
    OpCase(
        "roll",
        {"X": (3, 4)},
        {"shifts": [1, -5], "axis": [0, 1]},
        reference=lambda x, shifts, axis: np.roll(x, shifts, axis),
        double_grad=True,
    ),
    OpCase(
        "roll",
        {"X": (2, 3)},
        {"shifts": 4},
        reference=lambda x, shifts: np.roll(x, shifts),
        double_grad=True,
        name="flattened",
    ),
    OpCase(
        "tile",
        {"X": (2, 3)},
        {"repeats": [2, 1, 3]},
        reference=lambda x, repeats: np.tile(x, repeats),
        double_grad=True,
    ),
    OpCase(
        "tile",
        {"X": (2, 1, 3)},
        {"repeats": [2]},
        reference=lambda x, repeats: np.tile(x, repeats),
        double_grad=True,
        name="few_repeats",
    ),
    OpCase(
        "tile",
        {"X": (2, 3)},
        {"repeats": [0, 2]},
        reference=lambda x, repeats: np.tile(x, repeats),
        double_grad=True,
        name="zero",
    ),
    OpCase(
        "repeat_interleave",
        {"X": (3, 2)},
        {"repeats": [2, 0, 3], "axis": 0},
        reference=_interleave_ref,
        double_grad=True,
    ),
    OpCase(
        "repeat_interleave",
        {"X": (2, 3)},
        {"repeats": 2, "axis": -1},
        reference=_interleave_ref,
        double_grad=True,
        name="uniform",
    ),
    OpCase(
        "repeat_interleave",
        {"X": (2, 2)},
        {"repeats": [1, 2, 0, 1]},
        reference=_interleave_ref,
        double_grad=True,
        name="flattened",
    ),
    OpCase(
        "repeat_interleave_grad",
        {"X": (3, 2), "Out@GRAD": (5, 2)},
        {"repeats": [2, 0, 3], "axis": 0},
        reference=_adjoint(_interleave_ref),
        grad_inputs=("Out@GRAD",),
        double_grad=True,
    ),
    OpCase(
        "repeat_interleave_grad",
        {"X": (2, 2), "Out@GRAD": (4,)},
        {"repeats": [1, 2, 0, 1]},
        reference=_adjoint(_interleave_ref),
        grad_inputs=("Out@GRAD",),
        double_grad=True,
        name="flattened",
    ),
]

PAD = [
    OpCase(
        "pad",
        {"X": (2, 3, 4)},
        {"pad": [1, 2, 0, 1], "mode": "constant", "value": 0.5},
        reference=_pad_ref,
        double_grad=True,
        name="constant",
    ),
    OpCase(
        "pad",
        {"X": (3, 4)},
        {"pad": [-1, 2, 2, -2]},
        reference=_pad_ref,
        double_grad=True,
        name="constant_crop",
    ),
    OpCase(
        "pad",
        {"X": (2, 3, 4)},
        {"pad": [3, 1, 2, 2], "mode": "reflect"},
        reference=_pad_ref,
        double_grad=True,
        name="reflect",
    ),
    OpCase(
        "pad",
        {"X": (2, 5)},
        {"pad": [-1, 2], "mode": "reflect"},
        reference=_pad_ref,
        double_grad=True,
        name="reflect_crop",
    ),
    OpCase(
        "pad",
        {"X": (2, 3, 2)},
        {"pad": [3, 1, 0, 2], "mode": "replicate"},
        reference=_pad_ref,
        double_grad=True,
        name="replicate",
    ),
    OpCase(
        "pad",
        {"X": (2, 3, 4)},
        {"pad": [4, 1, 3, 3], "mode": "circular"},
        reference=_pad_ref,
        double_grad=True,
        name="circular",
    ),
    OpCase(
        "pad",
        {"X": (0, 3)},
        {"pad": [1, 1, 2, 0]},
        reference=_pad_ref,
        double_grad=True,
        name="size0",
    ),
    OpCase(
        "pad_grad",
        {"X": (2, 3), "Out@GRAD": (3, 6)},
        {"pad": [2, 1, -1, 2], "mode": "constant", "value": 3.0},
        reference=_adjoint(lambda x, **a: _pad_ref(x, **dict(a, value=0.0))),
        grad_inputs=("Out@GRAD",),
        double_grad=True,
        name="constant",
    ),
    OpCase(
        "pad_grad",
        {"X": (2, 4), "Out@GRAD": (3, 7)},
        {"pad": [2, 1, 1, 0], "mode": "reflect"},
        reference=_adjoint(_pad_ref),
        grad_inputs=("Out@GRAD",),
        double_grad=True,
        name="reflect",
    ),
    OpCase(
        "pad_grad",
        {"X": (2, 3), "Out@GRAD": (2, 7)},
        {"pad": [3, 1], "mode": "replicate"},
        reference=_adjoint(_pad_ref),
        grad_inputs=("Out@GRAD",),
        double_grad=True,
        name="replicate",
    ),
    OpCase(
        "pad_grad",
        {"X": (2, 3), "Out@GRAD": (2, 8)},
        {"pad": [3, 2], "mode": "circular"},
        reference=_adjoint(_pad_ref),
        grad_inputs=("Out@GRAD",),
        double_grad=True,
        name="circular",
    ),
]

TRIANGLES = [
    OpCase("tril", {"X": (3, 4)}, reference=lambda x: np.tril(x), double_grad=True),
    OpCase(
        "tril",
        {"X": (2, 3, 4)},
        {"diagonal": -1},
        reference=lambda x, diagonal: np.tril(x, diagonal),
        double_grad=True,
        name="batched_offset",
    ),
    OpCase("triu", {"X": (4, 3)}, reference=lambda x: np.triu(x), double_grad=True),
    OpCase(
        "triu",
        {"X": (2, 3, 4)},
        {"diagonal": 2},
        reference=lambda x, diagonal: np.triu(x, diagonal),
        double_grad=True,
        name="batched_offset",
    ),
    OpCase("diagonal", {"X": (3, 4)}, reference=_diagonal_ref, double_grad=True),
    OpCase(
        "diagonal",
        {"X": (2, 3, 4)},
        {"offset": -1, "axis1": 2, "axis2": 0},
        reference=_diagonal_ref,
        double_grad=True,
        name="axes_offset",
    ),
    OpCase(
        "diagonal",
        {"X": (2, 3)},
        {"offset": 5},
        reference=_diagonal_ref,
        double_grad=True,
        name="empty",
    ),
    OpCase(
        "diagonal_grad",
        {"X": (2, 3, 4), "Out@GRAD": (4, 2)},
        {"offset": 1, "axis1": 0, "axis2": -2},
        reference=_adjoint(_diagonal_ref),
        grad_inputs=("Out@GRAD",),
        double_grad=True,
    ),
]

CASES = FLIP_ROLL + PAD + TRIANGLES
