"""ops.buffers: large kernel arrays reused across steps, never while anything can read them."""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layers
import ops
import tape
from ops import buffers

SHAPE = (256, 512)  # 512 KiB of float32: pooled
BIG = buffers.MIN_BYTES // 4  # float32 elements of the smallest pooled array


@pytest.fixture(autouse=True)
def _fresh_pool():
    buffers.release()
    limit = buffers.set_limit(buffers.LIMIT_BYTES)
    yield
    buffers.set_limit(limit)
    buffers.release()


def _address(array):
    return array.__array_interface__["data"][0]


def test_an_array_nothing_references_is_handed_out_again():
    a = buffers.empty(np, SHAPE, np.float32)
    address = _address(a)
    del a
    assert _address(buffers.empty(np, SHAPE, np.float32)) == address


@pytest.mark.parametrize(
    "holder",
    [
        lambda a: a,
        lambda a: a[1:],  # a view
        lambda a: a.reshape(-1),
        lambda a: memoryview(a),
        lambda a: [a],
    ],
    ids=["name", "slice", "reshape", "memoryview", "list"],
)
def test_an_array_still_referenced_is_never_handed_out(holder):
    a = buffers.empty(np, SHAPE, np.float32)
    a.fill(7.0)
    kept = holder(a)
    address = _address(a)
    del a
    b = buffers.empty(np, SHAPE, np.float32)
    assert _address(b) != address
    b.fill(-1.0)
    assert np.asarray(kept[0] if isinstance(kept, list) else kept).min() == 7.0


def test_other_shapes_and_dtypes_get_arrays_of_their_own():
    a = buffers.empty(np, SHAPE, np.float32)
    address = _address(a)
    del a
    assert _address(buffers.empty(np, SHAPE[::-1], np.float32)) != address
    assert _address(buffers.empty(np, SHAPE, np.int32)) != address


def test_small_arrays_are_not_pooled():
    before = buffers.held_bytes()
    small = buffers.empty(np, (BIG - 1,), np.float32)
    assert small.shape == (BIG - 1,) and buffers.held_bytes() == before
    buffers.empty(np, (BIG,), np.float32)
    assert buffers.held_bytes() == before + buffers.MIN_BYTES


def test_zeros_are_zero_even_in_a_reused_array():
    a = buffers.empty(np, SHAPE, np.float32)
    a.fill(3.0)
    del a
    assert not buffers.zeros(np, SHAPE, np.float32).any()


def test_free_arrays_beyond_keep_free_go_back_to_the_allocator():
    arrays = [buffers.empty(np, SHAPE, np.float32) for _ in range(buffers.KEEP_FREE + 4)]
    one = arrays[0].nbytes
    held = buffers.held_bytes()
    del arrays
    taken = buffers.empty(np, SHAPE, np.float32)
    assert buffers.held_bytes() == held - 3 * one  # one taken, KEEP_FREE kept, the rest dropped
    assert taken.shape == SHAPE


def test_the_limit_bounds_what_the_pool_holds_and_zero_turns_it_off():
    one = np.empty(SHAPE, np.float32).nbytes
    buffers.set_limit(2 * one)
    arrays = [buffers.empty(np, SHAPE, np.float32) for _ in range(4)]
    assert buffers.held_bytes() == 2 * one
    assert [a.shape for a in arrays] == [SHAPE] * 4
    buffers.set_limit(0)
    del arrays
    buffers.release()
    assert buffers.held_bytes() == 0
    buffers.empty(np, SHAPE, np.float32)
    assert buffers.held_bytes() == 0


def test_threads_never_share_an_array_they_hold():
    seen, failures = [], []

    def work():
        for _ in range(300):
            a = buffers.empty(np, SHAPE, np.float32)
            mark = threading.get_ident() % 1000
            a[0, 0] = mark
            if a[0, 0] != mark:  # (another thread wrote into the array this one holds)
                failures.append(mark)
            seen.append(_address(a))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert len(set(seen)) < len(seen)  # (and arrays were reused)


