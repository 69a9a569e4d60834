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
