"""DLPack: zero-copy exchange with numpy and PyTorch (cupy and JAX where installed), and writes
through the other library to a buffer saved for backward caught as mutations."""

import importlib.util

import numpy as np
import pytest

import ops
import tape
from tape import guard

torch = pytest.importorskip("torch", reason="torch is the PyTorch side of the DLPack tests")


@pytest.fixture(autouse=True)
def _fresh_tape():
    tape.reset_global_tape()
    yield
    tape.reset_global_tape()


def _pointer(array):
    return array.__array_interface__["data"][0]


def test_numpy_sees_the_same_memory_read_only():
    x = tape.Variable(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    view = np.from_dlpack(x)
    assert np.shares_memory(view, x.value())
    assert not view.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        view[0, 0] = 1.0
    assert x.__dlpack_device__() == (1, 0)


def test_torch_shares_memory_both_ways():
    x = tape.Variable(np.arange(4.0, dtype=np.float32))
    t = torch.from_dlpack(x)
    assert t.data_ptr() == _pointer(x.value())
    source = torch.arange(5, dtype=torch.float64)
    y = tape.from_dlpack(source)
    assert _pointer(y.value()) == source.data_ptr()
    source[1] = 42.0  # a write on the torch side shows in the Variable: no copy was made
    assert y.numpy()[1] == 42.0
    assert y.dtype == np.float64 and y.shape == (5,) and y.is_leaf


def test_from_dlpack_numpy_and_variable_share_memory():
    data = np.arange(3, dtype=np.int64)
    x = tape.from_dlpack(data)
    assert np.shares_memory(x.value(), data)
    same = tape.from_dlpack(x)
    assert np.shares_memory(same.value(), data)


def test_strided_torch_tensor_imports_as_a_view():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = tape.from_dlpack(base.T)
    np.testing.assert_array_equal(x.numpy(), base.T.numpy())
    assert _pointer(x.value()) == base.data_ptr()


def test_gradients_flow_through_an_imported_tensor():
    source = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float32)
    x = tape.from_dlpack(source, requires_grad=True)
    loss = ops.sin(x).sum()
    tape.backward(loss)
    np.testing.assert_allclose(x.grad().numpy(), np.cos(source.numpy()), rtol=1e-6)


