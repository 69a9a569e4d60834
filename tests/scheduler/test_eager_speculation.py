"""A model whose graph is new at every step (tape.eager_speculation): after a streak of new
structures whose forward ran unbatched, the next global tape of the lazy block records eagerly
and gives eager mode's values bit for bit; a structure that repeats, a probe, or options that
batch or compile send steps back to lazy recording."""

import numpy as np
import pytest

import layers
import ops
import tape
from tape import autobatch_choice, eager_speculation

pytestmark = pytest.mark.usefixtures("structures_forgotten")

DIM = 4


def _model():
    tape.seed(0)
    return layers.Linear(DIM, DIM, act="tanh"), layers.Linear(DIM, 1)


def _step(model, length, lazy=True, **options):
    """One step over a sequence of ``length`` (a new structure for every new length): the
    loss, the gradients and the step's tape."""
    cell, head = model
    params = cell.params() + head.params()
    for param in params:
        param.clear_grad()
    x = np.linspace(-1, 1, DIM, dtype=np.float32)
    with tape.lazy(lazy, **options):
        t = tape.reset_global_tape()
        h = tape.Variable(x)
        for _ in range(length):
            h = cell(h) + h
        loss = head(h).sum()
        tape.backward(loss)
        grads = [p.grad().numpy().copy() for p in params]
    return loss.numpy(), grads, t


def _speculated(t):
    return t.speculated  # (recorded eagerly: every tape is eager once its block has ended)


def test_after_a_streak_of_new_structures_a_step_records_eagerly_with_eager_results():
    model = _model()
    tapes = []
    for length in range(1, 8):
        want_loss, want, _ = _step(model, length, lazy=False)
        loss, grads, t = _step(model, length, autobatch=False)
        np.testing.assert_array_equal(loss, want_loss)
        for got, expected in zip(grads, want, strict=True):
            np.testing.assert_array_equal(got, expected)
        tapes.append(t)
    streak = eager_speculation.STREAK
    assert [_speculated(t) for t in tapes] == [False] * streak + [True] * (7 - streak)
    assert "recorded eagerly" in tape.explain(tapes[-1])


def test_a_structure_that_repeats_ends_the_speculation():
    model = _model()
    for length in range(1, eager_speculation.STREAK + 2):  # (the last is speculated)
        _step(model, length, autobatch=False)
    _, _, repeated = _step(model, 1, autobatch=False)  # its sketch is known: the streak ends
    assert _speculated(repeated)
    _, _, after = _step(model, 3, autobatch=False)
    assert not _speculated(after)


def test_every_probe_th_speculated_step_records_lazily(monkeypatch):
    monkeypatch.setattr(eager_speculation, "PROBE", 3)
    model = _model()
    tapes = [_step(model, length, autobatch=False)[2] for length in range(1, 10)]
    # lazy steps make the streak; then each third speculated step is a lazy probe
    streak = eager_speculation.STREAK
    assert [_speculated(t) for t in tapes[streak:]] == ([True, True, False] * 3)[: 9 - streak]
    assert not any(_speculated(t) for t in tapes[:streak])


@pytest.mark.parametrize(
    "options", [{"autobatch": True}, {"compile": True}, {"threads": 2}, {"validate": True}]
)
def test_options_that_batch_or_compile_never_speculate(options):
    model = _model()
    tapes = [_step(model, length, **options)[2] for length in range(1, 7)]
    assert not any(_speculated(t) for t in tapes)


def test_a_model_that_batches_faster_is_not_speculated(monkeypatch):
    monkeypatch.setattr(autobatch_choice, "prefers_batching", lambda key: True)
    model = _model()
    tapes = [_step(model, length, autobatch="auto")[2] for length in range(1, 7)]
    assert not any(_speculated(t) for t in tapes)


def test_a_speculated_step_leaves_the_block_lazy_for_the_next_tape():
    model = _model()
    for length in range(1, 5):
        _step(model, length, autobatch=False)
    with tape.lazy(autobatch=False):
        t = tape.reset_global_tape()  # (speculated: records eagerly)
        y = ops.relu(tape.Variable(np.array([-1.0, 2.0], np.float32)))
        assert _speculated(t) and y._pending is None
        eager_speculation.reset()
        t = tape.reset_global_tape()
        y = ops.relu(tape.Variable(np.array([-1.0, 2.0], np.float32)))
        assert t.lazy and y._pending is t
        np.testing.assert_array_equal(y.numpy(), [0.0, 2.0])
