"""A buffer saved for backward never changes behind its back: the four ways a user could change
one either cannot reach it or make backward raise, naming the op that saved it and where the
value changed; parameters never share a buffer silently."""

import numpy as np
import pytest

import layers
import ops
import optim
import tape


def _grad_of_x_times_w(mutate):
    """d(sum(x * w))/dw after ``mutate(x_array, x)`` between recording and backward."""
    tape.reset_global_tape()
    batch = np.array([1.0, 2.0, 3.0], np.float32)
    x = tape.Variable(batch)
    w = tape.Variable(np.ones(3, np.float32), requires_grad=True)
    loss = (x * w).sum()
    mutate(batch, x)
    tape.backward(loss)
    return w.grad().numpy()


def test_reusing_the_batch_array_for_the_next_batch_changes_no_gradient():
    def next_batch(batch, x):
        batch[:] = [7.0, 8.0, 9.0]  # Variable(batch) copied it

    np.testing.assert_array_equal(_grad_of_x_times_w(next_batch), [1.0, 2.0, 3.0])


def test_writing_through_numpy_or_value_is_refused():
    for view in (lambda x: x.numpy(), lambda x: x.value()):

        def write(batch, x, view=view):
            with pytest.raises(ValueError, match="read-only"):
                view(x)[0] = 100.0

        np.testing.assert_array_equal(_grad_of_x_times_w(write), [1.0, 2.0, 3.0])


def test_set_value_on_a_saved_leaf_makes_backward_raise():
    def replace(batch, x):
        x.set_value(np.zeros(3, np.float32))

    with pytest.raises(tape.MutationError) as info:
        _grad_of_x_times_w(replace)
    message = str(info.value)
    assert message.startswith("op 'elementwise_mul' (elementwise_mul_0): X ('")
    assert "was given a new value after this op saved it for backward" in message
    assert "replaced by set_value at test_mutation.py:" in message


def test_add_op_writing_into_a_saved_input_makes_backward_raise():
    tape.reset_global_tape()
    t = tape.get_global_tape()
    x = tape.Variable(np.array([1.0, 2.0], np.float32), requires_grad=True)
    y = ops.tanh(x)  # tanh's gradient reads its output y
    loss = (y + 1.0).sum()  # add saves no buffer: tanh is the op that saved y
    t.add_op("relu", {"X": [x]}, {"Out": [y]})  # y rebound to relu(x)
    with pytest.raises(tape.MutationError, match="(?s)op 'tanh' .*the output of op 'relu'"):
        tape.backward(loss)


def test_an_optimizer_step_before_a_retained_backward_makes_it_raise():
    tape.reset_global_tape()
    w = tape.Variable(np.ones(2, np.float32), requires_grad=True)
    loss = (w * w).sum()
    tape.backward(loss, retain_graph=True)
    optim.SGD(lr=0.1)([w])  # w's old value is what the retained graph saved
    with pytest.raises(tape.MutationError, match="replaced by an in-place update"):
        tape.backward(loss)


def test_changes_after_backward_or_to_unsaved_inputs_are_fine():
    tape.reset_global_tape()
    x = tape.Variable(np.array([1.0, 2.0], np.float32))
    w = tape.Variable(np.ones(2, np.float32), requires_grad=True)
    loss = ((x + w) * 2.0).sum()  # add saves neither input's buffer
    x.set_value(np.zeros(2, np.float32))
    tape.backward(loss)
    np.testing.assert_array_equal(w.grad().numpy(), [2.0, 2.0])
    x.set_value(np.ones(2, np.float32))  # after backward: nothing left to guard


def test_in_lazy_mode_set_value_runs_the_pending_readers_of_the_old_value_first():
    results = []
    for lazy in (False, True):
        with tape.lazy(enabled=lazy):
            tape.reset_global_tape()
            x = tape.Variable(np.array([1.0, 2.0], np.float32))
            y = ops.exp(x)
            x.set_value(np.array([5.0, 6.0], np.float32))
            z = ops.exp(x)
            results.append((y.numpy().copy(), z.numpy().copy()))
    for eager, lazy in zip(*results, strict=True):
        np.testing.assert_array_equal(eager, lazy)


def test_parameters_built_from_one_array_move_independently(tmp_path):
    shared = np.ones(3, np.float32)
    a = tape.Variable(shared, requires_grad=True)
    b = tape.Variable(shared, requires_grad=True)
    tape.reset_global_tape()
    tape.backward((a * 2.0).sum())
    optim.SGD(lr=0.5)([a, b])
    np.testing.assert_array_equal(a.numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(b.numpy(), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(shared, [1.0, 1.0, 1.0])  # the caller's array is untouched
    same = np.zeros((3, 3), np.float32)  # one array initialises both layers' weights

    def build():
        def init(shape, dtype):
            return same

        return layers.Sequential(layers.Linear(3, 3, weight_init=init), layers.Linear(3, 3))

    saved = layers.Sequential(layers.Linear(3, 3), layers.Linear(3, 3))
    tape.save(tmp_path / "m.npz", saved)
    model = build()
    model[1].weight = model[0].weight.detach()  # even a shared buffer is safe to load into
    model[1].weight.requires_grad = model[1].weight.persistable = True
    tape.load(tmp_path / "m.npz", model)
    for i in range(2):
        np.testing.assert_array_equal(model[i].weight.numpy(), saved[i].weight.numpy())
    np.testing.assert_array_equal(same, np.zeros((3, 3)))
