"""Variable: the handle's description, value access, Python operators and reductions."""

import numpy as np
import pytest

import ops
import tape


@pytest.fixture(autouse=True)
def fresh_tape():
    tape.reset_global_tape()


def test_a_variable_describes_its_buffer():
    x = tape.Variable(np.zeros((2, 3), np.float32), requires_grad=True, name="x")
    assert (x.name, x.shape, x.dtype, x.requires_grad, x.ndim, x.size) == (
        "x",
        (2, 3),
        np.dtype(np.float32),
        True,
        2,
        6,
    )
    assert isinstance(x.value(), np.ndarray) and np.shares_memory(x.numpy(), x.value())
    assert not x.value().flags.writeable and not x.numpy().flags.writeable
    assert np.asarray(x).shape == (2, 3)
    assert x.grad is None and x.is_leaf


def test_an_empty_handle_has_no_shape_until_an_op_writes_it():
    out = tape.Variable()
    assert out.shape is None and "value=<empty>" in repr(out)
    tape.get_global_tape().add_op(
        "fill_constant", {}, {"Out": [out]}, {"shape": [2], "value": 3.0, "dtype": "float64"}
    )
    assert out.shape == (2,) and out.dtype == np.float64
    np.testing.assert_array_equal(out.numpy(), [3.0, 3.0])


def test_repr_is_helpful():
    x = tape.Variable(np.array([1.5, 2.0], np.float32), requires_grad=True, name="w")
    assert repr(x) == (
        "Variable(name='w', shape=(2,), dtype=float32, requires_grad=True, value=[1.5, 2. ])"
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_python_scalars_never_promote(dtype):
    x = tape.Variable(np.array([1.0, 2.0], dtype))
    for result in (x + 1, 2.5 * x, x - 0.5, 1.0 - x, x / 3, 3.0 / x, x**2, 2.0**x, -x):
        assert result.dtype == dtype


def test_operators_match_numpy_with_arrays_on_either_side():
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    x = tape.Variable(a)
    np.testing.assert_allclose((a + x).numpy(), a + a)
    np.testing.assert_allclose((x - a[0]).numpy(), a - a[0])
    np.testing.assert_allclose((a @ x).numpy(), a @ a)
    np.testing.assert_allclose((x @ a).numpy(), a @ a)
    np.testing.assert_allclose((a / x).numpy(), np.ones_like(a))


def test_comparisons_give_booleans_without_gradient():
    x = tape.Variable(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    mask = x > 1.5
    assert mask.dtype == np.bool_ and not mask.requires_grad
    np.testing.assert_array_equal(mask.numpy(), [False, True, True])
    np.testing.assert_array_equal((x == 2.0).numpy(), [False, True, False])
    np.testing.assert_array_equal((x <= 2.0).numpy(), [True, True, False])


def test_reductions_and_reshape_methods():
    a = np.arange(6.0).reshape(2, 3)
    x = tape.Variable(a, requires_grad=True)
    np.testing.assert_allclose(x.sum().numpy(), a.sum())
    np.testing.assert_allclose(x.sum(axis=0).numpy(), a.sum(0))
    np.testing.assert_allclose(x.sum(axis=1, keepdims=True).numpy(), a.sum(1, keepdims=True))
    np.testing.assert_allclose(x.mean().numpy(), a.mean())
    assert x.reshape(3, 2).shape == (3, 2) and x.reshape((-1,)).shape == (6,)
    tape.backward(x.sum())
    np.testing.assert_allclose(x.grad().numpy(), np.ones_like(a))


def test_scalar_conversions():
    x = tape.Variable(np.array([2.5]))
    assert float(x) == 2.5 and int(x) == 2 and x.item() == 2.5 and bool(x)
    with pytest.raises(ValueError, match="ambiguous"):
        bool(tape.Variable(np.ones(2)))


def test_numpy_ufuncs_defer_to_variable_operators():
    x = tape.Variable(np.ones(2))
    assert isinstance(np.ones(2) * x, tape.Variable)


def test_set_value_keeps_shape():
    x = tape.Variable(np.zeros(3))
    x.set_value([1, 2, 3])
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="changes its shape"):
        x.set_value(np.zeros(4))


def test_functional_api_is_the_op_table():
    assert ops.relu is ops.REGISTRY["relu"] and ops.add is ops.elementwise_add
    x = tape.Variable(np.array([-1.0, 2.0]))
    np.testing.assert_array_equal(ops.relu(x).numpy(), [0.0, 2.0])
    np.testing.assert_array_equal(ops.add(x, 1.0).numpy(), [0.0, 3.0])
