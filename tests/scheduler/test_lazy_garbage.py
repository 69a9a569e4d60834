"""Lazy runs leave no reference cycles: a dropped tape is freed by reference counting alone."""

from __future__ import annotations

import gc

import numpy as np

import ops
import tape
from tape.passes.plan import CACHE


def _training_step(w, x):
    with tape.lazy():
        tape.reset_global_tape()
        hidden = ops.tanh(x @ w)
        loss = (hidden * hidden).sum()
        w.clear_grad()
        tape.backward(loss)
        return loss.numpy(), w.grad().numpy()


def test_a_training_step_tape_is_freed_without_the_garbage_collector():
    """Variables a run freed point back to their tape only weakly, so the tape, its ops and
    their variables are no cycle (collecting such garbage cost lazy mode a quarter of its time)."""
    w = tape.Variable(np.full((3, 2), 0.5, np.float32), requires_grad=True)
    x = tape.Variable(np.ones((4, 3), np.float32))
    for _ in range(2):  # interpreted, then compiled (and its kernels generated) once
        _training_step(w, x)
    gc.collect()
    gc.disable()
    try:
        _training_step(w, x)
        tape.reset_global_tape()  # drops the step's tape
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_a_batched_product_step_tape_is_freed_without_the_garbage_collector():
    """Products a rewrite batched leave their own variables without a value: weakly pending."""
    CACHE.clear()
    w = tape.Variable(np.full((3, 3), 0.1, np.float32), requires_grad=True)
    xs = [tape.Variable(np.full((2, 3), float(i), np.float32)) for i in range(6)]

    def step():
        with tape.lazy():
            tape.reset_global_tape()
            h = xs[0]
            for x in xs[1:]:
                h = ops.tanh(x @ w + h @ w)
            w.clear_grad()
            tape.backward(h.sum())
            return w.grad().numpy()

    step()
    step()  # (the second sighting compiles the plan)
    gc.collect()
    gc.disable()
    try:
        step()
        tape.reset_global_tape()
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_a_freed_value_is_recomputed_while_its_tape_lives():
    with tape.lazy():
        t = tape.reset_global_tape()
        t.keep_history = True  # (otherwise the op that ran leaves the tape, and nothing can ask)
        x = tape.Variable(np.array([0.5, -0.5], np.float32))
        ops.exp(ops.tanh(x)).sum().numpy()
        inner = t.ops[0].results[0]
        assert inner._value is None and tape.variable.owner(inner) is t
        np.testing.assert_array_equal(inner.numpy(), np.tanh(x.numpy()))
