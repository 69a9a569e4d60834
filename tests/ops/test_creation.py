"""The factory functions against PyTorch's: values, shapes and default dtypes; requires_grad
leaves that collect gradients; seeded reproducibility; recording in lazy mode; and errors."""

import numpy as np
import pytest
import torch

import ops
import tape

_TORCH_DTYPES = {torch.float32: "float32", torch.int64: "int64", torch.bool: "bool"}


@pytest.mark.parametrize(
    "ours, theirs",
    [
        (lambda: ops.zeros(2, 3), lambda: torch.zeros(2, 3)),
        (lambda: ops.ones((2,)), lambda: torch.ones((2,))),
        (lambda: ops.empty(0, 2), lambda: torch.zeros(0, 2)),
        (lambda: ops.full((2, 2), 7), lambda: torch.full((2, 2), 7)),
        (lambda: ops.full((3,), True), lambda: torch.full((3,), True)),
        (lambda: ops.full((1,), -1.5), lambda: torch.full((1,), -1.5)),
        (lambda: ops.arange(5), lambda: torch.arange(5)),
        (lambda: ops.arange(2, 9, 3), lambda: torch.arange(2, 9, 3)),
        (lambda: ops.arange(1, 2.5, 0.5), lambda: torch.arange(1, 2.5, 0.5)),
        (lambda: ops.arange(0.0, -1.0, -0.1), lambda: torch.arange(0.0, -1.0, -0.1)),
        (lambda: ops.linspace(-1, 1, 5), lambda: torch.linspace(-1, 1, 5)),
        (lambda: ops.linspace(0, 10, 0), lambda: torch.linspace(0, 10, 0)),
        (lambda: ops.logspace(0, 3, 4), lambda: torch.logspace(0, 3, 4)),
        (lambda: ops.logspace(0, 3, 4, base=2.0), lambda: torch.logspace(0, 3, 4, base=2.0)),
        (lambda: ops.eye(3), lambda: torch.eye(3)),
        (lambda: ops.eye(2, 4, dtype="int64"), lambda: torch.eye(2, 4, dtype=torch.int64)),
        (lambda: ops.arange(4, dtype=np.float64), lambda: torch.arange(4, dtype=torch.float64)),
    ],
)
def test_factories_match_torch(ours, theirs):
    out, expected = ours(), theirs()
    assert out.shape == tuple(expected.shape)
    assert out.dtype == np.dtype(str(expected.dtype).replace("torch.", ""))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-6)


def test_like_forms_take_shape_dtype_and_place_of_their_input():
    x = tape.Variable(np.arange(6, dtype=np.float64).reshape(2, 3))
    for fn, value in [(ops.zeros_like, 0), (ops.ones_like, 1), (ops.empty_like, 0)]:
        out = fn(x)
        assert (out.shape, out.dtype) == ((2, 3), np.float64)
        np.testing.assert_array_equal(out.numpy(), np.full((2, 3), value))
    half = ops.full_like(x, 2.5, dtype="float32")
    assert half.dtype == np.float32 and float(half.numpy()[0, 0]) == 2.5
    assert ops.ones_like(x, dtype=np.int32).dtype == np.int32


def test_requires_grad_makes_a_leaf_that_collects_gradients():
    w = ops.randn(3, 2, requires_grad=True)
    b = ops.zeros(2, requires_grad=True)
    assert w.is_leaf and w.requires_grad and b.is_leaf
    x = tape.Variable(np.ones((4, 3), np.float32))
    loss = (x @ w + b).sum()
    tape.backward(loss)
    np.testing.assert_allclose(w.grad().numpy(), np.full((3, 2), 4.0))
    np.testing.assert_allclose(b.grad().numpy(), [4.0, 4.0])
    assert w.grad().dtype == np.float32


def test_random_factories_follow_tape_seed():
    tape.seed(7)
    first = [ops.rand(3).numpy(), ops.randn(2, 2).numpy(), ops.randint(10, size=(5,)).numpy()]
    tape.seed(7)
    second = [ops.rand(3).numpy(), ops.randn(2, 2).numpy(), ops.randint(10, size=(5,)).numpy()]
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert first[0].dtype == np.float32 and first[2].dtype == np.int64
    assert 0 <= first[0].min() and first[0].max() < 1
    low_high = ops.randint(-2, 0, size=(100,)).numpy()
    assert set(np.unique(low_high)) <= {-2, -1}


def test_lazy_mode_records_creation_ops_and_runs_them_on_demand():
    with tape.lazy():
        tape.reset_global_tape()
        grid = ops.arange(6).reshape(2, 3)
        scaled = ops.linspace(0, 1, 3) * ops.ones(2, 3)
        assert grid._pending is not None and scaled._pending is not None
        types = {op.type for op in tape.get_global_tape().ops}
        assert {"arange", "linspace", "fill_constant"} <= types
        np.testing.assert_array_equal(grid.numpy(), np.arange(6).reshape(2, 3))
        np.testing.assert_allclose(scaled.numpy(), [[0.0, 0.5, 1.0]] * 2)


def _error(fn, *args, **kwargs):
    with pytest.raises((ValueError, TypeError)) as info:
        fn(*args, **kwargs)
    assert "recorded at: test_creation.py:" in str(info.value)
    return str(info.value)


def test_errors_say_what_is_wrong():
    assert "only floating-point Variables can require gradients" in _error(
        ops.arange, 3, requires_grad=True
    )
    assert "arange needs finite bounds and a non-zero step" in _error(ops.arange, 0, 3, 0)
    assert "randint needs low < high" in _error(ops.randint, 3, 3, size=(2,))
    assert "the size must be ints" in _error(ops.zeros, 2.5)
    assert "attribute 'shape' has a negative dimension" in _error(ops.ones, -1, 2)
    assert "dtype is not a numeric dtype" in _error(ops.zeros, 2, dtype="str")
