"""Cases for the creation ops (no inputs, no gradients): arange, linspace, logspace and eye
against PyTorch, full_like, and randint checked statistically."""

import numpy as np
import torch

from tape.testing import OpCase


def _torch(fn):
    def reference(**attrs):
        dtype = getattr(torch, attrs.pop("dtype"))
        return fn(dtype=dtype, **attrs).numpy()

    return reference


def _check_randint(outputs, inputs, attrs):
    (out,) = outputs
    low, high = attrs.get("low", 0), attrs["high"]
    assert out.dtype == np.dtype(attrs.get("dtype", "int64")) and out.shape == tuple(attrs["shape"])
    assert out.min() >= low and out.max() < high
    counts = np.bincount(out.ravel() - low, minlength=high - low)
    expected = out.size / (high - low)
    # each count is binomial: within 6 standard deviations of its mean
    assert np.all(np.abs(counts - expected) < 6 * np.sqrt(expected)), counts


_ARANGE = lambda start, end, step, dtype: torch.arange(start, end, step, dtype=dtype)  # noqa: E731

CASES = [
    OpCase(
        "arange",
        {},
        {"start": 2, "end": 11, "step": 3, "dtype": "int64"},
        reference=_torch(_ARANGE),
        grad=False,
        dtypes=("float32",),
    ),
    OpCase(
        "arange",
        {},
        {"start": 1.0, "end": -2.2, "step": -0.3, "dtype": "float32"},
        reference=_torch(_ARANGE),
        grad=False,
        dtypes=("float32",),
        name="float_negative_step",
    ),
    OpCase(
        "arange",
        {},
        {"start": 0, "end": 1, "step": 0.1, "dtype": "float64"},
        reference=_torch(_ARANGE),
        grad=False,
        dtypes=("float64",),
        name="float64",
    ),
    OpCase(
        "arange",
        {},
        {"start": 3, "end": 3, "dtype": "int32"},
        reference=_torch(lambda start, end, dtype: torch.arange(start, end, dtype=dtype)),
        grad=False,
        dtypes=("float32",),
        name="empty",
    ),
    OpCase(
        "linspace",
        {},
        {"start": -1.0, "end": 2.0, "steps": 7, "dtype": "float32"},
        reference=_torch(torch.linspace),
        grad=False,
        dtypes=("float32",),
    ),
    OpCase(
        "linspace",
        {},
        {"start": -1, "end": 1, "steps": 7, "dtype": "int64"},
        reference=_torch(torch.linspace),
        grad=False,
        dtypes=("float32",),
        name="int",
    ),
    OpCase(
        "linspace",
        {},
        {"start": 3.0, "end": 5.0, "steps": 1, "dtype": "float64"},
        reference=_torch(torch.linspace),
        grad=False,
        dtypes=("float64",),
        name="one_step",
    ),
    OpCase(
        "logspace",
        {},
        {"start": -2.0, "end": 1.0, "steps": 5, "base": 2.0, "dtype": "float32"},
        reference=_torch(torch.logspace),
        grad=False,
        dtypes=("float32",),
    ),
    OpCase(
        "eye",
        {},
        {"n": 3, "m": 4, "dtype": "float32"},
        reference=_torch(torch.eye),
        grad=False,
        dtypes=("float32",),
    ),
    OpCase(
        "eye",
        {},
        {"n": 2, "dtype": "int64"},
        reference=lambda n, dtype: np.eye(n, dtype=dtype),
        grad=False,
        dtypes=("float32",),
        name="square_int",
    ),
    OpCase(
        "full_like",
        {"X": (2, 3)},
        {"value": 2.5},
        reference=lambda x, value: np.full_like(x, value),
        grad=False,
    ),
    OpCase(
        "full_like",
        {"X": (0, 2)},
        {"value": 1.0, "dtype": "int32"},
        reference=lambda x, value, dtype: np.full(x.shape, value, dtype),
        grad=False,
        name="dtype",
    ),
    OpCase(
        "randint",
        {},
        {"low": -3, "high": 4, "shape": [40, 100]},
        check=_check_randint,
        grad=False,
        dtypes=("float32",),
    ),
]
