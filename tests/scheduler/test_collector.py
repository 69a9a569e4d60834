"""The scheduler pauses the cyclic garbage collector while it works, and only then."""

import gc
import threading

import numpy as np
import pytest

import ops
import tape
from tape import collector


def test_paused_blocks_nest_and_the_collector_resumes_after_the_outermost():
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_the_user_disabled_stays_disabled():
    gc.disable()
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_resumes_when_the_last_thread_leaves():
    inside, leave = threading.Event(), threading.Event()

    def worker():
        with collector.paused():
            inside.set()
            leave.wait(5)

    thread = threading.Thread(target=worker)
    thread.start()
    inside.wait(5)
    with collector.paused():
        pass
    assert not gc.isenabled()  # the worker is still inside
    leave.set()
    thread.join()
    assert gc.isenabled()


def test_a_lazy_step_runs_with_the_collector_paused_and_leaves_it_on(monkeypatch):
    seen = []
    real = ops.tanh.kernel

    def spying(xp, attrs, x):
        seen.append(gc.isenabled())
        return real(xp, attrs, x)

    monkeypatch.setattr(ops.tanh, "kernel", spying)
    w = tape.Variable(np.ones((3, 3), np.float32), requires_grad=True)
    with tape.lazy():
        tape.reset_global_tape()
        loss = ops.tanh(w * 2.0).sum()
        tape.backward(loss)
        grad = w.grad().numpy()
    assert seen == [False]
    assert gc.isenabled()
    np.testing.assert_allclose(grad, 2.0 * (1.0 - np.tanh(2.0) ** 2) * np.ones((3, 3)), rtol=1e-6)


def test_a_failing_lazy_run_leaves_the_collector_on(monkeypatch):
    def failing(xp, attrs, x):
        raise FloatingPointError("injected")

    monkeypatch.setattr(ops.tanh, "kernel", failing)
    with tape.lazy():
        tape.reset_global_tape()
        y = ops.tanh(tape.Variable(np.ones(2, np.float32)))
        with pytest.raises(tape.ExecutionError, match="injected"):
            y.numpy()
    assert gc.isenabled()


def test_an_eager_step_pauses_the_collector_from_its_first_op_until_its_backward():
    w = tape.Variable(np.ones((2, 2), np.float32), requires_grad=True)
    tape.reset_global_tape()
    assert gc.isenabled()
    loss = ops.tanh(w).sum()
    assert not gc.isenabled()  # the step's tape grows: nothing to collect in it
    tape.backward(loss)
    assert gc.isenabled()  # the backward dropped the step's ops
    ops.tanh(w)  # the next step's first op
    assert not gc.isenabled()
    tape.reset_global_tape()
    assert gc.isenabled()


@pytest.mark.parametrize("lazy, mask", [(False, "EAGER_STEP_MASK"), (True, "STEP_MASK")])
def test_a_tape_that_records_without_running_or_a_backward_resumes_collection(
    monkeypatch, lazy, mask
):
    import tape.tape as engine

    monkeypatch.setattr(engine, mask, 7)  # a pause ends after 8 ops recorded
    w = tape.Variable(np.ones((2, 2), np.float32), requires_grad=True)
    with tape.lazy(lazy):
        tape.reset_global_tape()
        h = ops.tanh(w)
        assert not gc.isenabled()
        for _ in range(8):
            h = ops.tanh(h)
        assert gc.isenabled()
        for _ in range(8):
            h = ops.tanh(h)
        assert gc.isenabled()  # (not paused again before the next step)


def test_an_eager_step_without_backward_resumes_collection_at_the_reset():
    w = tape.Variable(np.ones((2, 2), np.float32), requires_grad=True)
    tape.reset_global_tape()
    ops.tanh(w)
    assert not gc.isenabled()
    tape.reset_global_tape()
    assert gc.isenabled()


def test_a_tape_made_by_hand_records_eagerly_with_the_collector_on():
    own = tape.Tape()
    own.add_op("tanh", inputs={"X": [tape.Variable(np.ones(3, np.float32), requires_grad=True)]})
    assert gc.isenabled()


def test_a_lazy_backward_that_ran_the_eager_way_ends_the_pause():
    w = tape.Variable(np.ones((2, 2), np.float32), requires_grad=True)
    with tape.lazy():
        tape.reset_global_tape()
        loss = ops.tanh(w).sum()
        assert not gc.isenabled()
        tape.backward(loss)  # (a structure seen for the first time: the eager way)
        assert gc.isenabled()  # its ops are gone


def test_a_lazy_step_pauses_the_collector_from_its_first_op_until_the_tape_is_reset():
    w = tape.Variable(np.ones((2, 2), np.float32), requires_grad=True)
    with tape.lazy(compile=True):  # (the backward's ops are recorded, to run in one plan)
        tape.reset_global_tape()
        assert gc.isenabled()
        loss = ops.tanh(w).sum()
        assert not gc.isenabled()  # the step's tape grows: nothing to collect in it
        tape.backward(loss)
        w.grad().numpy()
        assert not gc.isenabled()  # until the step's tape is dropped
        tape.reset_global_tape()
        assert gc.isenabled()
        ops.tanh(w)
    assert gc.isenabled()  # leaving the block ends the pause


def test_a_loop_that_never_resets_its_tape_resumes_collection_after_a_few_runs():
    w = tape.Variable(np.ones((2, 2), np.float32), requires_grad=True)
    with tape.lazy():
        tape.reset_global_tape()
        for _ in range(collector.RUN_LIMIT):
            assert ops.tanh(w).sum().numpy() > 0
        assert gc.isenabled()


def test_a_run_of_a_tape_other_than_the_global_one_ends_the_pause():
    own = tape.Tape(lazy=True)
    x = tape.Variable(np.ones(3, np.float32))
    y = own.add_op("tanh", inputs={"X": [x]})
    assert not gc.isenabled()
    np.testing.assert_allclose(y.numpy(), np.tanh(np.ones(3)), rtol=1e-6)
    assert gc.isenabled()
