"""BLAS control: the thread count is settable where numpy's BLAS allows it, small products run
single-threaded without changing the process setting, and the product policy keeps values."""

import sys

import numpy as np
import pytest

import tape
from ops import blas

matmul_module = sys.modules["ops.matmul"]
controllable = pytest.mark.skipif(
    blas.get_num_threads() is None, reason="numpy's BLAS exposes no thread control here"
)


@controllable
def test_set_num_threads_round_trips():
    before = blas.get_num_threads()
    try:
        assert tape.set_num_threads(1) is True
        assert tape.get_num_threads() == 1
    finally:
        blas.set_num_threads(before)


@controllable
def test_single_threaded_leaves_the_process_setting_alone():
    before = blas.get_num_threads()
    with blas.single_threaded():
        np.ones((4, 4)) @ np.ones((4, 4))
    assert blas.get_num_threads() == before


def _local_count():
    """The per-thread BLAS count the calling thread sees (read by setting and restoring it)."""
    local = blas._probe()[2]
    count = local(0)
    local(count)
    return count


@pytest.mark.skipif(blas._probe()[2] is None, reason="no per-thread BLAS setting here")
def test_overlapping_single_threaded_blocks_of_two_threads_restore_the_count():
    """A pool worker that leaves its block after the calling thread left its own must not leave
    the calling thread on one BLAS thread (numpy 2.4's OpenBLAS shares the "local" setting
    between threads: every later product of the process ran on one thread)."""
    import threading

    before = _local_count()
    entered, release = threading.Event(), threading.Event()

    def worker():
        with blas.single_threaded():
            entered.set()
            release.wait(5)

    thread = threading.Thread(target=worker)
    with blas.single_threaded():  # the calling thread enters first
        thread.start()
        entered.wait(5)
    release.set()  # ... leaves first, and the worker after it
    thread.join()
    assert _local_count() == before


@pytest.mark.parametrize("m, k, n", [(3, 5, 7), (16, 64, 512), (200, 300, 100)])
def test_product_equals_numpy_for_plain_and_transposed_weights(m, k, n):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k))
    weight = rng.standard_normal((n, k))
    np.testing.assert_allclose(matmul_module.product(np, x, weight.T), x @ weight.T, rtol=1e-12)
    np.testing.assert_allclose(
        matmul_module.product(np, x, weight.T.copy()), x @ weight.T, rtol=1e-12
    )


def test_batched_products_are_unchanged():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((3, 5, 6))
    np.testing.assert_allclose(matmul_module.product(np, a, b), a @ b, rtol=1e-12)


@pytest.mark.parametrize(
    "x_shape, y_shape",
    [((128, 1), (1, 64)), ((5, 7, 1), (5, 1, 3)), ((7, 1), (4, 1, 3)), ((2, 1, 6, 1), (3, 1, 2))],
)
@pytest.mark.parametrize(
    "dtypes", [("float32", "float32"), ("float64", "float64"), ("float32", "float64")]
)
def test_outer_products_equal_numpy_bit_for_bit(x_shape, y_shape, dtypes):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(x_shape).astype(dtypes[0])
    y = rng.standard_normal(y_shape).astype(dtypes[1])
    got, want = matmul_module.product(np, x, y), np.matmul(x, y)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    transposed = np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2)  # a strided view
    np.testing.assert_array_equal(matmul_module.product(np, transposed, y), want)


@pytest.mark.parametrize(
    "x_shape, y_shape, switches",
    [
        ((1, 32), (32, 32), False),  # a tree node's product: OpenBLAS runs it on one thread
        ((4, 1, 32), (32, 32), False),  # batched, as small
        ((16, 64), (64, 512), True),  # an LSTM step's: measured, one thread first
        ((256, 256), (256, 256), False),  # large: every BLAS thread
    ],
)
def test_only_products_openblas_would_thread_switch_to_one_thread(
    monkeypatch, x_shape, y_shape, switches
):
    switched = []

    class Recorded:
        def __enter__(self):
            switched.append(True)

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(matmul_module, "single_threaded", Recorded)
    monkeypatch.setattr(matmul_module, "_CHOICES", _fresh_choices())
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(x_shape), rng.standard_normal(y_shape)
    np.testing.assert_allclose(matmul_module.product(np, x, y), np.matmul(x, y), rtol=1e-12)
    assert bool(switched) == switches


def _fresh_choices():
    return [matmul_module.ThreadChoice() for _ in matmul_module._CHOICES]


@pytest.mark.parametrize("threads_faster", [True, False])
def test_mid_size_products_run_on_the_thread_count_measured_faster(monkeypatch, threads_faster):
    """Probes alternate one thread and all; the faster by median is kept for KEEP products."""
    alone = []  # one entry per product run in a single_threaded block
    clock = {"now": 0.0, "started": None}

    class Recorded:
        def __enter__(self):
            alone.append(True)

        def __exit__(self, *exc):
            pass

    class Clock:
        """Each timed run takes 1 s on the faster thread count, 2 s on the other."""

        @staticmethod
        def perf_counter():
            if clock["started"] is None:  # (a run starts)
                clock["started"] = len(alone)
            else:  # (it ends: on one thread if it entered a single_threaded block)
                one_thread = len(alone) > clock["started"]
                clock["now"] += 2.0 if one_thread == threads_faster else 1.0
                clock["started"] = None
            return clock["now"]

    monkeypatch.setattr(matmul_module, "single_threaded", Recorded)
    monkeypatch.setattr(matmul_module, "time", Clock)
    monkeypatch.setattr(matmul_module, "_CHOICES", _fresh_choices())
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((16, 64)), rng.standard_normal((64, 512))
    choice = matmul_module._CHOICES[(16 * 64 * 512).bit_length()]
    probes = 2 * matmul_module.ThreadChoice.PROBES
    for _ in range(probes):
        np.testing.assert_allclose(matmul_module.product(np, x, y), x @ y, rtol=1e-12)
    assert len(alone) == probes // 2  # (alternating)
    assert choice.threaded == threads_faster and choice.left == matmul_module.ThreadChoice.KEEP
    alone.clear()
    for _ in range(5):
        np.testing.assert_allclose(matmul_module.product(np, x, y), x @ y, rtol=1e-12)
    assert len(alone) == (0 if threads_faster else 5)


def test_products_inside_a_single_threaded_block_are_not_timed(monkeypatch):
    monkeypatch.setattr(matmul_module, "_CHOICES", _fresh_choices())
    monkeypatch.setattr(matmul_module, "single_threaded_open", lambda: True)
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((16, 64)), rng.standard_normal((64, 512))
    for _ in range(10):
        np.testing.assert_allclose(matmul_module.product(np, x, y), x @ y, rtol=1e-12)
    choice = matmul_module._CHOICES[(16 * 64 * 512).bit_length()]
    assert choice.one == [] and choice.every == [] and choice.left == 0
