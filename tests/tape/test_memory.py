"""Memory: backward frees forward buffers as it goes, and a training loop stays flat."""

import gc
import tracemalloc
import weakref

import numpy as np
import pytest

import ops
import tape
from ops.infer import same_as_input
from ops.registry import register, unregister


@pytest.fixture
def probe():
    """A temporary identity op whose gradient maker records which watched buffers are alive."""
    watched, alive_during_backward = [], []

    @register("probe_identity", inputs=("X",), infer=same_as_input)
    def probe_identity(xp, attrs, x):
        return x.copy()

    @probe_identity.gradient
    def _(g):
        gc.collect()
        alive_during_backward.append([ref() is not None for ref in watched])
        return (g.gouts[0],)

    yield probe_identity, watched, alive_during_backward
    unregister("probe_identity")


def _chain(probe_op, watched, depth=6):
    w = tape.Variable(np.random.rand(64, 64), requires_grad=True)
    h = probe_op(w * 1.0)  # the first op: its gradient runs last
    for _ in range(depth):
        h = ops.relu(h * 1.5)
        watched.append(weakref.ref(h._value))
    return w, h.sum()


def test_backward_releases_forward_buffers_before_earlier_gradients_run(probe):
    probe_op, watched, alive = probe
    tape.reset_global_tape()
    w, loss = _chain(probe_op, watched)
    tape.backward(loss)
    # When the first op's gradient ran, every later activation had already been freed.
    assert alive == [[False] * len(watched)]
    assert w.grad is not None


def test_retain_graph_keeps_forward_buffers_alive(probe):
    probe_op, watched, alive = probe
    tape.reset_global_tape()
    w, loss = _chain(probe_op, watched)
    tape.backward(loss, retain_graph=True)
    assert alive == [[True] * len(watched)]


def _train(steps, l1, l2, sgd):
    for _ in range(steps):
        tape.reset_global_tape()
        x = tape.Variable(np.random.rand(8, 3).astype(np.float32))
        loss = ops.mean(l2(l1(x)))
        tape.backward(loss)
        sgd(l1.params() + l2.params())


def test_a_thousand_training_steps_keep_memory_flat():
    import layers
    import optim

    l1, l2 = layers.Linear(3, 3, act="relu"), layers.Linear(3, 3, act="relu")
    sgd = optim.SGD(lr=0.001)
    _train(50, l1, l2, sgd)  # warm caches (constants, generators)
    gc.collect()
    tracemalloc.start()
    _train(100, l1, l2, sgd)
    gc.collect()
    after_100 = tracemalloc.get_traced_memory()[0]
    _train(900, l1, l2, sgd)
    gc.collect()
    after_1000 = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    # 900 more steps may not leave more than a few KiB behind (no growth per step).
    assert after_1000 - after_100 < 16 * 1024, (after_100, after_1000)


def test_an_eager_op_not_needed_for_backward_is_freed_when_dropped():
    tape.reset_global_tape()
    data = tape.Variable(np.random.rand(256, 256))
    ref = weakref.ref(ops.relu(data).value())
    gc.collect()
    assert ref() is None
