"""Backward semantics: shared variables sum their gradients, unreachable ops are skipped, no_grad
records nothing, leaves accumulate across calls (DyNet), released tapes refuse a second backward,
create_graph records gradients that can be differentiated again."""

import numpy as np
import pytest

import ops
import tape
from tape.errors import GraphError


@pytest.fixture(autouse=True)
def fresh_tape():
    tape.reset_global_tape()


def var(values, requires_grad=True, dtype=np.float64):
    return tape.Variable(np.asarray(values, dtype=dtype), requires_grad=requires_grad)


def test_a_variable_used_by_several_ops_gets_the_sum_of_their_gradients():
    x = var([1.0, 2.0, 3.0])
    loss = (x * x + x * 3.0 + x).sum()  # d/dx = 2x + 3 + 1
    tape.backward(loss)
    np.testing.assert_allclose(x.grad().numpy(), 2 * np.array([1.0, 2.0, 3.0]) + 4)


def test_many_uses_of_one_parameter_are_summed_in_batches():
    w = var(np.full((2, 2), 0.5))
    x = var(np.ones((2, 2)), requires_grad=False)
    for _ in range(30):  # more uses than one accumulation batch holds
        x = x + w
    tape.backward(x.sum())
    np.testing.assert_allclose(w.grad().numpy(), np.full((2, 2), 30.0))


def test_ops_that_cannot_reach_the_loss_are_skipped():
    x = var([1.0, 2.0])
    unrelated = ops.relu(x * 5.0)
    loss = (x * 2.0).sum()
    tape.backward(loss)
    np.testing.assert_allclose(x.grad().numpy(), [2.0, 2.0])
    assert unrelated.requires_grad  # recorded, but backward did not touch it
    # Only the unrelated ops remain (the loss's ops left with their gradients); no gradient
    # op was recorded.
    assert [op.type for op in tape.get_global_tape().ops] == ["elementwise_mul", "relu"]


def test_ops_on_variables_that_need_no_gradient_are_not_recorded():
    data = var([1.0, 2.0], requires_grad=False)
    doubled = data * 2.0
    assert not doubled.requires_grad
    assert len(tape.get_global_tape()) == 0


def test_no_grad_records_nothing_for_backward():
    w = var([1.0, 2.0])
    with tape.no_grad():
        y = w * 3.0
    assert not y.requires_grad
    assert len(tape.get_global_tape()) == 0
    with pytest.raises(GraphError, match="does not require a gradient"):
        tape.backward(y.sum())


def test_no_grad_works_as_a_decorator():
    @tape.no_grad()
    def frozen(v):
        return v * 2.0

    assert not frozen(var([1.0])).requires_grad


def test_leaf_gradients_accumulate_across_backward_calls_until_cleared():
    w = var([1.0, 2.0])
    for _ in range(3):
        tape.reset_global_tape()
        tape.backward((w * w).sum())
    np.testing.assert_allclose(w.grad().numpy(), 3 * 2 * np.array([1.0, 2.0]))
    w.clear_grad()
    assert w.grad() is None


def test_a_second_backward_over_a_released_tape_raises_a_clear_error():
    w = var([1.0, 2.0])
    loss = (ops.relu(w) * 2.0).sum()
    tape.backward(loss)
    with pytest.raises(GraphError) as err:
        tape.backward(loss)
    assert "released by an earlier backward" in str(err.value)
    assert "retain_graph=True" in str(err.value)


def test_a_released_intermediate_reached_from_a_new_loss_raises():
    w = var([1.0, 2.0])
    hidden = ops.relu(w * 3.0)
    tape.backward(hidden.sum())
    with pytest.raises(GraphError, match="released by an earlier backward"):
        tape.backward((hidden * 2.0).sum())


def test_retain_graph_allows_a_second_backward_and_accumulates():
    w = var([1.0, 2.0])
    loss = (w * w).sum()
    tape.backward(loss, retain_graph=True)
    tape.backward(loss)
    np.testing.assert_allclose(w.grad().numpy(), 2 * 2 * np.array([1.0, 2.0]))


def test_a_failed_backward_leaves_no_partial_gradient():
    a = var([1.0, 2.0])
    tape.reset_global_tape()
    foreign = a * 2.0  # recorded on the tape we are about to drop
    tape.reset_global_tape()
    loss = (foreign * a).sum()
    with pytest.raises(GraphError, match=r"on a tape that reset_global_tape\(\) ended"):
        tape.backward(loss)
    assert a.grad() is None


def test_explicit_grad_seeds_a_non_scalar_loss():
    x = var([1.0, 2.0, 3.0])
    y = x * x
    tape.backward(y, grad=np.array([1.0, 0.0, 2.0]))
    np.testing.assert_allclose(x.grad().numpy(), [2.0, 0.0, 12.0])


