"""ops.intra_op: kernels over very large arrays split into row chunks on threads, bit for bit."""

import threading

import numpy as np
import pytest

from ops import blas, intra_op
from ops.registry import REGISTRY

ROWS_ODD = (2049, 1031)  # 2.1M elements, rows of a length no power of two
FLAT = (intra_op.MIN_ELEMENTS + 17,)


@pytest.fixture
def three_threads(monkeypatch):
    monkeypatch.setattr(blas, "get_num_threads", lambda: 3)


def _kernel(op, *args, **attrs):
    defn = REGISTRY[op]
    return defn.kernel(np, defn.check_attrs(attrs), *args)


def _unsplit(monkeypatch, fn):
    """``fn()`` with every kernel one call: no threads, no blocks."""
    monkeypatch.setattr(intra_op, "MIN_ELEMENTS", 1 << 62)
    monkeypatch.setattr(intra_op, "BLOCK_BYTES", 1 << 62)
    try:
        return fn()
    finally:
        monkeypatch.undo()


CASES = {
    "relu": lambda x, y: _kernel("relu", x),
    "relu_grad": lambda x, y: _kernel("relu_grad", x, y),
    "tanh": lambda x, y: _kernel("tanh", x),
    "tanh_grad": lambda x, y: _kernel("tanh_grad", np.tanh(x), y),
    "sigmoid": lambda x, y: _kernel("sigmoid", x),
    "sigmoid_grad": lambda x, y: _kernel("sigmoid_grad", 1 / (1 + np.exp(-x)), y),
    "neg": lambda x, y: _kernel("neg", x),
    "add": lambda x, y: _kernel("elementwise_add", x, y),
    "sub_row": lambda x, y: _kernel("elementwise_sub", x, y[-1]),  # a broadcast last row
    "mul_scalar": lambda x, y: _kernel("elementwise_mul", x, np.asarray(0.5, x.dtype)),
    "mul_first_row": lambda x, y: _kernel("elementwise_mul", x, y[:1]),  # rows of 1 broadcast
}


@pytest.mark.usefixtures("three_threads")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [ROWS_ODD, FLAT], ids=["rows", "flat"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_split_kernels_equal_one_call_bit_for_bit(case, shape, dtype, monkeypatch):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    x.flat[::997] = 0.0  # (relu's ties)
    y = rng.standard_normal(shape).astype(dtype)
    assert intra_op.fan_out(np.empty_like(x)) == 3
    split = CASES[case](x, y)
    whole = _unsplit(monkeypatch, lambda: CASES[case](x, y))
    assert split.dtype == whole.dtype and split.shape == whole.shape
    np.testing.assert_array_equal(split.view(np.uint8), whole.view(np.uint8))


@pytest.mark.parametrize("shape", [(4096, 1024), ROWS_ODD, FLAT, (3, 1 << 20), (2, 3, 5)])
@pytest.mark.parametrize("count", [2, 3, 8])
def test_chunks_cover_every_row_once_and_start_on_aligned_elements(shape, count):
    out = np.empty(shape, np.float32)
    bounds = intra_op._bounds(out, count)
    assert bounds[0][0] == 0 and bounds[-1][1] == shape[0]
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    row = out.size // shape[0]
    assert all(lo * row % intra_op.ALIGN == 0 for lo, _ in bounds)
    assert len(bounds) <= count


def test_no_threads_inside_a_single_threaded_block_off_the_main_thread_or_for_small_arrays():
    big = np.empty((4096, 1024), np.float32)
    assert intra_op.fan_out(np.empty((64, 64), np.float32)) == 1
    with blas.single_threaded():  # (a lazy plan on its own thread pool runs its kernels so)
        assert intra_op.fan_out(big) == 1
    seen = []
    thread = threading.Thread(target=lambda: seen.append(intra_op.fan_out(big)))
    thread.start()
    thread.join()
    assert seen == [1]
    assert intra_op.fan_out(big[:, ::2]) == 1  # (not contiguous)


@pytest.mark.usefixtures("three_threads")
def test_an_error_in_any_chunk_is_raised_after_every_chunk_finished():
    out = np.zeros((4096, 1024), np.float32)
    finished = []

    def fail_late_rows(part, rows):
        if rows[0] > 0:
            raise ValueError("chunk failed")
        part.fill(1.0)
        finished.append(rows[0])

    rows = np.arange(out.shape[0])[:, None]
    with pytest.raises(ValueError, match="chunk failed"):
        intra_op.run(fail_late_rows, out, rows)
    assert finished == [0] and out[0, 0] == 1.0


@pytest.mark.usefixtures("three_threads")
def test_every_chunk_runs_under_the_callers_numpy_error_state():
    x = np.full((4096, 1024), 2.0, np.float32)
    x[-1, -1] = 3e38  # (its square overflows, in the last chunk: a helper thread's)
    assert intra_op.fan_out(x) == 3
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        _kernel("elementwise_mul", x, x)
    with np.errstate(over="ignore"):
        assert np.isinf(_kernel("elementwise_mul", x, x)[-1, -1])


@pytest.mark.parametrize("shape", [(4096, 1024), ROWS_ODD, (3, 1 << 20), (700, 3, 5)])
def test_a_multi_pass_kernel_walks_every_row_once_in_blocks_starting_on_aligned_elements(shape):
    out = np.zeros(shape, np.float32)
    rows = np.arange(shape[0], dtype=np.float32).reshape((-1,) + (1,) * (len(shape) - 1))
    seen = []

    def fill(part, rows_part, scalar):
        seen.append((part.shape[0], part.__array_interface__["data"][0]))
        np.add(rows_part, scalar, out=part)

    intra_op.run(fill, out, rows, 1.0, passes=2)
    np.testing.assert_array_equal(out, np.broadcast_to(rows + 1.0, shape))
    row = out.size // shape[0]
    base = out.__array_interface__["data"][0]
    assert sum(n for n, _ in seen) == shape[0]
    assert all(((start - base) // out.itemsize) % intra_op.ALIGN == 0 for _, start in seen)
    if out.nbytes > intra_op.BLOCK_BYTES and shape[0] > 1:
        unit = intra_op.ALIGN // np.gcd(row, intra_op.ALIGN)
        assert len(seen) > 1 and max(n for n, _ in seen) >= unit