def test_torch_write_after_an_op_saved_an_export_raises():
    x = tape.Variable(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
    y = ops.sin(x)  # saves X for its gradient
    torch.from_dlpack(x)[0] = 10.0  # torch ignores DLPack's read-only flag
    with pytest.raises(tape.MutationError) as err:
        tape.backward(y.sum())
    message = str(err.value)
    assert "op 'sin'" in message and "memory shared with another library (DLPack" in message
    assert "test_dlpack.py" in message  # where the buffer was shared


def test_torch_write_to_an_imported_buffer_after_recording_raises():
    source = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    x = tape.from_dlpack(source, requires_grad=True)
    y = ops.exp(x) * x
    source.mul_(2.0)
    with pytest.raises(tape.MutationError, match="was given a new value after this op saved it"):
        tape.backward(y.sum())


def test_write_between_recordings_fails_only_the_earlier_ops():
    source = torch.tensor([0.1, 0.2], dtype=torch.float64)
    x = tape.from_dlpack(source, requires_grad=True)
    early = ops.sin(x)
    source.add_(1.0)
    late = ops.sin(x)  # recorded after the write: it saw the new value
    tape.backward(late.sum(), retain_graph=True)
    np.testing.assert_allclose(x.grad().numpy(), np.cos(source.numpy()))
    with pytest.raises(tape.MutationError):
        tape.backward(early.sum())


def test_write_before_recording_is_not_a_mutation():
    source = torch.zeros(3, dtype=torch.float32)
    x = tape.from_dlpack(source, requires_grad=True)
    source.copy_(torch.tensor([1.0, 2.0, 3.0]))  # e.g. a data loader filling the batch
    tape.backward((x * x).sum())
    np.testing.assert_allclose(x.grad().numpy(), [2.0, 4.0, 6.0])


def test_lazy_backward_checks_shared_buffers_too():
    with tape.lazy():
        tape.reset_global_tape()
        source = torch.tensor([0.3, 0.4], dtype=torch.float64)
        x = tape.from_dlpack(source, requires_grad=True)
        y = ops.tanh(x) * x
        source.fill_(5.0)
        with pytest.raises(tape.MutationError):
            tape.backward(y.sum())


def test_sharing_ends_when_the_variable_gets_a_new_buffer():
    x = tape.Variable(np.ones(3, np.float32), requires_grad=True)
    exported = torch.from_dlpack(x)
    assert id(x) in guard.SHARED
    x.set_value(np.full(3, 2.0, np.float32))
    y = ops.sin(x)
    exported.zero_()  # the old buffer: nothing recorded reads it
    tape.backward(y.sum())
    np.testing.assert_allclose(x.grad().numpy(), np.cos(np.full(3, 2.0)), rtol=1e-6)
    assert id(x) not in guard.SHARED


def test_a_shared_variable_is_shared_no_more_once_it_is_gone_though_other_tapes_live():
    # a tape that outlives the step (an idle thread's, a private one) must not keep a shared
    # Variable alive: while one is listed every op checksums what it reads
    idle = tape.Tape()
    weight = tape.Variable(np.ones(2))
    idle.add_op("elementwise_mul", {"X": [weight], "Y": [weight]})
    x = tape.Variable(np.arange(3.0, dtype=np.float32))
    exported = torch.from_dlpack(x)
    gone = tape.from_dlpack(torch.arange(4.0))
    read = ops.sin(gone)
    assert {id(x), id(gone)} <= guard.SHARED.keys()
    del x, gone, read
    tape.reset_global_tape()
    assert not guard.SHARED
    assert exported.tolist() == [0.0, 1.0, 2.0]  # (the buffer lives on with its consumer)


def test_sharing_a_buffer_read_by_another_tape_seals_it_there():
    other = tape.Tape()
    x = tape.Variable(np.array([0.5, 1.5]), requires_grad=True)
    squared = other.add_op("elementwise_mul", {"X": [x], "Y": [x]})
    loss = other.add_op("reduce_sum", {"X": [squared]})
    exported = torch.from_dlpack(x)
    exported.mul_(3.0)  # written after the op on ``other`` saved it
    with pytest.raises(tape.MutationError, match="shared"):
        other.backward(loss)


def test_copy_export_shares_nothing():
    x = tape.Variable(np.ones(2, np.float32))
    copied = np.from_dlpack(x, copy=True)
    assert not np.shares_memory(copied, x.value()) and id(x) not in guard.SHARED


def test_errors_name_the_problem():
    with pytest.raises(tape.InputError, match="does not support DLPack"):
        tape.from_dlpack([1.0, 2.0])
    with pytest.raises(tape.DTypeError, match="detach"):
        tape.from_dlpack(torch.zeros(2, requires_grad=True))
    with pytest.raises(tape.InputError, match="floating-point dtype"):
        tape.from_dlpack(np.arange(3), requires_grad=True)


def test_legacy_consumers_get_the_buffer():
    x = tape.Variable(np.arange(3.0))
    capsule = x.__dlpack__()  # no max_version: DLPack 0.x, which has no read-only flag
    legacy = torch.utils.dlpack.from_dlpack(capsule)
    assert legacy.data_ptr() == _pointer(x.value())


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="JAX is not installed")
def test_jax_round_trip():
    import jax.numpy as jnp

    x = tape.from_dlpack(jnp.arange(4.0))
    np.testing.assert_array_equal(x.numpy(), np.arange(4.0))
    back = jnp.from_dlpack(tape.Variable(np.arange(3.0, dtype=np.float32)))
    np.testing.assert_array_equal(np.asarray(back), np.arange(3.0))


@pytest.mark.skipif(not tape.gpu_available(), reason="cupy with a CUDA device is not available")
def test_cupy_round_trip_shares_device_memory():
    import cupy

    source = cupy.arange(4, dtype=cupy.float32)
    x = tape.from_dlpack(source)
    assert x.value().data.ptr == source.data.ptr
    back = cupy.from_dlpack(x)
    assert back.data.ptr == source.data.ptr
