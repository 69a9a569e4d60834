"""PyTorch-familiar ergonomics: x.grad as a property (x.grad() still works), loss.backward(),
clone/detach/requires_grad_/item/tolist, bare @no_grad, and errors that name the user's line."""

import numpy as np
import pytest
import torch

import layers
import ops
import tape


def test_grad_is_a_property_and_the_call_form_still_works():
    x = tape.Variable(np.array([1.0, -2.0, 3.0]), requires_grad=True)
    assert x.grad() is None
    loss = (x * x).sum()
    loss.backward()
    assert isinstance(x.grad, tape.Variable)
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, -4.0, 6.0])
    assert x.grad() is x.grad  # the earlier spelling: a Variable called with nothing is itself
    x.grad = None
    assert x.grad() is None
    x.grad = np.ones(3)
    assert x.grad.numpy().tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(tape.ShapeError, match="the gradient of '.*' must have its shape"):
        x.grad = np.ones(2)
    with pytest.raises(TypeError, match="a Variable is not a function"):
        x(1)


def test_loss_backward_matches_torch():
    data = np.linspace(-1, 1, 6).reshape(2, 3)
    x = tape.Variable(data, requires_grad=True)
    ops.tanh(x * 3.0).mean().backward()
    t = torch.tensor(data, requires_grad=True)
    torch.tanh(t * 3.0).mean().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_clone_is_recorded_and_detach_is_cut():
    x = tape.Variable(np.array([1.0, 2.0]), requires_grad=True)
    copy = x.clone()
    assert copy is not x and copy.requires_grad and not copy.is_leaf
    np.testing.assert_array_equal(copy.numpy(), x.numpy())
    (copy * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
    cut = (x * 2.0).detach()
    assert cut.is_leaf and not cut.requires_grad


def test_requires_grad_item_tolist_numel_dim():
    w = tape.Variable(np.zeros((2, 3), np.float32))
    assert w.requires_grad_() is w and w.requires_grad
    assert w.requires_grad_(False) is w and not w.requires_grad
    with pytest.raises(tape.InputError, match="cannot require a gradient"):
        tape.Variable(np.arange(3)).requires_grad_()
    y = tape.Variable(np.ones(2), requires_grad=True) * 2.0
    with pytest.raises(tape.InputError, match="use .detach"):
        y.requires_grad_(False)
    assert tape.Variable(np.array([[1, 2], [3, 4]])).tolist() == [[1, 2], [3, 4]]
    assert tape.Variable(np.array(2.5)).item() == 2.5
    assert (w.numel(), w.dim()) == (6, 2)


def test_integer_data_cannot_require_a_gradient_and_the_line_is_named():
    with pytest.raises(tape.InputError) as info:
        tape.Variable([1, 2], requires_grad=True)
    message = str(info.value)
    assert "cannot require a gradient" in message and "int64" in message
    assert "recorded at: test_ergonomics.py:" in message


@pytest.mark.parametrize("mode", [tape.no_grad, tape.no_grad()], ids=["bare", "called"])
def test_no_grad_decorates_bare_or_called(mode):
    @mode
    def double(v):
        return v * 2.0

    w = tape.Variable(np.ones(2), requires_grad=True)
    assert not double(w).requires_grad
    assert double.__name__ == "double"
    assert (w * 2.0).requires_grad  # and only inside


def test_enable_grad_decorates_bare_too():
    @tape.enable_grad
    def double(v):
        return v * 2.0

    w = tape.Variable(np.ones(2), requires_grad=True)
    with tape.no_grad():
        assert double(w).requires_grad


def test_add_op_errors_name_the_users_line():
    t = tape.Tape()
    x = tape.Variable(np.ones(3))
    with pytest.raises(tape.InputError) as info:
        t.add_op("relu_typo", {"X": [x]})
    assert "op 'relu_typo': unknown op type" in str(info.value)
    assert "recorded at: test_ergonomics.py:" in str(info.value)
    with pytest.raises(tape.InputError) as info:
        ops.relu(x, x)
    assert "op 'relu': too many inputs" in str(info.value)
    assert "recorded at: test_ergonomics.py:" in str(info.value)


def test_attribute_errors_describe_variables_briefly():
    model = layers.Linear(3, 2)
    with pytest.raises(tape.AttrError) as info:
        ops.leaky_relu(tape.Variable(np.ones(2)), alpha=model.params())
    message = str(info.value)
    assert "actual:   list of 2 (Variable) (list)" in message
    assert "value=" not in message and len(message) < 400