def test_kernel_outputs_the_user_holds_keep_their_values_across_steps():
    """A conv net's activations and gradients (pooled kernels: conv, pool, relu, binary ops)
    held from one step are not overwritten by the next steps of the same shapes."""
    rng = np.random.default_rng(0)
    conv, pool = layers.Conv2D(2, 8, 3, padding=1), layers.MaxPool2D(2)
    x = tape.Variable(rng.standard_normal((16, 2, 32, 32)).astype(np.float32))

    def step():
        tape.reset_global_tape()
        conv.weight.clear_grad()
        a = ops.relu(conv(x))
        h = pool(a * 2.0 + a)
        tape.backward(h.sum())
        return a, h, conv.weight.grad()

    held = step()
    assert held[0].numpy().nbytes >= buffers.MIN_BYTES
    copies = [v.numpy().copy() for v in held]
    for _ in range(3):
        again = step()
        for value, copy in zip(again, copies, strict=True):
            np.testing.assert_array_equal(value.numpy(), copy)
    for value, copy in zip(held, copies, strict=True):
        np.testing.assert_array_equal(value.numpy(), copy)


def test_pooled_kernels_give_what_unpooled_ones_give():
    rng = np.random.default_rng(1)
    conv = layers.Conv2D(3, 8, 3, padding=1)
    x = tape.Variable(rng.standard_normal((8, 3, 40, 40)).astype(np.float32), requires_grad=True)

    def step():
        tape.reset_global_tape()
        x.clear_grad()
        conv.weight.clear_grad()
        y = ops.pool2d(ops.relu(conv(x) - 0.1), ksize=[2, 2])
        tape.backward((y * y).sum())
        return y.numpy().copy(), x.grad().numpy().copy(), conv.weight.grad().numpy().copy()

    pooled = [step() for _ in range(2)]
    buffers.set_limit(0)
    plain = step()
    for got in pooled:
        for a, b in zip(got, plain, strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_large_concat_writes_a_reused_buffer_and_keeps_held_results():
    """The joins of a weight's gradient product (``concat`` of a step's activations) reuse
    the pool's arrays across steps, give what numpy's concatenate gives, and never overwrite
    a result still held."""
    rng = np.random.default_rng(2)
    pieces = [rng.standard_normal((64, 192)).astype(np.float32) for _ in range(6)]
    join = ops.shape.concat.kernel
    held = join(np, {"axis": 0}, pieces)
    np.testing.assert_array_equal(held, np.concatenate(pieces))
    address = _address(held)
    again = join(np, {"axis": -2}, pieces[::-1])  # (held: another array)
    assert _address(again) != address
    np.testing.assert_array_equal(held, np.concatenate(pieces))
    np.testing.assert_array_equal(again, np.concatenate(pieces[::-1]))
    del held
    assert _address(join(np, {"axis": 0}, pieces)) == address  # (free again: reused)
    mixed = [pieces[0], pieces[1].astype(np.float64)]  # (other dtypes: numpy's promotion)
    assert join(np, {"axis": 1}, mixed).dtype == np.float64


@settings(max_examples=25, deadline=None)
@given(
    pieces=st.integers(1, 4),
    axis=st.integers(-3, 2),
    dtype=st.sampled_from([np.float32, np.float64]),
    layout=st.sampled_from(["C", "F", "reversed"]),
)
def test_a_pooled_concat_equals_numpys_for_any_axis_and_layout(pieces, axis, dtype, layout):
    """Large joins (pooled) along every axis, of contiguous, Fortran-ordered or negatively
    strided pieces, as numpy joins them."""
    rng = np.random.default_rng(pieces)
    shape = (24, 40, 96)  # 92,160 elements a piece: every join is at least MIN_BYTES
    xs = [rng.standard_normal(shape).astype(dtype) for _ in range(pieces)]
    if layout == "F":
        xs = [np.asfortranarray(x) for x in xs]
    elif layout == "reversed":
        xs = [x[::-1, :, ::-1] for x in xs]
    got = ops.shape.concat.kernel(np, {"axis": axis}, xs)
    np.testing.assert_array_equal(got, np.concatenate(xs, axis=axis))
    assert got.dtype == dtype and got.flags.c_contiguous
