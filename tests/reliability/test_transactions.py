"""An optimizer step is a transaction: every parameter and state is updated, or none is."""

import os
import signal
import weakref

import numpy as np
import pytest

import ops
import optim
import tape
from tape import transaction

OPTIMIZERS = {
    "sgd": lambda: optim.SGD(lr=0.1),
    "momentum": lambda: optim.SGD(lr=0.1, momentum=0.9),
    "nesterov": lambda: optim.SGD(lr=0.1, momentum=0.9, nesterov=True),
    "adam": lambda: optim.Adam(lr=0.1),
    "adamw": lambda: optim.AdamW(lr=0.1),
    "rmsprop": lambda: optim.RMSProp(lr=0.1, momentum=0.5, centered=True),
    "adagrad": lambda: optim.Adagrad(lr=0.1, lr_decay=0.1),
}


def _params():
    rng = np.random.default_rng(0)
    return [
        tape.Variable(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
        for shape in [(3, 2), (2,), (4,)]
    ]


def _backward(params, scale=1.0):
    tape.reset_global_tape()
    loss = sum(((p * p) * scale).sum() for p in params)
    tape.backward(loss)


def _snapshot(params, opt):
    state = opt.state_dict()
    arrays = [p.numpy().copy() for p in params]
    for entry in state["state"].values():
        arrays += [np.array(v) for k, v in sorted(entry.items()) if isinstance(v, np.ndarray)]
    return arrays, state["step"], [e["step"] for e in state["state"].values()]


def _assert_same(a, b):
    assert a[1:] == b[1:]
    assert len(a[0]) == len(b[0])
    for x, y in zip(a[0], b[0], strict=True):
        np.testing.assert_array_equal(x, y)


def _failing(monkeypatch, op_type, when, error):
    """Makes the ``when``-th call of ``op_type``'s kernel raise ``error``."""
    defn = ops.REGISTRY[op_type]
    original, calls = defn.kernels["any"], []

    def kernel(xp, attrs, *args):
        calls.append(1)
        if len(calls) == when:
            raise error
        return original(xp, attrs, *args)

    monkeypatch.setitem(defn.kernels, "any", kernel)
    monkeypatch.setattr(defn, "kernel", kernel)
    return calls


@pytest.mark.parametrize("error", [ValueError("injected"), KeyboardInterrupt, MemoryError])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_step_failing_at_its_second_update_changes_nothing(monkeypatch, name, error):
    params, opt = _params(), OPTIMIZERS[name]()
    _backward(params)
    opt(params)  # state exists
    _backward(params, 2.0)
    before = _snapshot(params, opt)
    _failing(monkeypatch, opt.op_type, 2, error)
    with pytest.raises((KeyboardInterrupt, tape.ExecutionError)):
        opt(params)
    monkeypatch.undo()
    _assert_same(_snapshot(params, opt), before)
    assert all(p.grad() is None for p in params)  # dropped: run backward again
    # A retry after backward is exactly the step an uninterrupted run takes.
    _backward(params, 2.0)
    opt(params)
    clean, clean_opt = _params(), OPTIMIZERS[name]()
    _backward(clean)
    clean_opt(clean)
    _backward(clean, 2.0)
    clean_opt(clean)
    _assert_same(_snapshot(params, opt), _snapshot(clean, clean_opt))


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_computing_the_update_in_the_gradient_buffer_changes_no_bit(name):
    params, opt = _params(), OPTIMIZERS[name]()
    held, held_opt = _params(), OPTIMIZERS[name]()
    for step in range(3):
        _backward(params, 1.0 + step)
        buffers = [weakref.ref(p.grad()._value) for p in params]
        opt(params)  # nothing else holds the gradients: their buffers hold the new values
        if name != "nesterov":
            assert all(p._value is b() for p, b in zip(params, buffers, strict=True))
        _backward(held, 1.0 + step)
        grads = [p.grad for p in held]  # held by the user: never overwritten
        copies = [g.numpy().copy() for g in grads]
        held_opt(held)
        for g, c in zip(grads, copies, strict=True):
            np.testing.assert_array_equal(g.numpy(), c)
    _assert_same(_snapshot(params, opt), _snapshot(held, held_opt))


@pytest.fixture
def ctrl_c_raises():
    """Python's own SIGINT handler (a background job may have started with SIGINT ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_commit_is_never_cut_in_half_by_ctrl_c(ctrl_c_raises):
    a, b = tape.Variable(np.zeros(1)), tape.Variable(np.zeros(1))
    with pytest.raises(KeyboardInterrupt):
        with transaction.Step() as step:
            step.write(a, np.ones(1))
            step.write(b, np.ones(1))
            step.callbacks.append(lambda: os.kill(os.getpid(), signal.SIGINT))
    # The interrupt arrived during the commit and was raised after it, with both written.
    assert a.numpy()[0] == 1.0 and b.numpy()[0] == 1.0


def test_a_failing_step_commits_nothing():
    a = tape.Variable(np.zeros(1))
    with pytest.raises(RuntimeError):
        with transaction.Step() as step:
            step.write(a, np.ones(1))
            raise RuntimeError("later failure")
    assert a.numpy()[0] == 0.0
