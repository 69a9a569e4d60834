"""The gradient of a Variable read by several slices (an LSTM's gates cut from one product) is
made by one ``slices_grad`` op, equal to the sum of one ``slice_grad`` per slice."""

import numpy as np
import pytest

import ops
import tape


def _gates_loss(z, hidden):
    i, f = ops.sigmoid(z[:hidden]), ops.sigmoid(z[hidden : 2 * hidden])
    g, o = ops.tanh(z[2 * hidden : 3 * hidden]), ops.sigmoid(z[3 * hidden :])
    return (i * g + f * o).sum()


def _reference(z, hidden):
    """d loss / dz by hand, piece by piece into zeros as the old sum of slice_grads did."""

    def sig(v):
        return 1 / (1 + np.exp(-v))

    i, f = sig(z[:hidden]), sig(z[hidden : 2 * hidden])
    g, o = np.tanh(z[2 * hidden : 3 * hidden]), sig(z[3 * hidden :])
    pieces = [g * i * (1 - i), o * f * (1 - f), i * (1 - g * g), f * o * (1 - o)]
    parts = []
    for k, piece in enumerate(pieces):
        part = np.zeros_like(z)
        part[k * hidden : (k + 1) * hidden] = piece
        parts.append(part)
    return parts[0] + parts[1] + parts[2] + parts[3]


@pytest.mark.parametrize("lazy", [False, True])
def test_gates_cut_from_one_vector_get_the_summed_slice_gradients(lazy):
    rng = np.random.default_rng(0)
    value = rng.standard_normal(12)
    z = tape.Variable(value, requires_grad=True)
    with tape.lazy(enabled=lazy):
        tape.reset_global_tape()
        loss = _gates_loss(z, 3)
        tape.backward(loss)
        grad = z.grad().numpy()
    np.testing.assert_allclose(grad, _reference(value, 3), rtol=1e-12, atol=1e-15)


def test_lazy_backward_records_one_op_for_all_slices_of_a_variable():
    z = tape.Variable(np.random.default_rng(1).standard_normal(8), requires_grad=True)
    with tape.lazy(compile=True):  # (a lazy backward that compiles records its gradient ops)
        tape.reset_global_tape()
        loss = _gates_loss(z, 2)
        recorded = len(tape.get_global_tape()._ops)
        tape.backward(loss)
        types = [op.type for op in tape.get_global_tape()._ops[recorded:]]
        tape.get_global_tape().realize([z.grad()])
    assert types.count("slices_grad") == 1
    assert "slice_grad" not in types and "sum" not in types


def test_eager_and_lazy_gradients_are_equal_bit_for_bit():
    value = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    grads = []
    for lazy in (False, True):
        z = tape.Variable(value, requires_grad=True)
        with tape.lazy(enabled=lazy, exact=True):
            tape.reset_global_tape()
            loss = sum((ops.tanh(z[:, k * 4 : (k + 1) * 4]) * (k + 1)).sum() for k in range(4))
            tape.backward(loss)
            grads.append(z.grad().numpy())
    assert np.array_equal(grads[0], grads[1])


@pytest.mark.parametrize("lazy", [False, True])
def test_a_variable_read_by_slices_and_whole_gets_both_gradients(lazy):
    value = np.arange(6.0)
    z = tape.Variable(value, requires_grad=True)
    with tape.lazy(enabled=lazy):
        tape.reset_global_tape()
        loss = (z[:2] * 3.0).sum() + (z * z).sum() + (z[4:] * 5.0).sum() + z[1:3].sum()
        tape.backward(loss)
        grad = z.grad().numpy()
    want = 2 * value + np.array([3.0, 4.0, 1.0, 0.0, 5.0, 5.0])
    np.testing.assert_allclose(grad, want, rtol=1e-12)


@pytest.mark.parametrize("lazy", [False, True])
def test_slices_along_different_axes_are_each_added(lazy):
    value = np.random.default_rng(3).standard_normal((3, 4))
    z = tape.Variable(value, requires_grad=True)
    with tape.lazy(enabled=lazy):
        tape.reset_global_tape()
        loss = (z[0:2] * 2.0).sum() + (z[:, 1:3] * 7.0).sum() + z[2:].sum()
        tape.backward(loss)
        grad = z.grad().numpy()
    want = np.zeros((3, 4))
    want[0:2] += 2.0
    want[:, 1:3] += 7.0
    want[2:] += 1.0
    np.testing.assert_allclose(grad, want, rtol=1e-12)


def test_second_order_gradients_flow_through_the_joined_slices():
    z = tape.Variable(np.array([0.3, -0.2, 0.5, 0.1]), requires_grad=True)
    tape.reset_global_tape()
    loss = (z[:2] ** 3).sum() + (z[2:] ** 2).sum()
    (dz,) = tape.grad(loss, [z], create_graph=True)
    tape.backward((dz * dz).sum())
    v = z.numpy()
    first = np.concatenate([3 * v[:2] ** 2, 2 * v[2:]])
    second = np.concatenate([6 * v[:2], 2 * np.ones(2)])
    np.testing.assert_allclose(z.grad().numpy(), 2 * first * second, rtol=1e-12)


@pytest.mark.parametrize(
    "starts, ends",
    [
        ((0, 2, 5), (2, 5, 7)),  # pieces that tile the axis: joined in one copy
        ((5, 0, 2), (7, 2, 5)),  # ... listed in any order
        ((-2, 0, 2), (7, 2, -2)),  # ... with negative and clamped bounds
        ((0, 3), (2, 7)),  # a gap: added into zeros
        ((0, 1, 4), (3, 5, 7)),  # overlapping pieces add up
    ],
)
def test_slices_grad_equals_each_piece_added_into_zeros(starts, ends):
    from ops.registry import REGISTRY

    defn = REGISTRY["slices_grad"]
    rng = np.random.default_rng(0)
    shape = (3, 7)
    attrs = defn.check_attrs({"shape": shape, "axes": (1,), "starts": starts, "ends": ends})
    gouts, want = [], np.zeros(shape, np.float32)
    for start, end in zip(starts, ends, strict=True):
        window = (slice(None), slice(start, end))
        gouts.append(rng.standard_normal(want[window].shape).astype(np.float32))
        want[window] += gouts[-1]
    got = defn.kernel(np, attrs, gouts)
    assert got.dtype == np.float32 and got.shape == shape
    np.testing.assert_array_equal(got, want)
