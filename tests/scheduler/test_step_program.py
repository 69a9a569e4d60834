"""A repeated lazy step runs whole at its backward (tape.step_program): once its template and
plan are learnt, a step records no gradient op, runs forward and backward as one plan, leaves
the leaves' gradients computed and the released ops dropped, and gives eager mode's values;
anything the plan cannot run whole goes the usual way, and a failed run changes nothing."""

import weakref

import numpy as np
import pytest

import layers
import ops
import optim
import tape
from ops.registry import register, unregister
from tape import tier_choice

# (speculation has its own tests: test_eager_speculation)
pytestmark = pytest.mark.usefixtures("no_speculation", "structures_forgotten")

DIM = 5
WARM = 8  # steps before the step program runs: first sightings, learning, compiling, timing


@pytest.fixture(autouse=True)
def _plan_tier(monkeypatch):
    """The plan tier every step (the eager way never measures cheaper): what these tests check."""
    monkeypatch.setattr(tier_choice, "MARGIN", 0.0)


def _model(seed=0):
    tape.seed(seed)
    return layers.Linear(DIM, DIM, act="tanh"), layers.Linear(DIM, 1)


def _params(model):
    return [p for layer in model for p in layer.params()]


def _forward(model, x, hold):
    hidden = model[0](tape.Variable(x))
    out = model[1](ops.dropout(hidden, dropout_prob=0.25)[0])
    if hold is not None:
        hold.append(hidden)
    return (out * out).mean()


def _step(model, x, lazy=True, hold=None, clear=True, **options):
    """One training step's loss and gradients (numpy), and the tape it recorded on."""
    if clear:
        for param in _params(model):
            param.clear_grad()
    with tape.lazy(lazy, autobatch=False, **options):
        t = tape.reset_global_tape()
        loss = _forward(model, x, hold)
        tape.backward(loss)
        after_backward = (len(t.ops), len(t._pending_ops))
        grads = [p.grad().numpy().copy() for p in _params(model)]
    return loss.numpy(), grads, t, after_backward


def _inputs(seed=1):
    return np.random.default_rng(seed).standard_normal((3, DIM)).astype(np.float32)


def _eager(model, x, seed):
    tape.seed(seed)
    return _step(model, x, lazy=False)


def _assert_close(got, want):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)


def test_a_repeated_step_records_no_gradient_op_and_gives_eager_modes_values():
    model, x = _model(), _inputs()
    for step in range(WARM + 3):
        want_loss, want, _, _ = _eager(model, x, seed=step)
        tape.seed(step)
        loss, grads, t, (ops_left, pending) = _step(model, x)
        np.testing.assert_allclose(loss, want_loss, rtol=2e-5)
        _assert_close(grads, want)  # (the dropout masks too: the same draws)
    # The last steps ran whole: the backward left no op (all released) and nothing pending.
    assert (ops_left, pending) == (0, 0)
    assert getattr(t, "_eager_way", None) is None
    assert "plan cache:" in tape.explain(t)
    # (dropout's two outputs are covered by the forward's recipe: tape.step_identity)
    assert "ran whole at its backward" in tape.explain(t)
    assert "recognised by its recipe" in tape.explain(t)


def test_gradients_are_eager_modes_bit_for_bit_under_exact():
    model, x = _model(), _inputs()
    for step in range(WARM + 2):
        _, want, _, _ = _eager(model, x, seed=step)
        tape.seed(step)
        _, grads, _, after = _step(model, x, exact=True)
        for g, w in zip(grads, want, strict=True):
            np.testing.assert_array_equal(g, w)
    assert after == (0, 0)


def test_values_held_at_the_backward_keep_their_values():
    model, x = _model(), _inputs()
    for step in range(WARM + 2):
        held_eager, held_lazy = [], []
        tape.seed(step)
        _step(model, x, lazy=False, hold=held_eager)
        tape.seed(step)
        _, _, _, after = _step(model, x, hold=held_lazy)
        np.testing.assert_allclose(held_lazy[0].numpy(), held_eager[0].numpy(), rtol=2e-5)
    assert after == (0, 0)


def test_gradients_accumulate_across_steps_that_do_not_clear_them():
    model, x = _model(), _inputs()
    for step in range(WARM):
        tape.seed(step)
        _step(model, x)
    tape.seed(100)
    _, once, _, _ = _step(model, x)
    tape.seed(100)
    _, twice, _, after = _step(model, x, clear=False)
    assert after == (4, 4)  # only the sums into the four parameters' gradients, pending
    _assert_close(twice, [2 * g for g in once])


