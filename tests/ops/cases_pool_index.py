"""Cases for max pooling with indices, max unpooling, adaptive pooling and the plane
gather/scatter-add pair, against per-window and per-position loop references."""

import itertools
import math

import numpy as np

from tape.testing import OpCase
from tests.ops.cases_pool import distinct, index_reference


def _planes(shape):
    return itertools.product(range(shape[0]), range(shape[1]))


def gather_reference(x, index):
    out = np.zeros(index.shape)
    for b, c in _planes(index.shape):
        out[b, c] = x[b, c].reshape(-1)[index[b, c]]
    return out


def scatter_add_reference(index, x, output_size):
    out = np.zeros(tuple(x.shape[:2]) + tuple(output_size))
    for b, c in _planes(x.shape):
        np.add.at(out[b, c].reshape(-1), index[b, c].reshape(-1), x[b, c].reshape(-1))
    return out


def unpool_reference(x, index, output_size):
    return scatter_add_reference(index, x, output_size)  # the cases' indices never repeat


def adaptive_windows(size, out):
    """PyTorch's windows: [floor(i * size / out), ceil((i + 1) * size / out))."""
    return [range(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _adaptive(x, output_size):
    axes = [adaptive_windows(n, o) for n, o in zip(x.shape[2:], output_size)]
    for b, c in _planes(x.shape):
        for p in np.ndindex(*output_size):
            positions = list(itertools.product(*(axes[a][i] for a, i in enumerate(p))))
            yield (b, c) + p, positions


def adaptive_avg_reference(x, output_size):
    out = np.zeros(tuple(x.shape[:2]) + tuple(output_size))
    for key, positions in _adaptive(x, output_size):
        out[key] = np.mean([x[key[:2] + pos] for pos in positions])
    return out


def adaptive_max_reference(x, output_size):
    out = np.zeros(tuple(x.shape[:2]) + tuple(output_size), dtype=x.dtype)
    index = np.zeros(out.shape, dtype=np.int64)
    for key, positions in _adaptive(x, output_size):
        first = max(positions, key=lambda pos: (x[key[:2] + pos], [-i for i in pos]))
        out[key] = x[key[:2] + first]
        index[key] = np.ravel_multi_index(first, x.shape[2:])
    return out, index


def unique_indices(shape, plane, seed=0):
    """Distinct flat positions in [0, plane) for each (n, c) plane of ``shape``."""
    rng = np.random.default_rng(seed)
    count = math.prod(shape[2:])
    planes = [rng.permutation(plane)[:count].reshape(shape[2:]) for _ in _planes(shape)]
    return np.stack(planes).reshape(shape).astype(np.int64)


def repeated_indices(shape, plane, seed=0):
    return np.random.default_rng(seed).integers(0, plane, shape)


WINDOWS = [
    (1, "plain", (2, 2, 7), {"ksize": [2]}),
    (
        1,
        "dilation_ceil",
        (1, 2, 9),
        {"ksize": [3], "strides": [2], "paddings": [1], "dilations": [2], "ceil_mode": True},
    ),
    (2, "overlap_pad", (1, 2, 5, 4), {"ksize": [3, 3], "strides": [1, 2], "paddings": [1, 1]}),
    (2, "dilation", (2, 1, 6, 7), {"ksize": [2, 2], "strides": [2, 1], "dilations": [2, 3]}),
    (
        3,
        "plain",
        (1, 2, 4, 3, 4),
        {"ksize": [2, 1, 2], "strides": [2, 1, 1], "paddings": [1, 0, 1]},
    ),
]

ADAPTIVE = [
    (1, "shrink_uneven", (2, 2, 7), [3]),
    (1, "grow", (1, 2, 3), [5]),
    (2, "mixed", (1, 2, 5, 4), [3, 6]),
    (2, "global", (2, 3, 3, 4), [1, 1]),
    (3, "uneven", (1, 1, 4, 5, 3), [3, 2, 2]),
]


def _index_cases():
    cases = []
    for nd, name, shape, window in WINDOWS:
        cases.append(
            OpCase(
                f"max_pool{nd}d_with_index",
                {"X": distinct(shape)},
                window,
                reference=index_reference,
                double_grad=True,
                name=name,
            )
        )
        integers = np.random.default_rng(nd).integers(-9, 9, shape).astype(np.int32)
        cases.append(
            OpCase(
                f"max_pool{nd}d_with_index",
                {"X": integers},
                window,
                reference=index_reference,
                grad=False,
                name=f"{name}_integers",
            )
        )
    for nd, name, shape, out in ADAPTIVE:
        cases.append(
            OpCase(
                f"adaptive_max_pool{nd}d",
                {"X": distinct(shape)},
                {"output_size": out},
                reference=adaptive_max_reference,
                double_grad=True,
                name=name,
            )
        )
        cases.append(
            OpCase(
                f"adaptive_avg_pool{nd}d",
                {"X": shape},
                {"output_size": out},
                reference=adaptive_avg_reference,
                double_grad=True,
                name=name,
            )
        )
    return cases


def _unpool_cases():
    cases = []
    for nd, shape, size in (
        (1, (2, 2, 3), [7]),
        (2, (1, 2, 2, 3), [4, 5]),
        (3, (1, 1, 2, 2, 1), [3, 2, 2]),
    ):
        index = unique_indices(shape, math.prod(size), seed=nd)
        cases.append(
            OpCase(
                f"max_unpool{nd}d",
                {"X": shape, "Indices": index},
                {"output_size": size},
                reference=unpool_reference,
                double_grad=True,
            )
        )
    x_shape, index_shape = (2, 3, 4, 3), (2, 3, 5)
    repeats = repeated_indices(index_shape, 12, seed=3)
    cases.append(
        OpCase(
            "plane_gather",
            {"X": x_shape, "Indices": repeats},
            reference=gather_reference,
            double_grad=True,
            name="repeats",
        )
    )
    cases.append(
        OpCase(
            "plane_scatter_add",
            {"Indices": repeats, "X": index_shape},
            {"output_size": [4, 3]},
            reference=scatter_add_reference,
            double_grad=True,
            name="repeats",
        )
    )
    return cases


CASES = _index_cases() + _unpool_cases()