def test_an_implicit_grad_needs_a_one_element_loss():
    x = var([1.0, 2.0])
    with pytest.raises(GraphError) as err:
        tape.backward(x * 2.0)
    assert "one element" in str(err.value) and "(2,)" in str(err.value)


def test_create_graph_gives_gradients_of_gradients():
    x = var([0.5, -1.0, 2.0])
    y = (x * x * x).sum()
    (gx,) = tape.grad(y, [x], create_graph=True)  # 3x^2
    assert gx.requires_grad
    (ggx,) = tape.grad(gx.sum(), [x])  # 6x
    np.testing.assert_allclose(gx.numpy(), 3 * x.numpy() ** 2)
    np.testing.assert_allclose(ggx.numpy(), 6 * x.numpy())


def test_create_graph_through_backward_accumulates_a_differentiable_grad():
    x = var([2.0])
    tape.backward((x * x * x).sum(), create_graph=True)
    first = x.grad()
    x.clear_grad()
    tape.backward(first.sum())
    np.testing.assert_allclose(x.grad().numpy(), [12.0])


def test_grad_returns_none_for_inputs_the_loss_does_not_depend_on():
    x, z = var([1.0]), var([2.0])
    gx, gz = tape.grad((x * 3.0).sum(), [x, z])
    np.testing.assert_allclose(gx.numpy(), [3.0])
    assert gz is None
    assert x.grad() is None  # tape.grad leaves .grad() untouched


def test_gradients_keep_the_variables_dtype():
    w = var(np.ones((3, 2)), dtype=np.float32)
    x = var(np.ones((4, 3)), requires_grad=False, dtype=np.float32)
    loss = ops.mean(ops.relu(x @ w * 2.0 + 1.0))
    tape.backward(loss)
    assert loss.dtype == np.float32
    assert w.grad().dtype == np.float32


def test_backward_on_a_private_tape_records_gradient_ops_there():
    private = tape.Tape()
    x = var([1.0, 2.0])
    out = private.add_op("elementwise_mul", {"X": [x], "Y": [x]})
    loss = private.add_op("mean", {"X": [out]})
    private.backward(loss)
    np.testing.assert_allclose(x.grad().numpy(), [1.0, 2.0])
    assert len(tape.get_global_tape()) == 0


def test_integer_variables_cannot_require_gradients():
    with pytest.raises(TypeError, match="floating-point"):
        tape.Variable(np.arange(3), requires_grad=True)


def test_accumulating_in_place_never_touches_a_gradient_shared_with_another_input():
    a, b = var([1.0, 2.0]), var([5.0, 7.0])
    # Reverse order: a + b first hands both inputs the same gout; a then gets two more.
    loss = (a * 3.0).sum() + (a * 5.0).sum() + (a + b).sum()
    tape.backward(loss)
    np.testing.assert_allclose(a.grad().numpy(), [9.0, 9.0])
    np.testing.assert_allclose(b.grad().numpy(), [1.0, 1.0])


def test_scalar_variables_accumulate_too():
    s = var(2.0)
    tape.backward(s * 3.0 + s * 4.0 + s * 5.0)
    assert s.grad().shape == () and float(s.grad().numpy()) == 12.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_gradients_add_up_in_reused_buffers_on_threads_bit_for_bit(dtype, monkeypatch):
    from ops import buffers, intra_op

    rng = np.random.default_rng(0)
    shape = (1031, 2049)  # (over intra_op's threshold and the buffer pool's; odd rows)
    values = [rng.standard_normal(shape).astype(dtype) for _ in range(3)]
    start = rng.standard_normal(shape).astype(dtype)

    def gradient():
        tape.reset_global_tape()
        x = tape.Variable(start, requires_grad=True)
        tape.backward(((x * values[0]) + (x * values[1]) + (x * values[2]) + x).sum())
        return x.grad().numpy().copy()

    monkeypatch.setattr(intra_op, "MIN_ELEMENTS", 2)  # (every array split where it can be)
    split = gradient()
    monkeypatch.setattr(intra_op, "MIN_ELEMENTS", 1 << 62)
    monkeypatch.setattr(buffers, "MIN_BYTES", 1 << 62)  # (plain numpy arrays, one call each)
    plain = gradient()
    assert split.dtype == plain.dtype == dtype
    np.testing.assert_array_equal(split.view(np.uint8), plain.view(np.uint8))
    np.testing.assert_allclose(plain, values[0] + values[1] + values[2] + 1, rtol=1e-5, atol=1e-5)