def test_an_optimizer_step_after_the_backward_updates_as_eager_mode_does():
    eager_model, lazy_model, x = _model(), _model(), _inputs()
    eager_opt = optim.SGD(_params(eager_model), lr=0.1)
    lazy_opt = optim.SGD(_params(lazy_model), lr=0.1)
    for step in range(WARM + 3):
        for model, opt, lazy in ((eager_model, eager_opt, False), (lazy_model, lazy_opt, True)):
            for param in _params(model):
                param.clear_grad()
            tape.seed(step)
            with tape.lazy(lazy, autobatch=False):
                tape.reset_global_tape()
                tape.backward(_forward(model, x, None))
                opt.step()
    for got, want in zip(_params(lazy_model), _params(eager_model), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_a_value_read_before_the_backward_sends_the_step_the_usual_way():
    model, x = _model(), _inputs()
    for step in range(WARM):
        tape.seed(step)
        _step(model, x)
    held = []
    tape.seed(7)
    with tape.lazy(autobatch=False):
        t = tape.reset_global_tape()
        for param in _params(model):
            param.clear_grad()
        loss = _forward(model, x, held)
        held[0].numpy()  # (its ops ran: the pending ops are not the program's)
        tape.backward(loss)
        assert len(t.ops) > 0  # the usual way: gradient ops recorded
        grads = [p.grad().numpy().copy() for p in _params(model)]
    _, want, _, _ = _eager(model, x, seed=7)
    _assert_close(grads, want)


@pytest.fixture
def fails_on_negative():
    @register("fails_on_negative", inputs=("X",), infer=lambda attrs, x: (x.shape, x.dtype))
    def fails(xp, attrs, x):
        """Out = X, or fails on negative inputs (a test op)."""
        if (x < 0).any():
            raise ValueError("negative input")
        return x

    yield fails
    unregister("fails_on_negative")


def test_a_failed_run_changes_nothing_and_names_the_op(fails_on_negative):
    w = tape.Variable(np.full((DIM, DIM), 0.5, np.float32), requires_grad=True)

    def step(sign):
        w.clear_grad()
        with tape.lazy(autobatch=False):
            t = tape.reset_global_tape()
            x = tape.Variable(np.full((2, DIM), sign, np.float32))
            loss = (fails_on_negative(x) @ w).sum()
            tape.backward(loss)
            return t, w.grad().numpy().copy()

    for _ in range(WARM):
        step(1.0)
    with pytest.raises(tape.ExecutionError, match="fails_on_negative.*negative input") as info:
        step(-1.0)
    assert "recorded at: test_step_program.py:" in str(info.value)
    t = tape.get_global_tape()
    assert t._pending_ops == []  # the failed run's ops left the pending list
    assert w.grad() is None  # no gradient half-written
    _, grad = step(1.0)
    np.testing.assert_allclose(grad, np.full((DIM, DIM), 2.0))


def test_an_op_no_gradient_reaches_stays_on_the_tape_with_its_value():
    w = tape.Variable(np.full((DIM,), 0.5, np.float32), requires_grad=True)

    def step():
        w.clear_grad()
        with tape.lazy(autobatch=False):
            t = tape.reset_global_tape()
            x = tape.Variable(np.arange(DIM, dtype=np.float32))
            mask = ops.relu(x - 2.0)  # needs no gradient: the backward leaves it
            loss = (ops.tanh(x * w) * mask).sum()
            tape.backward(loss)
            return t, mask, w.grad().numpy().copy()

    for _ in range(WARM):
        step()
    t, mask, grad = step()
    assert [op.type for op in t.ops] == ["elementwise_sub", "relu"]
    np.testing.assert_allclose(mask.numpy(), np.maximum(np.arange(DIM) - 2.0, 0.0))
    x = np.arange(DIM, dtype=np.float32)
    want = x * (1 - np.tanh(x * 0.5) ** 2) * np.maximum(x - 2.0, 0.0)
    np.testing.assert_allclose(grad, want, rtol=1e-5)


def test_an_update_after_a_whole_step_computes_the_parameters_in_the_gradients_buffers():
    """The gradients a whole step computed are the optimizer's alone once it consumes them: the
    update writes the new values into their buffers, as an eager step does (no parameter-sized
    allocation, no gradient kept alive by the ran update until the next step)."""
    model, x = _model(), _inputs()
    opt = optim.SGD(_params(model), lr=0.1)
    for step in range(WARM + 1):
        tape.seed(step)
        with tape.lazy(autobatch=False):
            t = tape.reset_global_tape()
            tape.backward(_forward(model, x, None))
            # (weakly: a reference here would make the buffer not the optimizer's alone; on
            # the last, whole step: an earlier one's gradients may still be pending)
            if step == WARM:
                buffers = [weakref.ref(p.grad()._value) for p in _params(model)]
            opt.step()
            t.realize(_params(model))
    reused = [p._value is buffer() for p, buffer in zip(_params(model), buffers, strict=True)]
    # (the weights' gradients; a bias's is a reshaped view of a sum: not an owned buffer)
    assert reused == [p.ndim == 2 for p in _params(model)]
