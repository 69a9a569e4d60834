"""The strict emulated GPU (tape.testing_device): it refuses what cupy refuses (and numpy calls on
device arrays), counts transfers, and check_on_device catches a kernel that would break on a GPU."""

import numpy as np
import pytest

import ops
import tape
from ops.registry import register, unregister
from ops.xp import array_module, gpu_available, to_numpy
from tape.errors import ExecutionError
from tape.testing import OpCase
from tape.testing_device import DeviceArray, EmulatedDevice, check_on_device, installed


@pytest.fixture
def device():
    return EmulatedDevice()


def test_device_arrays_refuse_implicit_conversion_to_numpy(device):
    a = device.asarray(np.arange(3.0))
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        np.asarray(a)


@pytest.mark.parametrize(
    "call",
    [
        lambda a: np.exp(a),
        lambda a: np.add(a, 1.0),
        lambda a: np.sum(a),
        lambda a: np.concatenate([a, a]),
        lambda a: np.where(a > 0, a, 0.0),
    ],
    ids=["ufunc", "binary_ufunc", "reduction", "concatenate", "where"],
)
def test_numpy_functions_refuse_device_arrays(device, call):
    with pytest.raises(TypeError):
        call(device.asarray(np.arange(3.0)))


@pytest.mark.parametrize(
    "call",
    [
        lambda xp, a: a + np.ones(3),
        lambda xp, a: np.ones(3) * a,
        lambda xp, a: xp.maximum(a, np.zeros(3)),
        lambda xp, a: a.__setitem__(slice(None), np.zeros(3)),
        lambda xp, a: a[np.array([0, 1])],
    ],
    ids=["operator", "reflected_operator", "function", "setitem", "index"],
)
def test_host_arrays_in_device_operations_raise(device, call):
    with pytest.raises(TypeError, match="host numpy.ndarray was mixed into a device operation"):
        call(device, device.asarray(np.arange(3.0)))


def test_results_stay_on_the_device_and_scalars_are_0d_arrays(device):
    a = device.asarray(np.array([[1.0, -2.0], [3.0, 4.0]]))
    for result in (a.sum(), device.max(a), a[0, 1], device.exp(a), a.T @ a, -a, a > 0):
        assert isinstance(result, DeviceArray)
    assert a.sum().shape == ()
    out = device.empty((2, 2))
    assert device.multiply(a, 2.0, out=out) is out


def test_transfers_and_scalar_reads_are_counted(device):
    a = device.asarray(np.arange(4.0))
    b = a * 2.0  # a scalar constant is not a transfer
    float(b[1]), b.sum().item()
    host = device.asnumpy(b)
    b.get()
    assert device.counts == {"to_device": 1, "to_host": 2, "scalar_reads": 2}
    np.testing.assert_array_equal(host, [0.0, 2.0, 4.0, 6.0])


def test_in_place_operators_write_the_device_buffer(device):
    a = device.asarray(np.ones(3))
    view = a[1:]
    view *= 3.0
    view += device.asarray(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(device.asnumpy(a), [1.0, 4.0, 5.0])


def test_ufunc_methods_and_scatter_add(device):
    target = device.zeros(4)
    device.add.at(target, device.asarray(np.array([1, 1, 3])), 1.0)
    device.scatter_add(target, device.asarray(np.array([0, 0])), device.asarray(np.ones(2)))
    np.testing.assert_array_equal(device.asnumpy(target), [2.0, 2.0, 0.0, 1.0])


def test_installed_makes_it_the_gpu_module_and_restores_the_previous_one(device):
    before = gpu_available()
    with installed(device):
        assert gpu_available()
        a = device.asarray(np.ones(2))
        assert array_module(a) is device
        assert array_module(np.ones(2)) is np
        with tape.device("gpu"):
            assert isinstance(ops.fill_constant(shape=[2], value=1.0).value(), DeviceArray)
        np.testing.assert_array_equal(to_numpy(a), [1.0, 1.0])
    assert gpu_available() == before


def test_seeded_random_ops_draw_the_same_numbers_as_on_the_cpu(device):
    tape.seed(3)
    cpu = ops.gaussian_random(shape=[5]).numpy()
    with installed(device), tape.device("gpu"):
        tape.seed(3)
        np.testing.assert_array_equal(ops.gaussian_random(shape=[5]).numpy(), cpu)


def _register_bad_op(name, kernel):
    from ops.infer import same_as_input

    opdef = register(name, inputs=("X",), infer=same_as_input)(kernel)
    opdef.gradient(lambda g: (g.gouts[0],))
    return opdef


@pytest.mark.parametrize(
    "kernel, message",
    [
        (lambda xp, attrs, x: np.tanh(x), "does not support ufuncs"),
        (lambda xp, attrs, x: xp.asarray(np.tanh(to_numpy(x))), "copied data to the host"),
        (lambda xp, attrs, x: np.tanh(to_numpy(x)), "left the device"),
    ],
    ids=["numpy_call", "host_round_trip", "returns_host_array"],
)
def test_check_on_device_catches_kernels_that_break_on_a_gpu(device, kernel, message):
    _register_bad_op("bad_device_kernel", kernel)
    try:
        with pytest.raises((AssertionError, ExecutionError), match=message):
            check_on_device(
                OpCase("bad_device_kernel", {"X": (3,)}, reference=np.tanh, grad=False), device
            )
    finally:
        unregister("bad_device_kernel")
