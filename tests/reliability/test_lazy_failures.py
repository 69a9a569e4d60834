"""A failed or interrupted lazy run fails alone: its ops are dropped, parameters and optimizer
state keep their pre-run values, and the next step -- lazy or eager -- works."""

import numpy as np
import pytest

import layers
import ops
import optim
import tape
from ops.registry import unregister
from tape.passes.plan import CACHE
from tests.scheduler.test_lazy import _register_boom

pytestmark = pytest.mark.usefixtures("lazy_tier")  # both lazy tiers


def _model():
    tape.seed(0)
    return layers.Linear(3, 4), layers.CrossEntropyLoss(), layers.Dropout(0.5)


def _step(model, opt, labels, lazy=True, dropout=False):
    linear, loss_fn, drop = model
    with tape.lazy(enabled=lazy):
        tape.reset_global_tape()
        x = tape.Variable(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
        h = linear(x)
        if dropout:
            h = drop(h)
        loss = loss_fn(h, tape.Variable(np.array(labels)))
        tape.backward(loss)
        opt(linear.params())
        return loss.numpy().item()


def _values(model, opt):
    params = [p.numpy().copy() for p in model[0].params()]
    state = opt.state_dict()
    return params, state


def _assert_same(a, b):
    for x, y in zip(a[0], b[0], strict=True):
        np.testing.assert_array_equal(x, y)
    assert a[1]["step"] == b[1]["step"]
    for key, entry in a[1]["state"].items():
        for slot, value in entry.items():
            np.testing.assert_array_equal(np.asarray(value), np.asarray(b[1]["state"][key][slot]))


def test_a_bad_batch_fails_alone_and_everything_after_it_works(tmp_path):
    model, opt = _model(), optim.Adam(lr=0.1)
    _step(model, opt, [0, 1])
    before = _values(model, opt)
    with pytest.raises(tape.ExecutionError, match="class index 9 is outside"):
        _step(model, opt, [0, 9])
    _assert_same(_values(model, opt), before)  # nothing of the failed step was applied
    tape.reset_global_tape()  # none of these re-raise the old error
    tape.save(tmp_path / "after.npz", model[0], opt)
    _step(model, opt, [1, 0], lazy=False)
    _step(model, opt, [1, 0], lazy=True)
    assert opt.step_count == 3


def test_the_next_step_equals_an_uninterrupted_run():
    failing, opt = _model(), optim.Adam(lr=0.1)
    clean, clean_opt = _model(), optim.Adam(lr=0.1)
    tape.seed(5)
    _step(failing, opt, [0, 1], dropout=True)
    with pytest.raises(tape.ExecutionError):
        _step(failing, opt, [0, 7], dropout=True)  # draws dropout masks, then fails
    _step(failing, opt, [1, 2], dropout=True)
    tape.seed(5)
    _step(clean, clean_opt, [0, 1], dropout=True)
    _step(clean, clean_opt, [1, 2], dropout=True)
    _assert_same(_values(failing, opt), _values(clean, clean_opt))


@pytest.mark.parametrize("threads", [0, 2])
def test_an_interrupt_inside_a_lazy_run_never_applies_an_update_twice(monkeypatch, threads):
    model, opt = _model(), optim.SGD(lr=0.5, momentum=0.9)
    _step(model, opt, [0, 1])
    before = _values(model, opt)
    original = ops.momentum.kernels["any"]
    calls = []

    def interrupted(xp, attrs, *args):
        calls.append(1)
        if len(calls) == 2:  # the second parameter's update: the first one has run
            raise KeyboardInterrupt
        return original(xp, attrs, *args)

    monkeypatch.setitem(ops.momentum.kernels, "any", interrupted)
    monkeypatch.setattr(ops.momentum, "kernel", interrupted)
    CACHE.clear()  # cached plans hold the kernels they were built with
    # (the updates run with the first request after them, at the latest on leaving the block)
    with pytest.raises(KeyboardInterrupt), tape.lazy(threads=threads):
        _step(model, opt, [1, 0])
    monkeypatch.undo()
    CACHE.clear()
    assert len(calls) == 2
    _assert_same(_values(model, opt), before)
    tape.reset_global_tape()  # the dropped updates do not run here
    _assert_same(_values(model, opt), before)


def test_reading_an_output_of_the_failed_run_names_the_failure():
    model = _model()
    with tape.lazy():
        tape.reset_global_tape()
        logits = model[0](tape.Variable(np.ones((2, 3), np.float32)))
        loss = model[1](logits, tape.Variable(np.array([0, 5])))
        with pytest.raises(tape.ExecutionError):
            loss.numpy()
        with pytest.raises(tape.GraphError) as info:
            loss.numpy()
    message = str(info.value)
    assert "the lazy run that was to compute this value failed" in message
    assert "class index 5 is outside [0, 4)" in message


def test_a_failed_lazy_backward_gives_leaves_back_their_earlier_gradients():
    boom = _register_boom()
    try:
        w = tape.Variable(np.ones(3, np.float32), requires_grad=True)
        tape.reset_global_tape()
        tape.backward((w * 2.0).sum())  # eager: w.grad() == 2
        for _ in range(2):  # a new structure, then one seen before
            with tape.lazy():
                tape.reset_global_tape()
                # The gradient reads boom's output, which fails when a run computes it: the
                # run the backward of a new structure starts (its forward), or the one
                # computing the recorded gradient ops of a structure seen before.
                with pytest.raises(tape.ExecutionError, match="negative input"):
                    tape.backward((boom(w * -1.0) * w).sum())
                    w.grad().numpy()
            np.testing.assert_array_equal(w.grad().numpy(), [2.0, 2.0, 2.0])
    finally:
        unregister("boom_for_test")


def test_a_failed_run_leaves_optimizer_counters_as_they_were():
    model, opt = _model(), optim.Adagrad(lr=0.1, lr_decay=0.5)
    _step(model, opt, [0, 1])
    steps = [s.step for s in opt._state.values()]
    with pytest.raises(tape.ExecutionError):
        _step(model, opt, [0, 4])
    assert opt.step_count == 1 and [s.step for s in opt._state.values()] == steps
