"""Stale variables: a backward reaching a Variable whose tape reset_global_tape() ended names the
op that created it, where, and where the tape was reset; its value keeps working as a constant,
and .detach() carries it into the next iteration (truncated BPTT)."""

import numpy as np
import pytest
import torch

import ops
import tape

X = np.linspace(-1.0, 1.0, 6).reshape(2, 3)


def _cell(x, h, w):
    return ops.tanh(x * w + h)


def test_backward_through_a_variable_of_an_ended_tape_names_its_op_and_the_reset():
    tape.reset_global_tape()
    w = tape.Variable(X, requires_grad=True)
    h = _cell(tape.Variable(X), tape.Variable(np.zeros_like(X)), w)
    tape.reset_global_tape()  # line of the reset
    loss = _cell(tape.Variable(X), h, w).sum()
    with pytest.raises(tape.GraphError) as info:
        loss.backward()
    message = str(info.value)
    assert f"gradient reached '{h.name}', created by op 'tanh' (tanh_" in message
    assert "on a tape that reset_global_tape() ended" in message
    assert "created at an eager op (no line kept)" in message
    assert "tape reset at test_stale.py:" in message
    assert "v.detach()" in message and "recorded at: test_stale.py:" in message
    assert w.grad() is None


def test_lazy_ops_keep_their_line_for_the_message():
    with tape.lazy():
        tape.reset_global_tape()
        w = tape.Variable(X, requires_grad=True)
        h = _cell(tape.Variable(X), tape.Variable(np.zeros_like(X)), w)
        tape.reset_global_tape()
        loss = _cell(tape.Variable(X), h, w).sum()
        with pytest.raises(tape.GraphError, match=r"created at test_stale.py:\d+ in _cell"):
            loss.backward()


def test_a_backward_that_released_it_earlier_says_so_and_suggests_detach():
    tape.reset_global_tape()
    w = tape.Variable(X, requires_grad=True)
    h = _cell(tape.Variable(X), tape.Variable(np.zeros_like(X)), w)
    h.sum().backward()
    tape.reset_global_tape()
    with pytest.raises(tape.GraphError) as info:
        _cell(tape.Variable(X), h, w).sum().backward()
    message = str(info.value)
    assert "whose ops were released by an earlier backward" in message
    assert "retain_graph=True" in message and "v.detach()" in message


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_truncated_bptt_with_detach_equals_torch(lazy):
    """Three segments of two steps each; the state is carried across segments detached."""
    tw = torch.tensor(X, requires_grad=True)
    th = torch.zeros(2, 3, dtype=torch.float64)
    expected = []
    for _ in range(3):
        for _ in range(2):
            th = torch.tanh(torch.tensor(X) * tw + th)
        th.sum().backward()
        expected.append(tw.grad.clone())
        tw.grad = None
        th = th.detach()
    w = tape.Variable(X, requires_grad=True)
    h = tape.Variable(np.zeros((2, 3)))
    with tape.lazy(lazy):
        for segment in range(3):
            tape.reset_global_tape()
            for _ in range(2):
                h = _cell(tape.Variable(X), h, w)
            h.sum().backward()
            np.testing.assert_allclose(w.grad.numpy(), expected[segment].numpy(), rtol=1e-12)
            w.grad = None
            h = h.detach()


def test_the_value_of_a_stale_variable_keeps_working():
    with tape.lazy():
        tape.reset_global_tape()
        w = tape.Variable(X, requires_grad=True)
        h = _cell(tape.Variable(X), tape.Variable(np.zeros_like(X)), w)  # never computed
        tape.reset_global_tape()
        np.testing.assert_allclose(h.numpy(), np.tanh(X * X), rtol=1e-12)
    tape.reset_global_tape()
    h = _cell(tape.Variable(X), tape.Variable(np.zeros_like(X)), w)
    tape.reset_global_tape()
    with tape.no_grad():
        np.testing.assert_allclose((h * 2.0).numpy(), 2 * np.tanh(X * X), rtol=1e-12)
