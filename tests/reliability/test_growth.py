"""A training loop that never resets the global tape stays flat, lazy or eager: ops leave the
tape once they ran and no backward can reach them."""

import tracemalloc

import numpy as np
import pytest

import layers
import optim
import tape


def _linear():
    return layers.Linear(
        16, 16, weight_init=layers.init.constant(0.1), bias_init=layers.init.constant(0.0)
    )


@pytest.mark.parametrize("lazy", [False, True])
def test_a_loop_without_reset_keeps_a_bounded_tape_and_memory(lazy):
    linear, mean, opt = _linear(), layers.Mean(), optim.SGD(lr=0.01)
    data = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)

    def step():
        loss = mean(linear(tape.Variable(data)))
        tape.backward(loss)
        opt(linear.params())
        return loss.numpy()

    with tape.lazy(enabled=lazy):
        tape.reset_global_tape()
        for _ in range(100):  # (lazy mode's plan caches fill as its tiers are measured)
            step()
        tracemalloc.start()
        start = tracemalloc.get_traced_memory()[0]
        for _ in range(200):
            step()
        grown = tracemalloc.get_traced_memory()[0] - start
        tracemalloc.stop()
        assert len(tape.get_global_tape()._ops) <= 256  # compacted as it doubles
    assert grown < 200_000  # was ~170 KB per iteration in lazy mode
    # ... and it trains exactly as a loop resetting the tape each step does (updates left on
    # the tape never take a later backward's gradient).
    reference, ref_opt = _linear(), optim.SGD(lr=0.01)
    for _ in range(300):
        tape.reset_global_tape()
        tape.backward(mean(reference(tape.Variable(data))))
        ref_opt(reference.params())
    np.testing.assert_allclose(linear.weight.numpy(), reference.weight.numpy(), rtol=1e-5)
