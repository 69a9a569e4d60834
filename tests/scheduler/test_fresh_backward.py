"""A lazy backward over a structure seen for the first time (tape.backward._after_forward): the
forward runs, then the reverse scan the eager way, so the step costs what eager mode's does and
gives its gradients bit for bit; a structure seen again records its gradient ops and compiles."""

import numpy as np
import pytest

import layers
import ops
import optim
import tape
from tape import replay

DIM = 4


@pytest.fixture(autouse=True)
def _forget_structures():
    replay._SEEN.clear()
    replay._TEMPLATES.clear()
    yield
    replay._SEEN.clear()


def _model(seed=0):
    tape.seed(seed)
    return layers.Linear(DIM, DIM, act="tanh"), layers.Linear(DIM, 1)


def _step(model, lengths, lazy, seed=1, options=None):
    """Sum of the model's outputs over sequences of ``lengths`` (a new structure for every new
    list): loss and parameter gradients; the tape."""
    cell, head = model
    rng = np.random.default_rng(seed)
    for param in cell.params() + head.params():
        param.clear_grad()
    with tape.lazy(lazy, **(options or {})):
        t = tape.reset_global_tape()
        losses = []
        for length in lengths:
            h = tape.Variable(rng.standard_normal(DIM).astype(np.float32))
            for _ in range(length):
                h = cell(h) + h
            losses.append(head(h).sum())
        loss = ops.stack(losses).mean()
        tape.backward(loss)
        grads = [p.grad().numpy().copy() for p in cell.params() + head.params()]
    return loss.numpy(), grads, t


@pytest.mark.parametrize("options", [{}, {"autobatch": False}, {"autobatch": True}])
def test_a_new_structure_gets_eager_modes_loss_and_gradients_bit_for_bit(options):
    model = _model()
    for lengths in ([2, 3], [1, 4, 2], [5]):
        want_loss, want, _ = _step(model, lengths, lazy=False)
        got_loss, got, _ = _step(model, lengths, lazy=True, options=options)
        np.testing.assert_array_equal(got_loss, want_loss)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)


def test_a_new_structure_records_no_gradient_op_and_keeps_no_forward_op():
    _, _, t = _step(_model(), [2, 3], lazy=True)
    assert t._pending_ops == []
    assert t.ops == []  # each forward op left the tape once its gradient ran, as in eager mode


def test_a_repeated_structure_records_its_gradient_ops_and_runs_them_as_a_compiled_plan():
    model = _model()
    want_loss, want, _ = _step(model, [2, 3], lazy=False)
    for _ in range(4):
        loss, got, t = _step(model, [2, 3], lazy=True)
        np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert t._last_plan is not None  # (forward and backward's third sighting compiled it)
    fused = [line for line in tape.explain(t).splitlines() if "fused[" in line]
    assert any("tanh_grad" in line for line in fused), "the backward runs inside the plan"


def test_a_tape_made_by_hand_keeps_its_gradient_ops_for_programs():
    cell, head = _model()
    recording = tape.Tape(lazy=True)
    previous, tape.tape.state.tape = tape.tape.state.tape, recording
    try:
        with tape.lazy():
            loss = head(cell(tape.Variable(np.ones(DIM, np.float32)))).sum()
            tape.backward(loss)
    finally:
        tape.tape.state.tape = previous
    types = [op.type for op in tape.Program.from_tape(recording).global_block().ops]
    assert "tanh_grad" in types and "matmul" in types


def test_an_optimizer_step_after_a_fresh_backward_updates_as_in_eager_mode():
    def train(lazy):
        model = _model()
        opt = optim.SGD(lr=0.1)
        for lengths in ([2, 1], [3], [1, 1, 2]):
            _step(model, lengths, lazy, options={"exact": True})
            with tape.lazy(lazy, exact=True):  # (a compiled update may fuse: exact is bitwise)
                opt(model[0].params() + model[1].params())
        return [p.numpy().copy() for p in model[0].params() + model[1].params()]

    for got, want in zip(train(True), train(False), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_failing_gradient_kernel_leaves_the_step_resumable(monkeypatch):
    """A gradient kernel that fails once: backward raises, the parameters keep no partial
    gradient, and the same call again completes with eager mode's gradients."""
    model = _model()
    _, want, _ = _step(model, [2, 2], lazy=False)
    from ops.registry import REGISTRY

    defn = REGISTRY["tanh_grad"]
    kernel, calls = defn.kernel, []

    def failing_once(xp, attrs, *args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected")
        return kernel(xp, attrs, *args)

    cell, head = model
    for param in cell.params() + head.params():
        param.clear_grad()
    rng = np.random.default_rng(1)
    with tape.lazy():
        tape.reset_global_tape()
        losses = []
        for length in [2, 2]:
            h = tape.Variable(rng.standard_normal(DIM).astype(np.float32))
            for _ in range(length):
                h = cell(h) + h
            losses.append(head(h).sum())
        loss = ops.stack(losses).mean()
        monkeypatch.setattr(defn, "kernel", failing_once)
        with pytest.raises(tape.ExecutionError, match="injected"):
            tape.backward(loss)
        assert all(p.grad() is None for p in cell.params() + head.params())
        tape.backward(loss)  # resumes where it stopped
        got = [p.grad().numpy() for p in cell.params() + head.params()]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
