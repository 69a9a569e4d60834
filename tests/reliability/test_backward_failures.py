"""A backward whose gradient kernel fails raises the library's error naming the gradient op and
the forward op, changes no gradient, and the same call again gives exactly the gradients of an
uninterrupted backward (eager: it resumes where it stopped; lazy: it starts again)."""

import numpy as np
import pytest

import ops
import tape
from ops.infer import same_as_input
from ops.registry import REGISTRY, register, unregister


@pytest.fixture
def flaky():
    """An identity op whose gradient op raises ``failures[0]`` (once) when it is set."""
    failures = []

    @register("flaky_identity", inputs=("X",), infer=same_as_input)
    def flaky_identity(xp, attrs, x):
        return x.copy()

    @register("flaky_identity_grad", inputs=("G",), infer=same_as_input)
    def flaky_identity_grad(xp, attrs, g):
        if failures:
            raise failures.pop()
        return g.copy()

    @flaky_identity.gradient
    def _(g):
        return (flaky_identity_grad(g.gouts[0]),)

    yield flaky_identity, failures
    unregister("flaky_identity")
    unregister("flaky_identity_grad")


def _loss(flaky_op, w):
    h = ops.tanh(w * 2.0)
    h = flaky_op(h) * w  # the failure comes after tanh's and mul's gradients ran
    return (ops.tanh(h) * 3.0).sum()


def _reference(flaky_op, value):
    tape.reset_global_tape()
    w = tape.Variable(value, requires_grad=True)
    tape.backward(_loss(flaky_op, w))
    return w.grad().numpy()


W = np.linspace(-1.0, 1.0, 6).reshape(2, 3)


@pytest.mark.parametrize(
    "error", [ValueError("boom"), MemoryError("out of memory")], ids=["error", "memory"]
)
def test_a_failing_gradient_kernel_names_both_ops_and_the_retry_resumes(flaky, error):
    flaky_op, failures = flaky
    expected = _reference(flaky_op, W)
    tape.reset_global_tape()
    w = tape.Variable(W, requires_grad=True)
    loss = _loss(flaky_op, w)
    failures.append(error)
    with pytest.raises(tape.ExecutionError) as info:
        tape.backward(loss)
    message = str(info.value)
    assert message.startswith("op 'flaky_identity_grad': kernel failed: ")
    assert type(error).__name__ in message and str(error) in message
    assert "in the gradient of op 'flaky_identity' (flaky_identity_" in message
    assert "backward was called at test_backward_failures.py:" in message
    assert isinstance(info.value.__cause__.__cause__, type(error))
    assert w.grad() is None  # nothing committed
    tape.backward(loss)  # the same call again: resumes
    np.testing.assert_array_equal(w.grad().numpy(), expected)
    assert tape.get_global_tape().ops == []  # and released everything as usual


def test_ctrl_c_in_a_gradient_kernel_passes_through_and_the_retry_resumes(flaky):
    flaky_op, failures = flaky
    expected = _reference(flaky_op, W)
    tape.reset_global_tape()
    w = tape.Variable(W, requires_grad=True)
    loss = _loss(flaky_op, w)
    failures.append(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        tape.backward(loss)
    tape.backward(loss)
    np.testing.assert_array_equal(w.grad().numpy(), expected)


def test_the_gradient_op_line_is_the_forward_ops_in_lazy_mode(flaky):
    flaky_op, failures = flaky
    expected = _reference(flaky_op, W)
    with tape.lazy(
        compile=True
    ):  # (records the gradient ops; see tests/scheduler/test_fresh_backward)
        t = tape.reset_global_tape()
        w = tape.Variable(W, requires_grad=True)
        loss = _loss(flaky_op, w)
        before = (len(t._ops), len(t._pending_ops))
        # In lazy mode kernels run later; a gradient maker failing fails the backward call.
        maker = REGISTRY["flaky_identity"].grad_maker
        REGISTRY["flaky_identity"].grad_maker = lambda g: 1 / 0
        try:
            with pytest.raises(tape.ExecutionError) as info:
                tape.backward(loss)
        finally:
            REGISTRY["flaky_identity"].grad_maker = maker
        message = str(info.value)
        assert "op 'flaky_identity' (flaky_identity_" in message
        assert "gradient maker failed: ZeroDivisionError: division by zero" in message
        assert "recorded at: test_backward_failures.py:" in message and "in _loss" in message
        # the gradient ops recorded before the failure left the tape; nothing is released
        assert (len(t._ops), len(t._pending_ops)) == before
        assert not any(v._released for op in t.ops for v in op.output_vars())
        tape.backward(loss)
        np.testing.assert_allclose(w.grad().numpy(), expected, rtol=1e-12)


def test_create_graph_failure_leaves_no_gradient_ops_on_the_tape(flaky):
    flaky_op, failures = flaky
    tape.reset_global_tape()
    w = tape.Variable(W, requires_grad=True)
    loss = _loss(flaky_op, w)
    t = tape.get_global_tape()
    recorded = len(t._ops)
    failures.append(ValueError("boom"))
    with pytest.raises(tape.ExecutionError):
        tape.backward(loss, create_graph=True)
    assert len(t._ops) == recorded
    (gw,) = tape.grad(loss, [w], create_graph=True)
    (ggw,) = tape.grad(gw.sum(), [w])
    assert ggw.shape == w.shape


def test_a_different_backward_after_a_failure_does_not_resume(flaky):
    flaky_op, failures = flaky
    tape.reset_global_tape()
    w = tape.Variable(W, requires_grad=True)
    loss = _loss(flaky_op, w)
    failures.append(ValueError("boom"))
    with pytest.raises(tape.ExecutionError):
        tape.backward(loss)
    # Another loss over the same ops: the ops the failed scan released are gone for it.
    with pytest.raises(tape.GraphError, match="released by an earlier backward"):
        tape.backward(loss * 2.0)
    assert w.grad() is None
